"""The soak: the whole ingestion stack on loopback under faults, then an exact reconciliation.

Real processes only, each private to the run and stopped at the end: a PostgreSQL cluster
(initdb/pg_ctl in a temporary directory, on a free port, so it can be restarted), a Redis
without persistence (a restart loses every queued message, as a crashed Redis does), the
simulator serving `/metrics` live, Debian's Prometheus scraping it, one Celery worker and
Celery beat ingesting every step.

While beat runs, the faults of issue 7 are injected in a cycle: a duplicate delivery of one
window, SIGKILL of the worker while a window is running, a Redis restart, Prometheus stopped
for several steps and restarted on the same TSDB, the exporters silent for three steps (the
simulator stopped with SIGSTOP, as a hung exporter or an overloaded node), a PostgreSQL
restart. A crashed process is started again, as a service manager would, and counted.

Afterwards beat stops, the harness waits for the stack to settle, and a second database
ingests the same span from the same Prometheus in one process, window by window, with no
faults: that is what Prometheus holds of what the simulator served. Every row of the soak's
database must equal the check's row, key by key: a row only in the check was lost, a row only
in the soak (or twice in it) was counted twice; and every window outside Prometheus' outage
must be exactly as complete as the check's (a window the exporters left short is short in
both: the faults lost nothing).

    python -m tests.soak.harness --minutes 10     # `make soak`
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
from celery import Celery

from simulator.prometheus import PrometheusProcess, free_port, lookback_for, start_prometheus

REPO = Path(__file__).resolve().parent.parent.parent
PYTHON = sys.executable
CELERY = str(Path(sys.executable).with_name("celery"))
PG_BIN = sorted(Path("/usr/lib/postgresql").glob("*/bin"))


class SoakError(RuntimeError):
    """The stack could not be started or did not settle; the message says which part."""


@dataclass(frozen=True)
class SoakPlan:
    """How long, how fast and how often. `cycles` fault cycles follow each other; a cycle is
    one of each fault, spaced so that several windows close between them."""

    cycles: int = 1
    step_seconds: int = 10
    scrape_seconds: int = 5
    lag_seconds: int = 7
    gpus: int = 8
    # Fast enough that pods start, end and get preempted within a short run.
    speed: float = 120.0
    prometheus_outage_steps: int = 3
    settle_timeout_seconds: float = 90.0

    def __post_init__(self) -> None:
        if self.step_seconds % self.scrape_seconds:
            raise ValueError("step_seconds must be a multiple of scrape_seconds")
        if self.lag_seconds <= self.scrape_seconds:
            raise ValueError("lag_seconds must exceed scrape_seconds (the last sample must land)")


@dataclass
class Fault:
    name: str
    at: datetime
    detail: str


@dataclass
class SoakResult:
    faults: list[Fault] = field(default_factory=list)
    restarts: dict[str, int] = field(default_factory=dict)
    windows_expected: int = 0
    windows_done: int = 0
    windows_missing: list[str] = field(default_factory=list)
    windows_not_done: list[str] = field(default_factory=list)
    windows_retried: int = 0
    windows_changed_after_first_write: int = 0
    rows_checked: int = 0
    rows_by_table: dict[str, int] = field(default_factory=dict)
    rows_lost: int = 0
    rows_duplicated: int = 0
    rows_differing: int = 0
    problems: list[str] = field(default_factory=list)
    span: tuple[datetime, datetime] | None = None
    min_completeness_outside_outage: Decimal | None = None
    max_completeness_outside_outage: Decimal | None = None
    # Off-outage windows short of samples, each with its counts and warnings (why it is short).
    incomplete_windows: list[str] = field(default_factory=list)
    # Off-outage windows whose completeness is not the check's (the faults lost samples).
    windows_completeness_differing: list[str] = field(default_factory=list)

    @property
    def fault_kinds(self) -> set[str]:
        return {fault.name for fault in self.faults}

    def table(self) -> str:
        kinds: dict[str, int] = {}
        for fault in self.faults:
            kinds[fault.name] = kinds.get(fault.name, 0) + 1
        lines = ["", "soak: faults injected"]
        lines += [
            f"  {fault.at:%H:%M:%S}  {fault.name:<22} {fault.detail}" for fault in self.faults
        ]
        span = f"{self.span[0]:%H:%M:%S}-{self.span[1]:%H:%M:%S} UTC" if self.span else "(no span)"
        by_table = ", ".join(f"{k} {v}" for k, v in self.rows_by_table.items())
        rows = [
            ("faults injected", ", ".join(f"{k} x{v}" for k, v in sorted(kinds.items()))),
            ("processes restarted", ", ".join(f"{k} x{v}" for k, v in self.restarts.items())),
            ("windows (span)", f"{self.windows_expected} ({span})"),
            ("windows done", self.windows_done),
            ("windows missing", len(self.windows_missing)),
            ("windows not done", len(self.windows_not_done)),
            ("windows retried", self.windows_retried),
            ("windows changed after 1st write", self.windows_changed_after_first_write),
            ("min completeness off-outage", self.min_completeness_outside_outage),
            ("max completeness off-outage", self.max_completeness_outside_outage),
            ("completeness not the check's (must be 0)", len(self.windows_completeness_differing)),
            ("rows checked", f"{self.rows_checked} ({by_table})"),
            ("rows lost (must be 0)", self.rows_lost),
            ("rows duplicated (must be 0)", self.rows_duplicated),
            ("rows differing (must be 0)", self.rows_differing),
        ]
        width = max(len(name) for name, _ in rows)
        lines += ["", "soak: result"]
        lines += [f"  {name:<{width}}  {value if value != '' else '-'}" for name, value in rows]
        lines += [f"  incomplete window: {window}" for window in self.incomplete_windows[:20]]
        lines += [
            f"  completeness differs: {window}"
            for window in self.windows_completeness_differing[:20]
        ]
        lines += [f"  problem: {problem}" for problem in self.problems[:40]]
        return "\n".join(lines)

    @property
    def ok(self) -> bool:
        return not (
            self.windows_missing
            or self.windows_not_done
            or self.rows_lost
            or self.rows_duplicated
            or self.rows_differing
            or self.windows_completeness_differing
            or self.problems
        )


# --- Processes ------------------------------------------------------------------------------


def _as_postgres(command: list[str]) -> list[str]:
    """PostgreSQL refuses to run as root: run its tools as the `postgres` user then."""
    if os.geteuid() == 0:
        return [_runuser(), "-u", "postgres", "--", *command]
    return command


def _runuser() -> str:
    """runuser lives in /usr/sbin, which a root shell's PATH may lack (`env -i`, cron)."""
    return shutil.which("runuser") or shutil.which("runuser", path="/usr/sbin:/sbin") or "runuser"


