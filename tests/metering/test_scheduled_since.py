"""Which pods are newly scheduled in each interval of a batch (a wait each, and their details
asked), on hand-made observations: kube-state-metrics' view is compared with what it showed
last of each pod, so a view it missed makes nobody new. tests/metering/test_scrape_targets.py
meters a silent kube-state-metrics end to end."""

from __future__ import annotations

from metering import measure
from metering.measure import Observed, PodIdentity

STEP = 300
FIRST = 1_790_000_100  # the interval before the batch
STARTS = [FIRST + STEP * n for n in range(5)]


def views(*intervals: dict[str, int | None]) -> dict[int, Observed]:
    """One kube-state-metrics view per interval: pod -> scheduled time (None: pending);
    an empty dict is an interval end it missed."""
    observed = {}
    for start, pods in zip(STARTS, intervals, strict=False):
        observed[start] = Observed()
        for name, scheduled in pods.items():
            observed[start].identity["ml", name] = PodIdentity(scheduled=scheduled, from_kube=True)
    return observed


def new(observed: dict[int, Observed]) -> list[list[str]]:
    found = measure._scheduled_since(observed)
    return [sorted(pod for _, pod in found[start]) for start in sorted(found)]


def test_it_finds_pods_scheduled_since_the_last_view() -> None:
    observed = views(
        {"steady": FIRST - 900, "pending": None},
        {"steady": FIRST - 900, "pending": FIRST + 200},  # scheduled in the first interval
        {"steady": FIRST - 900, "pending": FIRST + 200, "started": FIRST + 650},
    )
    assert new(observed) == [["pending"], ["started"]]
    assert measure._newly_scheduled(observed) == {"pending", "started"}


def test_it_takes_nobody_for_new_after_a_view_kube_state_metrics_missed() -> None:
    observed = views(
        {"steady": FIRST - 900},
        {},  # kube-state-metrics missed this interval's end
        {},
        {"steady": FIRST - 900, "in-the-gap": FIRST + 400},
    )
    assert new(observed) == [[], [], ["in-the-gap"]]


def test_it_takes_a_pod_recreated_under_the_same_name_for_new() -> None:
    observed = views(
        {"web-0": FIRST - 900},
        {"web-0": FIRST + 320},  # deleted and re-created between two ends: a new scheduling
        {"web-0": FIRST + 320},
    )
    assert new(observed) == [["web-0"], []]


def test_it_takes_only_pods_scheduled_since_the_batch_for_new_when_no_view_came_before() -> None:
    observed = views(
        {},  # kube-state-metrics silent at the interval before the batch
        {"old": FIRST - 86_400, "recent": FIRST + 10},
        {"old": FIRST - 86_400, "recent": FIRST + 10},
    )
    assert new(observed) == [["recent"], []]


def test_it_counts_a_pod_seen_only_over_an_interval_once() -> None:
    observed = views({"steady": FIRST - 900}, {"steady": FIRST - 900}, {"steady": FIRST - 900})
    # Gone by the second interval's end: read from history there, then not at all.
    observed[STARTS[1]].identity["ml", "brief"] = PodIdentity(
        scheduled=FIRST + 310, from_kube=True, from_history=True
    )
    assert new(observed) == [["brief"], []]
