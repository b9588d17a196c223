"""The average wait with Kueue's admissions: under Kueue a Job waits suspended, with no pod,
until admitted, so a kind's wait before running is its pods' mean wait to be scheduled plus
its workloads' mean wait in Kueue's queue (health.KindWait, reports.selectors.waits)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest

from metering.models import IngestWindow
from reports import health, period_health
from reports import selectors as health_selectors
from reports.cards import health_cards
from tests.factories import (
    IngestWindowFactory,
    PodWaitFactory,
    SourceFactory,
    TaskFactory,
    TeamFactory,
)

T0 = dt.datetime(2026, 10, 5, tzinfo=dt.UTC)
HOUR = dt.timedelta(hours=1)


def admitted(workloads: int, seconds: str) -> dict:
    return {"workloads": workloads, "seconds": seconds}


def test_it_adds_a_kinds_mean_admission_wait_to_its_pods_mean_wait() -> None:
    waits = health.Waits(
        per_kind={
            "training_batch": health.MeanWait(4, Decimal(40)),  # 10 s to be scheduled
            "inference": health.MeanWait(6, Decimal(60)),
        },
        admissions={"training_batch": health.MeanWait(2, Decimal(600))},  # 300 s in the queue
    )
    inference, training = waits.kinds
    assert (training.kind, training.waits, training.mean_seconds) == (
        "training_batch",
        4,
        Decimal(310),
    )
    assert training.scheduling.mean_seconds == 10 and training.admission.mean_seconds == 300
    assert inference.mean_seconds == 10 and inference.admission.waits == 0
    # The kinds weighted by their attempts: (4 x 310 + 6 x 10) / 10.
    assert waits.overall.waits == 10
    assert waits.overall.mean_seconds == Decimal(130)


def test_it_counts_a_kind_kueue_admitted_with_no_pod_scheduled_in_the_range() -> None:
    waits = health.Waits(per_kind={}, admissions={"preprocessing": health.MeanWait(3, Decimal(90))})
    (kind,) = waits.kinds
    assert (kind.waits, kind.mean_seconds, kind.scheduling.mean_seconds) == (3, Decimal(30), None)
    assert waits.overall.mean_seconds == Decimal(30)


def test_it_keeps_the_pods_wait_alone_where_kueue_admitted_nothing() -> None:
    waits = health.Waits(per_kind={"inference": health.MeanWait(3, Decimal(10))})
    assert waits.overall == health.MeanWait(3, Decimal(10))
    assert [(k.kind, k.mean_seconds) for k in waits.kinds] == [("inference", Decimal(10) / 3)]


def test_it_turns_an_unchanged_pod_wait_worse_when_the_queue_grew() -> None:
    def numbers(queued: str) -> health.HealthNumbers:
        return health.HealthNumbers(
            utilization=health.Utilization(Decimal(1), Decimal(2)),
            services=[],
            waits=health.Waits(
                per_kind={"training_batch": health.MeanWait(10, Decimal(100))},
                admissions={"training_batch": health.MeanWait(5, Decimal(queued))},
            ),
        )

    before, after = numbers("500"), numbers("5000")
    verdict = health.verdict(before, after)
    assert verdict.wait == health.Direction.WORSE
    cards = health_cards(before=before, after=after, verdict=verdict)
    assert cards[2].shown == "16.8 min" and cards[2].shown_previous == "1.8 min"  # 1,010 s, 110 s
    assert cards[2].explanation == (
        "10 scheduling attempts, with the wait of 5 workloads Kueue admitted"
    )


@pytest.fixture
def kueue_month(db):
    """Two training pods waited 30 s and 90 s to be scheduled; Kueue admitted 3 workloads in
    two windows of the range (1,800 s of waiting), and 1 more in a window after it."""
    source = SourceFactory(name="pool")
    team = TeamFactory(name="vision")
    task = TaskFactory(team=team, kind="training_batch")
    for seconds in (30, 90):
        PodWaitFactory(task=task, created=T0, seconds=seconds)
    IngestWindowFactory(
        source=source, start=T0, kueue_admissions={"training_batch": admitted(2, "600.250000")}
    )
    IngestWindowFactory(
        source=source,
        start=T0 + HOUR,
        kueue_admissions={
            "training_batch": admitted(1, "1199.750000"),
            "inference": admitted(1, "2.000000"),
        },
    )
    IngestWindowFactory(
        source=source,
        start=T0 + 2 * HOUR,
        kueue_admissions={"training_batch": admitted(7, "99999.000000")},
    )
    # A window not done counts nothing (its rows are not the record yet).
    IngestWindowFactory(
        source=source,
        start=T0 - HOUR,
        status=IngestWindow.Status.FAILED,
        kueue_admissions={"training_batch": admitted(9, "9.000000")},
    )
    return team


def test_it_reads_kueues_admissions_of_the_done_windows_starting_in_the_range(kueue_month):
    waits = health_selectors.waits(start=T0 - HOUR, end=T0 + 2 * HOUR)
    assert waits.admissions == {
        "inference": health.MeanWait(1, Decimal(2)),
        "training_batch": health.MeanWait(3, Decimal(1800)),
    }
    training = next(k for k in waits.kinds if k.kind == "training_batch")
    assert training.mean_seconds == Decimal(60) + Decimal(600)  # 60 s scheduled, 600 s queued
    inference = next(k for k in waits.kinds if k.kind == "inference")
    assert (inference.waits, inference.mean_seconds) == (1, Decimal(2))


def test_it_leaves_kueue_out_of_a_teams_waits(kueue_month):
    """Kueue counts per cluster queue: no team's share of it can be told."""
    waits = health_selectors.waits(
        start=T0, end=T0 + 2 * HOUR, teams=type(kueue_month).objects.all()
    )
    assert waits.admissions == {}
    assert waits.overall.mean_seconds == Decimal(60)


