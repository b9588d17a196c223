"""Kueue's admissions and how long they waited, per interval (measure._kueue_admissions), on
hand-made observations of its histogram `kueue_admission_wait_time_seconds` (`_count` and
`_sum`): under Kueue a Job waits suspended, with no pod, until admitted, so its pods' waits
leave the queue out. tests/metering/test_kueue_pool.py meters a whole simulated pool."""

from __future__ import annotations

from decimal import Decimal

from metering import measure, sources
from metering.measure import IntervalFacts, KueueAdmissions, Observed

PLAN = sources.QueryPlan(scrape_seconds=60, step_seconds=300)
FIRST = 1_790_000_100  # a multiple of 300
TARGET = ("kueue", "10.96.0.50:8443")

Reading = dict[tuple, tuple[int, str]]  # series -> (count, sum)


def series(queue: str, priority_class: str = "training-batch", **labels: str) -> tuple:
    job, instance = TARGET
    found = {
        "job": job,
        "instance": instance,
        "cluster_queue": queue,
        "priority_class": priority_class,
        "replica_role": "leader",
    }
    return tuple(sorted({**found, **labels}.items()))


def _fill(interval: Observed, reading: Reading, *, looked_back: bool = False) -> None:
    admitted = "kueue_admitted_looked_back" if looked_back else "kueue_admitted"
    waited = "kueue_waited_looked_back" if looked_back else "kueue_waited"
    setattr(interval, admitted, {k: Decimal(count) for k, (count, _) in reading.items()})
    setattr(interval, waited, {k: Decimal(total) for k, (_, total) in reading.items()})


def admitted(
    readings: list[Reading],
    *,
    before: Reading | None = None,
    looked_back: Reading | None = None,
    answered_before: bool = True,
) -> list[IntervalFacts]:
    """Each interval's facts from Kueue's readings before the batch and in each interval."""
    step = PLAN.step_seconds
    interval_before = Observed(targets={TARGET: [5, 5 if answered_before else 0]})
    _fill(interval_before, before or {})
    _fill(interval_before, looked_back or {}, looked_back=True)
    observed = {FIRST - step: interval_before}
    intervals = {}
    for n, reading in enumerate(readings):
        start = FIRST + n * step
        observed[start] = Observed(targets={TARGET: [5, 5]})
        _fill(observed[start], reading)
        intervals[start] = IntervalFacts()
    measure._kueue_admissions(intervals, observed, PLAN, FIRST)
    return [intervals[start] for start in sorted(intervals)]


def test_it_counts_admissions_and_their_waits_from_the_last_reading_before_each_interval() -> None:
    research = series("research")
    facts = admitted(
        [{research: (3, "700.5")}, {research: (3, "700.5")}, {research: (5, "4300.25")}],
        before={research: (2, "100.5")},
    )
    assert [f.kueue_admissions for f in facts] == [
        {"training_batch": KueueAdmissions(1, Decimal("600.0"))},
        {},
        {"training_batch": KueueAdmissions(2, Decimal("3599.75"))},
    ]
    assert not any(f.warnings for f in facts)


def test_it_gives_each_admission_the_kind_of_its_priority_class() -> None:
    batch, serving = series("a"), series("b", "inference-critical")
    other = series("c", "nightly")  # a class the source does not map: training_batch
    facts = admitted(
        [{batch: (2, "20"), serving: (1, "3"), other: (4, "400")}],
        before={batch: (1, "10"), serving: (0, "0"), other: (1, "100")},
    )
    assert facts[0].kueue_admissions == {
        "inference": KueueAdmissions(1, Decimal("3")),
        "training_batch": KueueAdmissions(4, Decimal("310")),
    }
    assert facts[0].warnings == [
        'waits: Kueue admitted 3 workload(s) under priority class "nightly", which the'
        " source's priority_class_kinds does not map: their wait counts as training_batch's"
    ]


def test_it_says_which_admissions_carry_no_priority_class() -> None:
    """Kueue releases before the label write none: every wait then counts as training's."""
    research = tuple((k, v) for k, v in series("research") if k != "priority_class")
    facts = admitted([{research: (2, "20")}], before={research: (1, "10")})
    assert facts[0].kueue_admissions == {"training_batch": KueueAdmissions(1, Decimal("10"))}
    assert facts[0].warnings == [
        "waits: Kueue admitted 1 workload(s) under no priority class, which the source's"
        " priority_class_kinds does not map: their wait counts as training_batch's"
    ]


