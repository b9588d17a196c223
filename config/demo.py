"""`make demo`: the whole stack on one machine, from nothing, on embedded defaults.

The demo tells the before/after story the overview asks about ("Is sharing paying off?"): it
simulates the two calendar months before today's, the earlier with training and inference on
separate pools (each sized for its own peak), the later on one shared pool. The overview opens
on the month of the newest data and compares it with the month before: these two.

Steps (each prints progress and its time; artefacts under var/ are reused on later runs):
simulate both months side by side -> back-fill one Prometheus TSDB -> start Prometheus and a
private Redis -> migrate -> ingest the months in parallel processes -> close both -> queue the
monthly report -> start Celery worker + beat and the web server.
Ctrl-C stops everything this script started.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from config.embedded import (  # noqa: E402
    PrivateRedis,
    database_url_ensure_owned,
    embedded_defaults_ensure,
    embedded_postgres_stop,
    private_redis_start,
    var_dir_from_environment,
)
from kernel.numbers import whole_number  # noqa: E402
from kernel.period import period_of_day, time_zone  # noqa: E402
from simulator.config import PoolConfig, previous_calendar_month  # noqa: E402

VAR = var_dir_from_environment()
PYTHON = sys.executable
# Small enough to come up in minutes on a busy 2-core machine with two months: 8 GPUs at a
# 150 s scrape write a third of the samples of 16 GPUs at 60 s, with every page still drawn
# the same way (two key services, six teams, all four task kinds, MIG and time-sliced GPUs;
# two samples in each five-minute interval, which the meters sum and difference exactly).
# Three nodes of three GPUs: an H100, an A100 and an L40S node, each with a time-sliced GPU and
# (H100, A100) a MIG GPU, priced by the demo book's GPU classes.
DEMO_GPUS = 9
DEMO_GPU_MODELS = "mixed"
DEMO_SCRAPE_SECONDS = 150
DEMO_STEP_SECONDS = 300
INGEST_BATCH_WINDOWS = 288  # a day of five-minute windows per range query
WEB_HOST = "127.0.0.1"
WEB_READY_SECONDS = 60


@dataclass(frozen=True)
class DemoMonth:
    config: PoolConfig

    @property
    def label(self) -> str:
        return period_of_day(self.config.start)


def demo_months(
    today: dt.date,
    *,
    gpus: int = DEMO_GPUS,
    scrape_seconds: int = DEMO_SCRAPE_SECONDS,
    days: int | None = None,
    timezone: str = "Asia/Shanghai",
) -> tuple[DemoMonth, DemoMonth]:
    """The two calendar months before `today`'s: the earlier on separate pools, the later
    shared. `days` simulates only the first days of each (the browser test's small version)."""
    later_start, later_days = previous_calendar_month(today)
    earlier_start, earlier_days = previous_calendar_month(later_start)
    months = []
    for seed, (start, length, pools) in enumerate(
        ((earlier_start, earlier_days, "separate"), (later_start, later_days, "shared")), start=1
    ):
        config = PoolConfig(
            gpus=gpus,
            days=min(length, days) if days else length,
            start=start,
            seed=seed,
            scrape_interval_seconds=scrape_seconds,
            step_seconds=DEMO_STEP_SECONDS,
            timezone=timezone,
            pools=pools,
            gpu_models=DEMO_GPU_MODELS,
        )
        months.append(DemoMonth(config))
    return months[0], months[1]


def say(message: str) -> None:
    print(f"==> {message}", flush=True)


class Clock:
    """Prints how long each step took, for the README's figures and for slow machines."""

    def __init__(self) -> None:
        self.began = self.last = time.monotonic()

    def lap(self, what: str) -> None:
        now = time.monotonic()
        say(f"{what}: {now - self.last:.1f} s")
        self.last = now

    def total(self) -> float:
        return time.monotonic() - self.began


def demo_environment() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("TANDEM_DEBUG", "1")
    env.setdefault("TANDEM_TIMEZONE", "Asia/Shanghai")
    env["TANDEM_SCRAPE_INTERVAL_SECONDS"] = str(DEMO_SCRAPE_SECONDS)
    env["TANDEM_STEP_SECONDS"] = str(DEMO_STEP_SECONDS)
    if not env.get("DATABASE_URL"):
        say("starting the embedded PostgreSQL under var/pgdata")
    # Settings start and write nothing: the database and the key are the entry point's to give.
    embedded_defaults_ensure(VAR)
    env["DATABASE_URL"] = os.environ["DATABASE_URL"]
    return env


def simulate_month(month: DemoMonth, out: Path) -> str:
    """One month's telemetry, cut in 8-day parts so promtool back-fills them side by side."""
    from simulator.pool import simulate

    result = simulate(month.config, out, part_days=8)
    return (
        f"{month.label} ({month.config.pools} pools): {result.samples_written:,} samples"
        f" in {result.seconds:.0f} s"
    )


def build_tsdb(months: tuple[DemoMonth, DemoMonth], tsdb: Path, clock: Clock) -> None:
    from simulator.prometheus import backfill_parts

    say(
        f"simulating {' and '.join(m.label for m in months)} side by side: {DEMO_GPUS} GPUs,"
        f" {DEMO_SCRAPE_SECONDS} s scrape; {months[0].label} with separate pools"
    )
    folders = [VAR / "simulated" / month.label for month in months]
    with ProcessPoolExecutor(max_workers=len(months)) as pool:
        for line in pool.map(simulate_month, months, folders):
            say(line)
    clock.lap("simulated")
    parts = sorted(part for folder in folders for part in folder.glob("metrics-*.om"))
    say(f"back-filling one Prometheus TSDB from {len(parts)} parts with promtool (once)")
    if tsdb.exists():
        shutil.rmtree(tsdb)  # a half-done earlier attempt
    backfill_parts(parts, tsdb, workers=os.cpu_count() or 2)
    (tsdb / ".backfilled").touch()
    # The TSDB now holds every sample; the gigabytes of text are no longer needed.
    for part in parts:
        part.unlink()
    clock.lap("back-filled")


def prometheus_gpu_count(url: str, at: dt.datetime) -> int:
    """GPUs that dcgm-exporter reported at `at` (a MIG GPU's instances share its UUID)."""
    query = urllib.parse.urlencode(
        {"query": "count(count by (UUID) (DCGM_FI_DEV_FB_USED))", "time": at.timestamp()}
    )
    with urllib.request.urlopen(f"{url}/api/v1/query?{query}", timeout=30) as response:
        result = json.load(response)["data"]["result"]
    return int(result[0]["value"][1]) if result else 0


def demo_admin_password() -> str:
    path = VAR / "demo_admin_password"
    if not path.exists():
        path.write_text(secrets.token_urlsafe(12))
        path.chmod(0o600)
    return path.read_text().strip()


def web_address() -> str:
    port = os.environ.get("TANDEM_DEMO_PORT", "8000")
    number = whole_number(port, max_digits=5)
    if number is None or not 1 <= number <= 65535:
        raise SystemExit(f"TANDEM_DEMO_PORT must be a TCP port 1-65535, got {port!r}")
    return f"{WEB_HOST}:{port}"


def stop_on_signal(signum: int, frame: object) -> None:
    """SIGTERM (kill, systemd, docker stop) stops the demo as Ctrl-C does; and SIGINT too when
    the demo was started in the background, where the shell has it ignored."""
    raise KeyboardInterrupt


def main() -> int:
    clock = Clock()  # the README quotes the first and second start's durations: print them
    signal.signal(signal.SIGTERM, stop_on_signal)
    signal.signal(signal.SIGINT, stop_on_signal)
    VAR.mkdir(parents=True, exist_ok=True)
    address = web_address()
    # The embedded PostgreSQL is the demo's to stop only if the demo started it.
    started_postgres = database_url_ensure_owned(VAR)
    env = demo_environment()
    try:
        return run_demo(env, address, clock)
    finally:
        if started_postgres is not None and not embedded_postgres_stop(VAR, started_postgres):
            say(f"the embedded PostgreSQL (pid {started_postgres}) did not stop: var/pgdata/log")
        say("stopped everything the demo started")


def run_demo(env: dict[str, str], address: str, clock: Clock) -> int:
    """Prometheus, the demo's Redis, then the stack; each stopped on the way out."""
    from simulator.prometheus import free_port, lookback_for, start_prometheus

    today = dt.datetime.now(time_zone(env["TANDEM_TIMEZONE"])).date()
    months = demo_months(today, timezone=env["TANDEM_TIMEZONE"])
    tsdb = (
        VAR
        / "prometheus"
        / (
            f"{months[0].label}+{months[1].label}-{DEMO_SCRAPE_SECONDS}s-{DEMO_GPUS}-{DEMO_GPU_MODELS}"
        )
    )
    if not (tsdb / ".backfilled").exists():
        build_tsdb(months, tsdb, clock)

    children: list[subprocess.Popen] = []
    redis: PrivateRedis | None = None
    port = int(os.environ.get("TANDEM_PROMETHEUS_PORT") or free_port())
    say(f"starting Prometheus on 127.0.0.1:{port}")
    prometheus = start_prometheus(
        tsdb,
        port=port,
        lookback_delta=lookback_for(DEMO_SCRAPE_SECONDS),
        scrape_interval=f"{DEMO_SCRAPE_SECONDS}s",
    )
    children.append(prometheus.process)
    env["PROMETHEUS_URL"] = prometheus.url
    try:
        redis = start_private_broker(env, VAR)
        say(f"started the demo's own Redis on {redis.url} (files under var/redis)")
        for month in months:
            config = month.config
            middle = config.start_epoch + (config.end_epoch - config.start_epoch) // 2
            gpus = prometheus_gpu_count(prometheus.url, dt.datetime.fromtimestamp(middle, dt.UTC))
            say(f"Prometheus holds {gpus} GPUs in {month.label} ({config.pools} pools)")
        clock.lap("Prometheus and Redis up")
        return run_stack(env, children, months, address, clock)
    finally:
        # A second signal (make passes its own SIGTERM on) must not cut the clean-up short.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        for child in reversed(children):
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
        for child in children:
            try:
                child.wait(timeout=15)
            except subprocess.TimeoutExpired:
                child.kill()
        if redis is not None:
            redis.stop()


def start_private_broker(env: dict[str, str], var_dir: Path) -> PrivateRedis:
    """A Redis of the demo's own, its URL set in `env` for the worker, beat and this process:
    another application's queue on the machine's Redis is never read or flushed."""
    redis = private_redis_start(var_dir)
    env["CELERY_BROKER_URL"] = redis.url
    return redis


def month_bounds_utc(month: DemoMonth) -> tuple[dt.datetime, dt.datetime]:
    """The whole calendar month, midnight to midnight in the pool's zone, in UTC."""
    first = month.config.start
    following = (first + dt.timedelta(days=32)).replace(day=1)
    zone = month.config.zone
    return tuple(
        dt.datetime.combine(day, dt.time(), zone).astimezone(dt.UTC) for day in (first, following)
    )


def load_django(env: dict[str, str]) -> None:
    """This process sets the database up through Django itself: each `manage.py` started
    apart costs a couple of seconds of imports on a busy 2-core machine."""
    os.environ.update(env)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()


def ingest_months(env: dict[str, str], months: tuple[DemoMonth, ...], clock: Clock) -> None:
    """One `ingest --now` process per month not yet ingested, side by side: the months share
    no hour of the rollup, only a few task and team rows (upserted in sorted order, so the
    processes may wait on each other there but never deadlock)."""
    from django.db import connections

    from metering import services
    from metering.models import IngestWindow

    source = services.source_default_ensure()
    processes = []
    for month in months:
        start, end = month_bounds_utc(month)
        expected = int((end - start).total_seconds()) // DEMO_STEP_SECONDS
        done = IngestWindow.objects.filter(
            source=source, start__gte=start, start__lt=end, status=IngestWindow.Status.DONE
        ).count()
        if done >= expected:
            say(f"{month.label} is already ingested ({done} windows)")
            continue
        say(f"ingesting {month.label} from Prometheus ({expected} windows) in a process of its own")
        command = [
            PYTHON, "manage.py", "ingest", "--source", "default", "--start", start.isoformat(),
            "--end", end.isoformat(), "--now", "--batch", str(INGEST_BATCH_WINDOWS),
        ]  # fmt: skip
        processes.append((month, subprocess.Popen(command, cwd=REPO, env=env)))
    connections.close_all()
    failed = [month.label for month, process in processes if process.wait() != 0]
    if failed:
        raise SystemExit(f"ingesting {', '.join(failed)} failed (see above)")
    clock.lap("ingested")


def state_service_objectives(months: list[DemoMonth]) -> None:
    """SLOs are not in the telemetry: state the simulated services' ones, as an operator would
    (every month's: a service of one month alone is judged by its own too; the later month's
    SLO where both have one)."""
    from django.core.management import call_command

    services: dict[str, dict] = {}
    for month in months:
        truth_path = VAR / "simulated" / month.label / "truth.json"
        if truth_path.exists():
            services |= json.loads(truth_path.read_text())["services"]
    say(f"stating the SLOs of {len(services)} inference services")
    for name, service in sorted(services.items()):
        call_command("set_slo", "--service", name, "--p99-ms", str(service["slo_p99_ms"]))


# The demo book's GPU classes (docs/pricing.md "GPU classes"): each model's own depreciation,
# facility share and draw; the tariff, peak hours and penalties stay the default book's.
DEMO_GPU_CLASSES = [
    {"name": "H100", "models": ["NVIDIA H100 80GB HBM3"], "depreciation_per_gpu_hour": "38.00",
     "facility_per_gpu_hour": "4.10", "gpu_average_power_kw": "0.70"},
    {"name": "A100", "models": ["NVIDIA A100-SXM4-80GB"], "depreciation_per_gpu_hour": "16.50",
     "facility_per_gpu_hour": "2.90", "gpu_average_power_kw": "0.40"},
    {"name": "L40S", "models": ["NVIDIA L40S"], "depreciation_per_gpu_hour": "7.20",
     "facility_per_gpu_hour": "1.80", "gpu_average_power_kw": "0.35"},
]  # fmt: skip


def demo_price_book_ensure(*, effective_from: dt.date) -> None:
    """Publish, once, a book with the simulated models' GPU classes in force from the earlier
    month, as finance would before the first close of a mixed pool."""
    from billing.models import PriceBook
    from billing.services import (
        price_book_create_draft,
        price_book_ensure_default,
        price_book_publish,
    )

    price_book_ensure_default()
    if PriceBook.objects.filter(gpu_classes__isnull=False).exists():
        return
    draft = price_book_create_draft(
        effective_from=effective_from,
        gpu_classes=DEMO_GPU_CLASSES,
        notes="Demo book: a price per GPU class (H100, A100, L40S).",
    )
    price_book_publish(price_book_id=draft.pk)
    say(f"published price book v{draft.version} with GPU classes H100, A100 and L40S")


def close_and_report(months: tuple[DemoMonth, ...], clock: Clock) -> None:
    """Close both months (a closed one is left as it is) and queue the later month's monthly
    report for the worker: its PDF is printed by Chromium while the pages are already up."""
    from django.core.management import CommandError, call_command

    from billing.models import PeriodClose
    from reports import services as report_services
    from reports.models import ReportRun

    demo_price_book_ensure(effective_from=months[0].config.start)
    for month in months:
        if PeriodClose.objects.filter(period=month.label).exists():
            # A later start: the demo's data never changes after its first, so nothing to redo.
            say(f"{month.label} is already closed")
            continue
        say(f"closing {month.label} and pricing its statements")
        try:
            call_command("close_period", "--period", month.label)
        except CommandError as error:
            say(f"{month.label} not closed: {error}")
    later = months[-1].label
    run = report_services.report_run_create(period=later, kind=ReportRun.Kind.MONTHLY)
    if run.status == ReportRun.Status.RUNNING:
        # Cut short when the demo stopped last time (its Redis keeps no queue across starts,
        # and no worker of ours runs yet): queue it again; writing a run twice is safe.
        from reports.tasks import report_run_execute

        report_run_execute.delay(run.pk)
    written = " (the worker writes it)" if run.status != ReportRun.Status.DONE else ""
    say(f"monthly report of {later}: run #{run.pk}, {run.status}{written}")
    clock.lap("closed")


def wait_for_web(address: str, process: subprocess.Popen) -> None:
    host, port = address.rsplit(":", 1)
    deadline = time.monotonic() + WEB_READY_SECONDS
    while process.poll() is None and time.monotonic() < deadline:
        try:
            with socket.create_connection((host, int(port)), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)


def run_stack(
    env: dict[str, str],
    children: list[subprocess.Popen],
    months: tuple[DemoMonth, DemoMonth],
    address: str,
    clock: Clock,
) -> int:
    from django.core.management import call_command

    load_django(env)
    say("migrating the database")
    call_command("migrate", "--noinput", verbosity=0)
    call_command("collectstatic", "--noinput", verbosity=0)
    clock.lap("migrated")
    ingest_months(env, months, clock)
    state_service_objectives(months)
    close_and_report(months, clock)
    password = demo_admin_password()
    call_command("ensure_demo_admin", "--password", password)
    from django.db import connections

    connections.close_all()

    say("starting the Celery worker, beat and the web server")
    celery = [PYTHON, "-m", "celery", "-A", "config"]
    children.append(
        subprocess.Popen([*celery, "worker", "-l", "warning", "-c", "2"], cwd=REPO, env=env)
    )
    schedule = str(VAR / "celerybeat-schedule")
    children.append(
        subprocess.Popen([*celery, "beat", "-l", "warning", "-s", schedule], cwd=REPO, env=env)
    )
    web = subprocess.Popen(
        [PYTHON, "manage.py", "runserver", "--noreload", address], cwd=REPO, env=env
    )
    children.append(web)
    wait_for_web(address, web)
    print(
        f"\nTandem is up after {clock.total():.0f} s: http://{address}/\n"
        f"  log in as: demo / {password}\n"
        f"  Prometheus: {env['PROMETHEUS_URL']}\n"
        f"  Celery broker: the demo's own Redis, {env['CELERY_BROKER_URL']}\n"
        f"  Overview: {months[1].label} (shared pool) against {months[0].label} (separate pools)\n"
        "Press Ctrl-C to stop everything.\n",
        flush=True,
    )
    try:
        while all(child.poll() is None for child in children):
            time.sleep(1)
    except KeyboardInterrupt:
        return 0
    failed = [child.args for child in children if child.poll() is not None]
    say(f"a process stopped on its own: {failed}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
