"""Which pods that no GPU series names count their GPUs' samples as missing, and how many, on
hand-made observations. tests/metering/test_scrape_targets.py meters a dcgm-exporter with its
pod mapping off end to end."""

from __future__ import annotations

from fractions import Fraction

from metering import measure, sources
from metering.measure import GpuInfo, IntervalFacts, Observed, PodIdentity, SeriesTicks
from metering.models import Source

PLAN = sources.query_plan_for(
    Source(name="pool", url="http://127.0.0.1:9", scrape_interval_seconds=60), step_seconds=300
)
TICKS = 5
EXPORTER = ("dcgm-exporter", "10.42.0.11:9400")


def interval(gpus: int = 4, answered: int = TICKS) -> Observed:
    """gpu-a's exporter reporting `gpus` GPUs at every tick, none of them named by a pod, and
    answering `answered` of its 5 scrapes."""
    observed = Observed()
    for n in range(gpus):
        observed.gpus[f"GPU-{n}"] = GpuInfo(ticks=answered, target=EXPORTER, node="gpu-a")
    observed.targets[EXPORTER] = [TICKS, answered]
    return observed


def running(
    before: Observed, now: Observed, name: str, gpus: Fraction | int, node: str = "gpu-a"
) -> None:
    """A pod Running at the interval's start and end, requesting `gpus`."""
    for observed in (before, now):
        observed.identity["ml", name] = PodIdentity(
            node=node, gpus_requested=Fraction(gpus), running=True, from_kube=True
        )


def derived(before: Observed, now: Observed) -> IntervalFacts:
    facts = IntervalFacts()
    measure._derive_completeness(facts, now, before, PLAN, {})
    return facts


def test_it_counts_the_requested_gpus_of_pods_running_through_unnamed() -> None:
    before, now = interval(), interval()
    running(before, now, "trainer-0", 2)
    # Two MIG instances of 3/7 each: 6/7 of a GPU, rounded up to one for the node.
    running(before, now, "mig-a", Fraction(3, 7))
    running(before, now, "mig-b", Fraction(3, 7))
    facts = derived(before, now)
    assert (facts.samples_seen, facts.samples_expected) == (4 * TICKS - 3 * TICKS, 4 * TICKS)
    assert facts.completeness == Fraction(1, 4)
    assert facts.warnings == [
        "attribution: node gpu-a: 3 pod(s) ran the whole interval with GPUs that no GPU"
        " series names, e.g. ml/mig-a requesting 3/7 GPU(s) (dcgm-exporter's pod mapping off"
        " or broken there?); 900 GPU-seconds counted missing"
    ]


def test_it_leaves_pods_that_did_not_run_through_or_are_named_uncounted() -> None:
    before, now = interval(), interval()
    running(before, now, "named", 1)
    now.series["GPU-0", "", "", "ml", "named"] = SeriesTicks(ticks=TICKS)
    running(before, now, "completed", 2)
    now.identity["ml", "completed"].running = False  # Succeeded: requests stay in KSM
    running(before, now, "started", 1)
    before.identity["ml", "started"].running = False  # Pending at the interval's start
    running(before, now, "preempted", 1)
    now.preempted.add(("ml", "preempted"))
    now.identity["ml", "cpu-only"] = PodIdentity(node="gpu-a", running=True, from_kube=True)
    before.identity["ml", "cpu-only"] = PodIdentity(node="gpu-a", running=True, from_kube=True)
    facts = derived(before, now)
    assert (facts.samples_seen, facts.samples_expected) == (4 * TICKS, 4 * TICKS)
    assert facts.warnings == []


