"""`make bench`: run every benchmarks/*.py and print ONE table of headline figures.

Each script runs in a process of its own (each sets Django up against its own scratch database,
and ingest.py starts Prometheus and a Celery worker), with:
- DATABASE_URL: a scratch database per script on the server of $DATABASE_URL (default
  postgres://postgres@127.0.0.1:5432), named bench_<script> (bench_quick_<script> with
  --quick, so a quick run never leaves a small month where a full run would reuse it).
  It is created when missing; the scripts migrate it and TRUNCATE what they load.
  dashboards.py shares api.py's database, to reuse the month api.py loaded.
- CELERY_BROKER_URL: $BENCH_BROKER_URL or redis://127.0.0.1:6379/9.
- BENCH_ROWS_JSON: where the script's `report()` leaves its rows for this table.

Every figure is printed with the reference it is compared against in the same run (COPY,
Prometheus's own evaluation time, bare DRF, a bare Django page, writing the same bytes): the
machines are shared and noisy, so ratios, not bare timings, decide. The machine (CPUs, memory,
CPU model, load before/after and the highest seen during the run) is printed with the table.

    .venv/bin/python benchmarks/run.py [--quick] [--only ingest,pricing] [--write RESULTS.md]

Exits 1 when a script fails (its row says so); a missed goal is a finding, not a failure.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))

from benchmarks._table import Row, format_table, read_rows  # noqa: E402

DEFAULT_SERVER = "postgres://postgres@127.0.0.1:5432"
DEFAULT_BROKER = "redis://127.0.0.1:6379/9"
# A runaway script must not hang `make bench` forever; the 10,000-GPU day alone takes over an hour.
TIMEOUT_SECONDS = 180 * 60


@dataclass(frozen=True)
class Plan:
    database: str | None  # scratch database name without prefix; None: needs no database
    full: tuple[str, ...] = ()
    quick: tuple[str, ...] = ()


# In this order: cheap first, and api before dashboards (dashboards reuses api's month).
PLANS: dict[str, Plan] = {
    "simulator": Plan(None, full=("--minutes", "30"), quick=("--minutes", "5")),
    # The 1,000- and 10,000-GPU days at the demo's 150 s scrape (benchmarks/ingest.py says why),
    # each ingested again in two shards per batch (metering.shards) against the unsharded wall.
    "ingest": Plan(
        "ingest",
        full=("--gpus", "1000,10000", "--hours", "24", "--scrape", "150", "--shards", "2"),
        quick=("--gpus", "100,250", "--hours", "2"),
    ),
    "pricing": Plan("pricing", quick=("--tasks", "50")),
    "api": Plan(
        "api",
        full=("--runs", "20", "--budget", "90"),
        quick=("--tasks", "46", "--runs", "10", "--budget", "20"),
    ),
    "dashboards": Plan(
        "api", quick=("--tasks", "46", "--runs", "5", "--cold", "1", "--budget", "10")
    ),
}


def scripts() -> list[str]:
    """Every benchmarks/*.py but this runner and helpers (_*.py): planned ones first."""
    found = sorted(p.stem for p in HERE.glob("*.py") if p.stem != "run" and p.stem[0] != "_")
    return [name for name in PLANS if name in found] + [n for n in found if n not in PLANS]


def database_url(name: str) -> str:
    server = urlsplit(os.environ.get("DATABASE_URL") or DEFAULT_SERVER)
    return urlunsplit(server._replace(path=f"/{name}", query=""))


def ensure_database(name: str) -> None:
    import psycopg

    with psycopg.connect(database_url("postgres"), autocommit=True) as connection:
        exists = connection.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name])
        if exists.fetchone() is None:
            connection.execute(f'CREATE DATABASE "{name}"')


def server_version() -> str:
    import psycopg

    try:
        with psycopg.connect(database_url("postgres")) as connection:
            return connection.execute("SHOW server_version").fetchone()[0]
    except psycopg.Error as error:
        return f"unknown ({error.__class__.__name__})"


def run_script(name: str, *, quick: bool, rows_dir: Path) -> list[Row]:
    plan = PLANS.get(name, Plan(name))
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env["CELERY_BROKER_URL"] = os.environ.get("BENCH_BROKER_URL", DEFAULT_BROKER)
    if plan.database:
        database = ("bench_quick_" if quick else "bench_") + plan.database
        ensure_database(database)
        env["DATABASE_URL"] = database_url(database)
    rows_file = rows_dir / f"{name}.json"
    env["BENCH_ROWS_JSON"] = str(rows_file)
    command = [sys.executable, str(HERE / f"{name}.py"), *(plan.quick if quick else plan.full)]
    print(f"\n==> {name}: {' '.join(command[1:])}", flush=True)
    began = time.perf_counter()
    try:
        finished = subprocess.run(command, cwd=REPO, env=env, timeout=TIMEOUT_SECONDS)
        failure = f"exit status {finished.returncode}" if finished.returncode else ""
    except subprocess.TimeoutExpired:
        failure = f"timed out after {TIMEOUT_SECONDS} s"
    took = time.perf_counter() - began
    print(f"<== {name}: {took:.0f} s{', FAILED: ' + failure if failure else ''}", flush=True)
    if failure or not rows_file.exists():
        reason = failure or "reported no rows"
        return [Row(f"{name}.py", "FAILED", "", None, reason, ok=False)]
    return read_rows(rows_file)


class LoadWatch:
    """The highest 1-minute load average seen while the benchmarks run, sampled every 5 s."""

    def __init__(self) -> None:
        self.highest = os.getloadavg()[0]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self) -> None:
        while not self._stop.wait(5):
            self.highest = max(self.highest, os.getloadavg()[0])

    def __enter__(self) -> LoadWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def memory_gib() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) / 2**20
    return 0.0


def loads() -> str:
    return " / ".join(f"{value:.2f}" for value in os.getloadavg())


def commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller pools, fewer runs")
    parser.add_argument("--only", default="", help="comma-separated script names")
    parser.add_argument("--write", type=Path, help="also write the table as Markdown here")
    options = parser.parse_args(argv)
    chosen = scripts()
    if options.only:
        wanted = [name.strip() for name in options.only.split(",") if name.strip()]
        unknown = sorted(set(wanted) - set(chosen))
        if unknown:
            parser.error(f"--only: no benchmarks/{unknown[0]}.py (have: {', '.join(chosen)})")
        chosen = [name for name in chosen if name in wanted]
    started_at = dt.datetime.now(dt.UTC)
    load_before = loads()
    began = time.perf_counter()
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="bench-rows-") as rows_dir, LoadWatch() as watch:
        for name in chosen:
            rows.extend(run_script(name, quick=options.quick, rows_dir=Path(rows_dir)))
    total = time.perf_counter() - began
    machine = [
        f"- run: {started_at:%Y-%m-%d %H:%M} UTC, {'--quick' if options.quick else 'full'},"
        f" {total / 60:.1f} min, commit {commit()}",
        f"- machine: {os.cpu_count()} CPUs (nproc), {memory_gib():.1f} GiB memory,"
        f" CPU model {cpu_model()}",
        f"- load average (1/5/15 min): before {load_before}, after {loads()},"
        f" highest 1-min seen during the run {watch.highest:.2f}",
        f"- Python {platform.python_version()}, PostgreSQL {server_version()},"
        f" {platform.system()} {platform.release()}",
    ]
    table = format_table(rows)
    missed = sum(row.ok is False for row in rows)
    summary = f"{len(rows)} figures, {missed} goal(s) missed or failed"
    print("\n" + "\n".join(machine) + "\n\n" + table + "\n\n" + summary)
    if options.write:
        options.write.write_text(
            "# `make bench` results\n\n" + "\n".join(machine) + "\n\n" + table + f"\n\n{summary}.\n"
        )
        print(f"written to {options.write}")
    failed = any(row.value == "FAILED" for row in rows)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
