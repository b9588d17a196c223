"""Which inference pods a window names as serving without the latency histogram
(measure._latency_unseen), on hand-made observations: only a pod that held GPUs through the
interval and whose own scrape target answered every scrape without it.
tests/metering/test_inference_without_histogram.py meters a whole pool end to end."""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction

import pytest

from metering import measure, sources
from metering.measure import IntervalFacts, Observed, PodIdentity
from metering.models import Source

PLAN = sources.query_plan_for(
    Source(name="pool", url="http://127.0.0.1:9", scrape_interval_seconds=60), step_seconds=300
)
POD = ("search", "vllm-qwen-0")
TARGET = ("vllm", "10.244.0.7:8000")


def pod(**changes: object) -> PodIdentity:
    values = {
        "from_kube": True,
        "priority_class": "inference-critical",
        "running": True,
        "pod_ip": "10.244.0.7",
        "host_ip": "192.168.1.20",
        **changes,
    }
    return PodIdentity(**values)


def unseen(
    *,
    now: PodIdentity | None = None,
    before: PodIdentity | None = None,
    targets: dict | None = None,
    latency: bool = False,
    histogram_targets: frozenset = frozenset(),
    alloc: Fraction = Fraction(300),
    preempted: bool = False,
) -> IntervalFacts:
    observed = Observed(targets={TARGET: [5, 5]} if targets is None else targets)
    observed.identity[POD] = now or pod()
    if latency:
        observed.latency_last[(POD[0], "qwen", POD[1])]["+Inf"] = Decimal(0)
    if preempted:
        observed.preempted.add(POD)
    earlier = Observed()
    earlier.identity[POD] = before or pod()
    facts = IntervalFacts()
    facts.alloc[POD] = alloc
    measure._latency_unseen(facts, observed, earlier, PLAN, set(histogram_targets))
    return facts


def test_it_names_an_inference_pod_whose_target_answered_without_the_histogram() -> None:
    facts = unseen()
    assert facts.latency_unseen == [POD]
    assert facts.warnings == [
        "latency: 1 inference pod(s) held GPUs through the interval and answered every scrape"
        " without a series of vllm:e2e_request_latency_seconds, e.g. search/vllm-qwen-0"
        ' (job="vllm" instance="10.244.0.7:8000"): their requests, P99 and SLA breaches'
        " (pricing rule 4) are not measured. vLLM started with --disable-log-stats writes"
        " none; another server writes another histogram (the source's latency_histogram);"
        " a task meant to serve so goes in the source's latency_unmeasured_tasks"
    ]


def test_it_reads_an_ipv6_target_by_its_address() -> None:
    target = ("vllm", "[fd00::7]:8000")
    facts = unseen(now=pod(pod_ip="fd00::7", host_ip="fd00::1"), targets={target: [5, 5]})
    assert facts.latency_unseen == [POD]


@pytest.mark.parametrize(
    "case",
    [
        "writes the histogram",
        "its target writes it without a pod label",
        "a training pod",
        "started within the interval",
        "ended within the interval",
        "preempted",
        "holds no GPU",
        "missed a scrape (a server still loading its model)",
        "its sidecar answers while its server loads",
        "never scraped",
        "no record of scrapes",
        "on its host's network",
    ],
)
def test_it_leaves_alone_a_pod_it_cannot_judge(case: str) -> None:
    arguments: dict = {
        "writes the histogram": {"latency": True},
        "its target writes it without a pod label": {"histogram_targets": frozenset({TARGET})},
        "a training pod": {"now": pod(priority_class="training-batch")},
        "started within the interval": {"before": pod(running=False)},
        "ended within the interval": {"now": pod(running=False)},
        "preempted": {"preempted": True},
        "holds no GPU": {"alloc": Fraction(0)},
        "missed a scrape (a server still loading its model)": {"targets": {TARGET: [5, 4]}},
        "its sidecar answers while its server loads": {
            "targets": {TARGET: [5, 0], ("envoy-stats", "10.244.0.7:15090"): [5, 5]}
        },
        "never scraped": {"targets": {("vllm", "10.244.0.99:8000"): [5, 5]}},
        "no record of scrapes": {"targets": {}},
        "on its host's network": {
            "now": pod(pod_ip="192.168.1.20"),
            "targets": {("node-exporter", "192.168.1.20:9100"): [5, 5]},
        },
    }[case]
    facts = unseen(**arguments)
    assert facts.latency_unseen == []
    assert facts.warnings == []


