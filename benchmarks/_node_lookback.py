"""What the look-back for a vanished exporter's GPUs costs Prometheus, read two ways: the week's
range that `sources.node_devices_query` sends (`last_over_time(...[7d])`), and an hourly
subquery (`max_over_time(timestamp(...)[7d:1h])`), which reads far fewer samples. The figures
docs/telemetry.md quotes ("Completeness"): samples, peak samples and evaluation time of each,
`--runs` times, on the tests' week-long pool (8 GPUs at 60 s), every node asked for at the
week's end. Not run by `make bench`.

    .venv/bin/python benchmarks/_node_lookback.py [--runs 3]
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import tempfile
from pathlib import Path

import requests

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from simulator.config import PoolConfig  # noqa: E402
from simulator.pool import simulate  # noqa: E402
from simulator.prometheus import backfill, lookback_for, start_prometheus  # noqa: E402

# tests/metering/conftest.py's POOL.
POOL = PoolConfig(
    gpus=8, days=7, start=dt.date(2026, 9, 28), seed=11, scrape_interval_seconds=60,
    scrape_offsets=True,
)  # fmt: skip
BY = "UUID, GPU_I_ID, job, instance, Hostname, hostname"


def queries(nodes: str) -> dict[str, str]:
    spellings = (f'Hostname=~"{nodes}"', f'Hostname="",hostname=~"{nodes}"')
    return {
        "range [7d]": " or ".join(
            f"group by ({BY}) (last_over_time(DCGM_FI_DEV_FB_USED{{{s}}}[7d]))" for s in spellings
        ),
        "subquery [7d:1h]": " or ".join(
            f"max by ({BY}) (max_over_time(timestamp(DCGM_FI_DEV_FB_USED{{{s}}})[7d:1h]))"
            for s in spellings
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch)
        result = simulate(POOL, out)
        backfill(result.metrics_path, out / "tsdb")
        prometheus = start_prometheus(
            out / "tsdb", lookback_delta=lookback_for(60), scrape_interval="60s"
        )
        try:
            at = POOL.start_epoch + POOL.days * 86_400 - 600
            nodes = "gpu-node-0[0-9]"
            print("query | series | samples | peak samples | evaluation ms")
            for _ in range(options.runs):
                for name, query in queries(nodes).items():
                    answer = requests.post(
                        f"{prometheus.url}/api/v1/query",
                        data={"query": query, "time": at, "stats": "all"},
                        timeout=60,
                    ).json()["data"]
                    samples = answer["stats"]["samples"]
                    print(
                        f"{name} | {len(answer['result'])} | {samples['totalQueryableSamples']:,}"
                        f" | {samples['peakSamples']:,}"
                        f" | {answer['stats']['timings']['evalTotalTime'] * 1000:.1f}"
                    )
        finally:
            prometheus.stop()


if __name__ == "__main__":
    main()
