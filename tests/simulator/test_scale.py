"""A 10,000-GPU pool (issue 16): the simulator accepts it, its shortcuts decide exactly as the
plain code would, and a simulation holds only its live tasks while truth.json stays the same."""

from __future__ import annotations

import datetime as dt
import ipaddress
import random

import pytest

from simulator.config import MAX_GPUS, PoolConfig, SimulatorConfigError
from simulator.layout import build_layout
from simulator.pool import Pool, simulate
from simulator.truth import build_truth, write_truth

DAY = dict(days=1, start=dt.date(2026, 10, 1), seed=3, scrape_interval_seconds=60)


def test_it_accepts_10000_gpus_and_refuses_more() -> None:
    assert MAX_GPUS == 10_000
    PoolConfig(gpus=10_000, **DAY)
    with pytest.raises(SimulatorConfigError, match="--gpus must be between 1 and 10000"):
        PoolConfig(gpus=10_001, **DAY)


def test_it_gives_every_node_of_a_10000_gpu_pool_an_address_of_its_own() -> None:
    nodes = build_layout(10_000, random.Random(0))
    addresses = [ipaddress.IPv4Address(node.ip) for node in nodes]
    assert len(nodes) == 1250 and len(set(addresses)) == 1250
    assert str(addresses[0]) == "10.42.0.11" and str(addresses[244]) == "10.42.0.255"
    assert str(addresses[245]) == "10.42.1.0"  # the small pools keep the addresses they had
    assert all(address in ipaddress.IPv4Network("10.42.0.0/16") for address in addresses)
    assert ipaddress.IPv4Address("10.42.0.5") not in addresses  # kube-state-metrics' own


class CheckedPool(Pool):
    """Places every whole-GPU pod both ways and fails on the first difference."""

    placements = 0

    def _fit_whole(self, pod, gpus, avoid):
        scanned = self._fit_whole_scan(pod, gpus, avoid)
        chosen = super()._fit_whole(pod, gpus, avoid)
        assert chosen == scanned, (pod.name, gpus, avoid)
        self.placements += chosen is not None
        return chosen


@pytest.mark.parametrize(
    "options",
    [
        dict(gpus=48),
        dict(gpus=24, pools="separate"),
        dict(gpus=24, gpu_models="mixed", scrape_interval_seconds=300),
    ],
    ids=["shared", "separate", "mixed"],
)
def test_it_places_pods_from_free_slots_exactly_as_a_scan_of_every_device(options) -> None:
    pool = CheckedPool(PoolConfig(**{**DAY, **options}))
    for tick in pool.config.ticks():
        pool.step(tick)
    assert pool.placements > 30


def test_it_spools_finished_tasks_and_writes_the_same_truth(tmp_path) -> None:
    config = PoolConfig(gpus=16, **DAY)
    kept = Pool(config)
    samples = sum(len(kept.step(tick)) for tick in config.ticks())
    write_truth(build_truth(kept, samples_written=samples), tmp_path / "kept.json")

    result = simulate(config, tmp_path / "streamed")

    assert result.samples_written == samples
    assert result.truth_path.read_bytes() == (tmp_path / "kept.json").read_bytes()


def test_it_holds_only_the_live_tasks_while_it_runs() -> None:
    from simulator.truth import TaskSpool

    pool = Pool(PoolConfig(gpus=16, **DAY))
    pool.spool = spool = TaskSpool()
    for task_id in pool.tasks:
        spool.created(task_id)
    most = 0
    for tick in pool.config.ticks():
        pool.step(tick)
        most = max(most, len(pool.tasks))
    spool.close()
    assert len(spool.order) > 2 * most  # many more tasks ran in the day than were ever live
    live = {p.task for group in (pool.pending, pool.running, pool.lingering) for p in group}
    assert set(pool.tasks.values()) <= live | {s.task for s in pool.services} | set(pool.recreate)
