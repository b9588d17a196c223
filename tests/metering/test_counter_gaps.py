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


def test_it_names_the_targets_of_counters_that_missed_scrapes_and_their_silent_replicas() -> None:
    """A target that answered latency series in the batch, and another replica of its job
    silent through the whole batch; the kubelet's; a target of another job that answered
    nothing of these meters is none of their business."""
    now = Observed()
    now.targets = {
        ("vllm", "10.0.0.1:8000"): [5, 2],
        ("vllm", "10.0.0.2:8000"): [5, 0],  # silent through the batch: known by its job
        ("kubelet", "10.1.0.1:10250"): [5, 4],
        ("node-exporter", "10.1.0.1:9100"): [5, 0],
        ("vllm", "10.0.0.3:8000"): [5, 5],
    }
    answered = {("vllm", "10.0.0.1:8000"): {"latency"}, ("kubelet", "10.1.0.1:10250"): {"io"}}
    targets = measure._gap_targets(answered, {BEFORE: now})
    facts = measure.IntervalFacts()
    measure._gap_targets_warn(facts, now, targets)
    assert [warning.split("; ")[0] for warning in facts.warnings] == [
        'io: 1 scrape target(s) missed scrapes, e.g. job="kubelet" instance="10.1.0.1:10250"'
        " answered 4 of 5",
        'latency: 2 scrape target(s) missed scrapes, e.g. job="vllm" instance="10.0.0.1:8000"'
        " answered 2 of 5",
    ]
