"""The workloads Kueue preempted in each interval (measure._kueue_preemptions), on hand-made
observations of its counter `kueue_evicted_workloads_total{reason="Preempted"}`: Kueue stops
a workload itself, so no pod shows the preemption, and the window counts them instead.
tests/metering/test_kueue_pool.py meters a whole simulated pool end to end."""

from __future__ import annotations

from decimal import Decimal

import pytest

from metering import measure, sources
from metering.measure import IntervalFacts, Observed
from metering.models import Source
from metering.sources import SourceConfigurationError

PLAN = sources.QueryPlan(scrape_seconds=60, step_seconds=300)
FIRST = 1_790_000_100  # a multiple of 300
TARGET = ("kueue", "10.96.0.50:8443")


def series(queue: str, *, target: tuple[str, str] = TARGET, **labels: str) -> tuple:
    job, instance = target
    found = {"job": job, "instance": instance, "cluster_queue": queue, "reason": "Preempted"}
    return tuple(sorted({**found, **labels}.items()))


def counted(
    readings: list[dict[tuple, int]],
    *,
    before: dict[tuple, int] | None = None,
    looked_back: dict[tuple, int] | None = None,
    answered_before: bool = True,
    answered_in_look_back: bool = False,
    answering: tuple[str, str] = TARGET,
) -> list[IntervalFacts]:
    """Each interval's facts, from Kueue's readings in the interval before the batch
    (`before`), in the look-back before it (`looked_back`) and in each interval of the batch;
    `answering` answers every scrape in the batch, and in the interval before as told."""
    step = PLAN.step_seconds
    interval_before = Observed(targets={answering: [5, 5 if answered_before else 0]})
    interval_before.kueue_evicted = {k: Decimal(v) for k, v in (before or {}).items()}
    interval_before.kueue_looked_back = {k: Decimal(v) for k, v in (looked_back or {}).items()}
    if answered_in_look_back:
        interval_before.kueue_answered_before.add(answering[1])
    observed = {FIRST - step: interval_before}
    intervals = {}
    for n, reading in enumerate(readings):
        start = FIRST + n * step
        observed[start] = Observed(targets={answering: [5, 5]})
        observed[start].kueue_evicted = {k: Decimal(v) for k, v in reading.items()}
        intervals[start] = IntervalFacts()
    measure._kueue_preemptions(intervals, observed, PLAN, FIRST)
    return [intervals[start] for start in sorted(intervals)]


def test_it_counts_each_interval_from_the_last_reading_before_it() -> None:
    research = series("research")
    facts = counted([{research: 3}, {research: 3}, {}, {research: 5}], before={research: 2})
    assert [f.kueue_preemptions for f in facts] == [{"research": 1}, {}, {}, {"research": 2}]


def test_it_counts_from_the_look_back_where_the_interval_before_holds_no_reading() -> None:
    # Kueue's scrapes failed through the interval before the batch.
    research = series("research")
    facts = counted([{research: 6}], looked_back={research: 4}, answered_before=False)
    assert facts[0].kueue_preemptions == {"research": 2} and not facts[0].kueue_unplaced


def test_it_counts_a_series_created_by_its_first_eviction_where_its_target_answered_before() -> (
    None
):
    # client_golang creates a label set's series at its first increment, at 1: no 0 before.
    facts = counted([{}, {series("research"): 1, series("vision"): 2}])
    assert facts[1].kueue_preemptions == {"research": 1, "vision": 2}
    assert "Kueue evicted 3 workload(s) to preempt them" in facts[1].warnings[0]
    assert "by cluster queue research: 1, vision: 2" in facts[1].warnings[0]
    assert 'show no "PreemptionByScheduler" reason' in facts[1].warnings[0]


def test_it_counts_a_first_eviction_after_failed_scrapes_of_a_target_that_answered_earlier() -> (
    None
):
    facts = counted([{series("research"): 3}], answered_before=False, answered_in_look_back=True)
    assert facts[0].kueue_preemptions == {"research": 3} and not facts[0].kueue_unplaced


def test_it_places_nothing_it_cannot_tell_the_time_of_and_says_so() -> None:
    # Kueue's target answered no scrape before: the series' value is what it counted since
    # Kueue started, most of it maybe before this Prometheus' oldest sample (or Kueue
    # restarted at a new address and evicted before Prometheus first scraped it).
    research = series("research")
    facts = counted([{research: 57}, {research: 58}], answered_before=False)
    assert (facts[0].kueue_preemptions, facts[0].kueue_unplaced) == ({}, 1)
    assert "first read here, at 57, from a target Prometheus holds no" in facts[0].warnings[0]
    assert facts[1].kueue_preemptions == {"research": 1} and not facts[1].kueue_unplaced


