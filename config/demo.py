"""`make demo`: the whole stack on one machine, from nothing, on embedded defaults.

Steps (each prints progress; artefacts under var/ are reused on later runs):
simulate last month's pool -> back-fill a Prometheus TSDB -> start Prometheus -> migrate ->
ingest the month -> close it -> report -> start Celery worker + beat and the web server.
Ctrl-C stops everything this script started.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path
from zoneinfo import ZoneInfo

REPO = Path(__file__).resolve().parent.parent
VAR = Path(os.environ.get("TANDEM_VAR_DIR", REPO / "var"))
PYTHON = sys.executable
DEMO_GPUS = 16
DEMO_SCRAPE_SECONDS = 60
WEB_ADDRESS = "127.0.0.1:8000"


def say(message: str) -> None:
    print(f"==> {message}", flush=True)


def manage(*args: str, env: dict[str, str], check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run([PYTHON, "manage.py", *args], cwd=REPO, env=env, check=check)


def has_command(name: str, env: dict[str, str]) -> bool:
    probe = subprocess.run(
        [PYTHON, "manage.py", "help", name], cwd=REPO, env=env, capture_output=True
    )
    return probe.returncode == 0


def demo_environment() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("TANDEM_DEBUG", "1")
    env.setdefault("TANDEM_TIMEZONE", "Asia/Shanghai")
    env.setdefault("TANDEM_SCRAPE_INTERVAL_SECONDS", str(DEMO_SCRAPE_SECONDS))
    if not env.get("DATABASE_URL"):
        sys.path.insert(0, str(REPO))
        from config.embedded import embedded_database_url

        say("starting the embedded PostgreSQL under var/pgdata")
        env["DATABASE_URL"] = embedded_database_url(VAR)
    return env


def prometheus_gpu_count(url: str, at: dt.datetime) -> int:
    """GPUs that dcgm-exporter reported at `at` (a MIG GPU's instances share its UUID)."""
    query = urllib.parse.urlencode(
        {"query": "count(count by (UUID) (DCGM_FI_DEV_FB_USED))", "time": at.timestamp()}
    )
    with urllib.request.urlopen(f"{url}/api/v1/query?{query}", timeout=30) as response:
        result = json.load(response)["data"]["result"]
    return int(result[0]["value"][1]) if result else 0


def state_service_objectives(env: dict[str, str], truth_path: Path) -> None:
    """SLOs are not in the telemetry: state the simulated services' ones, as an operator would."""
    if not truth_path.exists():
        return
    services = json.loads(truth_path.read_text())["services"]
    say(f"stating the SLOs of {len(services)} inference services")
    for name, service in sorted(services.items()):
        manage("set_slo", "--service", name, "--p99-ms", str(service["slo_p99_ms"]), env=env)


def demo_admin_password() -> str:
    path = VAR / "demo_admin_password"
    if not path.exists():
        path.write_text(secrets.token_urlsafe(12))
        path.chmod(0o600)
    return path.read_text().strip()


def stop_on_signal(signum: int, frame: object) -> None:
    """SIGTERM (kill, systemd, docker stop) stops the demo as Ctrl-C does; and SIGINT too when
    the demo was started in the background, where the shell has it ignored."""
    raise KeyboardInterrupt


def main() -> int:
    began = time.monotonic()  # the README quotes the first start's duration: print it
    signal.signal(signal.SIGTERM, stop_on_signal)
    signal.signal(signal.SIGINT, stop_on_signal)
    VAR.mkdir(parents=True, exist_ok=True)
    env = demo_environment()
    sys.path.insert(0, str(REPO))
    from simulator.config import previous_calendar_month
    from simulator.prometheus import backfill_parts, free_port, lookback_for, start_prometheus

    today = dt.datetime.now(ZoneInfo(env["TANDEM_TIMEZONE"])).date()
    month_start, days = previous_calendar_month(today)
    label = f"{month_start:%Y-%m}"

    simulated = VAR / "simulated" / label
    tsdb = VAR / "prometheus" / label
    if not (tsdb / ".backfilled").exists():
        say(f"simulating {label}: {DEMO_GPUS} GPUs, {days} days, {DEMO_SCRAPE_SECONDS} s scrape")
        manage(
            "simulate_pool", "--gpus", str(DEMO_GPUS), "--days", str(days),
            "--start", month_start.isoformat(), "--seed", "1", "--part-days", "8",
            "--scrape-interval", str(DEMO_SCRAPE_SECONDS), "--out", str(simulated), env=env,
        )  # fmt: skip
        parts = sorted(simulated.glob("metrics-*.om"))
        say(f"back-filling a Prometheus TSDB from {len(parts)} parts with promtool (once)")
        if tsdb.exists():
            shutil.rmtree(tsdb)  # a half-done earlier attempt
        backfill_parts(parts, tsdb, workers=os.cpu_count() or 2)
        (tsdb / ".backfilled").touch()
        # The TSDB now holds every sample; the gigabytes of text are no longer needed.
        for part in parts:
            part.unlink()

    children: list[subprocess.Popen] = []
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
    middle = dt.datetime.combine(month_start + dt.timedelta(days=days // 2), dt.time(12), dt.UTC)
    gpus = prometheus_gpu_count(prometheus.url, middle)
    say(f"Prometheus holds {gpus} of the {DEMO_GPUS} simulated GPUs' dcgm-exporter series")
    try:
        return run_stack(env, children, month_start, label, began)
    finally:
        for child in reversed(children):
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
        for child in children:
            try:
                child.wait(timeout=15)
            except subprocess.TimeoutExpired:
                child.kill()
        say("stopped everything the demo started")


def run_stack(
    env: dict[str, str],
    children: list[subprocess.Popen],
    month_start: dt.date,
    label: str,
    began: float,
) -> int:
    say("migrating the database")
    manage("migrate", "--noinput", "-v", "0", env=env)
    manage("collectstatic", "--noinput", "-v", "0", env=env)
    month_end = (month_start + dt.timedelta(days=32)).replace(day=1)
    zone = ZoneInfo(env["TANDEM_TIMEZONE"])
    start_utc = dt.datetime.combine(month_start, dt.time(), zone).astimezone(dt.UTC)
    end_utc = dt.datetime.combine(month_end, dt.time(), zone).astimezone(dt.UTC)
    if has_command("ingest", env):
        say(f"ingesting {label} from Prometheus (from {start_utc:%Y-%m-%d %H:%M} UTC)")
        manage(
            "ingest", "--source", "default", "--start", start_utc.isoformat(),
            "--end", end_utc.isoformat(), "--now", "--batch", "96", env=env,
        )  # fmt: skip
    state_service_objectives(env, VAR / "simulated" / label / "truth.json")
    if has_command("close_period", env):
        say(f"closing {label} and pricing its statements")
        manage("close_period", "--period", label, env=env, check=False)
    if has_command("run_report", env):
        say(f"writing the monthly report for {label}")
        manage("run_report", "--period", label, env=env, check=False)
    password = demo_admin_password()
    manage("ensure_demo_admin", "--password", password, env=env)

    say("starting the Celery worker, beat and the web server")
    celery = [PYTHON, "-m", "celery", "-A", "config"]
    children.append(
        subprocess.Popen([*celery, "worker", "-l", "warning", "-c", "2"], cwd=REPO, env=env)
    )
    schedule = str(VAR / "celerybeat-schedule")
    children.append(
        subprocess.Popen([*celery, "beat", "-l", "warning", "-s", schedule], cwd=REPO, env=env)
    )
    children.append(
        subprocess.Popen(
            [PYTHON, "manage.py", "runserver", "--noreload", WEB_ADDRESS], cwd=REPO, env=env
        )
    )
    print(
        f"\nTandem is up after {time.monotonic() - began:.0f} s: http://{WEB_ADDRESS}/\n"
        f"  log in as: demo / {password}\n"
        f"  Prometheus: {env['PROMETHEUS_URL']}\n"
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