def _pg_tool(name: str) -> str:
    for folder in reversed(PG_BIN):
        if (folder / name).exists():
            return str(folder / name)
    found = shutil.which(name)
    if found is None:
        raise SoakError(f"{name} not found: install Debian's postgresql package")
    return found


class PrivatePostgres:
    """A throwaway cluster: trust auth, loopback only, no fsync (the data is disposable)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.data = folder / "pgdata"
        self.log = folder / "postgres.log"
        self.port = free_port()
        folder.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            shutil.chown(folder, "postgres")
        _run(
            _as_postgres(
                [
                    _pg_tool("initdb"),
                    "-D",
                    str(self.data),
                    "-U",
                    "postgres",
                    "-A",
                    "trust",
                    "--no-sync",
                    "-E",
                    "UTF8",
                    "--locale=C",
                ]
            ),
            "initdb",
        )

    def url(self, database: str) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{database}"

    def start(self) -> None:
        options = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={self.folder}"
            " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        )
        _run(
            _as_postgres(
                [
                    _pg_tool("pg_ctl"),
                    "-D",
                    str(self.data),
                    "-l",
                    str(self.log),
                    "-o",
                    options,
                    "-w",
                    "-t",
                    "60",
                    "start",
                ]
            ),
            "pg_ctl start",
        )

    def stop(self) -> None:
        if (self.data / "postmaster.pid").exists():
            subprocess.run(
                _as_postgres(
                    [_pg_tool("pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop"]
                ),
                capture_output=True,
                check=False,
            )


class Supervised:
    """One long-running process in its own session (so SIGKILL reaches its children too)."""

    def __init__(self, name: str, command: list[str], log: Path, env: dict[str, str]) -> None:
        self.name, self.command, self.log_path, self.env = name, command, log, env
        self.process: subprocess.Popen | None = None
        self.expected_down = False

    def start(self) -> None:
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                self.command,
                cwd=REPO,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self.expected_down = False

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL the whole process group: no shutdown, no acknowledgement, nothing flushed."""
        if self.alive():
            assert self.process is not None
            with suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def stop(self, timeout: float = 20.0) -> None:
        self.expected_down = True
        if not self.alive():
            return
        assert self.process is not None
        with suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()

    def tail(self, size: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-size:]
        except OSError:
            return ""


