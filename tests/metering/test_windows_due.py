"""Beat re-queues what a fault lost: missing windows and windows nobody has touched for long."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.test import override_settings

from metering import services
from metering.models import IngestWindow, Source

STEP = timedelta(seconds=300)
NOW = datetime(2026, 10, 5, 12, 1, 30, tzinfo=UTC)  # 12:00 closed 90 s ago, past the 60 s lag


@pytest.mark.django_db
@override_settings(TANDEM_STEP_SECONDS=300, TANDEM_INGEST_LAG_SECONDS=60)
def test_it_queues_the_newest_window_the_gaps_and_the_stale_ones_only() -> None:
    source = Source.objects.create(name="s", url="http://127.0.0.1:9")
    first = datetime(2026, 10, 5, 10, 0, tzinfo=UTC)

    def window(start: datetime, status: str, touched_minutes_ago: int) -> IngestWindow:
        made = IngestWindow.objects.create(source=source, start=start, end=start + STEP)
        IngestWindow.objects.filter(pk=made.pk).update(
            status=status, updated=NOW - timedelta(minutes=touched_minutes_ago)
        )
        return made

    for index in range(12):  # 10:00 ... 10:55, all done
        window(first + STEP * index, "done", 60)
    stale = window(first + STEP * 12, "running", 30)  # a worker was killed on it
    window(first + STEP * 13, "pending", 1)  # retrying right now: leave it alone
    # 11:10 ... 11:50 were never created (a lost beat message, a broker restart)

    due = services.windows_due_create(source=source, now=NOW)

    starts = [w.start for w in due]
    gaps = [first + STEP * index for index in range(14, 24)]
    assert starts == [stale.start, *gaps]
    assert IngestWindow.objects.filter(source=source).count() == 24