def test_it_counts_a_restarted_kueue_from_zero_for_the_count_and_the_sum_together() -> None:
    research = series("research")
    # Restarted in place: the count went down; the sum (one long wait) did not.
    facts = admitted([{research: (1, "9000")}], before={research: (5, "500")})
    assert facts[0].kueue_admissions == {"training_batch": KueueAdmissions(1, Decimal("9000"))}


def test_it_counts_a_series_created_by_its_first_admission_whole() -> None:
    research = series("research")
    facts = admitted([{}, {research: (1, "42.5")}], answered_before=True)
    assert facts[1].kueue_admissions == {"training_batch": KueueAdmissions(1, Decimal("42.5"))}


def test_it_counts_from_the_look_back_where_the_interval_before_holds_no_reading() -> None:
    research = series("research")
    facts = admitted([{research: (7, "1000")}], looked_back={research: (6, "900")})
    assert facts[0].kueue_admissions == {"training_batch": KueueAdmissions(1, Decimal("100"))}


def test_it_does_not_count_admissions_it_cannot_place_in_time_and_says_so() -> None:
    research = series("research")
    facts = admitted([{research: (40, "86400")}], answered_before=False)
    assert facts[0].kueue_admissions == {}
    (warning,) = facts[0].warnings
    assert warning.startswith("waits: Kueue's count of admissions")
    assert "40 workload(s) and 86400 s of waiting" in warning


def test_it_waits_for_both_series_of_a_count_before_reading_it() -> None:
    research = series("research")
    step = PLAN.step_seconds
    interval_before = Observed(targets={TARGET: [5, 5]})
    _fill(interval_before, {research: (1, "10")})
    half = Observed(targets={TARGET: [5, 5]})
    half.kueue_admitted = {research: Decimal(2)}  # its sum's sample was not read
    whole = Observed(targets={TARGET: [5, 5]})
    _fill(whole, {research: (3, "70")})
    observed = {FIRST - step: interval_before, FIRST: half, FIRST + step: whole}
    intervals = {FIRST: IntervalFacts(), FIRST + step: IntervalFacts()}
    measure._kueue_admissions(intervals, observed, PLAN, FIRST)
    assert intervals[FIRST].kueue_admissions == {}
    (said,) = intervals[FIRST].warnings
    assert said.startswith("waits: Kueue's count of admissions")
    assert said.endswith(
        "has no kueue_admission_wait_time_seconds_sum beside it here: its admissions are not"
        " counted until both are read"
    )
    assert intervals[FIRST + step].kueue_admissions == {
        "training_batch": KueueAdmissions(2, Decimal("60"))
    }
    assert not intervals[FIRST + step].warnings


def test_it_reads_one_count_where_two_scrape_jobs_copy_kueue() -> None:
    research = series("research")
    copy = series("research", job="kueue-copy")
    facts = admitted(
        [{research: (3, "300"), copy: (3, "300")}],
        before={research: (1, "100"), copy: (1, "100")},
    )
    assert facts[0].kueue_admissions == {"training_batch": KueueAdmissions(2, Decimal("200"))}


def test_it_reads_a_restart_its_count_climbed_back_over_by_its_sum_going_down() -> None:
    """Kueue restarted in place after two long waits and admitted three short ones before the
    next reading: the count (2 -> 3) did not go down, the sum (7,200 -> 30) did. Read from the
    count alone, the interval held one admission of -7,170 s (a review's finding)."""
    research = series("research")
    facts = admitted([{research: (3, "30")}], before={research: (2, "7200")})
    assert facts[0].kueue_admissions == {"training_batch": KueueAdmissions(3, Decimal("30"))}


def test_it_takes_one_scrape_of_two_jobs_copying_kueue_one_scrape_apart() -> None:
    """The larger count and the larger sum are both the newer scrape's: the pair stays whole."""
    research = series("research")
    copy = series("research", job="kueue-copy")
    facts = admitted(
        [{research: (3, "300"), copy: (2, "200")}],
        before={research: (1, "100"), copy: (1, "100")},
    )
    assert facts[0].kueue_admissions == {"training_batch": KueueAdmissions(2, Decimal("200"))}