def _run(command: list[str], what: str, env: dict[str, str] | None = None) -> str:
    result = subprocess.run(
        command, cwd=REPO, env=env, capture_output=True, text=True, check=False, timeout=600
    )
    if result.returncode != 0:
        raise SoakError(f"{what} failed ({result.returncode}): {result.stderr or result.stdout}")
    return result.stdout


def _wait_for(predicate: Callable[[], bool], timeout: float, what: str, every: float = 0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with suppress(Exception):
            if predicate():
                return
        time.sleep(every)
    raise SoakError(f"timed out after {timeout:.0f}s waiting for {what}")


def _port_answers(port: int) -> bool:
    import socket

    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


# --- The stack ------------------------------------------------------------------------------


class Stack:
    def __init__(self, plan: SoakPlan, folder: Path, say: Callable[[str], None]) -> None:
        self.plan, self.folder, self.say = plan, folder, say
        self.postgres = PrivatePostgres(folder / "postgres")
        self.redis_port = free_port()
        self.simulator_port = free_port()
        self.prometheus_port = free_port()
        self.tsdb = folder / "tsdb"
        self.prometheus: PrometheusProcess | None = None
        self.restarts: dict[str, int] = {}
        self.env = {
            **os.environ,
            "DATABASE_URL": self.postgres.url("soak"),
            "CELERY_BROKER_URL": f"redis://127.0.0.1:{self.redis_port}/0",
            "PROMETHEUS_URL": f"http://127.0.0.1:{self.prometheus_port}",
            "TANDEM_STEP_SECONDS": str(plan.step_seconds),
            "TANDEM_SCRAPE_INTERVAL_SECONDS": str(plan.scrape_seconds),
            "TANDEM_INGEST_LAG_SECONDS": str(plan.lag_seconds),
            # Production backs off up to 10 minutes; the soak must settle within a few steps.
            "TANDEM_INGEST_RETRY_BACKOFF_SECONDS": "1",
            "TANDEM_INGEST_RETRY_BACKOFF_MAX_SECONDS": str(plan.step_seconds),
            "TANDEM_VAR_DIR": str(folder / "var"),
            "TANDEM_LOG_LEVEL": "INFO",
            "DJANGO_SETTINGS_MODULE": "config.settings",
            "PYTHONUNBUFFERED": "1",
        }
        self.env.pop("CELERY_TASK_ALWAYS_EAGER", None)
        logs = folder / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        self.redis = Supervised(
            "redis",
            [
                "redis-server",
                "--port",
                str(self.redis_port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(folder),
            ],
            logs / "redis.log",
            self.env,
        )
        self.simulator = Supervised(
            "simulator",
            [
                PYTHON,
                "manage.py",
                "simulate_pool",
                "--serve",
                str(self.simulator_port),
                "--gpus",
                str(plan.gpus),
                "--scrape-interval",
                str(plan.scrape_seconds),
                "--step",
                str(plan.step_seconds),
                "--speed",
                str(plan.speed),
                "--seed",
                "7",
            ],
            logs / "simulator.log",
            self.env,
        )
        self.worker_count = 0
        self.worker = self._new_worker()
        self.beat = Supervised(
            "beat",
            [CELERY, "-A", "config", "beat", "-l", "INFO", "-s", str(folder / "beat-schedule")],
            logs / "beat.log",
            self.env,
        )
        self.celery = Celery("soak", broker=self.env["CELERY_BROKER_URL"])

    def _new_worker(self) -> Supervised:
        self.worker_count += 1
        name = f"soak{self.worker_count}@127.0.0.1"
        return Supervised(
            "worker",
            [
                CELERY,
                "-A",
                "config",
                "worker",
                "-l",
                "INFO",
                "-n",
                name,
                "--concurrency",
                "2",
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
            ],
            self.folder / "logs" / f"worker{self.worker_count}.log",
            self.env,
        )

    # Start and stop -------------------------------------------------------------------------

    def start(self) -> None:
        self.postgres.start()
        _run(
            _as_postgres(
                [
                    _pg_tool("createdb"),
                    "-h",
                    "127.0.0.1",
                    "-p",
                    str(self.postgres.port),
                    "-U",
                    "postgres",
                    "soak",
                ]
            ),
            "createdb soak",
        )
        self.say("migrating the soak database")
        _run([PYTHON, "manage.py", "migrate", "--noinput", "-v", "0"], "migrate", self.env)
        # The check database starts as an identical, empty copy.
        with self.admin() as conn:
            conn.execute('CREATE DATABASE "check" TEMPLATE soak')
        self.redis.start()
        _wait_for(lambda: _port_answers(self.redis_port), 20, "redis")
        self.simulator.start()
        _wait_for(lambda: _port_answers(self.simulator_port), 60, "the simulator's /metrics")
        self.prometheus_start()
        self.worker.start()
        self.beat.start()

    def stop(self) -> None:
        for process in (self.beat, self.worker, self.simulator, self.redis):
            with suppress(Exception):
                process.stop()
        if self.prometheus is not None:
            with suppress(Exception):
                self.prometheus.stop()
        with suppress(Exception):
            self.postgres.stop()

    def prometheus_start(self) -> None:
        self.prometheus = start_prometheus(
            self.tsdb,
            port=self.prometheus_port,
            lookback_delta=lookback_for(self.plan.scrape_seconds),
            scrape_targets=[f"127.0.0.1:{self.simulator_port}"],
            scrape_interval=f"{self.plan.scrape_seconds}s",
            config_path=self.folder / "prometheus.yml",
            log_path=self.folder / "logs" / "prometheus.log",
        )

    @contextmanager
    def admin(self) -> Iterator[psycopg.Connection]:
        with psycopg.connect(self.postgres.url("postgres"), autocommit=True) as conn:
            yield conn

    def query(self, sql: str, params: Any = None, database: str = "soak") -> list[tuple]:
        with psycopg.connect(self.postgres.url(database), connect_timeout=5) as conn:
            return conn.execute(sql, params).fetchall()

    def supervise(self) -> None:
        """Start again whatever crashed (beat or a worker giving up on Redis), as systemd would."""
        for process in (self.worker, self.beat, self.simulator, self.redis):
            if not process.expected_down and process.process is not None and not process.alive():
                self.restarts[process.name] = self.restarts.get(process.name, 0) + 1
                self.say(f"{process.name} exited ({process.process.returncode}): starting it again")
                process.start()


# --- Faults ---------------------------------------------------------------------------------


class Injector:
    def __init__(self, stack: Stack, result: SoakResult) -> None:
        self.stack, self.result = stack, result
        self.outages: list[tuple[datetime, datetime]] = []
        self.killed_windows: set[int] = set()

    def note(self, name: str, detail: str) -> None:
        fault = Fault(name=name, at=datetime.now(UTC), detail=detail)
        self.result.faults.append(fault)
        self.stack.say(f"fault: {name}: {detail}")

    def pause(self, seconds: float) -> None:
        """Sleep, restarting crashed processes meanwhile."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.stack.supervise()
            time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))

    def duplicate_delivery(self) -> None:
        rows: list[tuple] = []
        deadline = time.monotonic() + 3 * self.stack.plan.step_seconds
        while not rows and time.monotonic() < deadline:
            rows = self.stack.query(
                "SELECT id, start FROM metering_ingestwindow WHERE status = 'done'"
                " AND rows_written > 0 ORDER BY start DESC LIMIT 1"
            )
            self.pause(0.5)
        if not rows:
            self.result.problems.append("duplicate delivery: no window was done yet")
            return
        window_id, start = rows[0]
        for _ in range(2):  # the same message twice, as a redelivering broker does
            self.stack.celery.send_task("metering.tasks.ingest_window", args=[window_id])
        self.note("duplicate delivery", f"ingest_window({window_id}) x2, window {start:%H:%M:%S}")

    def kill_worker_mid_window(self) -> None:
        """SIGKILL the worker while a window is `running`; if beat's window is too quick to
        catch within two steps, re-deliver the newest one and catch that."""
        deadline = time.monotonic() + 2 * self.stack.plan.step_seconds
        running: list[tuple] = []
        nudged = False
        # One connection for the tight poll; windows an earlier kill left running do not count.
        with psycopg.connect(self.stack.postgres.url("soak"), autocommit=True) as conn:
            while time.monotonic() < deadline and not running:
                running = conn.execute(
                    "SELECT id, start FROM metering_ingestwindow WHERE status = 'running'"
                    " AND NOT id = ANY(%s)",
                    [sorted(self.killed_windows)],
                ).fetchall()
                late = time.monotonic() > deadline - self.stack.plan.step_seconds
                if not running and not nudged and late:
                    newest = conn.execute(
                        "SELECT id FROM metering_ingestwindow ORDER BY start DESC LIMIT 1"
                    ).fetchall()
                    if newest:
                        self.stack.celery.send_task(
                            "metering.tasks.ingest_window", args=[newest[0][0]]
                        )
                        nudged = True
                time.sleep(0.005)
        pid = self.stack.worker.process.pid if self.stack.worker.process else None
        self.stack.worker.expected_down = True
        self.stack.worker.kill()
        if running:
            self.killed_windows.add(running[0][0])
            detail = f"pid {pid} while window {running[0][0]} ({running[0][1]:%H:%M:%S}) ran"
        else:
            detail = f"pid {pid}, no window caught running"
            self.result.problems.append("worker SIGKILL: no window was caught mid-ingest")
        self.note("worker SIGKILL", detail)
        self.stack.worker = self.stack._new_worker()
        self.stack.worker.start()

    def redis_restart(self) -> None:
        queued = 0
        with suppress(Exception):
            import redis

            client = redis.Redis(port=self.stack.redis_port, socket_timeout=2)
            queued = client.llen("celery") + client.hlen("unacked")
        self.stack.redis.stop()
        time.sleep(2)
        self.stack.redis.start()
        _wait_for(lambda: _port_answers(self.stack.redis_port), 20, "redis after restart")
        self.note("redis restart", f"no persistence: {queued} queued/unacked messages dropped")

    def prometheus_outage(self) -> None:
        assert self.stack.prometheus is not None
        began = datetime.now(UTC)
        self.stack.prometheus.stop()
        seconds = self.stack.plan.prometheus_outage_steps * self.stack.plan.step_seconds
        self.note(
            "prometheus stopped",
            f"for {seconds}s ({self.stack.plan.prometheus_outage_steps} steps)",
        )
        self.pause(seconds)
        self.stack.prometheus_start()
        self.outages.append((began, datetime.now(UTC)))
        self.note("prometheus restarted", "same TSDB, same port")

    def exporter_silent(self) -> None:
        """SIGSTOP the simulator for three steps: Prometheus' scrapes of it fail (`up` 0), as
        when an exporter hangs or the machine is too loaded to answer in time. At least one
        whole window falls inside (a scrape that began up to a scrape timeout before SIGCONT
        can still succeed); it is short of samples in the soak and the check alike, and says
        so in its warnings."""
        process = self.stack.simulator.process
        assert process is not None
        seconds = 3 * self.stack.plan.step_seconds
        os.killpg(process.pid, signal.SIGSTOP)
        self.note("exporter silent", f"simulator stopped (SIGSTOP) for {seconds}s")
        try:
            self.pause(seconds)  # a stopped process is alive: pause restarts only crashed ones
        finally:
            os.killpg(process.pid, signal.SIGCONT)

    def postgres_restart(self) -> None:
        self.stack.postgres.stop()
        time.sleep(1)
        self.stack.postgres.start()
        self.note("postgres restart", "pg_ctl stop -m fast, start")

    def cycle(self) -> None:
        step = self.stack.plan.step_seconds
        self.pause(step)
        self.duplicate_delivery()
        self.pause(step / 2)
        self.kill_worker_mid_window()
        self.pause(step)
        self.redis_restart()
        self.pause(step)
        self.prometheus_outage()
        self.pause(step)
        self.exporter_silent()
        self.pause(step)
        self.postgres_restart()
        self.pause(step)


# --- Reconciliation -------------------------------------------------------------------------

# One query per table: a key and the values that must agree. Keys use external ids, since the
# soak and the check databases number their tasks and services independently.
TABLES = {
    "usage": (
        "SELECT t.external_id, u.interval_start, u.alloc_gpu_seconds, u.busy_gpu_seconds,"
        " u.memory_avg_bytes, u.memory_peak_bytes, u.read_operations, u.write_operations,"
        " u.read_bytes, u.write_bytes, tm.name, t.kind"
        " FROM metering_usageinterval u JOIN metering_task t ON t.id = u.task_id"
        " JOIN metering_team tm ON tm.id = t.team_id",
        2,
    ),
    "capacity": (
        "SELECT fault_domain, interval_start, capacity_gpu_seconds, gpus_present"
        " FROM metering_capacityinterval",
        2,
    ),
    "latency": (
        "SELECT s.external_id, l.interval_start, l.buckets::text, l.request_count"
        " FROM metering_latencyinterval l JOIN metering_service s ON s.id = l.service_id",
        2,
    ),
    "preemptions": (
        "SELECT t.external_id, p.pod, p.at, p.gpus, p.seconds_since_start"
        " FROM metering_preemption p JOIN metering_task t ON t.id = p.task_id",
        3,
    ),
    "waits": (
        "SELECT t.external_id, w.pod, w.created, w.scheduled, w.seconds"
        " FROM metering_podwait w JOIN metering_task t ON t.id = w.task_id",
        3,  # a pod's wait per incarnation (metering.models.PodWait)
    ),
}


def reconcile(stack: Stack, result: SoakResult, outages: list[tuple[datetime, datetime]]) -> None:
    step = stack.plan.step_seconds
    windows = stack.query(
        "SELECT start, status, attempts, completeness, changed_after_first_write, warnings,"
        " samples_seen, samples_expected"
        " FROM metering_ingestwindow ORDER BY start"
    )
    if not windows:
        result.problems.append("no window was ever created: beat or the worker never ran")
        return
    first, last = windows[0][0], windows[-1][0]
    result.span = (first, last + timedelta(seconds=step))
    present = {row[0]: row for row in windows}
    expected = [first + timedelta(seconds=step * i) for i in range(len(_steps(first, last, step)))]
    result.windows_expected = len(expected)
    result.windows_missing = [f"{s:%H:%M:%S}" for s in expected if s not in present]
    result.windows_not_done = [
        f"{s:%H:%M:%S} {row[1]}" for s, row in present.items() if row[1] != "done"
    ]
    result.windows_done = sum(1 for row in windows if row[1] == "done")
    result.windows_retried = sum(1 for row in windows if row[2] > 1)
    result.windows_changed_after_first_write = sum(1 for row in windows if row[4] is not None)
    off_outage_rows = [
        row
        for row in windows
        if row[1] == "done"
        and row[0] > first + timedelta(seconds=step)  # Prometheus began mid-window
        and not any(
            row[0] < end + timedelta(seconds=step) and row[0] + timedelta(seconds=step) > began
            for began, end in outages
        )
    ]
    off_outage = [row[3] for row in off_outage_rows]
    result.min_completeness_outside_outage = min(off_outage) if off_outage else None
    result.max_completeness_outside_outage = max(off_outage) if off_outage else None
    result.incomplete_windows = [
        f"{row[0]:%H:%M:%S} completeness {row[3]} ({row[6]} of {row[7]} samples)"
        f" attempts {row[2]}: {'; '.join(map(str, row[5] or [])) or 'no warning'}"
        for row in off_outage_rows
        if row[3] < 1
    ]

    # The check: the same span, one window at a time, in one process, no faults.
    check_env = {**stack.env, "DATABASE_URL": stack.postgres.url("check")}
    _run(
        [
            PYTHON,
            "manage.py",
            "ingest",
            "--source",
            "default",
            "--start",
            first.isoformat(),
            "--end",
            result.span[1].isoformat(),
            "--now",
            "--batch",
            "1",
            "-v",
            "0",
        ],
        "the check's ingest",
        check_env,
    )
    for table, (sql, key_width) in TABLES.items():
        compare_rows(result, table, stack.query(sql), stack.query(sql, database="check"), key_width)
    # Completeness against the check's, window by window: on a loaded machine the simulator
    # can miss scrapes (Prometheus records them failed in `up`), and a window without samples
    # is short in both databases alike. A soak window less (or more) complete than the
    # fault-free ingest of the same Prometheus is one the faults changed.
    checked = dict(
        stack.query("SELECT start, completeness FROM metering_ingestwindow", database="check")
    )
    result.windows_completeness_differing = [
        f"{row[0]:%H:%M:%S} soak {row[3]}, check {checked.get(row[0])}"
        for row in off_outage_rows
        if checked.get(row[0]) != row[3]
    ]


def compare_rows(
    result: SoakResult, table: str, soak_rows: list[tuple], check_rows: list[tuple], width: int
) -> None:
    """Rows keyed by their first `width` columns: a key only in the check was lost, a key
    twice in the soak or only in the soak was counted twice, a key in both must agree."""
    result.rows_checked += len(check_rows)
    result.rows_by_table[table] = result.rows_by_table.get(table, 0) + len(check_rows)
    soak = _keyed(soak_rows, width)
    check = _keyed(check_rows, width)
    for key, values in soak.items():
        if len(values) > 1:
            result.rows_duplicated += len(values) - 1
            result.problems.append(f"{table} {key}: {len(values)} rows")
    for key in sorted(check.keys() - soak.keys()):
        result.rows_lost += 1
        result.problems.append(f"{table} {key}: lost {check[key][0]}")
    for key in sorted(soak.keys() - check.keys()):
        result.rows_duplicated += 1
        result.problems.append(f"{table} {key}: extra {soak[key][0]}")
    for key in sorted(soak.keys() & check.keys()):
        if soak[key][0] != check[key][0]:
            result.rows_differing += 1
            result.problems.append(f"{table} {key}: {soak[key][0]} != check {check[key][0]}")


def _steps(first: datetime, last: datetime, step: int) -> range:
    return range(int(first.timestamp()), int(last.timestamp()) + 1, step)


def _keyed(rows: list[tuple], width: int) -> dict[tuple, list[tuple]]:
    keyed: dict[tuple, list[tuple]] = {}
    for row in rows:
        keyed.setdefault(tuple(row[:width]), []).append(tuple(row[width:]))
    return keyed


# --- The run --------------------------------------------------------------------------------


def settle(stack: Stack, cutoff: datetime, timeout: float) -> None:
    """With beat still running (it is what repairs), wait until every window that ended before
    `cutoff` exists and is done; then stop beat and let the worker finish what it holds."""
    step = stack.plan.step_seconds

    def repaired() -> bool:
        stack.supervise()
        rows = stack.query(
            'SELECT start, status FROM metering_ingestwindow WHERE "end" <= %s ORDER BY start',
            [cutoff],
        )
        if not rows or any(status != "done" for _, status in rows):
            return False
        return len(rows) == len(_steps(rows[0][0], rows[-1][0], step)) and rows[-1][0] + timedelta(
            seconds=step
        ) > cutoff - timedelta(seconds=step)

    with suppress(SoakError):
        _wait_for(repaired, timeout, "the windows to be repaired", every=1.0)
    stack.beat.stop()

    def drained() -> bool:
        return not stack.query(
            "SELECT 1 FROM metering_ingestwindow WHERE status IN ('pending', 'running') LIMIT 1"
        )

    with suppress(SoakError):
        _wait_for(drained, 3 * step, "the last windows", every=0.5)
    stack.worker.stop()


def run_soak(
    plan: SoakPlan, say: Callable[[str], None] = print, keep: Path | None = None
) -> SoakResult:
    """Run the soak and return its result; `keep` keeps the logs and data there."""
    result = SoakResult()
    with tempfile.TemporaryDirectory(prefix="tandem-soak-") as scratch:
        folder = keep or Path(scratch)
        folder.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            os.chmod(folder, 0o755)  # the postgres user must reach its data directory
        stack = Stack(plan, folder, say)
        try:
            say(f"soak in {folder}: step {plan.step_seconds}s, scrape {plan.scrape_seconds}s")
            stack.start()
            injector = Injector(stack, result)
            for number in range(plan.cycles):
                say(f"fault cycle {number + 1}/{plan.cycles}")
                injector.cycle()
            # Two more steps, so that windows ingested after the last fault count too.
            injector.pause(2 * plan.step_seconds)
            cutoff = datetime.now(UTC) - timedelta(seconds=plan.lag_seconds)
            say(f"faults over; waiting for every window ending by {cutoff:%H:%M:%S} to be done")
            settle(stack, cutoff, plan.settle_timeout_seconds)
            result.restarts = dict(stack.restarts)
            reconcile(stack, result, injector.outages)
        except Exception:
            for process in (stack.worker, stack.beat, stack.simulator):
                say(f"--- {process.name} log tail ---\n{process.tail()}")
            raise
        finally:
            stack.stop()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="about how long to run")
    parser.add_argument("--step", type=int, default=10, help="metering step, seconds")
    parser.add_argument("--keep", type=Path, default=None, help="keep logs and data here")
    args = parser.parse_args()
    plan = SoakPlan(step_seconds=args.step)
    cycle_seconds = (6.5 + plan.prometheus_outage_steps) * plan.step_seconds
    plan = SoakPlan(step_seconds=args.step, cycles=max(1, round(args.minutes * 60 / cycle_seconds)))
    result = run_soak(
        plan,
        keep=args.keep,
        say=lambda line: print(f"{datetime.now(UTC):%H:%M:%S} {line}", flush=True),
    )
    print(result.table())
    sys.exit(0 if result.ok else 1)


if __name__ == "__main__":
    main()
