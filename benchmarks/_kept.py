"""What the breakdown scripts share (`_write_phase.py`, `_shards.py`, `_day_cpu.py`,
`_derive_cpu.py`): the arguments naming a pool kept by `benchmarks/ingest.py --keep` and the
checkout to run, its first sample, its Prometheus, and timers put around functions by name.
Imports nothing of Tandem's: a script sets Django up first."""

from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any


def kept_parser(description: str, *, hours: int) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("kept", type=Path, help="a folder kept by benchmarks/ingest.py --keep")
    parser.add_argument("--gpus", type=int, default=1000)
    parser.add_argument("--hours", type=int, default=hours)
    parser.add_argument("--scrape", type=int, default=150)
    return parser


def checkout_option(parser: argparse.ArgumentParser, runs: str) -> None:
    """--checkout: the Tandem checkout whose code `runs` (default: this one), so that two
    checkouts can be compared on the same kept pool (the script puts it first on sys.path)."""
    parser.add_argument(
        "--checkout",
        type=Path,
        default=Path(__file__).resolve().parent.parent,
        help=f"the Tandem checkout whose code {runs} (default: this one)",
    )


def kept_first(options: argparse.Namespace) -> int:
    """The kept pool's first sample (Unix seconds), as its simulation recorded it."""
    name = f"simulated-{options.gpus}x{options.hours}h-{options.scrape}s.json"
    return json.loads((options.kept / name).read_text())["first"]


@contextmanager
def kept_prometheus(options: argparse.Namespace) -> Iterator[Any]:
    """A Prometheus on the kept pool's TSDB, stopped whatever happens."""
    from simulator.prometheus import lookback_for, start_prometheus

    prometheus = start_prometheus(
        options.kept / f"tsdb-{options.gpus}",
        lookback_delta=lookback_for(options.scrape),
        scrape_interval=f"{options.scrape}s",
    )
    try:
        yield prometheus
    finally:
        prometheus.stop()


class PartTimers:
    """Seconds spent in functions, summed by key, and each call's seconds in the order they
    ran (`calls`); each timed wherever it is called from (`around` replaces the module's
    attribute, so import the module, not the name)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, list[float]] = defaultdict(list)

    def around(self, module: ModuleType, name: str, key: str | None = None) -> None:
        function = getattr(module, name)
        key = key or name

        def run(*args: Any, **kwargs: Any) -> Any:
            began = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                seconds = time.perf_counter() - began
                self.seconds[key] += seconds
                self.calls[key].append(seconds)

        setattr(module, name, run)

    def __getitem__(self, key: str) -> float:
        return self.seconds[key]


def timed_parts(
    timers: PartTimers, parts: list[tuple[ModuleType, str, str]], *, by_module: bool = False
) -> None:
    for module, name, _ in parts:
        timers.around(module, name, f"{module.__name__}.{name}" if by_module else name)
