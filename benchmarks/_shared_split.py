"""The real cluster's day (tests/metering/real_trace.py, Alibaba's `openb` trace) measured
both ways of one `QueryPlan` switch, alternating, in this process: to compare what a switch
moves between Prometheus and the worker.

- `--switch shared_from_samples` (the default): the time-sliced GPUs' split asked of
  Prometheus (`sources.shared_devices_query`) or taken from their raw samples
  (metering/shared_split.py);
- `--switch raw_samples`: the device meter from its range functions or from raw samples.

Each run measures the day in 72-window batches (`measure.measure`, no database) and prints
the process' CPU, the wall time, Prometheus' evaluation, the evaluation of the meter the
switch moves, and the CPU the Prometheus process used (evaluating, and encoding its answers,
which `stats` does not time). The day is back-filled once and Prometheus' compaction waited out, as
`benchmarks/real_trace.py` does. Not run by `make bench`:

    .venv/bin/python benchmarks/_shared_split.py --runs 3
    .venv/bin/python benchmarks/_shared_split.py --switch raw_samples --runs 3
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

import django

django.setup()

from benchmarks.ingest import compaction_settled, cpu_seconds  # noqa: E402
from metering import measure, sources  # noqa: E402
from metering.models import Source  # noqa: E402
from tests.metering import real_trace  # noqa: E402
from tests.metering.jobs import backfilled_prometheus  # noqa: E402

# The meter each switch moves.
SWITCHES = {"shared_from_samples": "shared", "raw_samples": "devices"}
BATCH_WINDOWS = 72


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--switch", choices=sorted(SWITCHES), default="shared_from_samples")
    parser.add_argument("--runs", type=int, default=3)
    options = parser.parse_args()
    pods = real_trace.trace_pods()
    gpus = real_trace.placed(pods, real_trace.trace_gpus())
    with tempfile.TemporaryDirectory(prefix="tandem-split-") as scratch:
        lines = real_trace.series_at(pods, gpus)
        prometheus = backfilled_prometheus(Path(scratch), lines, real_trace.SCRAPE)
        try:
            compaction_settled(prometheus.url)
            client = sources.PrometheusClient(url=prometheus.url)
            plan = dataclasses.replace(
                sources.query_plan_for(
                    Source(scrape_interval_seconds=real_trace.SCRAPE),
                    step_seconds=real_trace.STEP,
                ),
                closed_ranges=client.ranges_closed(),
            )
            for _ in range(options.runs):
                for value in (False, True):
                    switched = dataclasses.replace(plan, **{options.switch: value})
                    answered = cpu_seconds([prometheus.pid])
                    day = _day(client, switched, options.switch)
                    used = cpu_seconds([prometheus.pid]) - answered
                    print(f"{options.switch}={value}: {day}, Prometheus' CPU {used:.2f} s")
            client.close()
        finally:
            prometheus.stop()


def _day(client: sources.PrometheusClient, plan: sources.QueryPlan, switch: str) -> str:
    meter = SWITCHES[switch]
    first, end = int(real_trace.START.timestamp()), int(real_trace.END.timestamp())
    step = plan.step_seconds
    spent, began = time.process_time(), time.perf_counter()
    evaluation = moved = 0.0
    while first < end:
        last = min(first + BATCH_WINDOWS * step, end) - step
        measured = measure.measure(client, plan, first, last)
        evaluation += measured.evaluation_seconds
        moved += sum(q["evaluation_seconds"] for q in measured.queries if q["meter"] == meter)
        first = last + step
    return (
        f"CPU {time.process_time() - spent:.2f} s, wall {time.perf_counter() - began:.2f} s,"
        f" Prometheus' evaluation {evaluation:.3f} s ({meter} {moved:.3f} s)"
    )


if __name__ == "__main__":
    main()
