"""What one ingest batch (12 windows) costs before it writes: each meter query's answer, and
the worker's CPU to observe and derive it, on a pool kept by `benchmarks/ingest.py --keep`.

`make bench` reports whole-run figures; this says where a batch's measure phase goes. Prints
per meter query: JSON bytes, series, points, Prometheus' evaluation time (`stats=all`) and
the time the standard library's `json` takes to decode the answer (fastest of 3); Prometheus'
CPU to answer them uncompressed and gzip-compressed (`compression`); then the
CPU seconds (`time.process_time`, every thread) of `querying.observe_batch` and of
`measure.derive` for the same batch, `--runs` times. Not run by `make bench` (it needs a kept pool).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/bench_ingest \\
      .venv/bin/python benchmarks/ingest.py --gpus 10000 --hours 24 --scrape 150 --keep
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/bench_ingest \\
      .venv/bin/python benchmarks/_batch_cost.py var/bench/ingest-<pid> --gpus 10000 --hours 24

The batch starts `--at` hours into the pool (default 5). A source row named `batch-cost` is
created in the scratch database and deleted at the end.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import time
from pathlib import Path

import requests

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

import django  # noqa: E402

django.setup()

from benchmarks.ingest import (  # noqa: E402
    BATCH,
    STEP,
    cpu_seconds,
    meter_requests,
    part_requests,
)
from metering import measure, querying, sources  # noqa: E402
from metering.models import Source  # noqa: E402
from simulator.prometheus import lookback_for, start_prometheus  # noqa: E402


def answers(url: str, plan: sources.QueryPlan, start: int, end: int) -> None:
    """One line per meter query of the batch, and their total."""
    total = {"bytes": 0, "points": 0, "evaluation": 0.0, "decode": 0.0}
    print("meter | part | bytes | series | points | eval s | json decode s")
    sent = set()
    for name, build in sources.METER_PARTS.items():
        for part_name, part in build(plan).items():
            # Raw samples: one request for every part taking a function of them.
            for path, data in part_requests(part, plan, start=start, end=end):
                if data["query"] in sent:
                    continue
                sent.add(data["query"])
                reply = requests.post(
                    f"{url}/api/v1/{path}", data={**data, "stats": "all"}, timeout=600
                )
                body = reply.content
                decode = min(_seconds(json.loads, body) for _ in range(3))
                answer = json.loads(body)["data"]
                points = sum(len(series["values"]) for series in answer["result"])
                evaluation = answer["stats"]["timings"]["evalTotalTime"]
                label = f"{part_name} (raw samples)" if path == "query" else part_name
                print(
                    f"{name} | {label} | {len(body):,} | {len(answer['result']):,} |"
                    f" {points:,} | {evaluation:.3f} | {decode:.3f}"
                )
                total["bytes"] += len(body)
                total["points"] += points
                total["evaluation"] += evaluation
                total["decode"] += decode
    print(
        f"all | | {total['bytes']:,} | | {total['points']:,} | {total['evaluation']:.3f} |"
        f" {total['decode']:.3f}"
    )


def compression(url: str, pid: int, plan: sources.QueryPlan, start: int, end: int) -> None:
    """Prometheus' CPU (/proc) to answer the batch's meter queries, uncompressed as Tandem asks
    by default and gzip-compressed as TANDEM_PROMETHEUS_COMPRESSED asks, interleaved, 3 runs."""
    meter = meter_requests(plan, start=start, end=end)
    spent: dict[str, list[float]] = {"identity": [], "gzip": []}
    received = 0
    for _ in range(3):
        for encoding in spent:
            session = requests.Session()
            session.headers["Accept-Encoding"] = encoding
            before = cpu_seconds([pid])
            for path, data in meter:
                answer = session.post(f"{url}/api/v1/{path}", data=data, timeout=600)
                received += len(answer.content)
            spent[encoding].append(cpu_seconds([pid]) - before)
            session.close()
    for encoding, seconds in spent.items():
        runs = ", ".join(f"{value:.2f}" for value in seconds)
        print(f"Prometheus CPU for the batch's answers, Accept-Encoding {encoding}: {runs} s")
    print(f"({received / 6:,.0f} bytes a pass once decoded)")


def _seconds(function, *arguments) -> float:
    began = time.perf_counter()
    function(*arguments)
    return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kept", type=Path, help="a folder kept by benchmarks/ingest.py --keep")
    parser.add_argument("--gpus", type=int, default=10000)
    parser.add_argument("--hours", type=int, default=24, help="the kept pool's length")
    parser.add_argument("--scrape", type=int, default=150)
    parser.add_argument("--at", type=int, default=5, help="hours into the pool")
    parser.add_argument("--runs", type=int, default=3)
    options = parser.parse_args()
    recorded = options.kept / f"simulated-{options.gpus}x{options.hours}h-{options.scrape}s.json"
    first = json.loads(recorded.read_text())["first"]
    start = first + options.at * 3600
    start -= start % STEP  # a window on the metering grid
    last = start + (BATCH - 1) * STEP  # the batch's last window start
    prometheus = start_prometheus(
        options.kept / f"tsdb-{options.gpus}",
        lookback_delta=lookback_for(options.scrape),
        scrape_interval=f"{options.scrape}s",
    )
    source = None
    try:
        source = Source.objects.create(
            name="batch-cost", url=prometheus.url, scrape_interval_seconds=options.scrape
        )
        plan = sources.query_plan_for(source, step_seconds=STEP)
        # Evaluated at each window's end, as the ingest's range queries are.
        answers(prometheus.url, plan, start + STEP, last + STEP)
        compression(prometheus.url, prometheus.pid, plan, start + STEP, last + STEP)
        first_at = dt.datetime.fromtimestamp(start, dt.UTC)
        last_at = dt.datetime.fromtimestamp(last, dt.UTC)
        querying.observe_batch(source, plan, first_at, last_at)  # Prometheus' caches warm
        for _ in range(options.runs):
            began = time.process_time()
            observation = querying.observe_batch(source, plan, first_at, last_at)
            observed = time.process_time()
            measure.derive(observation, plan, start, last)
            derived = time.process_time()
            print(
                f"worker CPU of one batch: {derived - began:.2f} s (observe, i.e. requests,"
                f" JSON decoding and parsing: {observed - began:.2f} s; derive:"
                f" {derived - observed:.2f} s)"
            )
    finally:
        if source is not None:
            source.delete()
        prometheus.stop()


if __name__ == "__main__":
    main()
