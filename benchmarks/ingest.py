"""Benchmark: ingest 6 hours of a simulated 250-, 500- and 1,000-GPU pool at a 15 s scrape.

For each size: simulate the pool (simulator.pool), back-fill a real Prometheus with promtool,
queue the back-fill as Celery tasks (12 windows each) and let ONE `celery worker` with two
processes ingest it. Prints per size:
- ingest wall time, and that time / the summed Prometheus evaluation time of its queries
  (goal <= 2: batching makes Prometheus, not per-window overhead, the cost);
- usage rows written per second, against a raw COPY of the same rows into a table with the
  same indexes (goal >= 0.5): both the DELETE + COPY inside the ingest transaction, and the
  whole write phase (tasks upserted, rows built in Python, every table written, committed);
- the worker processes' peak RSS (goal <= 1 GB);
- ingest seconds per GPU-day (it should stay flat as the pool grows: linear scaling);
- per meter, Prometheus' evaluation time and samples scanned (`stats=all`), against ONE
  `sum by (namespace, pod) (sum_over_time({__name__=~"<every metric ingest reads>"}[span]))`
  scan of the same raw series over the whole span (goal: ingest evaluation <= 3x that scan),
  and the same ratio for one batch replayed under the same conditions (see `replay_batch`).

Run with DATABASE_URL pointing at a scratch database (migrated here; its metering rows are
TRUNCATEd) and CELERY_BROKER_URL at a Redis database of its own, e.g.
  DATABASE_URL=postgres://postgres@127.0.0.1:5432/metering_bench \\
  CELERY_BROKER_URL=redis://127.0.0.1:6379/2 .venv/bin/python benchmarks/ingest.py
Options: --sizes 250,500,1000 --hours 6 --keep (leave the scratch TSDBs in var/bench)
--reuse (back-fill only where var/bench has no TSDB of that size and span yet).

`main()` returns the headline rows for `benchmarks/run.py`. The 10,000-GPU day is extrapolated
from the largest size's seconds per GPU-day: the simulator stops at 4,096 GPUs, and simulating
plus back-filling 10,000 GPUs for 24 hours would alone take over an hour on 2 cores. The per-size
seconds per GPU-day (and their largest/smallest ratio) are what make that extrapolation fair.
"""

from __future__ import annotations

import argparse
import ast
import datetime as dt
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import requests

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402
from django.db.models import Sum  # noqa: E402

from benchmarks._table import Row, report, within  # noqa: E402
from metering import services, sources  # noqa: E402
from metering.models import IngestWindow, Source  # noqa: E402
from metering.tasks import ingest_windows  # noqa: E402
from simulator.config import PoolConfig  # noqa: E402
from simulator.pool import Pool, run_ticks  # noqa: E402
from simulator.prometheus import backfill, lookback_for, start_prometheus  # noqa: E402

SCRAPE = 15
BATCH = 12
TIMINGS = re.compile(r"ingested \d+ windows of .*?: (\{.*\})")
TOKEN = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
STEP = 300


