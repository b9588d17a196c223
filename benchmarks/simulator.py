"""Simulator speed: exporter samples per second, against just writing the same bytes.

Runs the pool engine (simulator.pool) for a 1,000-GPU pool at a 15 s scrape and writes every
tick's OpenMetrics to a file, as the demo, the tests and benchmarks/ingest.py do before a
back-fill. The reference, in the same run, writes the very same bytes to another file in 1 MiB
chunks: the floor any exporter writing this text pays. A second figure is the time one tick
takes against the scrape interval: serving `/metrics` live, the pool must produce a tick
faster than Prometheus asks for it.

No database: `.venv/bin/python benchmarks/simulator.py [--gpus 1000] [--minutes 30]`.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks._table import Row, report, within  # noqa: E402
from simulator.config import PoolConfig  # noqa: E402
from simulator.pool import Pool, run_ticks  # noqa: E402

SCRAPE = 15
CHUNK = 1 << 20


def simulate(gpus: int, minutes: int, path: Path) -> tuple[int, int, float]:
    """(samples, ticks, seconds) to simulate `minutes` of the pool into `path`."""
    config = PoolConfig(
        gpus=gpus, days=1, start=dt.date(2026, 10, 12), seed=7, scrape_interval_seconds=SCRAPE
    )
    began = time.perf_counter()
    pool = Pool(config)
    ticks = config.ticks()[: minutes * 60 // SCRAPE]
    samples = 0
    with open(path, "w", encoding="utf-8", buffering=CHUNK) as out:
        for tick, lines in run_ticks(pool, ticks):
            if lines:
                separator = f" {tick}\n"
                out.write(separator.join(lines))
                out.write(separator)
                samples += len(lines)
        out.write("# EOF\n")
    return samples, len(ticks), time.perf_counter() - began


def write_seconds(source: Path, target: Path) -> float:
    """Time writing `source`'s bytes (already in memory) to `target`, closed, not synced."""
    data = memoryview(source.read_bytes())
    began = time.perf_counter()
    with open(target, "wb", buffering=0) as out:
        for offset in range(0, len(data), CHUNK):
            out.write(data[offset : offset + CHUNK])
    return time.perf_counter() - began


def main(argv: list[str] | None = None) -> list[Row]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=1000)
    parser.add_argument("--minutes", type=int, default=30, help="simulated minutes")
    options = parser.parse_args(argv)
    scratch = REPO / "var" / "bench"
    scratch.mkdir(parents=True, exist_ok=True)
    simulated, copied = scratch / f"simulator-{os.getpid()}.om", scratch / f"copy-{os.getpid()}.om"
    try:
        samples, ticks, seconds = simulate(options.gpus, options.minutes, simulated)
        size = simulated.stat().st_size
        reference = write_seconds(simulated, copied)
    finally:
        simulated.unlink(missing_ok=True)
        copied.unlink(missing_ok=True)
    rate, floor = samples / seconds, samples / reference
    per_tick = seconds / ticks
    print(
        f"{options.gpus:,} GPUs x {options.minutes} min: {samples:,} samples,"
        f" {size / 2**20:,.0f} MiB in {seconds:.1f} s ({rate:,.0f} samples/s);"
        f" writing the same bytes: {reference:.2f} s ({floor:,.0f} samples/s)"
    )
    pool = f"{options.gpus:,} GPUs x {options.minutes} min"
    return [
        Row(
            figure=f"simulator samples/s, {pool}",
            value=f"{rate:,.0f} samples/s",
            reference=f"writing the same {size / 2**20:,.0f} MiB: {floor:,.0f} samples/s",
            ratio=rate / floor,
            goal="reported",
            note="ratio = share of the write-only rate",
        ),
        Row(
            figure=f"simulator time per tick, {options.gpus:,} GPUs",
            value=f"{per_tick * 1000:,.0f} ms",
            reference=f"scrape interval {SCRAPE} s",
            ratio=per_tick / SCRAPE,
            goal="ratio <= 1 (keeps up live)",
            ok=within(per_tick / SCRAPE, at_most=1),
        ),
    ]


if __name__ == "__main__":
    report(main())
