"""Pods never scheduled (docs/telemetry.md, "Identity, waits and preemptions"): a pod's wait
counts where it ends, when it is scheduled or when it is gone never scheduled (it gave up
waiting). The starved hour of tests/metering/pending_pods.py, ingested from a real
Prometheus: gave-up-1..3 were created at 11:02 and deleted Pending at 11:42, so each waited
2,400 s, a row each, ended at 11:42 (the end of their last Pending tick, 11:41, at 60 s
scrapes), written by the 11:45 window (the one after their last Pending interval); pending-1,
still Pending at 12:00, has no row yet. Before, only the scheduled pods' three waits were
stored."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from metering import services
from metering.models import IngestWindow, PodWait, Source, Task, UsageInterval
from simulator.prometheus import PrometheusProcess
from tests.metering.conftest import ingest_span, source_remove
from tests.metering.jobs import KSM, SCRAPE, backfilled_prometheus, jobs_source
from tests.metering.pending_pods import (
    END,
    START,
    TEAM,
    pending_prometheus,
    pod_lines,
    series_at,
)
from tests.slow import starts


def _at(hour: int, minute: int) -> datetime:
    return START.replace(hour=hour, minute=minute)


# (pod, seconds, scheduled (None: gave up waiting), ended)
SCHEDULED = [
    ("after-1", 120, _at(11, 3), _at(11, 3)),
    ("before-1", 600, _at(10, 11), _at(10, 11)),
    ("before-2", 120, _at(10, 33), _at(10, 33)),
]
GAVE_UP = [(f"gave-up-{n}", 2400, None, _at(11, 42)) for n in (1, 2, 3)]
WAITS = sorted(SCHEDULED + GAVE_UP)


@pytest.fixture(autouse=True)
def batches_of_a_day(settings) -> None:
    """A source's first batch is TANDEM_INGEST_BATCH_WINDOWS long (12 by default, later ones
    sized by its GPUs): 24, so that `batch=24` is one batch of the two hours."""
    settings.TANDEM_INGEST_BATCH_WINDOWS = 24


def stored_waits() -> list[tuple]:
    return sorted(PodWait.objects.values_list("pod", "seconds", "scheduled", "ended"))


@pytest.fixture(scope="module")
@starts("Prometheus")
def starved_prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusProcess]:
    running = pending_prometheus(tmp_path_factory.mktemp("pending"))
    yield running
    running.stop()


def _silent_prometheus(out: Path, *, up: str | None) -> PrometheusProcess:
    """The same pool with kube-state-metrics silent from 11:25 to 11:40 (three windows), while
    gave-up-1..3 and pending-1 are Pending and stay so after: its pod series missing, and its
    `up` at `up` (None: no `up` at all, the target gone from service discovery)."""
    silent = range(int(_at(11, 25).timestamp()), int(_at(11, 40).timestamp()))
    lines = {}
    for tick, samples in series_at().items():
        if tick in silent:
            kept = [line for line in samples if KSM not in line]
            samples = kept + ([f"up{{{KSM}}} {up}"] if up is not None else [])
        lines[tick] = samples
    return backfilled_prometheus(out, lines)


@pytest.fixture(scope="module", params=["0", None], ids=["up-0", "no-up"])
@starts("Prometheus")
def silent_prometheus(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[PrometheusProcess]:
    running = _silent_prometheus(tmp_path_factory.mktemp("silent"), up=request.param)
    yield running
    running.stop()


@pytest.mark.slow
@pytest.mark.parametrize("batch", [1, 12, 24], ids=["window-by-window", "hourly", "one-batch"])
@pytest.mark.django_db
def test_it_stores_the_waits_of_pods_that_gave_up(starved_prometheus, batch: int) -> None:
    source = jobs_source(starved_prometheus.url)
    ids = ingest_span(source, START, END, batch=batch)
    assert stored_waits() == WAITS
    windows = list(IngestWindow.objects.filter(pk__in=ids).order_by("start"))
    assert len(windows) == 24
    assert {w.status for w in windows} == {"done"}
    assert [w.warnings for w in windows] == [[]] * 24
    # Each gave-up pod has a task of its own (its Job), of its team and kind, with no usage:
    # it never held a GPU.
    tasks = Task.objects.filter(external_id__startswith="gave-up-")
    assert sorted(
        tasks.values_list("external_id", "team__name", "kind", "created", "first_started")
    ) == [(f"gave-up-{n}", TEAM, "training_batch", _at(11, 2), None) for n in (1, 2, 3)]
    assert not UsageInterval.objects.filter(task__in=tasks).exists()


@pytest.mark.slow
@pytest.mark.django_db
def test_it_writes_the_same_rows_when_ingested_again_in_any_batch(starved_prometheus) -> None:
    source = jobs_source(starved_prometheus.url)
    ids = ingest_span(source, START, END, batch=12)
    for batch in (24, 1, 5):
        for first in range(0, len(ids), batch):
            services.windows_ingest(window_ids=ids[first : first + batch])
        assert stored_waits() == WAITS  # no duplicates, nothing moved
    # The rows are the 11:45 window's: untouched by the window of their last Pending
    # interval (11:40) ingested alone, taken out and written again with the 11:45 one.
    last_pending, after = (
        IngestWindow.objects.get(source=source, start=_at(11, minute)).pk for minute in (40, 45)
    )
    before = set(PodWait.objects.filter(scheduled=None).values_list("pk", flat=True))
    services.windows_ingest(window_ids=[last_pending])
    assert set(PodWait.objects.filter(scheduled=None).values_list("pk", flat=True)) == before
    services.windows_ingest(window_ids=[after])
    assert stored_waits() == WAITS
    rewritten = set(PodWait.objects.filter(scheduled=None).values_list("pk", flat=True))
    assert len(rewritten) == 3 and rewritten.isdisjoint(before)


@pytest.mark.slow
@pytest.mark.django_db
def test_it_takes_the_waits_back_with_their_window(starved_prometheus) -> None:
    source = jobs_source(starved_prometheus.url)
    ingest_span(source, START, END, batch=24)
    Source.objects.filter(pk=source.pk).update(enabled=False)
    services.windows_withdraw(
        source=source, start=_at(11, 45), end=_at(11, 50), operator="ops", reason="test"
    )
    assert stored_waits() == sorted(SCHEDULED)


@pytest.mark.slow
@pytest.mark.parametrize("batch", [1, 24], ids=["window-by-window", "one-batch"])
@pytest.mark.django_db
def test_it_counts_no_pod_gone_while_kube_state_metrics_is_silent(
    silent_prometheus, batch: int
) -> None:
    # Silent from 11:25 to 11:40, kube-state-metrics shows no pod at all: a scrape gap, not a
    # deletion. pending-1 (Pending from 11:21 on) would otherwise have "given up" at 11:25
    # after waiting 240 s; back at 11:40, all are Pending, and gave-up-1..3 go at 11:42 with
    # kube-state-metrics answering, as in the clean pool.
    source = jobs_source(silent_prometheus.url)
    ids = ingest_span(source, START, END, batch=batch)
    assert stored_waits() == WAITS
    assert IngestWindow.objects.filter(pk__in=ids, status="done").count() == 24


@pytest.mark.slow
@pytest.mark.parametrize("shards", [[], ["node-1"]], ids=["whole", "sharded"])
@pytest.mark.django_db(transaction=True)
def test_it_stores_the_same_waits_sharded(starved_prometheus, shards: list[str]) -> None:
    source = Source.objects.create(
        name="starved",
        url=starved_prometheus.url,
        scrape_interval_seconds=SCRAPE,
        shard_node_patterns=shards,
    )
    try:
        ingest_span(source, START, END, batch=12)
        windows = IngestWindow.objects.filter(source=source)
        promql = " ".join(q["promql"] for w in windows for q in w.recorded_queries)
        assert ("node-1" in promql) == bool(shards)  # the shards' queries, where any
        assert {w.status for w in windows} == {"done"}
        assert stored_waits() == WAITS
    finally:
        source_remove(source.pk)


def _quick_prometheus(out: Path) -> PrometheusProcess:
    """The same pool and two pods Pending from 11:06 and gone before the 11:09 scrape, within
    the 11:05 interval (no interval's end shows them): `quick-gpu-1` asks for a GPU, as the
    pool's pods do, `quick-cpu-1` for CPUs only (a CronJob of the cluster's, say)."""
    gpu_request = 'resource="nvidia_com_gpu",unit="integer"} 1'
    lines = series_at()
    for tick in range(int(_at(11, 6).timestamp()), int(_at(11, 9).timestamp()), SCRAPE):
        lines[tick] = lines[tick] + pod_lines(
            "quick-gpu-1", int(_at(11, 6).timestamp()), None, tick
        )
        lines[tick] += [
            line.replace(gpu_request, 'resource="cpu",unit="core"} 2')
            for line in pod_lines("quick-cpu-1", int(_at(11, 6).timestamp()), None, tick)
        ]
    return backfilled_prometheus(out, lines)


@pytest.fixture(scope="module")
@starts("Prometheus")
def quick_prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusProcess]:
    running = _quick_prometheus(tmp_path_factory.mktemp("quick"))
    yield running
    running.stop()


@pytest.mark.slow
@pytest.mark.parametrize("batch", [1, 24], ids=["window-by-window", "one-batch"])
@pytest.mark.django_db
def test_it_counts_a_pod_gone_within_an_interval_only_if_it_asks_for_a_gpu(
    quick_prometheus, batch: int
) -> None:
    """Read from its Pending ticks alone, a pod created and gone within one interval shows
    its request there too: the GPU pod's wait counts (created 11:06, last Pending at the
    11:08 scrape: 180 s), the CPU-only pod's does not (docs/telemetry.md, "Pods that ask for
    no GPU")."""
    ingest_span(jobs_source(quick_prometheus.url), START, END, batch=batch)
    assert stored_waits() == sorted([*WAITS, ("quick-gpu-1", 180, None, _at(11, 9))])
    assert not Task.objects.filter(external_id="quick-cpu-1").exists()
