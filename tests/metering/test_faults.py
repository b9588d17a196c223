"""Faults: Prometheus down or answering 5xx, a worker killed mid-window, windows redelivered.
Real Prometheus, real Redis, real `celery worker` processes on the test database."""

from __future__ import annotations

import io
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import psycopg
import pytest
from django.conf import settings
from django.core.management import call_command

from metering import services, sources, tasks
from metering.models import CapacityInterval, IngestWindow, Source, UsageInterval
from simulator.prometheus import PrometheusProcess
from tests.metering.conftest import (
    POOL,
    pool_span,
    prometheus_over,
    wait_for,
    windows_status,
)
from tests.metering.rollup import rollup_drift

ISO = "%Y-%m-%dT%H:%M:%SZ"


def truth_alloc(truth: dict, start: datetime, end: datetime) -> dict[tuple[str, str], Decimal]:
    low, high = start.strftime(ISO), end.strftime(ISO)
    return {
        (task_id, interval): Decimal(value)
        for task_id, task in truth["tasks"].items()
        for interval, value in task["alloc_gpu_seconds"].items()
        if low <= interval < high
    }


def stored_alloc(start: datetime, end: datetime) -> dict[tuple[str, str], Decimal]:
    return {
        (task, moment.strftime(ISO)): amount
        for task, moment, amount in UsageInterval.objects.filter(
            interval_start__gte=start, interval_start__lt=end, alloc_gpu_seconds__gt=0
        ).values_list("task__external_id", "interval_start", "alloc_gpu_seconds")
    }


@pytest.fixture
def own_prometheus(pool_tsdb_copy: Path) -> Iterator[dict[str, PrometheusProcess]]:
    """A Prometheus over a private copy of the pool, which the test may stop and restart."""
    holder = {"process": prometheus_over(pool_tsdb_copy, POOL.scrape_interval_seconds)}
    yield holder
    holder["process"].stop()


def restart(holder: dict[str, PrometheusProcess], tsdb: Path) -> None:
    port = int(holder["process"].url.rsplit(":", 1)[1])
    holder["process"] = prometheus_over(tsdb, POOL.scrape_interval_seconds, port=port)


@pytest.mark.slow
@pytest.mark.django_db
def test_it_keeps_windows_pending_while_prometheus_is_down(
    own_prometheus, pool_tsdb_copy, pool_truth
) -> None:
    source = Source.objects.create(
        name="flaky", url=own_prometheus["process"].url, scrape_interval_seconds=60
    )
    start = pool_span(pool_truth)[0]
    own_prometheus["process"].stop()
    windows = services.windows_create(source=source, start=start, end=start + timedelta(hours=1))
    ids = [w.pk for w in windows]
    with pytest.raises(sources.PrometheusUnavailable):
        services.windows_ingest(window_ids=ids)
    assert windows_status(ids) == {"pending": 12}
    window = IngestWindow.objects.get(pk=ids[0])
    assert "unreachable" in window.error and window.attempts == 1
    assert not UsageInterval.objects.exists() and not CapacityInterval.objects.exists()

    restart(own_prometheus, pool_tsdb_copy)
    services.windows_ingest(window_ids=ids)
    assert windows_status(ids) == {"done": 12}
    assert IngestWindow.objects.get(pk=ids[0]).error == ""
    end = start + timedelta(hours=1)
    assert stored_alloc(start, end) == truth_alloc(pool_truth, start, end)


class Answer503(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.send_response(503)
        self.end_headers()
        self.wfile.write(b"overloaded")

    do_GET = do_POST

    def log_message(self, *args) -> None:
        pass


@pytest.mark.django_db
def test_it_keeps_windows_pending_when_prometheus_answers_5xx() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Answer503)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        source = Source.objects.create(name="busy", url=f"http://127.0.0.1:{server.server_port}")
        start = datetime.fromisoformat("2026-10-01T00:00:00Z")
        (window,) = services.windows_create(
            source=source, start=start, end=start + timedelta(minutes=5)
        )
        with pytest.raises(sources.PrometheusUnavailable, match="503"):
            services.window_ingest(window_id=window.pk)
    finally:
        server.shutdown()
    window.refresh_from_db()
    assert window.status == "pending" and "503" in window.error


