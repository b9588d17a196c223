"""A pool whose preemptions Kueue makes, back-filled into a real Prometheus from the simulator
(`--preemptions-by kueue`): Kueue evicts a workload itself (suspends its Job, whose pods are
then deleted), so no pod carries kube-state-metrics' `PreemptionByScheduler` reason, and its
only trace is Kueue's own count per cluster queue, `kueue_evicted_workloads_total`.

Before this check, such a pool's windows were complete and said nothing: no preemption was
stored, so pricing rule 5 paid no starvation credit, silently. Now each window counts the
workloads Kueue preempted in it (as many as the truth's preempted tasks there), says which
cluster queues, and the month's close and the usage report count them; the same pool with the
scheduler's preemptions stores them as before and counts nothing of Kueue's."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path

import pytest

from metering.models import IngestWindow, Preemption, Source
from metering.selectors import usage_report, window_blind_spots
from reports import selectors as health_selectors
from simulator.config import PoolConfig
from simulator.prometheus import PrometheusProcess
from tests.metering.conftest import (
    ingest_span,
    simulated_prometheus,
    source_remove,
)

pytestmark = pytest.mark.slow

# Three preemptions in the morning ramp: one task at 08:27 (Shanghai), two at 09:01, of two
# cluster queues (the simulator names a workload's queue after its namespace).
BASE = PoolConfig(gpus=16, days=1, start=date(2026, 10, 6), seed=4, scrape_interval_seconds=60)
SPAN = (BASE.start_epoch + 8 * 3600, BASE.start_epoch + 10 * 3600)
ISO = "%Y-%m-%dT%H:%M:%SZ"


def at(epoch: int) -> datetime:
    return datetime.fromtimestamp(epoch, UTC)


def epoch_of(iso: str) -> int:
    return int(datetime.strptime(iso, ISO).replace(tzinfo=UTC).timestamp())


def window_of(epoch: int) -> str:
    """The start of the 5-minute window holding `epoch`, as the tests name windows."""
    return at(epoch - epoch % 300).strftime(ISO)


# Kueue's scrapes missing over [00:55, 01:05) UTC, across the two batches' boundary (01:00)
# and the two preemptions of 01:01: the second batch counts from the look-back before it.
KUEUE_GAP = (BASE.start_epoch + 8 * 3600 + 55 * 60, BASE.start_epoch + 9 * 3600 + 5 * 60)


def without_kueue_in_gap(metrics: Path) -> None:
    kept = []
    for line in metrics.read_text().splitlines(keepends=True):
        kueue = line.startswith(("kueue_", 'up{job="kueue"'))
        if not (kueue and KUEUE_GAP[0] <= int(line.rsplit(" ", 1)[1]) < KUEUE_GAP[1]):
            kept.append(line)
    metrics.write_text("".join(kept))


def pool_of(
    preempter: str, tmp: pytest.TempPathFactory, *, kueue_gap: bool = False
) -> Iterator[tuple[dict, PrometheusProcess]]:
    out = tmp.mktemp(f"preempted-by-{preempter}{'-gap' if kueue_gap else ''}")
    edit = without_kueue_in_gap if kueue_gap else None
    yield from simulated_prometheus(replace(BASE, preemptions_by=preempter), out, edit)


@pytest.fixture(scope="module")
def kueue_pool(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[dict, PrometheusProcess]]:
    yield from pool_of("kueue", tmp_path_factory)


@pytest.fixture(scope="module")
def kueue_gap_pool(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[dict, PrometheusProcess]]:
    yield from pool_of("kueue", tmp_path_factory, kueue_gap=True)


@pytest.fixture(scope="module")
def scheduler_pool(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[dict, PrometheusProcess]]:
    yield from pool_of("scheduler", tmp_path_factory)


def evictions_by_window(truth: dict) -> Counter:
    """The truth's workloads evicted (a task preempted at one tick), by window start."""
    evicted = {
        (task, p["at"]) for task, found in truth["tasks"].items() for p in found["preemptions"]
    }
    windows: Counter = Counter()
    for _, when in evicted:
        epoch = epoch_of(when)
        if SPAN[0] <= epoch < SPAN[1]:
            windows[window_of(epoch)] += 1
    return windows


def metered(prometheus: PrometheusProcess, name: str, shards: list[str]) -> Source:
    source = Source.objects.create(
        name=name, url=prometheus.url, scrape_interval_seconds=60, shard_node_patterns=shards
    )
    # Two batches of an hour (00:00 and 01:00 UTC).
    ingest_span(source, at(SPAN[0]), at(SPAN[1]), batch=12)
    return source


@pytest.mark.parametrize("shards", [[], ["gpu-node-0[01]"]], ids=["whole", "sharded"])
@pytest.mark.django_db(transaction=True)
def test_it_counts_the_workloads_kueue_preempted_in_each_window(kueue_pool, shards) -> None:
    truth, prometheus = kueue_pool
    expected = evictions_by_window(truth)
    assert sum(expected.values()) == 3 and len(expected) == 2  # one window holds two
    source = metered(prometheus, "kueue-pool", shards)
    try:
        windows = list(IngestWindow.objects.filter(source=source).order_by("start"))
        assert len(windows) == 24 and {w.status for w in windows} == {"done"}
        assert all(w.completeness == 1 for w in windows)  # every GPU sample is there
        found = {w.start.strftime(ISO): w.kueue_preempted_workloads for w in windows}
        assert {start: n for start, n in found.items() if n} == dict(expected)
        for window in windows:
            said = [w for w in window.warnings if "Kueue evicted" in w]
            assert bool(said) == bool(window.kueue_preempted_workloads), window.warnings
        # No pod shows a preemption: without the count, nothing would say one happened.
        assert not Preemption.objects.filter(task__source=source).exists()
        blind = window_blind_spots(start=at(SPAN[0]), end=at(SPAN[1]))
        assert (blind.kueue_preemption_windows, blind.kueue_preempted_workloads) == (2, 3)
        report = usage_report(start=at(SPAN[0]), end=at(SPAN[1]), group_by="team")
        assert report["windows_with_kueue_preemptions"] == 2
        assert report["kueue_preempted_workloads"] == 3
    finally:
        source_remove(source.pk)