def test_it_counts_from_zero_after_kueue_restarted_in_place() -> None:
    research = series("research")
    facts = counted([{research: 9}, {research: 2}], before={research: 7})
    assert [f.kueue_preemptions for f in facts] == [{"research": 2}, {"research": 2}]


def test_it_counts_kueue_scraped_by_two_jobs_once() -> None:
    # A ServiceMonitor's job writes its own target labels, a pod-annotation job others.
    monitor = series(
        "research",
        target=("kueue-metrics", TARGET[1]),
        service="kueue-controller-manager-metrics-service",
        endpoint="https",
    )
    pods = series("research", target=("kubernetes-pods", TARGET[1]), node="cpu-node-1")
    facts = counted([{monitor: 5, pods: 5}], before={monitor: 4, pods: 4})
    assert facts[0].kueue_preemptions == {"research": 1}
    # A second job added later reads the same count: nothing more was preempted.
    facts = counted([{pods: 40, monitor: 40}], before={pods: 40})
    assert facts[0].kueue_preemptions == {}


def test_it_takes_a_count_relabelled_on_a_live_kueue_as_the_same_count() -> None:
    # A relabelling that adds a target label to every series, across a missed interval.
    high = series("research", priority_class="training-batch")
    low = series("research", priority_class="preprocessing")
    relabelled_high = series("research", priority_class="training-batch", env="prod")
    relabelled_low = series("research", priority_class="preprocessing", env="prod")
    facts = counted([{}, {relabelled_high: 501, relabelled_low: 340}], before={high: 500, low: 340})
    assert [f.kueue_preemptions for f in facts] == [{}, {"research": 1}]


def test_it_counts_a_first_eviction_after_kueue_restarted_in_place() -> None:
    # The restarted process' first eviction is of another priority class: a new count.
    old = series("research", priority_class="training-batch")
    new = series("research", priority_class="preprocessing")
    facts = counted([{new: 3}], before={old: 1})
    assert facts[0].kueue_preemptions == {"research": 3}


def test_it_counts_a_new_leader_whose_address_prometheus_scraped_before() -> None:
    # A follower is scraped through the same Service: its target answered before it led.
    leader = ("kueue", "10.96.0.51:8443")
    facts = counted([{series("research", target=leader): 1}], answering=leader)
    assert facts[0].kueue_preemptions == {"research": 1}


def test_it_keeps_the_queues_apart() -> None:
    batch = series("research", priority_class="training-batch")
    other = series("research", priority_class="preprocessing")
    vision = series("vision")
    facts = counted([{batch: 4, other: 1, vision: 2}], before={batch: 2, other: 1, vision: 2})
    assert facts[0].kueue_preemptions == {"research": 2}


def test_it_says_nothing_where_kueue_preempted_nothing() -> None:
    research = series("research")
    facts = counted([{research: 4}, {research: 4}], before={research: 4})
    assert all(not f.kueue_preemptions and not f.warnings for f in facts)


def test_it_reads_kueue_preemptions_with_the_source_matchers_over_each_interval() -> None:
    plan = sources.QueryPlan(scrape_seconds=60, step_seconds=300, matchers=(("cluster", "a"),))
    assert sources.kueue_counter_query(plan, "evicted") == (
        'last_over_time(kueue_evicted_workloads_total{reason="Preempted",cluster="a"}'
        "[299999ms] offset 1ms)"
    )
    assert sources.kueue_counter_query(plan, "admitted") == (
        'last_over_time(kueue_admission_wait_time_seconds_count{cluster="a"}[299999ms] offset 1ms)'
    )
    assert sources.kueue_before_batch_query(plan, "waited") == (
        'last_over_time(kueue_admission_wait_time_seconds_sum{cluster="a"}[86400s] offset 1ms)'
    )
    assert sources.kueue_targets_before_batch_query(plan, ["10.96.0.50:8443"]) == (
        r'max by (instance) (max_over_time(up{instance=~"10\\.96\\.0\\.50:8443",cluster="a"}'
        "[86400s] offset 1ms)) == 1"
    )


def test_it_counts_only_the_source_cluster_queues_where_it_names_them() -> None:
    source = Source(
        name="pool",
        url="http://127.0.0.1:9",
        label_mapping={"kueue_cluster_queues": "train-.*"},
    )
    plan = sources.query_plan_for(source, step_seconds=300)
    for counter in ("evicted", "admitted", "waited"):
        assert 'cluster_queue=~"train-.*"' in sources.kueue_counter_query(plan, counter)
    with pytest.raises(SourceConfigurationError, match=r"label_mapping\.kueue_cluster_queues"):
        sources.query_plan_for(
            Source(name="bad", url="http://x", label_mapping={"kueue_cluster_queues": "("}),
            step_seconds=300,
        )