def test_it_gives_the_reports_wait_rows_the_queue_apart(kueue_month):
    waits = health_selectors.waits(start=T0, end=T0 + 2 * HOUR)
    rows = period_health.wait_rows(waits, start=T0, end=T0 + 2 * HOUR)
    assert rows == [
        {
            "kind": "inference",
            "attempts": 0,
            "gave_up": 0,
            "average_seconds": Decimal(2),
            "admission_seconds": Decimal(2),
            "admitted": 1,
            "longest_seconds": Decimal(0),
        },
        {
            "kind": "training_batch",
            "attempts": 2,
            "gave_up": 0,
            "average_seconds": Decimal(660),
            "admission_seconds": Decimal(600),
            "admitted": 3,
            "longest_seconds": Decimal(90),
        },
    ]


def test_it_stores_the_admissions_in_a_snapshot_and_reads_old_snapshots_without(kueue_month):
    numbers = health_selectors.health_numbers(start=T0, end=T0 + 2 * HOUR)
    record = period_health._numbers_record(numbers)
    assert record["admissions"] == [
        ["inference", 1, "2.000000"],
        ["training_batch", 3, "1800.000000"],
    ]
    assert period_health._numbers_from_record(record).waits == numbers.waits
    del record["admissions"], record["admissions_unread"]  # stored before they were read
    old = period_health._numbers_from_record(record).waits
    assert old.admissions == {} and old.overall.mean_seconds == Decimal(60)
    assert old.admissions_unread  # its month's windows did not read them either


def test_it_does_not_compare_a_wait_with_kueues_queue_against_one_that_could_not_read_it():
    """The month before the deploy: its windows predate metering 0028 and show no queue where
    Kueue ran. The month after holds the same pods' waits and, now read, the queue's: nothing
    changed in the pool, and the wait read 900 times worse (a review's finding)."""
    pods = {"training_batch": health.MeanWait(waits=100, total_seconds=Decimal(200))}
    before = health.Waits(per_kind=pods, admissions_unread=True)
    after = health.Waits(
        per_kind=pods,
        admissions={"training_batch": health.MeanWait(waits=10, total_seconds=Decimal(18000))},
    )
    assert (before.overall.mean_seconds, after.overall.mean_seconds) == (2, 1802)
    assert not health.comparable_waits(before, after)

    def numbers(waits: health.Waits) -> health.HealthNumbers:
        return health.HealthNumbers(health.Utilization(Decimal(1), Decimal(2)), [], waits)

    verdict = health.verdict(numbers(before), numbers(after))
    assert verdict.wait == health.Direction.UNKNOWN
    card = health_cards(before=numbers(before), after=numbers(after), verdict=verdict)[2]
    assert card.explanation.endswith(
        "; not compared: Kueue's queue was not read in all of both periods"
    )
    # Read in both (or Kueue in neither): compared as before.
    assert health.comparable_waits(health.Waits(per_kind=pods), after)
    assert health.comparable_waits(before, health.Waits(per_kind=pods))


def test_it_says_a_range_holds_windows_written_before_kueue_was_read(kueue_month):
    assert not health_selectors.waits(start=T0, end=T0 + 2 * HOUR).admissions_unread
    IngestWindowFactory(source=IngestWindow.objects.first().source, start=T0 - 2 * HOUR)
    IngestWindow.objects.filter(start=T0 - 2 * HOUR).update(kueue_admissions=None)
    assert health_selectors.waits(start=T0 - 2 * HOUR, end=T0).admissions_unread
