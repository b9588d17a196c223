"""What asking kube-state-metrics whether it can show preemptions costs Prometheus: the count of
reasons written at 0 (`sources.reasons_at_zero_query`, asked of a batch whose pods show no
series of the preemption reason), beside the preemption reason that identity reads in every
batch (`identity_parts`' `preempted`) and one scan of the GPUs' framebuffer series, each as a
range query over a simulated day at the 5-minute step. Pools written as kube-state-metrics
v2.18 (the count reads a sample per pod and scrape) and v2.20 (it finds no series) write it;
v2.19 never asks it. Samples are also given as a share of all the pool's (nearly all of
which an ingest reads). The figures docs/telemetry.md quotes ("Which kube-state-metrics").
Not run by `make bench`.

    .venv/bin/python benchmarks/_reasons_probe.py [--gpus 250] [--runs 3]
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import requests

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from simulator.config import PoolConfig  # noqa: E402
from simulator.pool import simulate  # noqa: E402
from simulator.prometheus import backfill, lookback_for, start_prometheus  # noqa: E402

STEP = 300
# An interval's samples, [S, S + step), evaluated at S + step (sources.QueryPlan.window).
WINDOW = f"[{STEP * 1000 - 1}ms] offset 1ms"
QUERIES = {
    "reasons at 0 (the check)": (
        f'count(last_over_time(kube_pod_status_reason{{reason="Evicted"}}{WINDOW}) == 0)'
    ),
    "preemption reason (identity)": (
        f'max_over_time(kube_pod_status_reason{{reason="PreemptionByScheduler"}}{WINDOW})'
    ),
    "framebuffer scan (reference)": f"sum_over_time(DCGM_FI_DEV_FB_USED{WINDOW})",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=250)
    parser.add_argument("--runs", type=int, default=3)
    options = parser.parse_args()
    base = PoolConfig(
        gpus=options.gpus, days=1, start=dt.date(2026, 10, 6), seed=7, scrape_interval_seconds=60
    )
    print("release | query | series | samples | evaluation ms")
    for release in ("2.18", "2.20"):
        config = replace(base, kube_state_metrics=release)
        with tempfile.TemporaryDirectory() as scratch:
            out = Path(scratch)
            result = simulate(config, out)
            written = result.samples_written
            print(f"v{release} | the pool, written | - | {written:,} | -")
            backfill(result.metrics_path, out / "tsdb")
            prometheus = start_prometheus(
                out / "tsdb", lookback_delta=lookback_for(60), scrape_interval="60s"
            )
            try:
                for _ in range(options.runs):
                    for name, query in QUERIES.items():
                        answer = requests.post(
                            f"{prometheus.url}/api/v1/query_range",
                            data={
                                "query": query,
                                "start": config.start_epoch + STEP,
                                "end": config.end_epoch,
                                "step": STEP,
                                "stats": "all",
                            },
                            timeout=120,
                        ).json()["data"]
                        stats = answer["stats"]
                        samples = stats["samples"]["totalQueryableSamples"]
                        print(
                            f"v{release} | {name} | {len(answer['result'])}"
                            f" | {samples:,} ({samples / written:.1%} of the pool's)"
                            f" | {stats['timings']['evalTotalTime'] * 1000:.1f}"
                        )
            finally:
                prometheus.stop()


if __name__ == "__main__":
    main()
