"""Metering fixtures: a simulated pool back-filled into a real Prometheus, the real exporter
samples in another one, and real Celery workers on Redis."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import UTC, date, datetime
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.db import connection

from metering import services, sources
from metering.models import IngestWindow, Source
from simulator.config import PoolConfig
from simulator.pool import simulate
from simulator.prometheus import PrometheusProcess, backfill, lookback_for, start_prometheus
from tests import processes
from tests.conftest import REPO
from tests.metering import exposition
from tests.slow import starts

# A week across the October month boundary (UTC and Asia/Shanghai) and many peak/off-peak
# boundaries (09:00 and 22:00 local), small enough to ingest in seconds. Each target's samples
# lie between the ticks, at an offset of its own, as Prometheus stores real scrapes (the
# other simulated pools of the tests keep them on the ticks).
POOL = PoolConfig(
    gpus=8,
    days=7,
    start=date(2026, 9, 28),
    seed=11,
    scrape_interval_seconds=60,
    scrape_offsets=True,
)
# Two 5-minute windows of real exporter samples at a 15 s scrape.
EDGE_START = int(datetime(2026, 10, 5, tzinfo=UTC).timestamp())
EDGE_SCRAPE = 15
# Scrape ticks in [start, end): the sample at a window's start belongs to that window.
EDGE_TICKS = range(EDGE_START, EDGE_START + 600, EDGE_SCRAPE)


def simulated(config: PoolConfig, out: Path, edit: Callable[[Path], None] | None = None) -> dict:
    """`config`'s pool simulated into `out` and back-filled with promtool into `out / "tsdb"`;
    its truth. `edit` may change the metrics file first (drop an exporter's samples, say). The
    metrics file goes (hundreds of MB for POOL; the TSDB holds it all)."""
    simulate(config, out)
    if edit is not None:
        edit(out / "metrics.om")
    backfill(out / "metrics.om", out / "tsdb")
    (out / "metrics.om").unlink()
    return json.loads((out / "truth.json").read_text())


def simulated_prometheus(
    config: PoolConfig, out: Path, edit: Callable[[Path], None] | None = None
) -> Iterator[tuple[dict, PrometheusProcess]]:
    """`simulated`, then a real Prometheus over it, for a fixture to `yield from`."""
    truth = simulated(config, out, edit)
    running = prometheus_over(out / "tsdb", config.scrape_interval_seconds)
    try:
        yield truth, running
    finally:
        running.stop()


@pytest.fixture(scope="session")
def pool_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("pool")
    simulated(POOL, out)
    return out


@pytest.fixture(scope="session")
def pool_truth(pool_dir: Path) -> dict:
    return json.loads((pool_dir / "truth.json").read_text())


def prometheus_over(tsdb: Path, scrape_seconds: int, port: int | None = None) -> PrometheusProcess:
    return start_prometheus(
        tsdb,
        port=port,
        lookback_delta=lookback_for(scrape_seconds),
        scrape_interval=f"{scrape_seconds}s",
    )


@pytest.fixture(scope="session")
@starts("Prometheus")
def pool_prometheus(pool_dir: Path) -> Iterator[PrometheusProcess]:
    running = prometheus_over(pool_dir / "tsdb", POOL.scrape_interval_seconds)
    yield running
    running.stop()


@pytest.fixture
def pool_tsdb_copy(pool_dir: Path, tmp_path: Path) -> Path:
    """A private copy of the pool's TSDB, for a Prometheus a test may stop and restart."""
    copy = tmp_path / "tsdb"
    shutil.copytree(pool_dir / "tsdb", copy, ignore=shutil.ignore_patterns("lock", "wal"))
    return copy


@pytest.fixture(scope="session")
def edge_dir(tmp_path_factory: pytest.TempPathFactory, fixtures_dir: Path) -> Path:
    """Real exporter samples + edge-case series; "early" lacks the good pod's second half."""
    out = tmp_path_factory.mktemp("edge")
    samples = exposition.sample_lines(fixtures_dir)
    complete = [*samples, *exposition.edge_lines()]
    early = {
        tick: complete
        if tick < EDGE_START + 150
        else [*samples, *exposition.edge_lines(good_pod=False)]
        for tick in EDGE_TICKS
    }
    for name, lines in (("late", complete), ("early", early)):
        exposition.write_openmetrics(out / f"{name}.om", EDGE_TICKS, lines)
        backfill(out / f"{name}.om", out / name)
    return out


@pytest.fixture(scope="session")
@starts("Prometheus")
def edge_prometheus(edge_dir: Path) -> Iterator[PrometheusProcess]:
    running = prometheus_over(edge_dir / "late", EDGE_SCRAPE)
    yield running
    running.stop()


@pytest.fixture(scope="session")
@starts("Prometheus")
def early_prometheus(edge_dir: Path) -> Iterator[PrometheusProcess]:
    running = prometheus_over(edge_dir / "early", EDGE_SCRAPE)
    yield running
    running.stop()


def pool_span(truth: dict) -> tuple[datetime, datetime]:
    meta = truth["meta"]
    return (
        datetime.fromisoformat(meta["start"]),
        datetime.fromisoformat(meta["end"]),
    )


def ingest_span(source: Source, start: datetime, end: datetime, batch: int = 48) -> list[int]:
    """Ingest [start, end) in-process, `batch` windows per range query; returns window ids."""
    ids = [w.pk for w in services.windows_create(source=source, start=start, end=end)]
    for first in range(0, len(ids), batch):
        services.windows_ingest(window_ids=ids[first : first + batch])
    return ids


def wait_for(condition: Callable[[], bool], *, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.25)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def windows_status(ids: list[int]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for status in IngestWindow.objects.filter(pk__in=ids).values_list("status", flat=True):
        counts[status] = counts.get(status, 0) + 1
    return counts


class Worker:
    """A real `celery -A config worker` process group on the test database."""

    def __init__(self, log_path: Path, name: str) -> None:
        self.log_path = log_path
        env = processes.child_environment(
            DJANGO_SETTINGS_MODULE="tests.metering.worker_settings", PYTHONPATH=str(REPO)
        )
        command = [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "config",
            "worker",
            "--pool=prefork",
            "--concurrency=1",
            "--loglevel=INFO",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            "-n",
            f"{name}@%h",
        ]
        with open(log_path, "ab") as log:
            self.process = subprocess.Popen(
                command,
                cwd=REPO,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=processes.die_with_parent,
            )
        wait_for(self.ready, timeout=60, what=f"worker {name} to start ({log_path})")

    def ready(self) -> bool:
        if self.process.poll() is not None:
            raise AssertionError(f"worker exited: {self.log_path.read_text()[-3000:]}")
        return " ready." in self.log_path.read_text(errors="replace")

    def kill(self) -> None:
        """SIGKILL the whole process group: the main process and its pool child, no goodbye."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()


@pytest.fixture
def test_database_url() -> str:
    return processes.database_url()


@pytest.fixture
@starts("a Celery worker")
def start_worker(transactional_db: None, tmp_path: Path) -> Iterator[Callable[[], Worker]]:
    """Start workers on demand; all are stopped before the database is flushed."""
    from config.celery import app

    app.control.purge()
    with app.connection_for_write() as broker:
        # Messages a killed worker of an earlier run left unacknowledged would come back.
        client = broker.default_channel.client
        client.delete("unacked", "unacked_index")
    workers: list[Worker] = []

    def start() -> Worker:
        worker = Worker(
            tmp_path / f"worker-{len(workers)}.log",
            f"metering-{os.getpid()}-{len(workers)}",
        )
        workers.append(worker)
        return worker

    yield start
    for worker in workers:
        worker.stop()


def source_remove(pk: int) -> None:
    """Every row a source's ingest wrote, the source itself, and the teams left with no task
    or service: a module-scoped pool's clean-up (its own source only, never the others')."""
    with connection.cursor() as cursor:
        for statement in (
            "DELETE FROM metering_usageinterval u USING metering_task t"
            " WHERE u.task_id = t.id AND t.source_id = %(s)s",
            "DELETE FROM metering_preemption p USING metering_task t"
            " WHERE p.task_id = t.id AND t.source_id = %(s)s",
            "DELETE FROM metering_podwait w USING metering_task t"
            " WHERE w.task_id = t.id AND t.source_id = %(s)s",
            "DELETE FROM metering_latencyinterval l USING metering_service v"
            " WHERE l.service_id = v.id AND v.source_id = %(s)s",
            "DELETE FROM metering_capacityinterval WHERE source_id = %(s)s",
            "DELETE FROM metering_ingestbatch WHERE source_id = %(s)s",
            "DELETE FROM metering_ingestwindow WHERE source_id = %(s)s",
            "DELETE FROM metering_ingestqueries WHERE source_id = %(s)s",
            "DELETE FROM metering_gpusighting WHERE source_id = %(s)s",
            "DELETE FROM metering_task WHERE source_id = %(s)s",
            "DELETE FROM metering_service WHERE source_id = %(s)s",
            "DELETE FROM metering_source WHERE id = %(s)s",
            "DELETE FROM metering_team m WHERE NOT EXISTS (SELECT 1 FROM metering_task t"
            " WHERE t.team_id = m.id) AND NOT EXISTS (SELECT 1 FROM metering_service s"
            " WHERE s.team_id = m.id)",
        ):
            cursor.execute(statement, {"s": pk})


def answer(name: str, *series: tuple[dict[str, str], list[list]]) -> sources.QueryRun:
    """A query's answer as the parsers take it: each series' labels and [time, value] points
    (the query's own times are not read)."""
    at = datetime.fromtimestamp(0, UTC)
    found = [sources.Series(labels=labels, values=values) for labels, values in series]
    return sources.QueryRun(name, "", at, at, 0.0, 0.0, found)


@pytest.fixture
def operator_client(client):
    """A client logged in as an operator (a superuser) of the admin."""
    client.force_login(User.objects.create_superuser("operator", "op@example.com", "pw"))
    return client
