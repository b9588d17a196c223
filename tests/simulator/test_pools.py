"""Separate pools (the demo's "before" month): the same workloads, inference on GPUs of its own
sized for its peak, training alone on the configured GPUs (issue 15)."""

from __future__ import annotations

import datetime as dt
from collections import Counter

import pytest

from simulator.config import PoolConfig, SimulatorConfigError
from simulator.pool import Pool

# A day whose inference peak evicts training in the shared pool (not every seed's day does).
DAY = dict(gpus=8, days=1, start=dt.date(2026, 10, 1), seed=3, scrape_interval_seconds=60)


def run(pool: Pool) -> Counter:
    """Ticks through the day; counts (kind, pool the pod's node serves) of running pods."""
    placements: Counter = Counter()
    for tick in pool.config.ticks():
        pool.step(tick)
        for pod in pool.running:
            kind = "inference" if pod.task.service is not None else "training"
            placements[(kind, pod.node.serves)] += 1
    return placements


def test_it_gives_inference_gpus_of_its_own_sized_for_its_peak() -> None:
    shared, separate = Pool(PoolConfig(**DAY)), Pool(PoolConfig(**DAY, pools="separate"))
    peak = sum(service.max_replicas for service in separate.services)
    assert [s.key for s in separate.services] == [s.key for s in shared.services]
    assert len(separate.gpus) == len(shared.gpus) + peak
    inference_nodes = [node for node in separate.nodes if node.serves == "inference"]
    assert sum(len(node.gpus) for node in inference_nodes) == peak
    assert all(gpu.mode == "whole" for node in inference_nodes for gpu in node.gpus)


def test_it_keeps_inference_and_training_apart_and_preempts_nothing() -> None:
    pool = Pool(PoolConfig(**DAY, pools="separate"))
    placements = run(pool)
    assert set(placements) == {("inference", "inference"), ("training", "training")}
    assert not any(task.preemptions for task in pool.tasks.values())


def test_it_shares_one_pool_by_default() -> None:
    pool = Pool(PoolConfig(**DAY))
    placements = run(pool)
    assert set(placements) == {("inference", ""), ("training", "")}
    assert any(task.preemptions for task in pool.tasks.values())  # inference evicts at peaks


def test_it_refuses_an_unknown_pool_mode_naming_the_argument() -> None:
    with pytest.raises(SimulatorConfigError, match="--pools"):
        PoolConfig(**DAY, pools="mixed")
