"""truth.json agrees with the simulator's invariants and with the metrics it wrote."""

from __future__ import annotations

import datetime as dt
from dataclasses import replace
from decimal import Decimal

from simulator.config import PoolConfig
from simulator.pool import simulate
from simulator.truth import decimal_string, load_truth

SHARE_UNITS = 84


def epoch(iso_text: str) -> int:
    return int(dt.datetime.fromisoformat(iso_text.replace("Z", "+00:00")).timestamp())


def iso(seconds: int) -> str:
    return dt.datetime.fromtimestamp(seconds, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def task_of(readback, pod_key) -> str:
    facts = readback.pods[pod_key]
    return facts.label_task or facts.owner


def test_it_never_gives_a_pending_pod_a_gpu(small_pool, readback):
    checked = 0
    for pod_key, facts in readback.pods.items():
        assert not facts.pending_ticks & facts.device_ticks, pod_key
        if facts.first_device_tick is not None:
            # The first GPU sample stands for the scrape interval in which it was scheduled.
            assert facts.scheduled is not None, pod_key
            assert facts.first_device_tick - 60 < facts.scheduled <= facts.first_device_tick
            checked += 1
    waited = [w for task in small_pool.truth["tasks"].values() for w in task["waits"]]
    assert checked == len(waited) > 20
    assert any(w["seconds"] > 3600 for w in waited)  # a queue forms at the daytime peak


def test_it_switches_a_time_sliced_gpu_between_whole_and_shared_use_within_an_hour(
    small_pool, readback
):
    """dcgm-exporter writes no bare series for a GPU one pod holds whole: metering must count
    such a GPU present in every tick whatever its use in that tick."""
    sliced = [
        gpu["UUID"]
        for node in small_pool.truth["meta"]["nodes"]
        for gpu in node["gpus"]
        if gpu["mode"] == "timesliced"
    ]
    assert sliced
    switching = [
        hour
        for uuid in sliced
        for hour, uses in readback.uses_by_hour[uuid].items()
        if {"whole", "sliced"} <= uses
    ]
    assert switching


def test_it_never_allocates_more_than_the_capacity(small_pool):
    truth = small_pool.truth
    allocated: dict[str, Decimal] = {}
    for task in truth["tasks"].values():
        for interval, amount in task["alloc_gpu_seconds"].items():
            allocated[interval] = allocated.get(interval, Decimal(0)) + Decimal(amount)
    assert allocated
    for interval, amount in allocated.items():
        # Each task's amount is rounded to 6 places: allow that rounding, nothing more.
        assert amount <= Decimal(truth["capacity"][interval]) + Decimal("0.001"), interval
    full = 8 * 60 * 5
    assert max(Decimal(v) for v in truth["capacity"].values()) == full
    assert sum(allocated.values()) > Decimal(full) * len(truth["capacity"]) / 2


def test_it_resumes_preempted_jobs_from_their_last_checkpoint(small_pool):
    tasks = small_pool.truth["tasks"]
    preempted = [(t, p) for t in tasks.values() for p in t["preemptions"]]
    assert preempted
    resumed = 0
    for task, preemption in preempted:
        later = task["pods"][task["pods"].index(preemption["pod"]) + 1 :]
        assert later, f"{preemption['pod']} was not re-created"
        lost = Decimal(preemption["lost_gpu_seconds"])
        assert 0 <= lost <= task["checkpoint_seconds"] * preemption["gpus"]
        assert lost <= preemption["seconds_since_start"] * preemption["gpus"]
        waits = {w["pod"]: w for w in task["waits"]}
        preempted_at = epoch(preemption["at"])
        assert epoch(waits[preemption["pod"]]["scheduled"]) < preempted_at
        if later[0] in waits:
            assert epoch(waits[later[0]]["created"]) > preempted_at
            resumed += 1
    assert resumed


def test_it_agrees_with_the_metrics_it_wrote(small_pool, readback):
    truth, s = small_pool.truth, 60
    assert {k: v for k, v in truth["capacity"].items()} == {
        iso(i): decimal_string(units, SHARE_UNITS) for i, units in readback.capacity_units.items()
    }
    expected: dict[str, dict] = {}
    for pod_key, units in readback.alloc_units.items():
        task = expected.setdefault(task_of(readback, pod_key), {"alloc": {}, "busy": {}})
        for interval, value in units.items():
            task["alloc"][interval] = task["alloc"].get(interval, 0) + value
        for interval, value in readback.busy_units[pod_key].items():
            task["busy"][interval] = task["busy"].get(interval, 0) + value
    for task_id, task in truth["tasks"].items():
        mine = expected.pop(task_id, {"alloc": {}, "busy": {}})
        alloc = {iso(i): decimal_string(v, SHARE_UNITS) for i, v in mine["alloc"].items() if v}
        busy = {iso(i): decimal_string(v, SHARE_UNITS * 100) for i, v in mine["busy"].items() if v}
        assert task["alloc_gpu_seconds"] == alloc, task_id
        assert task["busy_gpu_seconds"] == busy, task_id
    assert not expected, "metrics attribute GPUs to tasks the truth does not know"
    assert s == truth["meta"]["scrape_interval_seconds"]


def test_it_agrees_on_memory_io_waits_and_preemptions(small_pool, readback):
    tasks = small_pool.truth["tasks"]
    by_task: dict[str, list] = {}
    for pod_key in readback.pods:
        by_task.setdefault(task_of(readback, pod_key), []).append(pod_key)
    for task_id, task in tasks.items():
        pods = by_task[task_id]
        assert sorted(task["pods"]) == sorted(name for _, name in pods), task_id
        peak = max(readback.memory_peak_mib.get(p, 0) for p in pods)
        assert task["memory_peak_bytes"] == peak * 1048576, task_id
        io: dict[int, int] = {}
        for pod in pods:
            for interval, value in readback.io_operations.get(pod, {}).items():
                io[interval] = io.get(interval, 0) + value
        assert task["io_operations"] == {iso(i): v for i, v in sorted(io.items()) if v}, task_id
        waits = [
            {
                "pod": name,
                "created": iso(readback.pods[(ns, name)].created),
                "scheduled": iso(readback.pods[(ns, name)].scheduled),
                "seconds": readback.pods[(ns, name)].scheduled - readback.pods[(ns, name)].created,
            }
            for ns, name in pods
            if readback.pods[(ns, name)].scheduled is not None
        ]
        assert sorted(task["waits"], key=str) == sorted(waits, key=str), task_id
        preemptions = [
            (name, iso(f.preempted_at), int(f.request), f.preempted_at - f.scheduled)
            for (ns, name), f in ((p, readback.pods[p]) for p in pods)
            if f.preempted_at is not None
        ]
        assert [
            (p["pod"], p["at"], p["gpus"], p["seconds_since_start"]) for p in task["preemptions"]
        ] == preemptions, task_id


def test_it_agrees_on_latency_bucket_increments(small_pool, readback):
    services = small_pool.truth["services"]
    assert set(services) == set(readback.latency)
    for key, service in services.items():
        bounds = service["bucket_bounds"]
        assert bounds[-1] == "+Inf" and {"1.0", "2.5", "5.0", "10.0", "60.0"} <= set(bounds)
        expected = {
            iso(interval): [per_le.get(le, 0) for le in bounds]
            for interval, per_le in sorted(readback.latency[key].items())
            if any(per_le.values())
        }
        assert service["increments"] == expected, key
        assert service["slo_p99_ms"] > 0 and service["team"] == key.split("/")[0]


def test_it_loses_gpus_and_nodes_for_a_while_and_never_overallocates(tmp_path):
    config = PoolConfig(
        gpus=8, days=20, start=dt.date(2026, 9, 30), seed=1, scrape_interval_seconds=300
    )
    truth = load_truth(simulate(replace(config, step_seconds=900), tmp_path).truth_path)
    capacity = {interval: Decimal(v) for interval, v in truth["capacity"].items()}
    full = 8 * 900
    assert full * 7 // 8 in capacity.values()  # one GPU out
    assert full // 2 in capacity.values()  # a whole node (4 GPUs) out
    allocated: dict[str, Decimal] = {}
    for task in truth["tasks"].values():
        for interval, amount in task["alloc_gpu_seconds"].items():
            allocated[interval] = allocated.get(interval, Decimal(0)) + Decimal(amount)
    for interval, amount in allocated.items():
        assert amount <= capacity[interval] + Decimal("0.001"), interval
