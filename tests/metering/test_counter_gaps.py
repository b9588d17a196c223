"""Which pods' counters resume after a gap at a batch's start (and are looked up), and which
are said to count from zero (the gap was longer than the look-up): on hand-made observations.
tests/metering/test_scrape_targets.py meters a real gap end to end."""

from __future__ import annotations

from decimal import Decimal

from metering import measure, sources
from metering.measure import Observed, PodIdentity

STEP = 300
BEFORE = 1_790_000_100  # the interval before the batch
DAY = sources.COUNTER_LOOKBACK_SECONDS


def batch(**pods: tuple[int | None, int]) -> dict[int, Observed]:
    """Three intervals (the one before and two of the batch); each pod named with (when
    kube-state-metrics says it was scheduled, or None, the interval of its first reading)."""
    observed = {BEFORE + STEP * at: Observed() for at in range(3)}
    for name, (scheduled, first) in pods.items():
        for at in range(first, 3):
            interval = observed[BEFORE + STEP * at]
            interval.io_last["ml", name]["read_operations"] = Decimal(1000 + at)
            interval.latency_last["ml", "chat", name]["+Inf"] = Decimal(50 + at)
            if scheduled is not None:
                interval.identity["ml", name] = PodIdentity(scheduled=scheduled, from_kube=True)
    return observed


def test_it_looks_up_pods_that_resume_without_having_been_scheduled_since() -> None:
    observed = batch(
        steady=(BEFORE - DAY, 0),  # read in the interval before: nothing to look up
        resumed=(BEFORE - 600, 1),  # scheduled earlier, silent in the interval before
        late=(BEFORE - 600, 2),  # silent until the batch's second interval
        started=(BEFORE + 10, 1),  # scheduled since: counts from zero
        unknown=(None, 1),  # not in kube-state-metrics: looked up
    )
    expected = {("ml", "resumed"), ("ml", "late"), ("ml", "unknown")}
    assert set(measure._counters_looked_back(observed, "io")) == expected
    assert set(measure._counters_looked_back(observed, "latency")) == expected


def test_it_says_which_pods_count_from_zero_after_more_than_the_look_up() -> None:
    observed = batch(
        long_gone=(BEFORE - DAY - 1, 1),  # silent for longer than the look-up reaches
        resumed=(BEFORE - 600, 1),  # within it: its last reading was not found either
        found=(BEFORE - DAY - 1, 2),
    )
    resumed = measure._counters_looked_back(observed, "io")
    # The look-up found the last reading of `found` (it lands on the interval before).
    observed[BEFORE].io_last["ml", "found"]["read_operations"] = Decimal(900)
    measure._counters_unfound_warn(observed, "io", resumed)
    assert [interval.warnings for interval in observed.values()] == [
        [],
        [
            "io: 1 pod(s) resumed after over 24 h without a reading, counted from zero,"
            " e.g. ml/long_gone"
        ],
        [],
    ]
