"""Batches sized to the pool: a task's run of windows is measured in batches of one range query
per meter, as long as TANDEM_INGEST_BATCH_GPU_WINDOWS allows for the GPUs the source's latest
window expected. Real Prometheus over the simulated pool; a stub that answers 503."""

from __future__ import annotations

import gc
import logging
import threading
import weakref
from datetime import datetime, timedelta
from http.server import ThreadingHTTPServer

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from metering import ingest, measure, selectors, services, sources
from metering.models import IngestWindow, Source
from tests.metering.conftest import POOL, pool_span, windows_status
from tests.metering.test_faults import Answer503, stored_alloc, truth_alloc

TICKS = 300 // POOL.scrape_interval_seconds  # scrapes in a five-minute window


def batch_sizes(records: list[logging.LogRecord]) -> list[int]:
    """The windows of each batch, from the line the ingest logs per batch it writes."""
    return [r.args[0] for r in records if r.msg.startswith("ingested %s windows")]


@pytest.mark.slow
@pytest.mark.django_db
def test_it_measures_a_long_run_in_batches_sized_to_the_pool_and_exactly(
    pool_prometheus, pool_truth, settings, caplog
) -> None:
    settings.TANDEM_INGEST_BATCH_WINDOWS = 4  # before the source has a window
    settings.TANDEM_INGEST_BATCH_GPU_WINDOWS = 10 * POOL.gpus  # then 10 windows of 8 GPUs
    source = Source.objects.create(
        name="sized", url=pool_prometheus.url, scrape_interval_seconds=POOL.scrape_interval_seconds
    )
    start = pool_span(pool_truth)[0] + timedelta(hours=1)
    end = start + timedelta(minutes=5 * 30)
    ids = [w.pk for w in services.windows_create(source=source, start=start, end=end)]

    with caplog.at_level(logging.INFO, logger="metering.ingest"):
        services.windows_ingest(window_ids=ids)

    assert selectors.source_gpus_latest(source=source) == POOL.gpus
    assert batch_sizes(caplog.records) == [4, 10, 10, 6]
    assert windows_status(ids) == {"done": 30}
    # Every batch boundary falls inside the span: the sums are the simulator's to the unit.
    assert stored_alloc(start, end) == truth_alloc(pool_truth, start, end)


@pytest.mark.django_db
def test_it_bounds_a_batch_by_the_budget_by_a_day_and_by_one_window(settings) -> None:
    source = Source.objects.create(
        name="sizes", url="http://127.0.0.1:9", scrape_interval_seconds=60
    )
    start = datetime.fromisoformat("2026-10-01T00:00:00Z")
    run = [IngestWindow(source=source, start=start + timedelta(minutes=5 * i)) for i in range(300)]
    settings.TANDEM_INGEST_BATCH_WINDOWS = 12
    assert [len(b) for b in ingest._batches(run)] == [12] * 25  # no window yet: the default

    IngestWindow.objects.create(
        source=source,
        start=start - timedelta(minutes=5),
        end=start,
        status=IngestWindow.Status.DONE,
        samples_expected=1000 * TICKS,  # 1,000 GPUs
    )
    settings.TANDEM_INGEST_BATCH_GPU_WINDOWS = 120_000
    assert [len(b) for b in ingest._batches(run)] == [120, 120, 60]
    settings.TANDEM_INGEST_BATCH_GPU_WINDOWS = 10**9
    assert [len(b) for b in ingest._batches(run)] == [288, 12]  # a day at most
    settings.TANDEM_INGEST_BATCH_GPU_WINDOWS = 1
    assert {len(b) for b in ingest._batches(run)} == {1}  # a window at least
    with CaptureQueriesContext(connection) as queries:  # beat's newest window, every step
        assert [len(b) for b in ingest._batches(run[:1])] == [1]
    assert not queries.captured_queries


@pytest.mark.django_db
def test_it_sizes_a_sharded_sources_batches_as_any_sources(settings) -> None:
    """A combiner holds what an unsharded batch holds and one shard's staged device meters at a
    time: the same budget (metering/ingest.py, `_batches`)."""
    source = Source.objects.create(
        name="sharded sizes",
        url="http://127.0.0.1:9",
        scrape_interval_seconds=60,
        shard_node_patterns=["^node-a"],
    )
    start = datetime.fromisoformat("2026-10-01T00:00:00Z")
    run = [IngestWindow(source=source, start=start + timedelta(minutes=5 * i)) for i in range(72)]
    settings.TANDEM_INGEST_BATCH_WINDOWS = 12
    settings.TANDEM_INGEST_BATCH_GPU_WINDOWS = 240_000
    assert [len(b) for b in ingest._batches(run)] == [12] * 6  # no window yet: the default
    assert ingest._unsized(run)  # so its first batch runs its shards in the task
    latest = IngestWindow.objects.create(
        source=source,
        start=start - timedelta(minutes=5),
        end=start,
        status=IngestWindow.Status.DONE,
        samples_expected=1000 * TICKS,
    )
    assert not ingest._unsized(run)
    assert [len(b) for b in ingest._batches(run)] == [72]  # 240 allowed, the task's 72
    IngestWindow.objects.filter(pk=latest.pk).update(samples_expected=20_000 * TICKS)
    assert [len(b) for b in ingest._batches(run)] == [12] * 6  # 240,000 / 20,000