def simulate_hours(gpus: int, hours: int, path: Path) -> tuple[int, int, int]:
    """OpenMetrics for the first `hours` of a day of the pool; (first tick, last tick, samples)."""
    config = PoolConfig(
        gpus=gpus, days=1, start=dt.date(2026, 10, 12), seed=5, scrape_interval_seconds=SCRAPE
    )
    pool = Pool(config)
    ticks = config.ticks()[: hours * 3600 // SCRAPE]
    samples = 0
    with open(path, "w", encoding="utf-8", buffering=1 << 20) as out:
        for tick, lines in run_ticks(pool, ticks):
            if lines:
                separator = f" {tick}\n"
                out.write(separator.join(lines))
                out.write(separator)
                samples += len(lines)
        out.write("# EOF\n")
    return ticks[0], ticks[-1], samples


def start_worker(log: Path) -> subprocess.Popen:
    command = [
        sys.executable, "-m", "celery", "-A", "config", "worker", "--pool=prefork",
        "--concurrency=2", "--loglevel=INFO", "--without-gossip", "--without-mingle",
        "--without-heartbeat", "-n", f"bench-ingest-{os.getpid()}@%h",
    ]  # fmt: skip
    with open(log, "wb") as out:
        worker = subprocess.Popen(
            command, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    deadline = time.monotonic() + 120
    while " ready." not in log.read_text(errors="replace"):
        if worker.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"worker did not start:\n{log.read_text()[-3000:]}")
        time.sleep(0.2)
    return worker


def peak_rss_bytes(main_pid: int) -> int:
    """Largest VmHWM among the worker's main process and its pool children."""
    pids = [main_pid]
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == main_pid:
            pids.append(int(stat.parent.name))
    peak = 0
    for pid in pids:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        match = re.search(r"VmHWM:\s+(\d+) kB", status)
        if match:
            peak = max(peak, int(match.group(1)) * 1024)
    return peak


def copy_rows_per_second(source: Source) -> tuple[int, float]:
    """COPY the source's usage rows out, then time a raw COPY of them into a fresh table
    with the same columns and indexes."""
    with connection.cursor() as cursor:
        raw = cursor.cursor
        cursor.execute("DROP TABLE IF EXISTS bench_usage_copy")
        cursor.execute("CREATE TABLE bench_usage_copy (LIKE metering_usageinterval INCLUDING ALL)")
        data = bytearray()
        with raw.copy(
            "COPY (SELECT u.* FROM metering_usageinterval u JOIN metering_task t"
            f" ON t.id = u.task_id WHERE t.source_id = {int(source.pk)}) TO STDOUT"
        ) as copy:
            for block in copy:
                data += block
        rows = data.count(b"\n")
        began = time.perf_counter()
        with raw.copy("COPY bench_usage_copy FROM STDIN") as copy:
            copy.write(bytes(data))
        seconds = time.perf_counter() - began
        cursor.execute("DROP TABLE bench_usage_copy")
    return rows, rows / seconds


def metric_names(url: str, promql: list[str]) -> list[str]:
    """The metrics these queries read: their words that the server knows as metric names (a
    selector without matchers has no braces to tell it by)."""
    known = requests.get(f"{url}/api/v1/label/__name__/values", timeout=60).json()["data"]
    return sorted({word for text in promql for word in TOKEN.findall(text)} & set(known))


def raw_scan(url: str, promql: list[str], *, at: int, seconds: int) -> dict:
    """One `sum by (namespace, pod) (sum_over_time(<metric>[span]))` scan of every raw metric
    the ingest queries name, over the whole span, evaluated once at its end: what reading the
    data once costs. One query per metric (their results would share label sets), times summed;
    the median of 3 runs."""
    names = metric_names(url, promql)
    runs = []
    for _ in range(3):
        evaluation = samples = 0
        for name in names:
            query = f"sum by (namespace, pod) (sum_over_time({name}[{seconds}s] offset 1ms))"
            answer = requests.post(
                f"{url}/api/v1/query",
                data={"query": query, "time": at, "stats": "all"},
                timeout=600,
            ).json()
            if answer.get("status") != "success":
                raise SystemExit(f"the raw scan failed: {answer}")
            stats = answer["data"]["stats"]
            evaluation += stats["timings"]["evalTotalTime"]
            samples += stats["samples"]["totalQueryableSamples"]
        runs.append((evaluation, samples))
    evaluation, samples = sorted(runs)[1]
    return {"evaluation": evaluation, "samples": samples, "metrics": names}


def replay_batch(url: str, promql: list[str], *, start: int, end: int) -> dict:
    """One batch's per-batch meter queries (12 windows and the one before) and the raw scan
    of the metrics they name over the same span, interleaved, each the fastest of 3 runs: the
    same-conditions ratio, which the whole run's sum (queries evaluated while the workers'
    Python competes for the same 2 cores, the scan alone afterwards) only approximates."""
    names = metric_names(url, promql)
    span = end - start + STEP
    scans = [f"sum by (namespace, pod) (sum_over_time({n}[{span}s] offset 1ms))" for n in names]
    best: dict[str, float] = {}
    for _ in range(3):
        for key, query, instant in [
            *((f"q{i}", q, False) for i, q in enumerate(promql)),
            *((f"s{i}", q, True) for i, q in enumerate(scans)),
        ]:
            data = {"query": query, "stats": "all"}
            data.update({"time": end} if instant else {"start": start, "end": end, "step": STEP})
            path = "query" if instant else "query_range"
            answer = requests.post(f"{url}/api/v1/{path}", data=data, timeout=600).json()
            if answer.get("status") != "success":
                raise SystemExit(f"the replay failed: {answer}")
            seconds = answer["data"]["stats"]["timings"]["evalTotalTime"]
            best[key] = min(best.get(key, seconds), seconds)
    meters = sum(v for k, v in best.items() if k.startswith("q"))
    scan = sum(v for k, v in best.items() if k.startswith("s"))
    return {"meters": meters, "scan": scan, "ratio": meters / scan}


def prepare(gpus: int, hours: int, scratch: Path, *, reuse: bool) -> tuple[Path, dict]:
    """The back-filled TSDB of the pool's first `hours` (kept in var/bench for --reuse)."""
    scratch.mkdir(parents=True, exist_ok=True)
    metrics, tsdb = scratch / f"pool-{gpus}.om", scratch / f"tsdb-{gpus}-{hours}h"
    marker = tsdb / "bench.json"
    if reuse and marker.exists():
        return tsdb, {**json.loads(marker.read_text()), "prepare_seconds": 0.0}
    shutil.rmtree(tsdb, ignore_errors=True)
    began = time.perf_counter()
    first, last, samples = simulate_hours(gpus, hours, metrics)
    backfill(metrics, tsdb)
    metrics.unlink()
    facts = {"first": first, "last": last, "samples": samples}
    marker.write_text(json.dumps(facts))
    return tsdb, {**facts, "prepare_seconds": time.perf_counter() - began}


def run_size(gpus: int, hours: int, scratch: Path, *, reuse: bool = False) -> dict:
    tsdb, facts = prepare(gpus, hours, scratch, reuse=reuse)
    first, last, samples = facts["first"], facts["last"], facts["samples"]
    prepared = facts["prepare_seconds"]
    prometheus = start_prometheus(
        tsdb, lookback_delta=lookback_for(SCRAPE), scrape_interval=f"{SCRAPE}s"
    )
    log = scratch / f"worker-{gpus}.log"
    worker = start_worker(log)
    try:
        source = Source.objects.create(
            name=f"bench-{gpus}", url=prometheus.url, scrape_interval_seconds=SCRAPE
        )
        start = dt.datetime.fromtimestamp(first - SCRAPE, dt.UTC)
        windows = services.windows_create(
            source=source, start=start, end=dt.datetime.fromtimestamp(last, dt.UTC)
        )
        ids = [w.pk for w in windows]
        began = time.perf_counter()
        for index in range(0, len(ids), BATCH):
            ingest_windows.delay(ids[index : index + BATCH])
        while IngestWindow.objects.filter(pk__in=ids, status="done").count() < len(ids):
            failed = IngestWindow.objects.filter(pk__in=ids, status="failed").first()
            if failed:
                raise SystemExit(f"window failed: {failed.error}")
            time.sleep(0.1)
        wall = time.perf_counter() - began
        rss = peak_rss_bytes(worker.pid)
        promql = [
            query["promql"]
            for queries in IngestWindow.objects.filter(pk__in=ids).values_list("queries", flat=True)
            for query in queries
        ]
        span_end = int(windows[-1].end.timestamp())
        scan = raw_scan(
            prometheus.url,
            promql,
            at=span_end,
            seconds=span_end - int(windows[0].start.timestamp()) + STEP,
        )
        plan = sources.QueryPlan(scrape_seconds=SCRAPE, step_seconds=STEP)
        parts = [p.promql for build in sources.METER_PARTS.values() for p in build(plan).values()]
        batch_end = int(windows[min(BATCH, len(windows)) - 1].end.timestamp())
        replay = replay_batch(
            prometheus.url, parts, start=int(windows[0].start.timestamp()), end=batch_end
        )
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        worker.wait(timeout=60)
        prometheus.stop()
    timings = [ast.literal_eval(m) for m in TIMINGS.findall(log.read_text(errors="replace"))]
    logged_windows = sum(t["windows"] for t in timings)
    if logged_windows != len(ids):
        print(f"warning: the worker log names {logged_windows} of {len(ids)} windows", flush=True)
    usage_rows = sum(t["usage_rows"] for t in timings)
    # From the windows themselves (each holds its share of its batch's evaluation), so a
    # log line lost cannot shrink it.
    evaluation = float(
        IngestWindow.objects.filter(pk__in=ids).aggregate(total=Sum("prometheus_seconds"))["total"]
    )
    write_seconds = sum(t["write_seconds"] for t in timings)
    copy_seconds = sum(t["usage_copy_seconds"] for t in timings)
    copied_rows, copy_rate = copy_rows_per_second(source)
    meters: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    for t in timings:
        for meter, (seconds, scanned) in t.get("meters", {}).items():
            meters[meter][0] += seconds
            meters[meter][1] += scanned
    return {
        "gpus": gpus,
        "samples": samples,
        "prepare_seconds": prepared,
        "windows": len(ids),
        "usage_rows": copied_rows,
        "copied_rows": copied_rows,
        "wall": wall,
        "evaluation": evaluation,
        # Rates over the batches the log names (rows and seconds of the same batches).
        "write_rate": usage_rows / write_seconds if write_seconds else 0.0,
        "ingest_copy_rate": usage_rows / copy_seconds if copy_seconds else 0.0,
        "copy_rate": copy_rate,
        "rss": rss,
        "per_gpu_day": wall / (gpus * hours / 24),
        "meters": dict(meters),
        "scan": scan,
        "replay": replay,
    }


def main(argv: list[str] | None = None) -> list[Row]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="250,500,1000")
    parser.add_argument("--hours", type=int, default=6)
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--reuse", action="store_true")
    options = parser.parse_args(argv)
    call_command("migrate", verbosity=0)
    with connection.cursor() as cursor:
        cursor.execute(
            "TRUNCATE metering_usageinterval, metering_capacityinterval, metering_latencyinterval,"
            " metering_preemption, metering_podwait, metering_ingestwindow, metering_task,"
            " metering_service, metering_team, metering_source CASCADE"
        )
    scratch = REPO / "var" / "bench"
    results = []
    for size in (int(s) for s in options.sizes.split(",")):
        result = run_size(size, options.hours, scratch, reuse=options.reuse)
        results.append(result)
        print(
            f"{size:>5} GPUs x {options.hours} h: {result['samples']:,} samples"
            f" (simulated and back-filled in {result['prepare_seconds']:.0f} s),"
            f" {result['windows']} windows, {result['usage_rows']:,} usage rows",
            flush=True,
        )
    print()
    print(
        "GPUs | ingest wall s | Prometheus eval s | wall/eval (goal <= 2) | raw COPY rows/s |"
        " ingest DELETE+COPY rows/s (ratio, goal >= 0.5) | whole write phase rows/s (ratio) |"
        " worker peak RSS MB (goal <= 1024) | s per GPU-day"
    )
    for r in results:
        print(
            f"{r['gpus']} | {r['wall']:.1f} | {r['evaluation']:.1f} |"
            f" {r['wall'] / r['evaluation']:.2f} | {r['copy_rate']:,.0f} |"
            f" {r['ingest_copy_rate']:,.0f} ({r['ingest_copy_rate'] / r['copy_rate']:.2f}) |"
            f" {r['write_rate']:,.0f} ({r['write_rate'] / r['copy_rate']:.2f}) |"
            f" {r['rss'] / 2**20:.0f} | {r['per_gpu_day']:.3f}"
        )
    for r in results:
        print_meters(r)
    biggest = results[-1]
    print(
        f"\n1,000-GPU day (extrapolated from {biggest['gpus']} GPUs): "
        f"{biggest['per_gpu_day'] * 1000:.0f} s of ingest (goal <= 15 s)"
    )
    if not (options.keep or options.reuse):
        shutil.rmtree(scratch, ignore_errors=True)
    return rows_for(results, hours=options.hours)


