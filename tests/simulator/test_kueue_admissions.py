"""Kueue admits (`--preemptions-by kueue`): it holds a Job suspended until it admits the
workload, so the Job's pods exist (in kube-state-metrics) only from the admission on and are
bound a second later; the wait before is Kueue's, in `kueue_admission_wait_time_seconds`, and
truth.json's `kueue_admissions` lists each admission. The scheduler model itself is the one of
the default pool: the same pods are bound at the same times, only their `created` moves."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from decimal import Decimal
from pathlib import Path

import pytest

from simulator.config import PoolConfig
from simulator.pool import Pool, simulate, write_openmetrics_parts
from simulator.serve import render_text
from simulator.truth import build_truth, iso, load_truth, write_truth

# Seed 4 preempts four Jobs in two days (three in the first morning, see
# test_kueue_preemptions), which all run again, so their workloads are admitted again; seed 0
# with two gang Jobs binds one gang's second pod 75 minutes after the first (a sibling pending
# after the admission) and the other's at the admission's tick.
POOL = PoolConfig(gpus=16, days=1, start=dt.date(2026, 10, 6), seed=4, scrape_interval_seconds=60)
GANGS = replace(POOL, seed=0, gang_jobs=2)
CONFIGS = {"preempting": replace(POOL, days=2), "gangs": GANGS}
S = POOL.scrape_interval_seconds
WAIT = "kueue_admission_wait_time_seconds"
LE = ("1", "2.5", "5", "10", "20", "40", "80", "160", "320", "640", "1280", "2560", "5120")
LE += ("10240", "20480", "40960", "+Inf")
BOUNDS = tuple(Decimal(le) for le in LE)  # +Inf too


def step_until(pool: Pool, ticks: Iterator[int], done: Callable[[], bool]) -> None:
    """Run the pool tick by tick until `done()` holds after a tick."""
    for tick in ticks:
        pool.step(tick)
        if done():
            return
    raise AssertionError("the day ended first")


@dataclass
class Run:
    """What one day of a pool wrote, kept small: Kueue's histogram lines, and per pod the
    ticks kube-state-metrics wrote it at and its kube_pod_created."""

    pool: Pool
    truth: dict
    histogram: dict[int, dict[str, str]] = field(default_factory=dict)  # tick -> series -> value
    ksm_ticks: dict[str, list[int]] = field(default_factory=lambda: defaultdict(list))
    created: dict[str, set[int]] = field(default_factory=lambda: defaultdict(set))


def run(config: PoolConfig) -> Run:
    pool = Pool(config)
    samples = 0
    found = Run(pool, {})
    for tick in config.ticks():
        lines = pool.step(tick)
        samples += len(lines)
        found.histogram[tick] = {}
        seen: set[str] = set()
        for line in lines:
            if line.startswith(WAIT):
                series, value = line.rsplit(" ", 1)
                found.histogram[tick][series] = value
            elif line.startswith("kube_pod_"):
                pod = line.split(',pod="', 1)[1].split('"', 1)[0]
                seen.add(pod)
                if line.startswith("kube_pod_created{"):
                    found.created[pod].add(int(line.rsplit(" ", 1)[1]))
        for pod in seen:
            found.ksm_ticks[pod].append(tick)
    found.truth = build_truth(pool, samples_written=samples)
    return found


@pytest.fixture(scope="module", params=list(CONFIGS))
def runs(request: pytest.FixtureRequest) -> tuple[Run, Run]:
    """The pool with Kueue, and the same pool with kube-scheduler preempting (no admissions)."""
    config = CONFIGS[request.param]
    return run(replace(config, preemptions_by="kueue")), run(config)


def resumed(truth: dict) -> list[str]:
    """The preempted one-pod Jobs that ran again."""
    return [
        task_id
        for task_id, task in kueue_jobs(truth).items()
        if task["preemptions"] and len(task["waits"]) > 1 and "-gang-" not in task_id
    ]


def epoch(at: str) -> int:
    return int(dt.datetime.fromisoformat(at.replace("Z", "+00:00")).timestamp())


def series_of(admission: dict) -> str:
    return (
        f'job="kueue",instance="10.96.0.50:8443",cluster_queue="{admission["cluster_queue"]}",'
        f'priority_class="{admission["priority_class"]}",replica_role="leader"'
    )


def kueue_jobs(truth: dict) -> dict[str, dict]:
    return {
        task_id: task
        for task_id, task in truth["tasks"].items()
        if task["kind"] in ("training_batch", "preprocessing")
    }


def test_it_counts_and_sums_each_admission_at_its_tick(runs: tuple[Run, Run]) -> None:
    kueue, _ = runs
    admissions = kueue.truth["kueue_admissions"]
    assert len(admissions) > 30, "the config must admit, or this test checks nothing"
    expected: dict[str, dict[int, list[int]]] = defaultdict(lambda: defaultdict(list))
    for admission in admissions:
        expected[series_of(admission)][epoch(admission["at"])].append(admission["seconds"])
    assert len(expected) > 3
    for labels, by_tick in expected.items():
        count, total = f"{WAIT}_count{{{labels}}}", f"{WAIT}_sum{{{labels}}}"
        first = min(by_tick)
        previous_count = previous_sum = 0
        for tick, lines in kueue.histogram.items():
            if tick < first:
                # A HistogramVec's label set exists from its first observation on.
                assert count not in lines and total not in lines
                continue
            waits = by_tick.get(tick, [])
            assert int(lines[count]) - previous_count == len(waits), (labels, tick)
            assert int(lines[total]) - previous_sum == sum(waits), (labels, tick)
            previous_count, previous_sum = int(lines[count]), int(lines[total])
    written = {
        series.split("{", 1)[1].rsplit(",le=", 1)[0].rstrip("}")
        for lines in kueue.histogram.values()
        for series in lines
    }
    assert written == set(expected)


def test_it_writes_cumulative_buckets_with_client_golangs_bounds(runs: tuple[Run, Run]) -> None:
    kueue, _ = runs
    by_series: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for admission in kueue.truth["kueue_admissions"]:
        by_series[series_of(admission)].append((epoch(admission["at"]), admission["seconds"]))
    for tick, lines in kueue.histogram.items():
        for labels, observed in by_series.items():
            if f"{WAIT}_count{{{labels}}}" not in lines:
                continue
            buckets = [int(lines[f'{WAIT}_bucket{{{labels},le="{le}"}}']) for le in LE]
            assert buckets == sorted(buckets)
            assert buckets[-1] == int(lines[f"{WAIT}_count{{{labels}}}"])
            so_far = [seconds for at, seconds in observed if at <= tick]
            assert buckets == [sum(s <= bound for s in so_far) for bound in BOUNDS]
            # 17 buckets, a sum and a count: nothing else of the label set.
            assert sum(labels in series for series in lines) == len(LE) + 2
    spread = {a["seconds"] for a in kueue.truth["kueue_admissions"]}
    assert min(spread) <= 80 and max(spread) > 1280, "buckets low and high should both fill"


def test_it_writes_no_pod_of_a_kueue_workload_before_its_admission(runs: tuple[Run, Run]) -> None:
    kueue, scheduler = runs
    jobs = kueue_jobs(kueue.truth)
    admitted_at: dict[str, dict[int, int]] = defaultdict(dict)  # task -> admitted -> at
    for admission in kueue.truth["kueue_admissions"]:
        admitted_at[admission["task"]][epoch(admission["admitted"])] = epoch(admission["at"])
    later = 0
    for task_id, task in jobs.items():
        for pod in task["pods"]:
            ticks = kueue.ksm_ticks.get(pod, [])
            queued = scheduler.ksm_ticks[pod][0]  # without Kueue, written from its creation
            if not ticks:
                continue  # never admitted in the day: never written
            (created,) = kueue.created[pod]
            # Written from the tick its workload's admission is observed at, as created then.
            assert admitted_at[task_id][created] == ticks[0], pod
            later += ticks[0] > queued
            assert ticks == list(range(ticks[0], ticks[-1] + S, S))
        assert not [pod for pod in task["pods"] if pod in kueue.ksm_ticks] or task_id in admitted_at
    assert later > 20
    never = [
        pod
        for task in jobs.values()
        for pod in task["pods"]
        if pod not in kueue.ksm_ticks and pod in scheduler.ksm_ticks
    ]
    assert never, "some Job should still wait for admission at the day's end"
    # Kueue queues Jobs only: the other pods are written as without it.
    for task in kueue.truth["tasks"].values():
        if task["kind"] in ("inference", "training_interactive"):
            for pod in task["pods"]:
                assert kueue.ksm_ticks[pod] == scheduler.ksm_ticks[pod]


def test_it_leaves_kube_scheduler_a_second_and_kueue_the_rest(runs: tuple[Run, Run]) -> None:
    kueue, scheduler = runs
    jobs = kueue_jobs(kueue.truth)
    before = {
        wait["pod"]: wait for task in scheduler.truth["tasks"].values() for wait in task["waits"]
    }
    waits_of = defaultdict(list)  # (task, admitted) -> the waits of its pods
    for task_id, task in jobs.items():
        for wait in task["waits"]:
            waits_of[(task_id, wait["created"])].append(wait)
            # Bound at the same moment as without Kueue: the scheduler model did not move.
            assert wait["scheduled"] == before[wait["pod"]]["scheduled"]
    admissions = kueue.truth["kueue_admissions"]
    assert sum(len(waits) for waits in waits_of.values()) == sum(
        len(task["waits"]) for task in jobs.values()
    )
    assert len(admissions) == len(waits_of)  # every Job pod bound belongs to one admission
    for admission in admissions:
        waits = waits_of[(admission["task"], admission["admitted"])]
        at = epoch(admission["at"])
        first = min(waits, key=lambda wait: wait["scheduled"])
        at_admission = [w for w in waits if at - S < epoch(w["scheduled"]) < at]
        assert first in at_admission
        assert first["seconds"] <= 1
        assert all(wait["seconds"] < S for wait in at_admission)  # kube-scheduler's part: tiny
        # A gang Job's sibling bound later waits from the admission to its bind.
        for wait in waits:
            assert wait["seconds"] == epoch(wait["scheduled"]) - epoch(admission["admitted"])
        # Kueue's wait + the first pod's = its bind - the workload's queued time (its pods'
        # creation without Kueue: the earliest of those the admission created).
        queued = min(epoch(before[wait["pod"]]["created"]) for wait in waits)
        assert admission["seconds"] + first["seconds"] == epoch(first["scheduled"]) - queued
        assert admission["kind"] == jobs[admission["task"]]["kind"]
    assert [a["admitted"] for a in admissions] == sorted(a["admitted"] for a in admissions)
    assert max(a["seconds"] for a in admissions) > 3600  # long waits are Kueue's now
    # Requeued after an eviction: a one-pod Job's every pod bound is an admission of its own
    # (the one before it ended or was evicted), so a preempted Job's pod re-created has one.
    for task_id, task in jobs.items():
        if "-gang-" not in task_id:  # a gang Job's id is its Job's name, "<model>-gang-<n>"
            assert sum(a["task"] == task_id for a in admissions) == len(task["waits"])
    if kueue.pool.config.days == 2:
        assert len(resumed(kueue.truth)) == 4


def test_it_moves_only_the_waits_of_the_truth(runs: tuple[Run, Run]) -> None:
    kueue, scheduler = runs
    with_kueue = {k: v for k, v in kueue.truth.items() if k not in ("meta", "kueue_admissions")}
    without = {k: v for k, v in scheduler.truth.items() if k != "meta"}
    for truth in (with_kueue, without):
        for task in truth["tasks"].values():
            task.pop("waits")
    assert with_kueue == without
    assert "kueue_admissions" not in scheduler.truth
    assert list(kueue.truth).index("kueue_admissions") < list(kueue.truth).index("tasks")


def test_it_admits_a_gang_again_with_its_pending_sibling_after_an_eviction() -> None:
    config = replace(GANGS, preemptions_by="kueue")
    pool = Pool(config)
    ticks = iter(config.ticks())
    step_until(pool, ticks, lambda: any(p.task.gang and not p.hidden for p in pool.pending))
    (sibling,) = [p for p in pool.pending if p.task.gang and not p.hidden]
    gang = sibling.task
    (running,) = [p for p in pool.running if p.task is gang]
    assert f'pod="{sibling.name}"' in "".join(sibling.ksm_lines)
    evicted = next(ticks)
    pool._preempt(running, evicted)  # as _preempt_for would for an inference pod
    lines = pool.step(evicted)
    # Kueue suspends the Job: its pending pod goes too, and waits for the next admission.
    assert sibling.hidden and not [line for line in lines if f'pod="{sibling.name}"' in line]

    def admissions() -> list[dict]:
        return [a for a in pool.kueue_admissions if a["task"] == gang.id]

    step_until(pool, ticks, lambda: len(admissions()) == 2)
    again = admissions()[1]
    assert epoch(again["at"]) > evicted
    # From the eviction, or the re-created pod's creation if earlier (preempted here before the
    # tick's controllers run, the Job re-creates its pod at this tick, not the next).
    recreated = gang.pods[-1]  # the pod the Job re-created for the one evicted
    assert recreated not in (sibling.name, running.name)
    queued = next(p.queued for p in pool.running + pool.pending if p.name == recreated)
    assert again["seconds"] == epoch(again["admitted"]) - min(evicted, queued)
    assert not gang.awaiting or all(p.hidden for p in gang.awaiting)


def test_it_admits_a_job_again_when_its_only_pod_is_lost() -> None:
    config = replace(POOL, preemptions_by="kueue")
    pool = Pool(config)
    ticks = iter(config.ticks())
    step_until(pool, ticks, lambda: bool(pool.kueue_admissions))
    job = next(p for p in pool.running if p.task.owner_kind == "Job" and p.task.live_pods == 1)
    lost = next(ticks)
    pool._lose_node(job.node, lost, lost + 3600)
    pool.step(lost)
    assert not job.task.admitted
    (again,) = [p for p in pool.pending if p.task is job.task]
    assert again.hidden and not again.ksm_lines
    step_until(pool, ticks, lambda: not again.hidden)
    last = [a for a in pool.kueue_admissions if a["task"] == job.task.id][-1]
    assert last["admitted"] == iso(again.created)
    assert last["seconds"] == again.created - again.queued > 0


def test_it_writes_admissions_the_same_when_streamed(tmp_path: Path) -> None:
    config = replace(POOL, preemptions_by="kueue", scrape_interval_seconds=300)
    kept = Pool(config)
    samples = sum(len(kept.step(tick)) for tick in config.ticks())
    write_truth(build_truth(kept, samples_written=samples), tmp_path / "kept.json")

    result = simulate(config, tmp_path / "streamed")

    assert result.truth_path.read_bytes() == (tmp_path / "kept.json").read_bytes()
    assert load_truth(result.truth_path)["kueue_admissions"]


def test_it_serves_the_histogram_as_one_family() -> None:
    pool = Pool(replace(POOL, preemptions_by="kueue"))
    for tick in POOL.ticks():
        lines = pool.step(tick)
        if pool.kueue_admissions:
            break
    text = render_text(lines)
    assert text.count(f"# TYPE {WAIT} histogram") == 1
    family = text.split(f"# TYPE {WAIT} histogram\n", 1)[1].split("# TYPE", 1)[0]
    label_sets = {(a["cluster_queue"], a["priority_class"]) for a in pool.kueue_admissions}
    assert family.count(f"{WAIT}_bucket{{") == len(LE) * len(label_sets)
    assert family.count(f"{WAIT}_sum{{") == family.count(f"{WAIT}_count{{") == len(label_sets)
    assert text.count(WAIT) == family.count(WAIT) + 1  # all of them in the family


def test_it_stamps_the_histogram_at_kueues_scrape_offset(tmp_path: Path) -> None:
    config = replace(POOL, preemptions_by="kueue", scrape_offsets=True)
    pool = Pool(config)
    (path,), _ = write_openmetrics_parts(
        pool, tmp_path, part_seconds=0, ticks=config.ticks()[: 3 * 3600 // S]
    )
    stamps: dict[str, set[str]] = defaultdict(set)
    for line in path.read_text().splitlines():
        if line.startswith((WAIT, 'up{job="kueue"')):
            kind = "histogram" if line.startswith(WAIT) else "up"
            stamps[kind].add(line.rsplit(" ", 1)[1])
    # One target, one offset: the histogram's samples are stamped as Kueue's `up` is.
    assert stamps["histogram"] and stamps["histogram"] <= stamps["up"]
    assert all(not stamp.endswith(".000") for stamp in stamps["up"])


def test_it_leaves_a_notebooks_preemption_to_kube_scheduler() -> None:
    # Two GPUs: no MIG or time-sliced GPU, so notebooks take a whole one, which inference may
    # preempt. Kueue does not queue notebooks (StatefulSets): it neither evicts nor counts them.
    config = PoolConfig(
        gpus=2, days=3, start=dt.date(2026, 10, 5), seed=1, scrape_interval_seconds=300
    )
    pool = Pool(replace(config, preemptions_by="kueue"))
    reasons: set[str] = set()
    for tick in config.ticks():
        reasons.update(
            line.split(',pod="', 1)[1].split('"', 1)[0]
            for line in pool.step(tick)
            if line.endswith('reason="PreemptionByScheduler"} 1')
        )
    preempted = {
        kind: {
            p["pod"] for task in pool.tasks.values() if task.kind == kind for p in task.preemptions
        }
        for kind in ("training_interactive", "training_batch")
    }
    assert preempted["training_interactive"] and preempted["training_batch"]
    assert reasons == preempted["training_interactive"]
    evicted = {
        (task.id, p["at"])
        for task in pool.tasks.values()
        if task.owner_kind == "Job"
        for p in task.preemptions
    }
    assert sum(pool.kueue_evictions.values()) == len(evicted)
