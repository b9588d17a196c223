"""The hourly rollup of usage, capacity and latency, kept by triggers on the interval tables.

Each trigger is per statement and sees the rows the statement changed (transition tables). It
recomputes, from the interval table itself, every (thing, UTC hour) those rows fall in:
delete the rollup rows of those keys, insert the fresh sums. Recomputing rather than adding
differences keeps the peak (a maximum) right after deletes and needs no arithmetic on the old
values. All three triggers take one transaction-scoped advisory lock first: two ingest
transactions writing intervals of the same hour then recompute one after the other, and as
each statement of a PL/pgSQL function takes a new snapshot (READ COMMITTED, Django's default),
the second one sees what the first committed. One lock for the three tables, so no two
writers can take them in opposite orders.

Hours are UTC (`date_trunc('hour', ..., 'UTC')`, whatever the session's time zone).

A second level, metering_teamhour (team x kind x hour), is kept the same way from
metering_usagehour and from tasks that change team or kind.
"""

import django.db.models.deletion
import metering.models
from django.db import migrations, models


LOCK = "PERFORM pg_advisory_xact_lock(7305135120493011);  -- 'tandem hourly rollup'"

USAGE_RECOMPUTE = f"""
CREATE FUNCTION metering_usagehour_recompute(task_ids bigint[], hours timestamptz[])
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF task_ids IS NULL THEN RETURN; END IF;
    {LOCK}
    DELETE FROM metering_usagehour h
    USING unnest(task_ids, hours) AS k(task_id, hour_start)
    WHERE h.task_id = k.task_id AND h.hour_start = k.hour_start;
    INSERT INTO metering_usagehour (task_id, hour_start, intervals, alloc_gpu_seconds,
        busy_gpu_seconds, memory_avg_bytes_sum, memory_peak_bytes, read_operations,
        write_operations, read_bytes, write_bytes)
    SELECT u.task_id, k.hour_start, count(*), sum(u.alloc_gpu_seconds), sum(u.busy_gpu_seconds),
        sum(u.memory_avg_bytes), max(u.memory_peak_bytes), sum(u.read_operations),
        sum(u.write_operations), sum(u.read_bytes), sum(u.write_bytes)
    FROM unnest(task_ids, hours) AS k(task_id, hour_start)
    JOIN metering_usageinterval u ON u.task_id = k.task_id
        AND u.interval_start >= k.hour_start AND u.interval_start < k.hour_start + interval '1 hour'
    GROUP BY u.task_id, k.hour_start;
END $$;
"""

CAPACITY_RECOMPUTE = f"""
CREATE FUNCTION metering_capacityhour_recompute(source_ids bigint[], hours timestamptz[])
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF source_ids IS NULL THEN RETURN; END IF;
    {LOCK}
    DELETE FROM metering_capacityhour h
    USING unnest(source_ids, hours) AS k(source_id, hour_start)
    WHERE h.source_id = k.source_id AND h.hour_start = k.hour_start;
    INSERT INTO metering_capacityhour (source_id, hour_start, capacity_gpu_seconds)
    SELECT c.source_id, k.hour_start, sum(c.capacity_gpu_seconds)
    FROM unnest(source_ids, hours) AS k(source_id, hour_start)
    JOIN metering_capacityinterval c ON c.source_id = k.source_id
        AND c.interval_start >= k.hour_start AND c.interval_start < k.hour_start + interval '1 hour'
    GROUP BY c.source_id, k.hour_start;
END $$;
"""

LATENCY_RECOMPUTE = f"""
CREATE FUNCTION metering_latencyhourbucket_recompute(service_ids bigint[], hours timestamptz[])
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF service_ids IS NULL THEN RETURN; END IF;
    {LOCK}
    DELETE FROM metering_latencyhourbucket h
    USING unnest(service_ids, hours) AS k(service_id, hour_start)
    WHERE h.service_id = k.service_id AND h.hour_start = k.hour_start;
    INSERT INTO metering_latencyhourbucket (service_id, hour_start, le, count, intervals)
    SELECT l.service_id, k.hour_start, b.bucket ->> 0, sum((b.bucket ->> 1)::numeric), count(*)
    FROM unnest(service_ids, hours) AS k(service_id, hour_start)
    JOIN metering_latencyinterval l ON l.service_id = k.service_id
        AND l.interval_start >= k.hour_start AND l.interval_start < k.hour_start + interval '1 hour'
    CROSS JOIN LATERAL jsonb_array_elements(l.buckets) AS b(bucket)
    GROUP BY l.service_id, k.hour_start, b.bucket ->> 0;
END $$;
"""