@pytest.mark.django_db
def test_it_creates_the_newest_closed_window_for_beat() -> None:
    source = Source.objects.create(name="live", url="http://127.0.0.1:9")
    now = datetime.fromisoformat("2026-10-01T00:06:30Z")
    window = services.window_newest_closed_create(source=source, now=now)
    # 00:06:30 minus the 60 s lag is 00:05:30: the newest closed window is 00:00-00:05.
    assert (window.start.strftime(ISO), window.end.strftime(ISO)) == (
        "2026-10-01T00:00:00Z",
        "2026-10-01T00:05:00Z",
    )
    assert services.window_newest_closed_create(source=source, now=now).pk == window.pk
    beat = settings.CELERY_BEAT_SCHEDULE["metering-ingest-newest-windows"]
    assert beat["task"] == tasks.ingest_newest_windows.name
    assert beat["schedule"] == timedelta(seconds=300)


@pytest.mark.slow
def test_it_ingests_through_a_celery_worker(start_worker, pool_prometheus, pool_truth) -> None:
    source = Source.objects.create(
        name="celery", url=pool_prometheus.url, scrape_interval_seconds=60
    )
    start = datetime.fromisoformat(
        "2026-09-30T15:00:00Z"
    )  # 23:00 local: off-peak, 1 h to month end (local)
    end = start + timedelta(hours=2)
    out = io.StringIO()
    call_command(
        "ingest",
        "--source",
        "celery",
        "--start",
        start.isoformat(),
        "--end",
        end.isoformat(),
        stdout=out,
    )
    assert "queued 24 windows of celery in 2 tasks" in out.getvalue()
    ids = list(IngestWindow.objects.filter(source=source).values_list("pk", flat=True))
    assert windows_status(ids) == {"pending": 24}
    start_worker()
    wait_for(lambda: windows_status(ids) == {"done": 24}, timeout=90, what="24 windows done")
    assert stored_alloc(start, end) == truth_alloc(pool_truth, start, end)
    assert rollup_drift() == []  # the hourly rollup moved with every rewrite


@pytest.mark.slow
def test_it_survives_a_worker_killed_mid_window(
    start_worker, pool_prometheus, pool_truth, test_database_url
) -> None:
    source = Source.objects.create(
        name="killed", url=pool_prometheus.url, scrape_interval_seconds=60
    )
    start = datetime.fromisoformat("2026-09-30T23:00:00Z")
    end = start + timedelta(hours=1)
    ids = [w.pk for w in services.windows_create(source=source, start=start, end=end)]
    # Hold a lock that the worker's write transaction needs after it has copied usage rows in:
    # the worker then sits inside its transaction, with rows written but not committed.
    blocker = psycopg.connect(test_database_url)
    watcher = psycopg.connect(test_database_url, autocommit=True)  # fresh statistics each time
    blocker.execute("LOCK TABLE metering_capacityinterval IN SHARE MODE")
    waiting = (
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
        " AND wait_event_type = 'Lock' AND query ILIKE '%%metering_capacityinterval%%'"
    )
    try:
        worker = start_worker()
        tasks.ingest_windows.delay(ids)
        wait_for(
            lambda: watcher.execute(waiting).fetchone() is not None,
            timeout=60,
            what="the worker to block inside its write transaction",
        )
        (backend,) = watcher.execute(waiting).fetchone()
        wrote_usage = watcher.execute(
            "SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation"
            " WHERE l.pid = %s AND c.relname = 'metering_usageinterval'"
            " AND l.mode = 'RowExclusiveLock'",
            [backend],
        ).fetchone()[0]
        assert wrote_usage == 1
        worker.kill()
    finally:
        blocker.rollback()  # release the lock: the orphaned backend then finds its client gone
        blocker.close()
    wait_for(
        lambda: watcher.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE pid = %s", [backend]
        ).fetchone()[0]
        == 0,
        timeout=30,
        what="the killed worker's database session to end",
    )
    watcher.close()
    assert not UsageInterval.objects.filter(task__source=source).exists()
    assert not CapacityInterval.objects.filter(source=source).exists()
    assert windows_status(ids) == {"running": 12}

    # The message was never acknowledged: a worker starting after the broker's visibility
    # timeout (3 s in worker_settings) takes it back.
    time.sleep(4)
    start_worker()
    wait_for(lambda: windows_status(ids) == {"done": 12}, timeout=90, what="redelivery")
    assert stored_alloc(start, end) == truth_alloc(pool_truth, start, end)
    assert rollup_drift() == []  # the hourly rollup moved with every rewrite
    assert set(IngestWindow.objects.filter(pk__in=ids).values_list("attempts", flat=True)) == {2}


