"""Every row a source's ingest wrote, as a reader names it: tests compare two sources' rows
(sharded and unsharded, one exporter scraped once and twice)."""

from __future__ import annotations

from metering import writer
from metering.models import (
    CapacityInterval,
    GpuSighting,
    IngestWindow,
    LatencyInterval,
    PodWait,
    Preemption,
    Task,
    UsageInterval,
)


def stored(source_id: int) -> dict[str, list[tuple]]:
    """Every row a source's ingest wrote, named by what it means (not by database ids)."""
    task = ("task__namespace", "task__external_id", "task__team__name")
    # Every column the ingest writes, its task named rather than numbered.
    columns = [column for column in writer.USAGE_COLUMNS if column != "task_id"]
    usage = UsageInterval.objects.filter(task__source_id=source_id).values_list(*task, *columns)
    capacity = CapacityInterval.objects.filter(source_id=source_id).values_list(
        "fault_domain", "gpu_model", "interval_start", "gpus_present", "capacity_gpu_seconds"
    )
    preemptions = Preemption.objects.filter(task__source_id=source_id).values_list(
        *task, "pod", "pods", "at", "gpus", "seconds_since_start", "gpu_model"
    )
    waits = PodWait.objects.filter(task__source_id=source_id).values_list(
        *task, "pod", "created", "scheduled", "ended", "seconds"
    )
    latency = LatencyInterval.objects.filter(service__source_id=source_id).values_list(
        "service__external_id", "interval_start", "buckets", "request_count", "p99_seconds"
    )
    tasks = Task.objects.filter(source_id=source_id).values_list(
        "namespace",
        "external_id",
        "team__name",
        "kind",
        "fault_domain",
        "first_seen",
        "last_seen",
        "created",
        "first_started",
        "ended",
    )
    windows = IngestWindow.objects.filter(source_id=source_id).values_list(
        "start", "status", "samples_seen", "samples_expected", "completeness", "rows_written"
    )
    # The spans each GPU was counted present over (a psycopg Multirange of Ranges).
    sightings = GpuSighting.objects.filter(source_id=source_id).values_list("uuid", "node", "seen")
    found = {
        "usage": usage,
        "capacity": capacity,
        "preemptions": preemptions,
        "waits": waits,
        "latency": latency,
        "tasks": tasks,
        "windows": windows,
        "sightings": [(uuid, node, str(seen)) for uuid, node, seen in sightings],
    }
    return {name: sorted(rows, key=repr) for name, rows in found.items()}
