"""What the time-sliced GPUs' split costs Prometheus, asked two ways, on the `openb` trace's
real day (tests/metering/real_trace.py): as ingest asks it (`sources.shared_devices_query`,
a subquery at the scrape interval inside each window, a range query at the step), and as the
same per-tick expression asked directly as a range query at the scrape interval. Each the
fastest of 3, Prometheus' own evalTotalTime (`stats=all`), for a batch of 12 and of 72
windows. README "A real cluster's day" cites it: the second way costs the same, so what costs
is evaluating the expression at every tick, not the subquery.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/bench_real_trace \\
      .venv/bin/python benchmarks/_shared_probe.py

Not run by `make bench` (a breakdown, not a figure). Reads nothing from the database but
the settings need one.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

import django

django.setup()

from benchmarks.ingest import compaction_settled  # noqa: E402
from metering import sources  # noqa: E402
from metering.models import Source  # noqa: E402
from tests.metering import real_trace  # noqa: E402
from tests.metering.jobs import backfilled_prometheus  # noqa: E402

SUBQUERY_RANGE = re.compile(r"\[[0-9a-z]+:[0-9a-z]+\]( offset \S+)?$")


def per_tick(promql: str) -> str:
    """`promql` with each `sum_over_time((x)[w:s] offset o)` and `count_over_time(...)` of a
    subquery replaced by its inner `(x)`: the per-tick expression, to be asked at step s."""
    for function in ("sum_over_time(", "count_over_time("):
        at = 0
        while (start := promql.find(function, at)) >= 0:
            opening = start + len(function) - 1
            depth = 0
            for end in range(opening, len(promql)):
                depth += {"(": 1, ")": -1}.get(promql[end], 0)
                if depth == 0:
                    break
            argument = promql[opening + 1 : end]
            subquery = SUBQUERY_RANGE.search(argument)
            if subquery is None:
                at = end
                continue
            promql = promql[:start] + argument[: subquery.start()] + promql[end + 1 :]
            at = start
    return promql


def evaluation(url: str, promql: str, *, step: int, start: int, end: int) -> float:
    best = float("inf")
    for _ in range(3):
        answer = requests.post(
            f"{url}/api/v1/query_range",
            data={"query": promql, "start": start, "end": end, "step": step, "stats": "all"},
            timeout=600,
        ).json()
        if answer["status"] != "success":
            raise SystemExit(f"Prometheus refused the query: {answer}")
        best = min(best, answer["data"]["stats"]["timings"]["evalTotalTime"])
    return best


def main() -> None:
    pods = real_trace.trace_pods()
    gpus = real_trace.placed(pods, real_trace.trace_gpus())
    shared = sorted(
        {gpu.uuid for gpu in gpus for tick in real_trace.ticks() if len(gpu.holders(tick)) > 1}
    )
    with tempfile.TemporaryDirectory(prefix="tandem-shared-") as scratch:
        scrape = real_trace.SCRAPE
        lines = real_trace.series_at(pods, gpus)
        prometheus = backfilled_prometheus(Path(scratch), lines, scrape)
        try:
            compaction_settled(prometheus.url)
            source = Source(scrape_interval_seconds=scrape)
            step = real_trace.STEP
            plan = sources.query_plan_for(source, step_seconds=step)
            as_ingest = sources.shared_devices_query(plan, shared)
            direct = per_tick(as_ingest)
            day = int(real_trace.START.timestamp())
            for windows in (12, 72):
                first = day + step * windows  # an hour or six in, the windows' starts
                last = first + step * (windows - 1)
                subquery = evaluation(
                    prometheus.url, as_ingest, step=step, start=first + step, end=last + step
                )
                ticks = evaluation(
                    prometheus.url, direct, step=scrape, start=first, end=last + step - scrape
                )
                print(
                    f"{len(shared)} shared GPUs, {windows} windows: a subquery per window"
                    f" {subquery:.3f} s, per tick at {scrape} s {ticks:.3f} s"
                )
        finally:
            prometheus.stop()


if __name__ == "__main__":
    main()
