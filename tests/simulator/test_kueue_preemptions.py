"""Kueue preempts (`--preemptions-by kueue`): it evicts the workload itself, so the pods carry
no PreemptionByScheduler reason, and Kueue's own `kueue_evicted_workloads_total` counts the
evictions per cluster queue (the namespace here) and priority class, a series appearing only at
its label set's first eviction. The preemptions happen all the same: truth.json lists them."""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from simulator.config import PoolConfig, SimulatorConfigError
from simulator.pool import Pool
from simulator.truth import iso

# Seed 4 preempts an nlp Job at 08:27 local, then another nlp Job and a vision Job at 09:01,
# as inference scales up for the morning: one label set rises twice, another appears later.
POOL = PoolConfig(gpus=16, days=1, start=dt.date(2026, 10, 6), seed=4, scrape_interval_seconds=60)
KUEUE = replace(POOL, preemptions_by="kueue")
HOURS = 10
KUEUE_UP = 'up{job="kueue",instance="10.96.0.50:8443"} 1'

Ticks = list[tuple[int, list[str]]]


def run(config: PoolConfig, hours: int = HOURS) -> tuple[Pool, Ticks]:
    pool = Pool(config)
    ticks = [(tick, pool.step(tick)) for tick in list(config.ticks())[: hours * 3600 // 60]]
    return pool, ticks


def evicted_series(namespace: str, priority_class: str) -> str:
    return (
        'kueue_evicted_workloads_total{job="kueue",instance="10.96.0.50:8443",'
        f'cluster_queue="{namespace}",reason="Preempted",underlying_cause="",'
        f'priority_class="{priority_class}",replica_role="leader"}}'
    )


def epoch(at: str) -> int:
    return int(dt.datetime.fromisoformat(at.replace("Z", "+00:00")).timestamp())


def evictions(pool: Pool) -> set[tuple[int, str, str]]:
    """(tick, its series, task id) of every workload eviction per truth: one per task and tick
    (the pods of one task preempted at one tick are one workload evicted)."""
    return {
        (epoch(p["at"]), evicted_series(task.namespace, task.priority_class), task.id)
        for task in pool.tasks.values()
        for p in task.preemptions
    }


def values_by_tick(ticks: Ticks, prefix: str) -> dict[str, dict[int, str]]:
    """series -> tick -> value, of the lines starting with `prefix`."""
    found: dict[str, dict[int, str]] = {}
    for tick, lines in ticks:
        for line in lines:
            if line.startswith(prefix):
                series, value = line.rsplit(" ", 1)
                found.setdefault(series, {})[tick] = value
    return found


@pytest.mark.parametrize("ksm", ["", "2.19", "2.20"])
def test_it_counts_evicted_workloads_and_no_preemption_reason(ksm: str) -> None:
    pool, ticks = run(replace(KUEUE, kube_state_metrics=ksm))
    evicted = evictions(pool)
    assert len(evicted) >= 3, "the config must preempt, or this test checks nothing"
    written = [line for _, lines in ticks for line in lines]
    assert not [line for line in written if 'reason="PreemptionByScheduler"} 1' in line]
    series = values_by_tick(ticks, "kueue_evicted_workloads_total{")
    expected = Counter(name for _, name, _ in evicted)
    assert {name: int(by_tick[max(by_tick)]) for name, by_tick in series.items()} == expected
    assert all(KUEUE_UP in lines for _, lines in ticks)
    preempted = {p["pod"] for task in pool.tasks.values() for p in task.preemptions}
    for pod in preempted:
        reason = f'pod="{pod}",'
        lines = [line for line in written if reason in line and "PreemptionByScheduler" in line]
        # As for a pod nobody preempted: at 0 where the release writes reasons at 0, and
        # absent from 2.20 on (a series only for a reason that is set).
        if ksm == "2.20":
            assert not lines
        else:
            assert lines and all(line.endswith(" 0") for line in lines)


def test_it_writes_a_series_from_its_first_eviction_on_with_the_pods_end() -> None:
    pool, ticks = run(KUEUE)
    evicted = evictions(pool)
    series = values_by_tick(ticks, "kueue_evicted_workloads_total{")
    assert set(series) == {name for _, name, _ in evicted}
    for name, by_tick in series.items():
        ats = sorted(at for at, evicted_name, _ in evicted if evicted_name == name)
        # Present at every tick from the first eviction's on, counting the workloads evicted
        # up to and including that tick: nothing at 0 before.
        assert min(by_tick) == ats[0]
        assert by_tick == {
            tick: str(sum(at <= tick for at in ats)) for tick, _ in ticks if tick >= ats[0]
        }
    firsts = [by_tick[min(by_tick)] for by_tick in series.values()]
    assert "1" in firsts and "0" not in firsts
    assert any(int(by_tick[max(by_tick)]) > 1 for by_tick in series.values())
    # The count rises at the tick the preempted pod ends (its phase Failed), not later.
    lines_at = dict(ticks)
    for task in pool.tasks.values():
        for preemption in task.preemptions:
            failed = f'pod="{preemption["pod"]}",'
            assert any(
                failed in line and line.endswith('phase="Failed"} 1')
                for line in lines_at[epoch(preemption["at"])]
            )


def test_it_counts_a_gang_jobs_pods_preempted_at_one_tick_as_one_workload() -> None:
    config = replace(KUEUE, seed=0, gang_jobs=2)
    pool = Pool(config)
    ticks = iter(config.ticks())
    for tick in ticks:
        pool.step(tick)
        running = [p for p in pool.running if p.task.gang and not p.ended]
        gang = next((p.task for p in running if sum(q.task is p.task for q in running) == 2), None)
        if gang is not None:
            break
    assert gang is not None
    tick = next(ticks)
    # Both pods preempted at the next tick, before it runs, as _preempt_for would for two
    # inference pods (the pool itself rarely picks a gang Job's pods, the oldest running).
    for pod in [p for p in running if p.task is gang]:
        pool._preempt(pod, tick)
    lines = pool.step(tick)
    assert [p["at"] for p in gang.preemptions] == [iso(tick), iso(tick)]
    count = [
        line for line in lines if line.startswith(evicted_series(gang.namespace, "training-batch"))
    ]
    assert [line.rsplit(" ", 1)[1] for line in count] == ["1"]


def test_it_writes_no_kueue_series_by_default() -> None:
    pool, ticks = run(POOL)
    written = [line for _, lines in ticks for line in lines]
    assert not [line for line in written if line.startswith(("kueue_", 'up{job="kueue"'))]
    preempted = {p["pod"] for task in pool.tasks.values() for p in task.preemptions}
    assert preempted
    for pod in preempted:
        assert any(
            f'pod="{pod}",' in line and line.endswith('reason="PreemptionByScheduler"} 1')
            for line in written
        )


def test_it_refuses_an_unknown_preempter_naming_the_option() -> None:
    with pytest.raises(
        SimulatorConfigError,
        match="--preemptions-by must be one of scheduler, kueue, got 'yunikorn'",
    ):
        replace(POOL, preemptions_by="yunikorn")


def test_it_takes_the_preempter_from_the_command(tmp_path: Path) -> None:
    common = ["--gpus=3", "--days=1", "--start=2026-10-01", "--scrape-interval=300", "--step=900"]
    call_command("simulate_pool", *common, "--preemptions-by=kueue", f"--out={tmp_path / 'k'}")
    call_command("simulate_pool", *common, f"--out={tmp_path / 'd'}")

    def meta(name: str) -> dict:
        return json.loads((tmp_path / name / "truth.json").read_text())["meta"]

    assert meta("k")["preemptions_by"] == "kueue"
    assert "preemptions_by" not in meta("d")
    assert f"{KUEUE_UP} " in (tmp_path / "k" / "metrics.om").read_text()
    with pytest.raises(CommandError, match="--preemptions-by must be one of scheduler, kueue"):
        call_command("simulate_pool", *common, "--preemptions-by=volcano", f"--out={tmp_path}")
