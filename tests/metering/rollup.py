"""What the hourly rollup should hold, computed afresh from the interval tables.

`rollup_drift()` lists every rollup row that differs from a GROUP BY of the intervals (either
way round: missing, extra or with other sums). An empty list is the invariant the triggers of
migration metering 0003 keep, whoever writes the intervals.
"""

from __future__ import annotations

from django.db import connection

EXPECTED = {
    "metering_usagehour": """
        SELECT task_id, date_trunc('hour', interval_start, 'UTC'), count(*),
            sum(alloc_gpu_seconds), sum(busy_gpu_seconds), sum(memory_avg_bytes),
            max(memory_peak_bytes), sum(read_operations), sum(write_operations),
            sum(read_bytes), sum(write_bytes)
        FROM metering_usageinterval GROUP BY 1, 2""",
    "metering_teamhour": """
        SELECT t.team_id, t.kind, date_trunc('hour', u.interval_start, 'UTC'),
            sum(u.alloc_gpu_seconds), sum(u.busy_gpu_seconds)
        FROM metering_usageinterval u JOIN metering_task t ON t.id = u.task_id
        GROUP BY 1, 2, 3""",
    "metering_capacityhour": """
        SELECT source_id, date_trunc('hour', interval_start, 'UTC'), sum(capacity_gpu_seconds)
        FROM metering_capacityinterval GROUP BY 1, 2""",
    "metering_latencyhourbucket": """
        SELECT l.service_id, date_trunc('hour', l.interval_start, 'UTC'), b.bucket ->> 0,
            sum((b.bucket ->> 1)::numeric), count(*)
        FROM metering_latencyinterval l
        CROSS JOIN LATERAL jsonb_array_elements(l.buckets) AS b(bucket) GROUP BY 1, 2, 3""",
}
STORED = {
    "metering_usagehour": """
        SELECT task_id, hour_start, intervals, alloc_gpu_seconds, busy_gpu_seconds,
            memory_avg_bytes_sum, memory_peak_bytes, read_operations, write_operations,
            read_bytes, write_bytes
        FROM metering_usagehour""",
    "metering_teamhour": "SELECT team_id, kind, hour_start, alloc_gpu_seconds,"
    " busy_gpu_seconds FROM metering_teamhour",
    "metering_capacityhour": "SELECT source_id, hour_start, capacity_gpu_seconds"
    " FROM metering_capacityhour",
    "metering_latencyhourbucket": "SELECT service_id, hour_start, le, count, intervals"
    " FROM metering_latencyhourbucket",
}


def rollup_drift(using: object = None) -> list[tuple]:
    """(table, "missing" | "extra", row) for every difference; [] when the rollup is right."""
    drift = []
    with (using or connection).cursor() as cursor:
        for table, expected in EXPECTED.items():
            for label, first, second in (
                ("missing", expected, STORED[table]),
                ("extra", STORED[table], expected),
            ):
                cursor.execute(f"({first}) EXCEPT ({second})")
                drift += [(table, label, row) for row in cursor.fetchall()]
    return drift


def rollup_rows() -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT (SELECT count(*) FROM metering_usagehour)"
            " + (SELECT count(*) FROM metering_teamhour)"
            " + (SELECT count(*) FROM metering_capacityhour)"
            " + (SELECT count(*) FROM metering_latencyhourbucket)"
        )
        return cursor.fetchone()[0]