def test_it_counts_no_more_than_the_node_showed_and_all_requested_where_none_reports_it() -> None:
    before, now = interval(gpus=2), interval(gpus=2)
    running(before, now, "greedy", 8)  # more than the node's 2 GPUs: a time-sliced request
    running(before, now, "elsewhere", 1, node="gpu-b")  # no GPU exporter reports gpu-b
    facts = derived(before, now)
    # gpu-a's 2 GPUs counted missing, not seen; gpu-b's 1 GPU expected, and missing.
    assert (facts.samples_seen, facts.samples_expected) == (0, 2 * TICKS + TICKS)
    assert [warning.split(", e.g.")[0] for warning in facts.warnings] == [
        "attribution: node gpu-a: 1 pod(s) ran the whole interval with GPUs that no GPU"
        " series names",
        "attribution: node gpu-b: 1 pod(s) ran the whole interval with GPUs that no GPU"
        " series names",
    ]
    assert facts.warnings[0].endswith("; 600 GPU-seconds counted missing")
    assert facts.warnings[1].endswith(
        " (no GPU exporter reports the node); 300 GPU-seconds counted missing"
    )


def test_it_leaves_pods_on_a_node_whose_exporter_missed_scrapes_to_that_count() -> None:
    before, now = interval(), interval(answered=3)
    running(before, now, "trainer-0", 2)
    facts = derived(before, now)
    # The 2 failed scrapes of 4 GPUs are missing; the pod adds nothing to it.
    assert (facts.samples_seen, facts.samples_expected) == (4 * 3, 4 * TICKS)
    assert [w for w in facts.warnings if w.startswith("attribution")] == []


def test_it_asks_the_mig_resources_apart_from_the_mapped_one() -> None:
    part = sources.identity_parts(PLAN)["requests"]
    assert part.queries == (
        'kube_pod_container_resource_requests{resource="nvidia_com_gpu"}',
        'kube_pod_container_resource_requests{resource=~"nvidia_com_mig_.+"}',
    )
    mig_only = sources.query_plan_for(
        Source(name="mig", url="http://x", label_mapping={"gpu_resource": "nvidia_com_mig_1g"}),
        step_seconds=300,
    )
    queries = sources.identity_parts(mig_only)["requests"].queries
    assert queries == ('kube_pod_container_resource_requests{resource="nvidia_com_mig_1g"}',)


def test_it_counts_nothing_twice_where_a_silent_exporter_may_be_the_node() -> None:
    # gpu-a's exporter missed every scrape, and goes by a name no pod's node carries: the pod
    # on "gpu-a.internal" may run on its GPUs, already counted missing.
    before, now = interval(), interval(answered=0)
    running(before, now, "trainer-0", 2, node="gpu-a.internal")
    facts = derived(before, now)
    assert (facts.samples_seen, facts.samples_expected) == (0, 4 * TICKS)
    assert [w for w in facts.warnings if w.startswith("attribution")] == [
        "attribution: node gpu-a.internal: 1 pod(s) ran the whole interval with GPUs that no"
        " GPU series names, e.g. ml/trainer-0 requesting 2 GPU(s) (no GPU exporter reports"
        " the node by that name); not counted: gpu-a's exporter missed scrapes, counted"
        " missing already"
    ]


def unmetered_plan(nodes: str) -> sources.QueryPlan:
    """PLAN with the source's `unmetered_nodes` set to `nodes`."""
    return sources.query_plan_for(
        Source(
            name="pool",
            url="http://127.0.0.1:9",
            scrape_interval_seconds=60,
            label_mapping={"unmetered_nodes": nodes},
        ),
        step_seconds=300,
    )


def test_it_leaves_pods_on_another_sources_nodes_alone() -> None:
    plan = unmetered_plan("team-b-.*")
    before, now = interval(), interval()
    running(before, now, "theirs", 4, node="team-b-gpu-1")
    running(before, now, "ours", 1, node="gpu-z")
    facts = IntervalFacts()
    measure._derive_completeness(facts, now, before, plan, {})
    assert (facts.samples_seen, facts.samples_expected) == (4 * TICKS, 4 * TICKS + TICKS)
    assert [w.split(", e.g.")[0] for w in facts.warnings] == [
        "attribution: node gpu-z: 1 pod(s) ran the whole interval with GPUs that no GPU"
        " series names"
    ]