def print_meters(r: dict) -> None:
    scan = r["scan"]
    print(
        f"\n{r['gpus']} GPUs: Prometheus cost per meter against one sum_over_time scan of the"
        f" {len(scan['metrics'])} metrics ingest reads ({scan['evaluation']:.2f} s,"
        f" {scan['samples']:,} samples)\nmeter | eval s | samples scanned | eval / scan"
    )
    for meter, (seconds, samples) in sorted(r["meters"].items(), key=lambda m: -m[1][0]):
        print(f"{meter} | {seconds:.2f} | {samples:,} | {seconds / scan['evaluation']:.2f}")
    replay = r["replay"]
    print(
        f"one batch replayed, fastest of 3, interleaved: meters {replay['meters']:.3f} s,"
        f" scan {replay['scan']:.3f} s, ratio {replay['ratio']:.2f} (goal <= 3)"
    )
    total = sum(seconds for seconds, _ in r["meters"].values())
    scanned = sum(samples for _, samples in r["meters"].values())
    print(f"all | {total:.2f} | {scanned:,} | {total / scan['evaluation']:.2f} (goal <= 3)")


def rows_for(results: list[dict], *, hours: int) -> list[Row]:
    """The headline rows: the largest size for rates, every size for wall/eval and scaling."""
    biggest, smallest = results[-1], results[0]
    size = f"{biggest['gpus']:,} GPUs x {hours} h"
    rows = []
    for r in results:
        ratio = r["wall"] / r["evaluation"]
        rows.append(
            Row(
                figure=f"ingest wall time, {r['gpus']:,} GPUs x {hours} h",
                value=f"{r['wall']:.1f} s",
                reference=f"Prometheus evaluation {r['evaluation']:.1f} s",
                ratio=ratio,
                goal="ratio <= 2",
                ok=within(ratio, at_most=2),
            )
        )
    scan_seconds = biggest["scan"]["evaluation"]
    scan_ratio = biggest["evaluation"] / scan_seconds
    rows.append(
        Row(
            figure=f"Prometheus evaluation of ingest, {size}",
            value=f"{biggest['evaluation']:.1f} s",
            reference=f"one sum_over_time scan of its raw series {scan_seconds:.2f} s",
            ratio=scan_ratio,
            goal="ratio <= 3",
            ok=within(scan_ratio, at_most=3),
        )
    )
    replay = biggest["replay"]
    rows.append(
        Row(
            figure=f"Prometheus evaluation of one ingest batch, same conditions, {size}",
            value=f"{replay['meters']:.3f} s",
            reference=f"one sum_over_time scan of its raw series {replay['scan']:.3f} s",
            ratio=replay["ratio"],
            goal="ratio <= 3",
            ok=within(replay["ratio"], at_most=3),
        )
    )
    for label, rate in (
        ("ingest rows/s, DELETE + COPY in the ingest transaction", biggest["ingest_copy_rate"]),
        ("ingest rows/s, whole write phase", biggest["write_rate"]),
    ):
        ratio = rate / biggest["copy_rate"]
        rows.append(
            Row(
                figure=f"{label}, {size}",
                value=f"{rate:,.0f} rows/s",
                reference=f"raw COPY {biggest['copy_rate']:,.0f} rows/s",
                ratio=ratio,
                goal="ratio >= 0.5",
                ok=within(ratio, at_least=0.5),
            )
        )
    peak = max(r["rss"] for r in results) / 2**20
    rows.append(
        Row(
            figure="worker peak RSS (largest process, any size)",
            value=f"{peak:,.0f} MB",
            reference="",
            ratio=None,
            goal="<= 1024 MB",
            ok=within(peak, at_most=1024),
        )
    )
    if len(results) > 1:
        scaling = biggest["per_gpu_day"] / smallest["per_gpu_day"]
        rows.append(
            Row(
                figure=f"ingest s per GPU-day, {biggest['gpus']:,} GPUs",
                value=f"{biggest['per_gpu_day']:.4f} s",
                reference=f"{smallest['gpus']:,} GPUs {smallest['per_gpu_day']:.4f} s",
                ratio=scaling,
                goal="ratio <= 1.25 (linear)",
                ok=within(scaling, at_most=1.25),
            )
        )
    for gpus, goal in ((1_000, 15.0), (10_000, 150.0)):
        seconds = biggest["per_gpu_day"] * gpus
        rows.append(
            Row(
                figure=f"{gpus:,}-GPU day ingest time",
                value=f"{seconds:,.0f} s",
                reference="",
                ratio=None,
                goal=f"<= {goal:.0f} s",
                ok=within(seconds, at_most=goal),
                note=f"EXTRAPOLATED from {size}",
            )
        )
    return rows


if __name__ == "__main__":
    report(main())
