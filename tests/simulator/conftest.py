"""A small simulated pool shared by the simulator tests: 8 GPUs, 2 days, 60 s scrapes."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path

import pytest

from simulator.config import PoolConfig
from simulator.pool import SimulationResult, simulate
from simulator.prometheus import backfill, running_prometheus
from simulator.truth import load_truth
from tests.simulator.readback import Readback, read_back
from tests.slow import starts

# Seed 7 preempts two Jobs at the 9:00 surge and both resume later: the invariants need both.
SMALL_POOL = PoolConfig(
    gpus=8, days=2, start=dt.date(2026, 9, 30), seed=7, scrape_interval_seconds=60, step_seconds=300
)


@dataclass(frozen=True)
class SimulatedPool:
    config: PoolConfig
    result: SimulationResult
    truth: dict


@pytest.fixture(scope="session")
def small_pool(tmp_path_factory: pytest.TempPathFactory) -> SimulatedPool:
    out = tmp_path_factory.mktemp("small-pool")
    result = simulate(SMALL_POOL, out)
    return SimulatedPool(SMALL_POOL, result, load_truth(result.truth_path))


@pytest.fixture(scope="session")
def readback(small_pool: SimulatedPool) -> Readback:
    return read_back(
        small_pool.result.metrics_path,
        step=SMALL_POOL.step_seconds,
        scrape=SMALL_POOL.scrape_interval_seconds,
    )


@pytest.fixture(scope="session")
@starts("Prometheus")
def small_pool_prometheus(small_pool: SimulatedPool, tmp_path_factory: pytest.TempPathFactory):
    tsdb = tmp_path_factory.mktemp("small-pool-tsdb")
    backfill(small_pool.result.metrics_path, tsdb)
    with running_prometheus(
        tsdb, scrape_interval_seconds=SMALL_POOL.scrape_interval_seconds
    ) as url:
        yield url


def exposition_sample(fixtures_dir: Path, name: str) -> str:
    return (fixtures_dir / "exposition" / name).read_text(encoding="utf-8")