@pytest.mark.slow
def test_it_fills_windows_once_prometheus_is_back_mid_backfill(
    start_worker, own_prometheus, pool_tsdb_copy, pool_truth
) -> None:
    source = Source.objects.create(
        name="backfill", url=own_prometheus["process"].url, scrape_interval_seconds=60
    )
    start = datetime.fromisoformat("2026-10-01T00:00:00Z")
    middle, end = start + timedelta(hours=1), start + timedelta(hours=2)
    first = [w.pk for w in services.windows_create(source=source, start=start, end=middle)]
    second = [w.pk for w in services.windows_create(source=source, start=middle, end=end)]
    start_worker()
    tasks.ingest_windows.delay(first)
    wait_for(lambda: windows_status(first) == {"done": 12}, timeout=60, what="first hour")

    own_prometheus["process"].stop()
    tasks.ingest_windows.delay(second)
    wait_for(
        lambda: IngestWindow.objects.filter(
            pk__in=second, status="pending", attempts__gte=2
        ).count()
        == 12,
        timeout=60,
        what="retries while Prometheus is down",
    )
    assert "unreachable" in IngestWindow.objects.get(pk=second[0]).error
    assert not UsageInterval.objects.filter(interval_start__gte=middle).exists()

    restart(own_prometheus, pool_tsdb_copy)
    wait_for(lambda: windows_status(second) == {"done": 12}, timeout=60, what="second hour")
    assert stored_alloc(start, end) == truth_alloc(pool_truth, start, end)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_it_waits_for_a_free_query_slot_of_the_source(edge_prometheus, test_database_url) -> None:
    from django.db import connection as thread_connection

    from metering.services import QUERY_SLOT_LOCK_CLASS

    source = Source.objects.create(
        name="capped", url=edge_prometheus.url, scrape_interval_seconds=15, max_concurrent_queries=1
    )
    start = datetime.fromisoformat("2026-10-05T00:00:00Z")
    (window,) = services.windows_create(
        source=source, start=start, end=start + timedelta(minutes=5)
    )
    other_worker = psycopg.connect(test_database_url, autocommit=True)
    other_worker.execute(
        "SELECT pg_advisory_lock(%s, %s)", [QUERY_SLOT_LOCK_CLASS, source.pk * 1000]
    )

    def ingest() -> None:
        try:
            services.window_ingest(window_id=window.pk)
        finally:
            thread_connection.close()

    thread = threading.Thread(target=ingest)
    thread.start()
    wait_for(
        lambda: windows_status([window.pk]) == {"running": 1}, timeout=30, what="window running"
    )
    thread.join(timeout=1.5)
    assert thread.is_alive(), "the only query slot is taken: the ingest must wait for it"
    other_worker.execute(
        "SELECT pg_advisory_unlock(%s, %s)", [QUERY_SLOT_LOCK_CLASS, source.pk * 1000]
    )
    thread.join(timeout=60)
    other_worker.close()
    assert windows_status([window.pk]) == {"done": 1}