# (interval table, rollup, the key column that is not the hour)
TABLES = [
    ("metering_usageinterval", "metering_usagehour", "task_id"),
    ("metering_capacityinterval", "metering_capacityhour", "source_id"),
    ("metering_latencyinterval", "metering_latencyhourbucket", "service_id"),
]


def _keys(rows: str, key: str) -> str:
    return (
        f"SELECT DISTINCT {key}, date_trunc('hour', interval_start, 'UTC') AS hour_start"
        f" FROM {rows}"
    )


def _triggers(table: str, rollup: str, key: str) -> str:
    touched = {
        "insert": _keys("new_rows", key),
        "delete": _keys("old_rows", key),
        "update": f"{_keys('old_rows', key)} UNION {_keys('new_rows', key)}",
    }
    referencing = {
        "insert": "REFERENCING NEW TABLE AS new_rows",
        "delete": "REFERENCING OLD TABLE AS old_rows",
        "update": "REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows",
    }
    statements = []
    for event, keys in touched.items():
        name = f"{rollup}_after_{event}"
        statements.append(f"""
CREATE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE ids bigint[]; hours timestamptz[];
BEGIN
    SELECT array_agg({key}), array_agg(hour_start) INTO ids, hours FROM ({keys}) AS k;
    PERFORM {rollup}_recompute(ids, hours);
    RETURN NULL;
END $$;
CREATE TRIGGER {name} AFTER {event.upper()} ON {table}
{referencing[event]} FOR EACH STATEMENT EXECUTE FUNCTION {name}();
""")
    # TRUNCATE has no transition table; it empties the interval table, so the rollup too.
    statements.append(f"""
CREATE FUNCTION {rollup}_after_truncate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM {rollup};
    RETURN NULL;
END $$;
CREATE TRIGGER {rollup}_after_truncate AFTER TRUNCATE ON {table}
FOR EACH STATEMENT EXECUTE FUNCTION {rollup}_after_truncate();
""")
    return "".join(statements)


def _drop(table: str, rollup: str, key: str) -> str:
    return (
        "".join(
            f"DROP TRIGGER IF EXISTS {rollup}_after_{event} ON {table};"
            f" DROP FUNCTION IF EXISTS {rollup}_after_{event}();"
            for event in ("insert", "delete", "update", "truncate")
        )
        + f" DROP FUNCTION IF EXISTS {rollup}_recompute(bigint[], timestamptz[]);"
    )


