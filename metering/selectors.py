"""Metering reads: sources, windows and the usage report operators and scripts ask for."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from django.conf import settings
from django.db import connection

from metering.models import IngestWindow, Source

GROUP_BY = {
    "team": "tm.name",
    "task": "t.external_id",
    "kind": "t.kind",
}
SIX_PLACES = Decimal("0.000001")


class UnknownSource(LookupError):
    pass


def source_get(*, name: str) -> Source:
    """The source called `name`; the error lists the known ones."""
    source = Source.objects.filter(name=name).first()
    if source is None:
        known = ", ".join(Source.objects.order_by("name").values_list("name", flat=True))
        raise UnknownSource(f"source {name!r} does not exist (known: {known or 'none'})")
    return source


def windows_not_done(*, start: datetime, end: datetime) -> list[IngestWindow]:
    return list(
        IngestWindow.objects.filter(start__gte=start, start__lt=end)
        .exclude(status=IngestWindow.Status.DONE)
        .select_related("source")
    )


def completeness(*, start: datetime, end: datetime) -> Decimal:
    """Mean window completeness over [start, end) for every enabled source; a window that was
    never ingested (or does not exist) counts as 0, so a gap is visible, not averaged away."""
    step = settings.TANDEM_STEP_SECONDS
    expected_per_source = max(0, int((end - start).total_seconds()) // step)
    sources = Source.objects.filter(enabled=True).count()
    if not expected_per_source or not sources:
        return Decimal(0)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT COALESCE(sum(w.completeness), 0) FROM metering_ingestwindow w"
            " JOIN metering_source s ON s.id = w.source_id"
            " WHERE s.enabled AND w.status = 'done' AND w.start >= %s AND w.start < %s",
            [start, end],
        )
        total = cursor.fetchone()[0]
    return (Decimal(total) / (expected_per_source * sources)).quantize(
        SIX_PLACES, rounding=ROUND_HALF_UP
    )


def _gpu_hours(seconds: Decimal | None) -> str:
    return str(((seconds or Decimal(0)) / 3600).quantize(SIX_PLACES, rounding=ROUND_HALF_UP))


def usage_report(*, start: datetime, end: datetime, group_by: str) -> dict[str, Any]:
    """Usage in [start, end) per team, task or kind (see the `usage_report` command).

    Waits and preemptions count in the period of their event: a wait where its pod was
    scheduled, a preemption where it happened.
    """
    if group_by not in GROUP_BY:
        raise ValueError(f"group_by must be one of {', '.join(GROUP_BY)}, got {group_by!r}")
    key = GROUP_BY[group_by]
    tasks_of = "FROM metering_task t JOIN metering_team tm ON tm.id = t.team_id"
    groups: dict[str, dict[str, Any]] = defaultdict(
        lambda: {
            "tasks": set(),
            "alloc": Decimal(0),
            "busy": Decimal(0),
            "peak": 0,
            "io": 0,
            "preemptions": 0,
            "waits": [],
        }
    )
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {key}, t.id, sum(u.alloc_gpu_seconds), sum(u.busy_gpu_seconds),"
            " max(u.memory_peak_bytes), sum(u.read_operations + u.write_operations)"
            f" {tasks_of} JOIN metering_usageinterval u ON u.task_id = t.id"
            " WHERE u.interval_start >= %s AND u.interval_start < %s GROUP BY 1, 2",
            [start, end],
        )
        for group, task, alloc, busy, peak, operations in cursor.fetchall():
            row = groups[group]
            row["tasks"].add(task)
            row["alloc"] += alloc
            row["busy"] += busy
            row["peak"] = max(row["peak"], peak)
            row["io"] += int(operations)
        cursor.execute(
            f"SELECT {key}, t.id, count(*) {tasks_of}"
            " JOIN metering_preemption p ON p.task_id = t.id"
            " WHERE p.at >= %s AND p.at < %s GROUP BY 1, 2",
            [start, end],
        )
        for group, task, count in cursor.fetchall():
            groups[group]["tasks"].add(task)
            groups[group]["preemptions"] += count
        cursor.execute(
            f"SELECT {key}, t.id, w.seconds {tasks_of} JOIN metering_podwait w ON w.task_id = t.id"
            " WHERE w.scheduled >= %s AND w.scheduled < %s",
            [start, end],
        )
        for group, task, seconds in cursor.fetchall():
            groups[group]["tasks"].add(task)
            groups[group]["waits"].append(seconds)
        cursor.execute(
            "SELECT sum(capacity_gpu_seconds) FROM metering_capacityinterval"
            " WHERE interval_start >= %s AND interval_start < %s",
            [start, end],
        )
        capacity = cursor.fetchone()[0]
    return {
        "start": start.isoformat().replace("+00:00", "Z"),
        "end": end.isoformat().replace("+00:00", "Z"),
        "capacity_gpu_hours": _gpu_hours(capacity),
        "completeness": str(completeness(start=start, end=end)),
        "groups": [
            {
                "group": group,
                "tasks": len(row["tasks"]),
                "alloc_gpu_hours": _gpu_hours(row["alloc"]),
                "busy_gpu_hours": _gpu_hours(row["busy"]),
                "peak_memory_bytes": row["peak"],
                "io_operations": row["io"],
                "preemptions": row["preemptions"],
                "mean_wait_seconds": (
                    round(sum(row["waits"]) / len(row["waits"]), 3) if row["waits"] else None
                ),
            }
            for group, row in sorted(groups.items())
        ],
    }
