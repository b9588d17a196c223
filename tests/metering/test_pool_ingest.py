"""Ingesting a simulated pool from a real Prometheus gives exactly the simulator's truth.

The pool (8 GPUs: whole, MIG and time-sliced; both label spellings; two days across the
October month boundary) is ingested once for this module, in batches of consecutive windows;
each test compares one meter with truth.json.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections import defaultdict
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest
from django.core.management import call_command

from audit.models import AuditEntry
from metering import measure
from metering.models import (
    CapacityInterval,
    IngestWindow,
    LatencyInterval,
    PodWait,
    Preemption,
    Service,
    Source,
    Task,
    UsageInterval,
)
from simulator.prometheus import PrometheusProcess
from tests.metering.conftest import POOL, ingest_span, pool_span, source_remove
from tests.metering.rollup import rollup_drift, rollup_rows

# Every test here starts Prometheus, a Celery worker or Chromium (tests/slow.py).
pytestmark = pytest.mark.slow

ISO = "%Y-%m-%dT%H:%M:%SZ"


@pytest.fixture(scope="module")
def pool_source(
    django_db_setup: None,
    django_db_blocker: pytest.FixtureRequest,
    pool_prometheus: PrometheusProcess,
    pool_truth: dict,
) -> Iterator[int]:
    """The whole pool ingested once (committed), removed again when the module is done."""
    with django_db_blocker.unblock():
        source = Source.objects.create(
            name="simulated", url=pool_prometheus.url, scrape_interval_seconds=60
        )
        ingest_span(source, *pool_span(pool_truth))
        yield source.pk
        source_remove(source.pk)


def per_task_interval(field: str) -> dict[str, dict[str, Decimal]]:
    found: dict[str, dict[str, Decimal]] = defaultdict(dict)
    for external_id, start, value in UsageInterval.objects.values_list(
        "task__external_id", "interval_start", field
    ):
        if value:
            found[external_id][start.strftime(ISO)] = value
    return found


def truth_per_task_interval(truth: dict, key: str) -> dict[str, dict[str, Decimal]]:
    return {
        task_id: {interval: Decimal(str(value)) for interval, value in task[key].items()}
        for task_id, task in truth["tasks"].items()
        if task[key]
    }


@pytest.mark.django_db
def test_it_stores_every_tasks_allocated_gpu_seconds_exactly(pool_source, pool_truth) -> None:
    expected = truth_per_task_interval(pool_truth, "alloc_gpu_seconds")
    assert sum(len(v) for v in expected.values()) > 1000  # the pool was busy
    assert per_task_interval("alloc_gpu_seconds") == expected


@pytest.mark.django_db
def test_it_covers_mig_time_sliced_and_both_label_spellings(pool_source, pool_truth) -> None:
    """Fractional shares (MIG slices/7, time-slicing 1/k) and exported_pod nodes are present,
    so the exact equality above is not a whole-GPU-only coincidence."""
    amounts = UsageInterval.objects.values_list("alloc_gpu_seconds", flat=True)
    assert any(amount % 60 for amount in amounts)  # not whole GPUs x 60 s ticks
    styles = {node["pod_label_style"] for node in pool_truth["meta"]["nodes"]}
    modes = {gpu["mode"] for node in pool_truth["meta"]["nodes"] for gpu in node["gpus"]}
    assert styles == {"pod", "exported_pod"}
    assert modes == {"whole", "mig", "timesliced"}


@pytest.mark.django_db
def test_it_stores_busy_gpu_seconds_exactly(pool_source, pool_truth) -> None:
    assert per_task_interval("busy_gpu_seconds") == truth_per_task_interval(
        pool_truth, "busy_gpu_seconds"
    )


@pytest.mark.django_db
def test_it_stores_io_operations_from_one_level_per_pod(pool_source, pool_truth) -> None:
    found: dict[str, dict[str, int]] = defaultdict(dict)
    for external_id, start, reads, writes in UsageInterval.objects.values_list(
        "task__external_id", "interval_start", "read_operations", "write_operations"
    ):
        if reads + writes:
            found[external_id][start.strftime(ISO)] = reads + writes
    expected = {
        t: task["io_operations"] for t, task in pool_truth["tasks"].items() if task["io_operations"]
    }
    assert found == expected


@pytest.mark.django_db
def test_it_stores_peak_memory_in_bytes(pool_source, pool_truth) -> None:
    peaks: dict[str, int] = defaultdict(int)
    for external_id, peak in UsageInterval.objects.values_list(
        "task__external_id", "memory_peak_bytes"
    ):
        peaks[external_id] = max(peaks[external_id], peak)
    expected = {
        t: task["memory_peak_bytes"]
        for t, task in pool_truth["tasks"].items()
        if task["memory_peak_bytes"]
    }
    assert {t: p for t, p in peaks.items() if p} == expected


@pytest.mark.django_db
def test_it_records_preemptions_with_their_first_tick(pool_source, pool_truth) -> None:
    expected = sorted(
        (task_id, p["pod"], p["at"], Decimal(str(p["gpus"])), p["seconds_since_start"])
        for task_id, task in pool_truth["tasks"].items()
        for p in task["preemptions"]
    )
    found = sorted(
        (p.task.external_id, p.pod, p.at.strftime(ISO), p.gpus, p.seconds_since_start)
        for p in Preemption.objects.select_related("task")
    )
    assert expected, "the simulated pool should preempt training for inference"
    assert found == expected
    assert not Preemption.objects.filter(lost_gpu_seconds__isnull=False).exists()


@pytest.mark.django_db
def test_it_records_each_pods_wait_once(pool_source, pool_truth) -> None:
    expected = sorted(
        (task_id, w["pod"], w["created"], w["scheduled"], w["seconds"])
        for task_id, task in pool_truth["tasks"].items()
        for w in task["waits"]
    )
    found = sorted(
        (w.task.external_id, w.pod, w.created.strftime(ISO), w.scheduled.strftime(ISO), w.seconds)
        for w in PodWait.objects.select_related("task")
    )
    assert found == expected


@pytest.mark.django_db
def test_it_resolves_task_team_and_kind(pool_source, pool_truth) -> None:
    found = {t.external_id: (t.team.name, t.kind) for t in Task.objects.select_related("team")}
    active = {
        task_id: (task["team"], task["kind"])
        for task_id, task in pool_truth["tasks"].items()
        if task["alloc_gpu_seconds"] or task["waits"] or task["preemptions"]
    }
    assert found == active
    assert {kind for _, kind in found.values()} == {
        "inference",
        "training_interactive",
        "training_batch",
        "preprocessing",
    }


@pytest.mark.django_db
def test_it_stores_capacity_per_interval(pool_source, pool_truth) -> None:
    found = {
        c.interval_start.strftime(ISO): c.capacity_gpu_seconds
        for c in CapacityInterval.objects.filter(source_id=pool_source)
    }
    assert found == {k: Decimal(v) for k, v in pool_truth["capacity"].items()}


@pytest.mark.django_db
def test_it_stores_latency_bucket_increments_per_service(pool_source, pool_truth) -> None:
    found = {
        (row.service.external_id, row.interval_start.strftime(ISO)): row.buckets
        for row in LatencyInterval.objects.select_related("service")
    }
    expected = {}
    for service_id, service in pool_truth["services"].items():
        bounds = [measure.canonical_le(b) for b in service["bucket_bounds"]]
        for interval, counts in service["increments"].items():
            expected[(service_id, interval)] = [
                list(pair) for pair in zip(bounds, counts, strict=True)
            ]
    assert expected
    assert found == expected


@pytest.mark.django_db
def test_it_records_full_completeness_and_the_queries(pool_source, pool_truth) -> None:
    windows = IngestWindow.objects.filter(source_id=pool_source)
    assert windows.count() == POOL.days * 24 * 12
    assert set(windows.values_list("status", flat=True)) == {"done"}
    short = windows.exclude(completeness=1).values_list("start", "completeness", "warnings")
    assert not short, list(short[:5])
    window = windows.first()
    assert window.samples_seen == window.samples_expected > 0
    assert window.warnings == []
    queries = window.recorded_queries
    assert {q["meter"] for q in queries} >= {"devices", "identity", "latency"}
    # Debian's Prometheus 2.x: closed ranges, so step - 1 ms ending 1 ms before the end; a
    # new pod's constants (creation, request) also at the end, where identity is read.
    for query in queries:
        window = (
            r"\[300000ms\]\)"
            if query["meter"] == "pod_details"
            else r"\[299999ms(:60s)?\] offset 1ms"
        )
        assert re.search(window, query["promql"]), query


@pytest.mark.django_db
def test_it_records_each_service_it_created_in_the_audit_log_once(pool_source) -> None:
    services = Service.objects.filter(source_id=pool_source)
    created = AuditEntry.objects.filter(
        object_type="metering.service",
        action="create",
        object_id__in=[str(pk) for pk in services.values_list("pk", flat=True)],
    )
    assert services.exists()
    assert sorted(created.values_list("object_id", flat=True)) == sorted(
        str(pk) for pk in services.values_list("pk", flat=True)
    )
    assert {e.actor for e in created} == {"system"}
    assert {e.changes["created_by"] for e in created} == {"ingest of source simulated"}


@pytest.mark.django_db
def test_it_keeps_the_hourly_rollup_equal_to_the_ingested_intervals(pool_source) -> None:
    assert rollup_rows() > POOL.days * 24  # a week of hours, for tasks, capacity and services
    assert rollup_drift() == []


@pytest.mark.django_db
def test_it_changes_nothing_when_every_window_runs_again(pool_source, pool_truth) -> None:
    def snapshot() -> dict:
        return {
            "usage": sorted(
                UsageInterval.objects.values_list(
                    "task_id",
                    "interval_start",
                    "alloc_gpu_seconds",
                    "busy_gpu_seconds",
                    "memory_peak_bytes",
                    "read_operations",
                    "write_operations",
                )
            ),
            "capacity": sorted(
                CapacityInterval.objects.values_list("interval_start", "capacity_gpu_seconds")
            ),
            "latency": sorted(
                (s, t, json.dumps(b))
                for s, t, b in LatencyInterval.objects.values_list(
                    "service_id", "interval_start", "buckets"
                )
            ),
            "preemptions": sorted(Preemption.objects.values_list("task_id", "pod", "at", "gpus")),
            "waits": sorted(
                PodWait.objects.values_list("task_id", "pod", "created", "scheduled", "seconds")
            ),
            "tasks": sorted(Task.objects.values_list("id", "external_id", "team_id", "kind")),
        }

    before = snapshot()
    hashes = dict(IngestWindow.objects.values_list("pk", "content_hash"))
    logged = AuditEntry.objects.count()
    ingest_span(Source.objects.get(pk=pool_source), *pool_span(pool_truth), batch=100)
    assert snapshot() == before
    assert rollup_drift() == []
    assert AuditEntry.objects.count() == logged  # nothing new was created
    assert dict(IngestWindow.objects.values_list("pk", "content_hash")) == hashes
    assert not IngestWindow.objects.filter(changed_after_first_write__isnull=False).exists()
    assert set(IngestWindow.objects.values_list("attempts", flat=True)) == {2}


@pytest.mark.django_db
def test_it_reports_usage_per_team_as_json(pool_source, pool_truth) -> None:
    out = io.StringIO()
    start, end = pool_truth["meta"]["start"], pool_truth["meta"]["end"]
    call_command("usage_report", "--start", start, "--end", end, "--group-by", "team", stdout=out)
    report = json.loads(out.getvalue())
    alloc: dict[str, Decimal] = defaultdict(Decimal)
    waits: dict[str, list[int]] = defaultdict(list)
    preemptions: dict[str, int] = defaultdict(int)
    for task in pool_truth["tasks"].values():
        alloc[task["team"]] += sum(Decimal(v) for v in task["alloc_gpu_seconds"].values())
        waits[task["team"]] += [w["seconds"] for w in task["waits"]]
        preemptions[task["team"]] += len(task["preemptions"])
    capacity = sum(Decimal(v) for v in pool_truth["capacity"].values())
    assert report["capacity_gpu_hours"] == str((capacity / 3600).quantize(Decimal("0.000001")))
    assert report["completeness"] == "1.000000"
    groups = {g["group"]: g for g in report["groups"]}
    assert set(groups) == {team for team, amount in alloc.items() if amount}
    for team, group in groups.items():
        assert group["alloc_gpu_hours"] == str((alloc[team] / 3600).quantize(Decimal("0.000001")))
        assert group["preemptions"] == preemptions[team]
        expected_wait = round(sum(waits[team]) / len(waits[team]), 3) if waits[team] else None
        assert group["mean_wait_seconds"] == expected_wait


@pytest.mark.django_db
def test_it_reports_usage_per_kind_as_csv(pool_source, pool_truth) -> None:
    out = io.StringIO()
    start, end = "2026-10-01T00:00:00Z", "2026-10-01T01:00:00+00:00"
    call_command(
        "usage_report",
        "--start",
        start,
        "--end",
        end,
        "--group-by",
        "kind",
        "--format",
        "csv",
        stdout=out,
    )
    rows = list(csv.DictReader(io.StringIO(out.getvalue())))
    alloc: dict[str, Decimal] = defaultdict(Decimal)
    for task in pool_truth["tasks"].values():
        for interval, value in task["alloc_gpu_seconds"].items():
            if "2026-10-01T00:00:00Z" <= interval < "2026-10-01T01:00:00Z":
                alloc[task["kind"]] += Decimal(value)
    assert {r["group"]: Decimal(r["alloc_gpu_hours"]) for r in rows} == {
        kind: (seconds / 3600).quantize(Decimal("0.000001")) for kind, seconds in alloc.items()
    }
    assert {r["start"] for r in rows} == {"2026-10-01T00:00:00Z"}


@pytest.mark.django_db
def test_it_meters_a_day_whose_ends_lie_exactly_on_the_truths_boundaries(
    pool_prometheus, pool_truth
) -> None:
    """[00:00 on the 1st, 00:00 on the 2nd) in the pool's zone, in one batch: the samples at
    exactly 00:00:00 of each day belong to that day, so the first and the last window of the
    day hold as much as truth.json says, and the 2nd's first sample is in no window."""
    zone = ZoneInfo(POOL.timezone)
    start = datetime(2026, 10, 1, tzinfo=zone).astimezone(UTC)
    end = datetime(2026, 10, 2, tzinfo=zone).astimezone(UTC)
    source = Source.objects.create(
        name="one day", url=pool_prometheus.url, scrape_interval_seconds=60
    )
    ids = ingest_span(source, start, end, batch=288)
    assert len(ids) == 288
    inside = {
        moment.strftime(ISO) for moment in (start + timedelta(minutes=5 * i) for i in range(288))
    }
    capacity = {
        c.interval_start.strftime(ISO): c.capacity_gpu_seconds
        for c in CapacityInterval.objects.filter(source=source)
    }
    assert capacity == {k: Decimal(v) for k, v in pool_truth["capacity"].items() if k in inside}
    assert start.strftime(ISO) in capacity and max(inside) in capacity
    alloc: dict[str, dict[str, Decimal]] = defaultdict(dict)
    for external_id, moment, value in UsageInterval.objects.filter(task__source=source).values_list(
        "task__external_id", "interval_start", "alloc_gpu_seconds"
    ):
        if value:
            alloc[external_id][moment.strftime(ISO)] = value
    expected = {
        task_id: {k: Decimal(v) for k, v in task["alloc_gpu_seconds"].items() if k in inside}
        for task_id, task in pool_truth["tasks"].items()
    }
    assert alloc == {task_id: amounts for task_id, amounts in expected.items() if amounts}
    assert sum(Decimal(v) for v in capacity.values()) == sum(
        Decimal(v) for k, v in pool_truth["capacity"].items() if k in inside
    )