# The team level, from the task level: a statement that changes task hours recomputes the
# whole UTC hours it touched (a few hundred task rows each), and a task whose team or kind
# changes (ingest's upsert follows kube-state-metrics) recomputes every hour it has usage in.
TEAM_HOURS = f"""
CREATE FUNCTION metering_teamhour_recompute(hours timestamptz[]) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF hours IS NULL THEN RETURN; END IF;
    {LOCK}
    DELETE FROM metering_teamhour WHERE hour_start = ANY(hours);
    INSERT INTO metering_teamhour (team_id, kind, hour_start, alloc_gpu_seconds, busy_gpu_seconds)
    SELECT t.team_id, t.kind, h.hour_start, sum(h.alloc_gpu_seconds), sum(h.busy_gpu_seconds)
    FROM metering_usagehour h JOIN metering_task t ON t.id = h.task_id
    WHERE h.hour_start = ANY(hours)
    GROUP BY t.team_id, t.kind, h.hour_start;
END $$;
CREATE FUNCTION metering_teamhour_after_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM metering_teamhour_recompute(
        (SELECT array_agg(DISTINCT hour_start) FROM new_rows));
    RETURN NULL;
END $$;
CREATE TRIGGER metering_teamhour_after_insert AFTER INSERT ON metering_usagehour
REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT
EXECUTE FUNCTION metering_teamhour_after_insert();
CREATE FUNCTION metering_teamhour_after_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM metering_teamhour_recompute(
        (SELECT array_agg(DISTINCT hour_start) FROM old_rows));
    RETURN NULL;
END $$;
CREATE TRIGGER metering_teamhour_after_delete AFTER DELETE ON metering_usagehour
REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT
EXECUTE FUNCTION metering_teamhour_after_delete();
CREATE FUNCTION metering_teamhour_after_task_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM metering_teamhour_recompute((
        SELECT array_agg(DISTINCT h.hour_start)
        FROM new_rows n JOIN old_rows o ON o.id = n.id
        JOIN metering_usagehour h ON h.task_id = n.id
        WHERE n.team_id <> o.team_id OR n.kind <> o.kind));
    RETURN NULL;
END $$;
CREATE TRIGGER metering_teamhour_after_task_update AFTER UPDATE ON metering_task
REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT
EXECUTE FUNCTION metering_teamhour_after_task_update();
CREATE FUNCTION metering_teamhour_after_truncate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM metering_teamhour;
    RETURN NULL;
END $$;
CREATE TRIGGER metering_teamhour_after_truncate AFTER TRUNCATE ON metering_usagehour
FOR EACH STATEMENT EXECUTE FUNCTION metering_teamhour_after_truncate();
"""
TEAM_HOURS_DROP = "".join(
    f"DROP TRIGGER IF EXISTS metering_teamhour_after_{event} ON {table};"
    f" DROP FUNCTION IF EXISTS metering_teamhour_after_{event}();"
    for event, table in (
        ("insert", "metering_usagehour"),
        ("delete", "metering_usagehour"),
        ("task_update", "metering_task"),
        ("truncate", "metering_usagehour"),
    )
) + " DROP FUNCTION IF EXISTS metering_teamhour_recompute(timestamptz[]);"


# The rows already there, summed once (no trigger has fired on them).
BACKFILL = """
INSERT INTO metering_usagehour (task_id, hour_start, intervals, alloc_gpu_seconds,
    busy_gpu_seconds, memory_avg_bytes_sum, memory_peak_bytes, read_operations,
    write_operations, read_bytes, write_bytes)
SELECT task_id, date_trunc('hour', interval_start, 'UTC'), count(*), sum(alloc_gpu_seconds),
    sum(busy_gpu_seconds), sum(memory_avg_bytes), max(memory_peak_bytes), sum(read_operations),
    sum(write_operations), sum(read_bytes), sum(write_bytes)
FROM metering_usageinterval GROUP BY 1, 2;
INSERT INTO metering_capacityhour (source_id, hour_start, capacity_gpu_seconds)
SELECT source_id, date_trunc('hour', interval_start, 'UTC'), sum(capacity_gpu_seconds)
FROM metering_capacityinterval GROUP BY 1, 2;
INSERT INTO metering_latencyhourbucket (service_id, hour_start, le, count, intervals)
SELECT l.service_id, date_trunc('hour', l.interval_start, 'UTC'), b.bucket ->> 0,
    sum((b.bucket ->> 1)::numeric), count(*)
FROM metering_latencyinterval l CROSS JOIN LATERAL jsonb_array_elements(l.buckets) AS b(bucket)
GROUP BY 1, 2, 3;
"""
# When the backfill's insert into metering_usagehour fired the team trigger, the team level
# is already there; run on its own (tests), it fills it.
BACKFILL_TEAMS = """
DELETE FROM metering_teamhour;
INSERT INTO metering_teamhour (team_id, kind, hour_start, alloc_gpu_seconds, busy_gpu_seconds)
SELECT t.team_id, t.kind, h.hour_start, sum(h.alloc_gpu_seconds), sum(h.busy_gpu_seconds)
FROM metering_usagehour h JOIN metering_task t ON t.id = h.task_id GROUP BY 1, 2, 3;
"""