@pytest.mark.django_db
def test_it_runs_an_unsized_sharded_sources_first_batch_in_the_task(settings) -> None:
    """Queued, every batch of a new sharded source would be sized before any is written
    (the default, 12 windows); its first batch's shards run in the task, and the window it
    writes sizes the rest, whose shards are queued."""
    settings.TANDEM_INGEST_BATCH_WINDOWS = 2
    source = Source.objects.create(
        name="sharded, new",
        url="http://127.0.0.1:9",  # nothing listens: every shard finds Prometheus down
        scrape_interval_seconds=60,
        shard_node_patterns=["^node-a"],
    )
    start = datetime.fromisoformat("2026-10-01T00:00:00Z")
    ids = [
        w.pk
        for w in services.windows_create(
            source=source, start=start, end=start + timedelta(minutes=5 * 6)
        )
    ]
    queued: list[int] = []
    with pytest.raises(sources.PrometheusUnavailable):
        services.windows_ingest(window_ids=ids, shard_dispatch=queued.extend)
    assert queued == []  # the first batch ran its shards here (and found Prometheus down)
    IngestWindow.objects.filter(pk=ids[0]).update(
        status=IngestWindow.Status.DONE, samples_expected=10 * TICKS
    )
    services.windows_ingest(window_ids=ids[1:], shard_dispatch=queued.extend)
    assert len(queued) == 2  # sized now: one batch of the five windows, its two shards queued


@pytest.mark.django_db
def test_it_leaves_the_rest_of_a_run_pending_when_a_batch_finds_prometheus_down(
    settings,
) -> None:
    settings.TANDEM_INGEST_BATCH_WINDOWS = 4
    server = ThreadingHTTPServer(("127.0.0.1", 0), Answer503)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        source = Source.objects.create(name="down", url=f"http://127.0.0.1:{server.server_port}")
        start = datetime.fromisoformat("2026-10-01T00:00:00Z")
        windows = services.windows_create(
            source=source, start=start, end=start + timedelta(minutes=5 * 10)
        )
        with pytest.raises(sources.PrometheusUnavailable, match="503"):
            services.windows_ingest(window_ids=[w.pk for w in windows])
    finally:
        server.shutdown()
    stored = list(IngestWindow.objects.filter(source=source).order_by("start"))
    assert {w.status for w in stored} == {"pending"}
    assert all("503" in w.error for w in stored)
    # The first batch was tried; the later ones were not sent to a Prometheus that is down.
    assert [w.attempts for w in stored] == [1] * 4 + [0] * 6


@pytest.mark.slow
def test_it_holds_a_few_answers_at_a_time_not_every_answer_of_a_batch(
    pool_prometheus, pool_truth, monkeypatch
) -> None:
    """A batch's answers are its largest objects: observing it must let each go once read, and
    not fetch ahead of the parsing (which held every answer of a 10,000-GPU batch at once)."""
    answers: list[weakref.ref[sources.QueryRun]] = []  # QueryRun is unhashable: no WeakSet
    at_each_request: list[int] = []

    def counted(request):
        def wrapper(self, *args, **kwargs):
            gc.collect()
            at_each_request.append(sum(1 for answer in answers if answer() is not None))
            answer = request(self, *args, **kwargs)
            answers.append(weakref.ref(answer))
            return answer

        return wrapper

    monkeypatch.setattr(measure._Runner, "run", counted(measure._Runner.run))
    monkeypatch.setattr(measure._Runner, "samples", counted(measure._Runner.samples))
    plan = sources.query_plan_for(
        Source(scrape_interval_seconds=POOL.scrape_interval_seconds), step_seconds=300
    )
    client = sources.PrometheusClient(url=pool_prometheus.url)
    try:
        first = int((pool_span(pool_truth)[0] + timedelta(hours=1)).timestamp())
        measure.observe(client, plan, first, first + 23 * 300)
    finally:
        client.close()
    assert len(at_each_request) >= 12  # the meters' requests, then the narrowed queries
    # The one being parsed, the one fetched meanwhile, and the last one read by a meter
    # whose other part is still out.
    assert max(at_each_request) <= 3, at_each_request
