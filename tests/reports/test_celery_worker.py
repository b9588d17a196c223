"""A real Celery worker, on the session's private Redis, runs a queued report, PDF included."""

from __future__ import annotations

import hashlib
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from billing.services import period_close, price_book_ensure_default
from reports import services
from reports.models import ReportRun
from tests import processes
from tests.conftest import REPO
from tests.factories import windows_complete
from tests.pools import reports as pools
from tests.slow import starts

# Every test here starts Prometheus, a Celery worker or Chromium (tests/slow.py).
pytestmark = pytest.mark.slow

WAIT_SECONDS = 180


@pytest.fixture
@starts("a Celery worker")
def worker(transactional_db, settings, tmp_path: Path) -> Iterator[subprocess.Popen]:
    broker = settings.CELERY_BROKER_URL
    # The session's private Redis (tests/private_services.py): no task left by an earlier test.
    redis.Redis.from_url(broker).flushdb()
    # The worker's var/ (and so its report files) is this test's, like the test process's.
    var_dir = tmp_path / "var"
    var_dir.mkdir()
    settings.TANDEM_REPORTS_DIR = str(var_dir / "reports")
    env = processes.child_environment(
        TANDEM_VAR_DIR=str(var_dir),
        TANDEM_REPORTS_DIR=str(var_dir / "reports"),
        TANDEM_TIMEZONE=settings.TANDEM_TIMEZONE,
    )
    log = (tmp_path / "worker.log").open("w")
    process = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "config", "worker", "--pool", "solo",
         "-l", "info", "--without-heartbeat", "--without-mingle", "--without-gossip"],
        cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
        preexec_fn=processes.die_with_parent,
    )  # fmt: skip
    try:
        yield process
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def test_it_runs_a_queued_report_in_a_celery_worker(worker, tmp_path: Path) -> None:
    price_book_ensure_default()  # the flush of a transactional test removed the default book
    pools.build_report_pool()
    windows_complete(periods=[pools.PERIOD])
    period_close(period=pools.PERIOD)

    run = services.report_run_create(period=pools.PERIOD, kind="monthly")  # sent on commit

    deadline = time.monotonic() + WAIT_SECONDS
    while time.monotonic() < deadline and worker.poll() is None:
        run.refresh_from_db()
        if run.status in (ReportRun.Status.DONE, ReportRun.Status.FAILED):
            break
        time.sleep(1)
    log = (tmp_path / "worker.log").read_text()
    assert run.status == ReportRun.Status.DONE, (run.error, log[-3000:])
    assert {file.kind for file in run.files.all()} == {"team_csv", "focus_csv", "pdf"}
    for report_file in run.files.all():
        assert hashlib.sha256(report_file.path.read_bytes()).hexdigest() == report_file.sha256