class Migration(migrations.Migration):
    dependencies = [
        ("metering", "0002_latencyinterval_p99_seconds"),
    ]

    operations = [
        migrations.CreateModel(
            name="CapacityHour",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("hour_start", models.DateTimeField()),
                ("capacity_gpu_seconds", models.DecimalField(decimal_places=6, max_digits=24)),
                (
                    "source",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        related_name="capacity_hours",
                        to="metering.source",
                    ),
                ),
            ],
            options={
                "indexes": [
                    models.Index(fields=["hour_start"], name="metering_ca_hour_st_b4ea6c_idx")
                ],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("source", "hour_start"), name="capacityhour_unique"
                    )
                ],
            },
        ),
        migrations.CreateModel(
            name="LatencyHourBucket",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("hour_start", models.DateTimeField()),
                ("le", models.CharField(max_length=64)),
                ("count", metering.models.UnboundedDecimalField(decimal_places=0, max_digits=1000)),
                ("intervals", models.PositiveIntegerField()),
                (
                    "service",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        related_name="latency_hour_buckets",
                        to="metering.service",
                    ),
                ),
            ],
            options={
                "indexes": [
                    models.Index(fields=["hour_start"], name="metering_la_hour_st_e3b192_idx")
                ],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("service", "hour_start", "le"), name="latencyhourbucket_unique"
                    )
                ],
            },
        ),
        migrations.CreateModel(
            name="UsageHour",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("hour_start", models.DateTimeField()),
                ("intervals", models.PositiveIntegerField()),
                ("alloc_gpu_seconds", models.DecimalField(decimal_places=6, max_digits=24)),
                ("busy_gpu_seconds", models.DecimalField(decimal_places=6, max_digits=24)),
                ("memory_avg_bytes_sum", models.DecimalField(decimal_places=0, max_digits=30)),
                ("memory_peak_bytes", models.BigIntegerField()),
                ("read_operations", models.DecimalField(decimal_places=0, max_digits=30)),
                ("write_operations", models.DecimalField(decimal_places=0, max_digits=30)),
                ("read_bytes", models.DecimalField(decimal_places=0, max_digits=30)),
                ("write_bytes", models.DecimalField(decimal_places=0, max_digits=30)),
                (
                    "task",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        related_name="usage_hours",
                        to="metering.task",
                    ),
                ),
            ],
            options={
                "indexes": [
                    models.Index(fields=["hour_start"], name="metering_us_hour_st_649cc2_idx")
                ],
                "constraints": [
                    models.UniqueConstraint(fields=("task", "hour_start"), name="usagehour_unique")
                ],
            },
        ),
        migrations.CreateModel(
            name="TeamHour",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "kind",
                    models.CharField(
                        choices=[
                            ("inference", "Inference"),
                            ("training_interactive", "Training (interactive)"),
                            ("training_batch", "Training (batch)"),
                            ("preprocessing", "Preprocessing"),
                        ],
                        max_length=32,
                    ),
                ),
                ("hour_start", models.DateTimeField()),
                ("alloc_gpu_seconds", models.DecimalField(decimal_places=6, max_digits=24)),
                ("busy_gpu_seconds", models.DecimalField(decimal_places=6, max_digits=24)),
                (
                    "team",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        related_name="usage_hours",
                        to="metering.team",
                    ),
                ),
            ],
            options={
                "indexes": [
                    models.Index(fields=["hour_start"], name="metering_te_hour_st_d325e8_idx")
                ],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("team", "kind", "hour_start"), name="teamhour_unique"
                    )
                ],
            },
        ),
        migrations.RunSQL(
            USAGE_RECOMPUTE
            + CAPACITY_RECOMPUTE
            + LATENCY_RECOMPUTE
            + "".join(_triggers(*t) for t in TABLES)
            + TEAM_HOURS,
            TEAM_HOURS_DROP + "".join(_drop(*t) for t in TABLES),
        ),
        migrations.RunSQL(BACKFILL + BACKFILL_TEAMS, migrations.RunSQL.noop),
    ]
