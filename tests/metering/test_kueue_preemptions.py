"""The workloads Kueue preempted in each interval (measure._kueue_preemptions), on hand-made
observations of its counter `kueue_evicted_workloads_total{reason="Preempted"}`: Kueue stops
a workload itself, so no pod shows the preemption, and the window counts them instead.
tests/metering/test_kueue_pool.py meters a whole simulated pool end to end."""

from __future__ import annotations

from decimal import Decimal

from metering import measure, sources
from metering.measure import IntervalFacts, Observed

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
    answered_before: bool = True,
) -> list[IntervalFacts]:
    """Each interval's facts, from Kueue's readings in the interval before the batch
    (`before`, as the look-back puts them) and in each interval of the batch."""
    step = PLAN.step_seconds
    observed = {FIRST - step: Observed(targets={TARGET: [5, 5 if answered_before else 0]})}
    observed[FIRST - step].kueue_evicted = {k: Decimal(v) for k, v in (before or {}).items()}
    intervals = {}
    for n, reading in enumerate(readings):
        start = FIRST + n * step
        observed[start] = Observed(targets={TARGET: [5, 5]})
        observed[start].kueue_evicted = {k: Decimal(v) for k, v in reading.items()}
        intervals[start] = IntervalFacts()
    measure._kueue_preemptions(intervals, observed, PLAN, FIRST)
    return [intervals[start] for start in sorted(intervals)]


def test_it_counts_each_interval_from_the_last_reading_before_it() -> None:
    research = series("research")
    facts = counted([{research: 3}, {research: 3}, {}, {research: 5}], before={research: 2})
    assert [f.kueue_preemptions for f in facts] == [{"research": 1}, {}, {}, {"research": 2}]


def test_it_counts_a_series_created_by_its_first_eviction_where_its_target_answered_before() -> (
    None
):
    # client_golang creates a label set's series at its first increment, at 1: no 0 before.
    facts = counted([{}, {series("research"): 1, series("vision"): 2}])
    assert facts[1].kueue_preemptions == {"research": 1, "vision": 2}
    assert "Kueue evicted 3 workload(s) to preempt them" in facts[1].warnings[0]
    assert "by cluster queue research: 1, vision: 2" in facts[1].warnings[0]
    assert 'show no "PreemptionByScheduler" reason' in facts[1].warnings[0]


def test_it_does_not_count_what_a_series_held_before_its_prometheus_holds_anything() -> None:
    # Kueue's target was not scraped in the interval before: the series' value is what it
    # counted since Kueue started, most of it before this Prometheus' oldest sample.
    research = series("research")
    facts = counted([{research: 57}, {research: 58}], answered_before=False)
    assert facts[0].kueue_preemptions == {}
    assert "first read here, at 57, with no earlier reading" in facts[0].warnings[0]
    assert facts[1].kueue_preemptions == {"research": 1}


def test_it_counts_from_zero_after_kueue_restarted() -> None:
    research = series("research")
    facts = counted([{research: 9}, {research: 2}], before={research: 7})
    assert [f.kueue_preemptions for f in facts] == [{"research": 2}, {"research": 2}]


def test_it_adds_the_series_of_one_queue_and_keeps_the_others_apart() -> None:
    batch = series("research", priority_class="training-batch")
    other = series("research", priority_class="preprocessing")
    moved = series("research", target=("kueue", "10.96.0.51:8443"))  # a new leader's
    facts = counted(
        [{batch: 4, other: 1, moved: 1}], before={batch: 2, other: 1}, answered_before=True
    )
    # The new leader's target answered no scrape before: its first reading is not counted.
    assert facts[0].kueue_preemptions == {"research": 2}


def test_it_says_nothing_where_kueue_preempted_nothing() -> None:
    research = series("research")
    facts = counted([{research: 4}, {research: 4}], before={research: 4})
    assert all(not f.kueue_preemptions and not f.warnings for f in facts)


def test_it_reads_kueue_preemptions_with_the_source_matchers_over_each_interval() -> None:
    plan = sources.QueryPlan(scrape_seconds=60, step_seconds=300, matchers=(("cluster", "a"),))
    assert sources.kueue_preemptions_query(plan) == (
        'last_over_time(kueue_evicted_workloads_total{reason="Preempted",cluster="a"}'
        "[299999ms] offset 1ms)"
    )
    assert sources.kueue_before_batch_query(plan).endswith("[86400s] offset 1ms)")
