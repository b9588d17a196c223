"""Which GPU-seconds count as described by kube-state-metrics (measure._identity_coverage) and
when a re-ingest loses identity (writer._identity_lost), on hand-made facts.
tests/metering/test_identity_loss.py re-ingests from real Prometheus processes."""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction

import pytest

from metering import measure, sources, writer
from metering.measure import IntervalFacts, PodIdentity

KNOWN = ("ml", "train-0")
OTHER = ("ml", "train-1")


def described(**changes: object) -> PodIdentity:
    values = {"from_kube": True, "labelled": True, "owned": True, "informed": True}
    return PodIdentity(**{**values, **changes})


def batch(*views: dict) -> dict[int, IntervalFacts]:
    """One interval per view (pod -> identity), each pod holding a GPU for 300 s."""
    intervals = {}
    for n, view in enumerate(views):
        facts = IntervalFacts(identity=dict(view))
        facts.alloc.update(dict.fromkeys((KNOWN, OTHER), Fraction(300)))
        intervals[300 * n] = facts
    return intervals


def test_it_counts_a_pod_described_in_another_interval_of_the_batch_as_described() -> None:
    # kube-state-metrics missed the first interval's end; the second describes both pods.
    intervals = batch({KNOWN: described()}, {KNOWN: described(), OTHER: described()})
    measure._identity_coverage(intervals)
    assert [(f.described_gpu_seconds, f.undescribed_gpu_seconds) for f in intervals.values()] == [
        (600, 0),
        (600, 0),
    ]
    assert all(not f.warnings for f in intervals.values())


@pytest.mark.parametrize(
    "view",
    [
        {},  # kube-state-metrics not scraped, or its series gone
        {"labelled": False},  # kube_pod_labels gone: its task and team labels unknown
        {"owned": False},  # kube_pod_owner gone: its task unknown
        {"informed": False},  # kube_pod_info gone: its kind (priority class) unknown
    ],
    ids=["nothing", "no labels", "no owner", "no info"],
)
def test_it_counts_a_pod_without_its_labels_and_owner_as_guessed(view: dict) -> None:
    other = described(**view) if view else None
    intervals = batch({KNOWN: described(), **({OTHER: other} if other else {})})
    measure._identity_coverage(intervals)
    (facts,) = intervals.values()
    assert (facts.described_gpu_seconds, facts.undescribed_gpu_seconds) == (300, 300)
    assert facts.warnings == [
        measure.UNDESCRIBED.format(count=1, seconds="300.000000", example="ml/train-1")
    ]


def stored(described_seconds: int, undescribed_seconds: int) -> dict:
    return {
        "described_gpu_seconds": Decimal(described_seconds),
        "undescribed_gpu_seconds": Decimal(undescribed_seconds),
    }


@pytest.mark.parametrize(
    ("before", "now", "lost"),
    [
        ((240, 0), (0, 240), True),  # its series gone: every pod guessed
        ((240, 0), (120, 120), True),  # one of two pods' descriptions gone
        ((480, 0), (240, 0), False),  # fewer GPU-seconds in all: a source's matchers narrowed
        ((240, 150), (240, 300), False),  # late samples of a pod never described
        ((240, 0), (240, 0), False),
    ],
)
def test_it_loses_identity_only_when_gpu_seconds_move_from_described_to_guessed(
    before: tuple[int, int], now: tuple[int, int], lost: bool
) -> None:
    coverage = writer.IdentityCoverage(described=Decimal(now[0]), undescribed=Decimal(now[1]))
    assert writer._identity_lost(stored(*before), coverage) is lost


PLAN = sources.QueryPlan(scrape_seconds=60, step_seconds=300)
TEAM = {"team_label": "red", "task_label": "etl"}


def labels_dropped(before: list[dict], now: list[dict]) -> list[str]:
    """The warnings of an interval whose GPU pods had `before` and have `now` (pod i each)."""
    earlier, observed = measure.Observed(), measure.Observed()
    facts = IntervalFacts()
    for n, (then, later) in enumerate(zip(before, now, strict=True)):
        pod = ("ml", f"train-{n}")
        earlier.identity[pod] = described(**then)
        observed.identity[pod] = described(**later)
        facts.alloc[pod] = Fraction(300)
    measure._mapping_labels_dropped(facts, observed, earlier, PLAN)
    return facts.warnings


def test_it_says_when_every_gpu_pod_loses_the_team_label_at_once() -> None:
    # kube-state-metrics restarted without label_team in its --metric-labels-allowlist.
    now = [{"task_label": "etl"}, {"task_label": "etl"}, {}]
    assert labels_dropped([TEAM, TEAM, {}], now) == [
        measure.LABEL_DROPPED.format(
            label="label_team", count=2, fallback="their team is their namespace"
        )
    ]
    assert "is label_team still in its --metric-labels-allowlist?" in measure.LABEL_DROPPED.format(
        label="label_team", count=2, fallback=""
    )


def test_it_says_when_both_labels_go_naming_each() -> None:
    warnings = labels_dropped([TEAM, TEAM], [{}, {}])
    assert [w.split(" at the interval")[0] for w in warnings] == [
        "identity: every one of the 2 GPU pod(s) that carried label_team",
        "identity: every one of the 2 GPU pod(s) that carried label_task",
    ]


def test_it_leaves_out_the_pods_it_cannot_compare_at_both_ends() -> None:
    """A pod gone by the interval's end (its labels read over the interval may be the old
    kube-state-metrics'), one whose labels were not read, and one recreated under its name do
    not hide the drop from the pods that lost the label."""
    gone = {**TEAM, "from_history": True}
    recreated = {**TEAM, "scheduled": 99}
    unread = {"labelled": False}
    now = [{"task_label": "etl"}, {"task_label": "etl"}, gone, recreated, unread]
    (warning,) = labels_dropped([TEAM] * 5, now)
    assert warning.startswith("identity: every one of the 2 GPU pod(s) that carried label_team")


def test_it_takes_two_pods_losing_a_label_for_a_warning() -> None:
    # One pod losing its team label is a relabel, not kube-state-metrics' allowlist.
    assert labels_dropped([TEAM, {}], [{"task_label": "etl"}, {}]) == []


@pytest.mark.parametrize(
    "now",
    [
        [TEAM, TEAM],  # nothing changed
        [{"team_label": "blue", "task_label": "etl"}, TEAM],  # a relabel, not a loss
        [{"task_label": "etl"}, TEAM],  # one pod relabelled to its namespace: a relabel
        [{"labelled": False}, {"labelled": False}],  # its labels unread: `_identity_coverage`
    ],
    ids=["same", "relabelled", "one of two", "labels unread"],
)
def test_it_says_nothing_unless_every_pod_lost_a_label_it_had(now: list[dict]) -> None:
    assert labels_dropped([TEAM, TEAM], now) == []
