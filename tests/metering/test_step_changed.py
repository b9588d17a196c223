"""TANDEM_STEP_SECONDS changed under stored windows. Before, beat created the new step's
windows over the old ones: where the step became finer (600 s to 300 s), the new 12:05-12:10
window was metered beside the old 12:00-12:10 one, and those five minutes were billed twice;
where it became coarser, the old windows were off the new grid, and an old window queued
again was marked failed and left its month unclosable. Now a coarser step's windows stay and
the finer windows start where they end; a finer step's windows, off the coarser grid, stop the
source, saying so in the log, on the overview and at the close."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

import pytest
from django.test import override_settings
from django.utils import timezone

from metering import services, tasks
from metering.models import IngestWindow, Source, UsageInterval
from metering.selectors import completeness, windows_off_step
from tests.factories import SourceFactory, TaskFactory, UsageIntervalFactory

pytestmark = pytest.mark.django_db
ELEVEN = datetime(2026, 10, 5, 11, 0, tzinfo=UTC)
NOW = datetime(2026, 10, 5, 12, 11, 30, tzinfo=UTC)  # 12:10 closed 90 s ago, past the 60 s lag


def windows_done(source: Source, *, step: int, start: datetime, end: datetime) -> list[int]:
    """The source's windows of [start, end) on `step`, done as a worker leaves them."""
    with override_settings(TANDEM_STEP_SECONDS=step):
        windows = services.windows_create(source=source, start=start, end=end)
    IngestWindow.objects.filter(pk__in=[w.pk for w in windows]).update(
        status="done", completeness=1, first_written=timezone.now()
    )
    return [w.pk for w in windows]


def spans(source: Source) -> list[tuple[str, str]]:
    return [
        (f"{start:%H:%M}", f"{end:%H:%M}")
        for start, end in IngestWindow.objects.filter(source=source)
        .order_by("start")
        .values_list("start", "end")
    ]


@override_settings(TANDEM_STEP_SECONDS=300, TANDEM_INGEST_LAG_SECONDS=60)
def test_it_starts_a_finer_step_where_the_coarser_windows_end() -> None:
    source = SourceFactory(name="pool")
    windows_done(source, step=600, start=ELEVEN, end=ELEVEN + timedelta(minutes=70))

    # 12:11:30: the newest closed 300 s window, 12:05-12:10, is the old 12:00-12:10 one's.
    newest, *backlog = services.windows_due_create(source=source, now=NOW)
    assert (newest, backlog) == ([], [])
    later = NOW + timedelta(minutes=10)
    newest, *backlog = services.windows_due_create(source=source, now=later)
    assert [(w.start, w.end) for w in newest] == [
        (ELEVEN + timedelta(minutes=75), ELEVEN + timedelta(minutes=80))
    ]
    assert [(w.start, w.end) for batch in backlog for w in batch] == [
        (ELEVEN + timedelta(minutes=70), ELEVEN + timedelta(minutes=75))
    ]
    # An operator's range across both steps: the old windows stay, whole, and are not
    # returned for measuring on the new step.
    created = services.windows_create(
        source=source, start=ELEVEN, end=ELEVEN + timedelta(minutes=80)
    )
    assert [w.start for w in created] == [
        ELEVEN + timedelta(minutes=70),
        ELEVEN + timedelta(minutes=75),
    ]
    assert spans(source) == [
        ("11:00", "11:10"), ("11:10", "11:20"), ("11:20", "11:30"), ("11:30", "11:40"),
        ("11:40", "11:50"), ("11:50", "12:00"), ("12:00", "12:10"), ("12:10", "12:15"),
        ("12:15", "12:20"),
    ]  # fmt: skip
    assert windows_off_step() == []  # a coarser step's windows lie on the finer grid
    # The usage report's completeness counts a 600 s window as two steps of 300 s.
    assert completeness(start=ELEVEN, end=ELEVEN + timedelta(minutes=70)) == 1


@override_settings(TANDEM_STEP_SECONDS=600, TANDEM_INGEST_LAG_SECONDS=60)
def test_it_meters_no_window_of_a_source_off_the_coarser_grid_and_says_why(caplog) -> None:
    old = SourceFactory(name="old")
    SourceFactory(name="fresh")
    windows_done(old, step=300, start=ELEVEN, end=ELEVEN + timedelta(minutes=65))
    before = spans(old)

    with caplog.at_level(logging.ERROR, logger="metering.tasks"):
        queued = tasks.ingest_newest_windows(now=NOW.isoformat())

    assert spans(old) == before  # nothing created beside the 300 s windows
    assert list(
        IngestWindow.objects.filter(pk__in=queued).values_list("source__name", "start")
    ) == [("fresh", ELEVEN + timedelta(minutes=60))]  # the other source is metered on
    said = (
        "source old not metered: source old holds 13 window(s) of 300 s between"
        " 2026-10-05T11:00:00Z and 2026-10-05T12:05:00Z that are off the grid of"
        " TANDEM_STEP_SECONDS 600"
    )
    assert said in caplog.text
    assert "Set TANDEM_STEP_SECONDS back to 300" in caplog.text
    with pytest.raises(services.StepChanged, match="13 window\\(s\\) of 300 s"):
        services.windows_create(source=old, start=NOW, end=NOW + timedelta(hours=1))
    assert spans(old) == before

    with override_settings(TANDEM_STEP_SECONDS=300):  # set back: metered on
        newest, *_ = services.windows_due_create(source=old, now=NOW)
    assert [(w.start, w.end) for w in newest] == [
        (ELEVEN + timedelta(minutes=65), ELEVEN + timedelta(minutes=70))
    ]


@override_settings(TANDEM_STEP_SECONDS=600)
def test_it_keeps_an_old_windows_rows_when_it_is_queued_again_on_another_step() -> None:
    """Measured on the new step's grid, the window would be rewritten with half its span."""
    source = SourceFactory(name="pool")
    ten_past = ELEVEN + timedelta(minutes=70)
    (window_id,) = windows_done(
        source, step=300, start=ten_past, end=ten_past + timedelta(minutes=5)
    )
    window = IngestWindow.objects.get(pk=window_id)
    UsageIntervalFactory(task=TaskFactory(source=source), interval_start=window.start)

    services.windows_ingest(window_ids=[window_id], sharded=False)

    window.refresh_from_db()
    assert window.status == "done"
    assert window.error == (
        "ingested again and refused, the rows stored before kept: window pool 2026-10-05"
        " 12:10-12:15 is not one step: 300 s long, TANDEM_STEP_SECONDS 600"
    )
    assert UsageInterval.objects.filter(task__source=source).count() == 1