def test_it_counts_inference_by_the_sources_priority_classes() -> None:
    source = Source(
        name="pool",
        url="http://127.0.0.1:9",
        scrape_interval_seconds=60,
        priority_class_kinds={"serving": "inference", "inference-critical": "training_batch"},
    )
    plan = sources.query_plan_for(source, step_seconds=300)
    observed, earlier = Observed(targets={TARGET: [5, 5]}), Observed()
    for classes, expected in (("serving", [POD]), ("inference-critical", [])):
        observed.identity[POD] = earlier.identity[POD] = pod(priority_class=classes)
        facts = IntervalFacts()
        facts.alloc[POD] = Fraction(300)
        measure._latency_unseen(facts, observed, earlier, plan, set())
        assert facts.latency_unseen == expected


def test_it_names_a_pod_whose_server_and_sidecar_both_answered_without_it() -> None:
    sidecar = ("envoy-stats", "10.244.0.7:15090")
    facts = unseen(targets={TARGET: [5, 5], sidecar: [5, 5]})
    assert facts.latency_unseen == [POD]
    assert '(job="envoy-stats" instance="10.244.0.7:15090")' in facts.warnings[0]


def test_it_leaves_alone_a_worker_of_a_replica_whose_leader_writes_the_histogram() -> None:
    """A multi-node replica (KubeRay, LeaderWorkerSet with a task label): one task, the leader
    serving and writing the histogram, the workers holding GPUs with a Ray target of their own."""
    leader, worker = ("search", "qwen-head"), ("search", "qwen-worker-0")
    observed, earlier = Observed(), Observed()
    for pod, address in ((leader, "10.244.0.7"), (worker, "10.244.0.8")):
        observed.identity[pod] = earlier.identity[pod] = pod_of_task(address, "RayCluster")
        observed.targets[("ray", f"{address}:8080")] = [5, 5]
    observed.latency_last[(leader[0], "qwen", leader[1])]["+Inf"] = Decimal(0)
    facts = IntervalFacts()
    facts.alloc[leader] = facts.alloc[worker] = Fraction(2400)
    measure._latency_unseen(facts, observed, earlier, PLAN, set())
    assert facts.latency_unseen == []
    # Another task's pod in the same state is named.
    observed.identity[worker] = earlier.identity[worker] = pod_of_task("10.244.0.8", "other")
    measure._latency_unseen(facts, observed, earlier, PLAN, set())
    assert facts.latency_unseen == [worker]


def pod_of_task(address: str, owner: str) -> PodIdentity:
    return pod(pod_ip=address, owner_kind=owner, owner_name=f"qwen-{owner.lower()}")


def test_it_leaves_alone_the_tasks_the_source_says_serve_without_it() -> None:
    """An offline batch server in an inference priority class, or a Triton: the source's
    `latency_unmeasured_tasks` names them (namespace/task), so they are not named each window."""
    source = Source(
        name="pool",
        url="http://127.0.0.1:9",
        scrape_interval_seconds=60,
        label_mapping={"latency_unmeasured_tasks": "search/batch-.*"},
    )
    plan = sources.query_plan_for(source, step_seconds=300)
    observed, earlier = Observed(targets={TARGET: [5, 5]}), Observed()
    for owner, expected in (("batch-embedder", []), ("vllm-qwen", [POD])):
        observed.identity[POD] = earlier.identity[POD] = pod(owner_name=owner)
        facts = IntervalFacts()
        facts.alloc[POD] = Fraction(300)
        measure._latency_unseen(facts, observed, earlier, plan, set())
        assert facts.latency_unseen == expected