def admissions_by_window(truth: dict) -> dict[str, dict[str, list]]:
    """The truth's admissions in the span, by window start and task kind: [workloads,
    seconds waited] (Kueue's histogram takes each at its `at` tick)."""
    windows: dict[str, dict[str, list]] = {}
    for admitted in truth["kueue_admissions"]:
        epoch = epoch_of(admitted["at"])
        if SPAN[0] <= epoch < SPAN[1]:
            start = window_of(epoch)
            entry = windows.setdefault(start, {}).setdefault(admitted["kind"], [0, 0])
            entry[0] += 1
            entry[1] += admitted["seconds"]
    return windows


def waits_by_kind(truth: dict) -> dict[str, list[int]]:
    """The truth's pod waits (created to scheduled) of pods scheduled in the span, by kind."""
    found: dict[str, list[int]] = {}
    for task in truth["tasks"].values():
        for wait in task["waits"]:
            if SPAN[0] <= epoch_of(wait["scheduled"]) < SPAN[1]:
                found.setdefault(task["kind"], []).append(wait["seconds"])
    return found


@pytest.mark.parametrize("shards", [[], ["gpu-node-0[01]"]], ids=["whole", "sharded"])
@pytest.mark.django_db(transaction=True)
def test_it_adds_the_wait_in_kueues_queue_to_the_average_wait(
    kueue_pool, scheduler_pool, shards
) -> None:
    """Under Kueue a Job's pods exist only once it is admitted: they wait a second to be
    scheduled, and the hours before are Kueue's admission wait. Each window keeps the truth's
    admissions and their seconds; the average wait before running is what the same pool's pods
    waited from submission where no Kueue held them back (the scheduler's pool)."""
    truth, prometheus = kueue_pool
    expected = admissions_by_window(truth)
    workloads = sum(n for kinds in expected.values() for n, _ in kinds.values())
    queued = sum(s for kinds in expected.values() for _, s in kinds.values())
    assert (workloads, queued) == (5, 42_709)  # docs/telemetry.md quotes these
    source = metered(prometheus, "kueue-admissions", shards)
    try:
        windows = IngestWindow.objects.filter(source=source).order_by("start")
        found = {
            w.start.strftime(ISO): {
                kind: [a["workloads"], Decimal(a["seconds"])]
                for kind, a in w.kueue_admissions.items()
            }
            for w in windows
            if w.kueue_admissions
        }
        assert found == expected
        waits = health_selectors.waits(start=at(SPAN[0]), end=at(SPAN[1]))
        assert not waits.admissions_unread
        pods = waits_by_kind(truth)
        submitted = waits_by_kind(scheduler_pool[0])  # submission to running, no Kueue
        for kind in waits.admissions:
            # Kueue's Jobs: created at admission, bound a second after.
            assert waits.per_kind[kind].mean_seconds == Decimal(sum(pods[kind])) / len(pods[kind])
            assert max(pods[kind]) <= 1, kind
            (combined,) = [k for k in waits.kinds if k.kind == kind]
            assert len(submitted[kind]) == len(pods[kind]), kind
            assert combined.mean_seconds == Decimal(sum(submitted[kind])) / len(submitted[kind])
    finally:
        source_remove(source.pk)


@pytest.mark.django_db(transaction=True)
def test_it_counts_what_kueue_preempted_during_its_gap_once_it_answers_again(
    kueue_gap_pool,
) -> None:
    """Kueue's scrapes missing through the interval before the second batch: its counts are
    taken from their last reading before the gap (the look-back), and the two preemptions of
    01:01 land on 01:05, when Kueue answers again, as counters do after a gap. Without the
    look-back, the count created at 00:27 would be counted whole again at 01:05."""
    truth, prometheus = kueue_gap_pool
    assert sum(evictions_by_window(truth).values()) == 3
    source = metered(prometheus, "kueue-gap-pool", [])
    try:
        windows = IngestWindow.objects.filter(source=source, kueue_preempted_workloads__gt=0)
        found = {w.start.strftime(ISO): w.kueue_preempted_workloads for w in windows}
        assert found == {"2026-10-06T00:25:00Z": 1, "2026-10-06T01:05:00Z": 2}
        assert not IngestWindow.objects.filter(source=source, kueue_counts_unplaced__gt=0).exists()
    finally:
        source_remove(source.pk)


@pytest.mark.django_db(transaction=True)
def test_it_stores_the_schedulers_preemptions_and_counts_nothing_of_kueue(scheduler_pool) -> None:
    truth, prometheus = scheduler_pool
    expected = evictions_by_window(truth)
    source = metered(prometheus, "scheduler-pool", [])
    try:
        windows = IngestWindow.objects.filter(source=source)
        assert not windows.filter(kueue_preempted_workloads__gt=0).exists()
        epochs = [int(p.at.timestamp()) for p in Preemption.objects.filter(task__source=source)]
        stored = Counter(window_of(epoch) for epoch in epochs)
        assert stored == expected
    finally:
        source_remove(source.pk)
