"""What four checks of every batch cost in Python (they ask Prometheus nothing): telling
inference pods that serve without the latency histogram (`measure._latency_unseen`), beside
the latency derivation of the same intervals (`measure._derive_latency`); the team and task
labels gone from every GPU pod at once (`measure._mapping_labels_dropped`) and the GPU-seconds
of pods kube-state-metrics described or not (`measure._identity_coverage`) and of pods under
priority classes the source does not map (`measure._kinds_unmapped`), and the busy time of
GPUs no pod held (`measure._unheld_busy`), beside the allocation summed in the same intervals
(`kernel.numbers.exact_sum`); and what reading free GPUs' busy series costs the busy meter's
grouping and parsing (`measure._grouped`, `measure._parse_busy`), beside the same meter without
them (pods only); and the check for two clusters read as one (`measure._clusters_check`), on
series with and without a cluster label. Each reference is measured in the same run.

The interval is a 10,000-GPU pool's, made by hand: 10,000 pods holding one GPU each, a third
of them inference replicas (each with its target and, but in the worst case, a histogram of 22
buckets), among 40,000 pods kube-state-metrics describes (none, in the worst case); 1,250 GPU
exporters; for the busy time of GPUs no pod held, 12,000 GPUs, 2,000 of them free (idle, or,
in the worst case, every one busy). Twelve intervals, a batch's. The best of `--runs`. The
figures docs/telemetry.md quotes ("Latency buckets", "Pods kube-state-metrics does not
describe", "Who is who", "Busy time"). Not run by `make bench`.

    .venv/bin/python benchmarks/_checks_probe.py [--runs 5]
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from decimal import Decimal
from fractions import Fraction
from functools import partial
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
# The settings want a database; nothing here opens a connection.
os.environ.setdefault("DATABASE_URL", "postgres://unused@127.0.0.1:9/unused")

import django  # noqa: E402

django.setup()

from kernel.collector import collector_held  # noqa: E402
from kernel.numbers import exact_sum  # noqa: E402
from metering import measure, sources  # noqa: E402
from metering.measure import IntervalFacts, Observed, PodIdentity, SeriesTicks  # noqa: E402

GPU_PODS = 10_000
PODS = 40_000
EXPORTERS = 1_250
INTERVALS = 12
BOUNDS = [str(b) for b in (0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60)]
BOUNDS += [str(b) for b in (120, 240, 480, 960, 1920, 7680)] + ["+Inf"]
PLAN = sources.QueryPlan(scrape_seconds=15, step_seconds=300)


def interval(*, histogram: bool) -> tuple[Observed, Observed, IntervalFacts]:
    now, before, facts = Observed(), Observed(), IntervalFacts()
    for n in range(PODS):
        pod = ("ml", f"pod-{n}")
        address = f"10.{n // 65536}.{n // 256 % 256}.{n % 256}"
        inference = n < GPU_PODS and n % 3 == 0
        now.identity[pod] = before.identity[pod] = PodIdentity(
            from_kube=True,
            labelled=True,
            owned=True,
            informed=True,
            priority_class="inference-critical" if inference else "training-batch",
            running=True,
            pod_ip=address,
            host_ip=f"192.168.{n % EXPORTERS // 256}.{n % EXPORTERS % 256}",
        )
        if n < GPU_PODS:
            facts.alloc[pod] = Fraction(300)
        if inference:
            now.targets[("vllm", f"{address}:8000")] = [20, 20]
            if histogram:
                now.latency_last[("ml", f"model-{n % 6}", pod[1])] = {
                    bound: Decimal(7 * i) for i, bound in enumerate(BOUNDS)
                }
    for n in range(EXPORTERS):
        now.targets[("dcgm-exporter", f"192.168.{n // 256}.{n % 256}:9400")] = [20, 20]
    return now, before, facts


def best(runs: int, work: Callable[[], None]) -> float:
    """The fastest of `runs`, each after a full collection and with the collector held, as
    ingest holds it (`measure.derive` is `collector_paused`): a collection inside one
    measurement (the heap holds a 40,000-pod pool) would double that figure and not its
    reference."""
    times = []
    for _ in range(runs):
        gc.collect()
        with collector_held():
            began = time.perf_counter()
            work()
            times.append(time.perf_counter() - began)
    return min(times)


def check(now: Observed, before: Observed, facts: IntervalFacts) -> None:
    for _ in range(INTERVALS):
        measure._latency_unseen(IntervalFacts(alloc=facts.alloc), now, before, PLAN, set())


def derive_latency(now: Observed) -> None:
    for _ in range(INTERVALS):
        measure._derive_latency(IntervalFacts(), now, {})


def coverage(intervals: dict[int, IntervalFacts]) -> None:
    for facts in intervals.values():
        facts.warnings = []
    measure._identity_coverage(intervals)


def labels_dropped(now: Observed, before: Observed, facts: IntervalFacts) -> None:
    for _ in range(INTERVALS):
        measure._mapping_labels_dropped(IntervalFacts(alloc=facts.alloc), now, before, PLAN)


def allocation_sum(intervals: dict[int, IntervalFacts]) -> None:
    for facts in intervals.values():
        exact_sum(facts.alloc.values())


def kinds(measured: measure.Measured, observed: dict[int, Observed]) -> None:
    for facts in measured.intervals.values():
        facts.warnings, facts.unmapped_kinds = [], {}
    measure._kinds_unmapped(measured, observed)


FREE_GPUS = 2_000


def with_devices(now: Observed, *, free_busy: bool) -> Observed:
    """`now` with a series per GPU: one per GPU pod, busy, and FREE_GPUS bare ones."""
    devices = Observed(identity=now.identity, targets=now.targets)
    for n in range(GPU_PODS + FREE_GPUS):
        pod = ("ml", f"pod-{n}") if n < GPU_PODS else ("", "")
        busy = Decimal(10) if n < GPU_PODS or free_busy else Decimal(0)
        devices.series[(f"GPU-{n}", "", "", *pod)] = SeriesTicks(
            ticks=20, node=f"node-{n // 8}", busy=busy
        )
    return devices


def busy_answer(free: int, *, free_busy: bool) -> sources.QueryRun:
    """The engine-active meter's answer of a batch: each GPU pod's series and `free` bare
    ones, a point per interval (idle: "0")."""
    ends = [str(PLAN.step_seconds * (n + 1)) for n in range(INTERVALS)]
    series = [
        sources.Series(
            labels={"UUID": f"GPU-{n}", "namespace": "ml", "pod": f"pod-{n}", "job": "dcgm"},
            values=[[end, "12.5"] for end in ends],
        )
        for n in range(GPU_PODS)
    ]
    series += [
        sources.Series(
            labels={"UUID": f"GPU-free-{n}", "job": "dcgm"},
            values=[[end, "3.5" if free_busy else "0"] for end in ends],
        )
        for n in range(free)
    ]
    return sources.QueryRun("busy", "", None, None, 0.0, 0.0, series)  # type: ignore[arg-type]


def busy_meter(answer: sources.QueryRun, part: sources.Part) -> None:
    grouped = measure._grouped(answer, "active", part)
    observed = {PLAN.step_seconds * n: Observed() for n in range(-1, INTERVALS)}
    measure._parse_busy(grouped, observed, PLAN)


def labelled(devices: Observed, cluster: str) -> Observed:
    """`devices`' series, each with the cluster label's value `cluster` ("": no label)."""
    found = Observed(identity=devices.identity, targets=devices.targets)
    found.series = {key: replace(s, cluster=cluster) for key, s in devices.series.items()}
    return found


def unheld(intervals: dict[int, IntervalFacts], observed: dict[int, Observed]) -> None:
    for facts in intervals.values():
        facts.warnings, facts.unheld_busy = [], {}
    measure._unheld_busy(intervals, observed, PLAN)


def batch_of(now: Observed, facts: IntervalFacts, *, described: bool) -> dict[int, IntervalFacts]:
    identity = now.identity if described else dict.fromkeys(now.identity, PodIdentity())
    return {n: IntervalFacts(identity=identity, alloc=dict(facts.alloc)) for n in range(INTERVALS)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    options = parser.parse_args()
    for histogram, case in ((True, "every replica writes it"), (False, "none does (all named)")):
        now, before, facts = interval(histogram=histogram)
        checked = best(options.runs, partial(check, now, before, facts))
        derived = best(options.runs, partial(derive_latency, now))
        reference = f"latency derivation {derived * 1000:.1f} ms"
        ratio = f"{checked / derived:.2f}" if histogram else "-"
        print(
            f"latency histogram, {case}: the check {checked * 1000:.1f} ms per batch;"
            f" {reference}; ratio {ratio}"
        )
    now, before, facts = interval(histogram=True)
    for pod in now.identity:  # every pod labelled with its team and task, before and now
        now.identity[pod].team_label = now.identity[pod].task_label = "ml"
    checked = best(options.runs, partial(labels_dropped, now, before, facts))
    summed = best(options.runs, partial(allocation_sum, batch_of(now, facts, described=True)))
    print(
        f"mapping labels dropped: {checked * 1000:.1f} ms per batch; allocation summed"
        f" {summed * 1000:.1f} ms; ratio {checked / summed:.2f}"
    )
    for described, case in ((True, "every pod described"), (False, "none (all guessed)")):
        intervals = batch_of(now, facts, described=described)
        checked = best(options.runs, partial(coverage, intervals))
        summed = best(options.runs, partial(allocation_sum, intervals))
        print(
            f"identity coverage, {case}: {checked * 1000:.1f} ms per batch; allocation summed"
            f" {summed * 1000:.1f} ms; ratio {checked / summed:.2f}"
        )
    intervals = batch_of(now, facts, described=True)
    observed = dict.fromkeys(intervals, now)
    summed = best(options.runs, partial(allocation_sum, intervals))
    for kinds_of, case in (
        (PLAN.priority_class_kinds, "every class mapped"),
        ({}, "none (all said)"),
    ):
        plan = replace(PLAN, priority_class_kinds=kinds_of)
        measured = measure.Measured(intervals, [], 0.0, plan)
        checked = best(options.runs, partial(kinds, measured, observed))
        print(
            f"priority classes not mapped, {case}: {checked * 1000:.1f} ms per batch;"
            f" allocation summed {summed * 1000:.1f} ms; ratio {checked / summed:.2f}"
        )
    step = PLAN.step_seconds
    for free_busy, case in ((False, "free GPUs idle"), (True, "every free GPU busy")):
        devices = with_devices(now, free_busy=free_busy)
        # The batch's intervals and the one before, each the same view.
        observed = {n * step: devices for n in range(-1, INTERVALS)}
        batch = {n * step: IntervalFacts() for n in range(INTERVALS)}
        checked = best(options.runs, partial(unheld, batch, observed))
        print(
            f"busy GPUs no pod held, {case}: {checked * 1000:.1f} ms per batch; allocation"
            f" summed {summed * 1000:.1f} ms; ratio {checked / summed:.2f}"
        )
    devices = with_devices(now, free_busy=False)
    for cluster, case in (("", "no cluster label"), ("prod", "one cluster label")):
        observed = {n * step: labelled(devices, cluster) for n in range(-1, INTERVALS)}
        checked = best(options.runs, partial(measure._clusters_check, observed, PLAN, 0))
        print(
            f"two clusters read as one, {case}: {checked * 1000:.1f} ms per batch; allocation"
            f" summed {summed * 1000:.1f} ms; ratio {checked / summed:.2f}"
        )
    part = sources.busy_parts(PLAN)["active"]
    pods_only = replace(part, busy_bare=False)
    for free, free_busy in ((2_000, False), (10_000, False), (2_000, True)):
        answer = busy_answer(free, free_busy=free_busy)
        read = best(options.runs, partial(busy_meter, answer, part))
        reference = best(options.runs, partial(busy_meter, answer, pods_only))
        case = f"{free:,} free GPUs, {'busy' if free_busy else 'idle'}"
        print(
            f"busy meter reading free GPUs, {case}: {read * 1000:.1f} ms per batch; the same"
            f" meter on pods only {reference * 1000:.1f} ms; ratio {read / reference:.2f}"
        )


if __name__ == "__main__":
    main()
