"""Beat re-queues what a fault lost: missing windows and windows nobody has touched for long."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.test import override_settings

from metering import selectors, services, tasks
from metering.models import IngestWindow, Source

STEP = timedelta(seconds=300)
NOW = datetime(2026, 10, 5, 12, 1, 30, tzinfo=UTC)  # 12:00 closed 90 s ago, past the 60 s lag


def window_at(
    source: Source, start: datetime, status: str, touched_minutes_ago: int, completeness: str = "0"
) -> IngestWindow:
    """A window of the source as a worker left it, last touched that long before NOW."""
    made = IngestWindow.objects.create(source=source, start=start, end=start + STEP)
    IngestWindow.objects.filter(pk=made.pk).update(
        status=status,
        completeness=completeness,
        updated=NOW - timedelta(minutes=touched_minutes_ago),
    )
    return made


@pytest.mark.django_db
@override_settings(TANDEM_STEP_SECONDS=300, TANDEM_INGEST_LAG_SECONDS=60)
def test_it_queues_the_newest_window_the_gaps_and_the_stale_ones_only() -> None:
    source = Source.objects.create(name="s", url="http://127.0.0.1:9")
    first = datetime(2026, 10, 5, 10, 0, tzinfo=UTC)
    for index in range(12):  # 10:00 ... 10:55, all done
        window_at(source, first + STEP * index, "done", 60)
    stale = window_at(source, first + STEP * 12, "running", 30)  # a worker was killed on it
    window_at(source, first + STEP * 13, "pending", 1)  # retrying right now: leave it alone
    # 11:10 ... 11:50 were never created (a lost beat message, a broker restart)

    newest, *backlog = services.windows_due_create(source=source, now=NOW)

    gaps = [first + STEP * index for index in range(14, 23)]
    assert [w.start for w in newest] == [first + STEP * 23]  # 11:55, alone in its task
    assert [w.start for batch in backlog for w in batch] == [stale.start, *gaps]
    assert IngestWindow.objects.filter(source=source).count() == 24


def mark_done(window_ids: list[int]) -> None:
    """What a worker does with the queued windows (no Celery worker in these tests)."""
    IngestWindow.objects.filter(pk__in=window_ids).update(status="done", completeness=1)


@pytest.mark.django_db
@override_settings(
    TANDEM_STEP_SECONDS=300, TANDEM_INGEST_LAG_SECONDS=60, TANDEM_INGEST_CATCHUP_WINDOWS=288
)
def test_it_catches_up_a_three_day_gap_oldest_first_in_bounded_ticks() -> None:
    source = Source.objects.create(name="s", url="http://127.0.0.1:9")
    first = NOW.replace(minute=0, second=0) - timedelta(days=3)  # 2026-10-02 12:00, done
    mark_done([IngestWindow.objects.create(source=source, start=first, end=first + STEP).pk])

    queued_per_tick = []
    while selectors.windows_missing(source_ids=[source.pk], start=None, end=NOW - STEP):
        queued = tasks.ingest_newest_windows(now=NOW.isoformat())
        queued_per_tick.append(IngestWindow.objects.filter(pk__in=queued).order_by("start"))
        mark_done(queued)
        assert len(queued_per_tick) < 10, "beat does not converge"

    # Each tick: the newest window (11:55) and at most 288 of the 862 missing, oldest first.
    assert [len(windows) for windows in queued_per_tick] == [289, 289, 287]
    assert queued_per_tick[0][0].start == first + STEP
    starts = list(IngestWindow.objects.filter(source=source).values_list("start", flat=True))
    assert starts == [first + STEP * index for index in range(3 * 288)]  # one per step, to 11:55
    assert not IngestWindow.objects.filter(source=source).exclude(status="done").exists()


@pytest.mark.django_db
@override_settings(
    TANDEM_STEP_SECONDS=300, TANDEM_INGEST_LAG_SECONDS=60, TANDEM_INGEST_CATCHUP_WINDOWS=100
)
def test_it_keeps_the_backlog_in_flight_within_the_sources_cap() -> None:
    source = Source.objects.create(name="s", url="http://127.0.0.1:9", max_concurrent_queries=3)
    first = NOW.replace(minute=0, second=0) - timedelta(days=30)
    mark_done([IngestWindow.objects.create(source=source, start=first, end=first + STEP).pk])

    _, *backlog = services.windows_due_create(source=source, now=NOW)

    assert [len(batch) for batch in backlog] == [34, 34, 32]  # 100 windows, 3 tasks at most
    assert [w.start for batch in backlog for w in batch] == [
        first + STEP * index for index in range(1, 101)
    ]
    # The next tick, with those still queued: only the newest window, nothing piles up.
    later = NOW + STEP
    assert services.windows_due_create(source=source, now=later)[1:] == []
    # Once the workers are through, the tick tops the backlog up again where it stopped.
    mark_done([w.pk for batch in backlog for w in batch])
    _, *refill = services.windows_due_create(source=source, now=later)
    assert refill[0][0].start == first + STEP * 101
    assert sum(len(batch) for batch in refill) == 100 - 1  # the previous newest is in flight


@pytest.mark.django_db
@override_settings(
    TANDEM_STEP_SECONDS=300, TANDEM_INGEST_LAG_SECONDS=60, TANDEM_INGEST_CATCHUP_WINDOWS=288
)
def test_it_back_fills_a_new_source_from_its_configured_start() -> None:
    since = datetime(2026, 10, 4, 12, tzinfo=UTC)  # a day before NOW's newest window
    source = Source.objects.create(name="s", url="http://127.0.0.1:9", ingest_from=since)

    newest, *backlog = services.windows_due_create(source=source, now=NOW)

    assert newest[0].start == datetime(2026, 10, 5, 11, 55, tzinfo=UTC)
    starts = [w.start for batch in backlog for w in batch]
    assert starts == [since + STEP * index for index in range(287)]  # up to 11:50, oldest first


@pytest.mark.django_db
@override_settings(
    TANDEM_STEP_SECONDS=300, TANDEM_INGEST_LAG_SECONDS=60, TANDEM_INGEST_CATCHUP_WINDOWS=5
)
def test_it_creates_no_window_it_does_not_queue() -> None:
    source = Source.objects.create(name="s", url="http://127.0.0.1:9")
    first = datetime(2026, 10, 5, 10, 0, tzinfo=UTC)
    for index in (0, 1, 2):  # lost: running, untouched for an hour
        window_at(source, first + STEP * index, "running", 60)

    _, *backlog = services.windows_due_create(source=source, now=NOW)

    queued = [w.start for batch in backlog for w in batch]
    assert queued == [first + STEP * index for index in range(5)]  # 3 lost, 2 missing
    # 10:00 ... 10:20 and the newest, 11:55: the other missing windows wait for later ticks.
    assert IngestWindow.objects.filter(source=source).count() == 6


@pytest.mark.django_db
@override_settings(
    TANDEM_STEP_SECONDS=300, TANDEM_INGEST_LAG_SECONDS=60, TANDEM_INGEST_LATE_SECONDS=3600
)
def test_it_looks_again_at_recent_incomplete_windows_only() -> None:
    source = Source.objects.create(name="s", url="http://127.0.0.1:9")
    first = datetime(2026, 10, 5, 10, 55, tzinfo=UTC)
    # (completeness, minutes since last touched) of 10:55 ... 11:50, all done.
    done = {
        0: ("0.5", 30),  # 10:55: ended 11:00, more than the hour before NOW
        1: ("0.5", 30),  # 11:00: looked at again
        2: ("1", 30),  # complete
        3: ("0.98", 5),  # incomplete, but looked at 5 minutes ago
        4: ("0.98", 30),  # looked at again
    }
    for index in range(12):
        completeness, touched = done.get(index, ("1", 30))
        window_at(source, first + STEP * index, "done", touched, completeness)

    _, *backlog = services.windows_due_create(source=source, now=NOW)

    assert [w.start for batch in backlog for w in batch] == [first + STEP, first + STEP * 4]
    # Touched by this tick: the next one queues only its newest window.
    assert services.windows_due_create(source=source, now=NOW + STEP)[1:] == []
