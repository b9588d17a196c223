"""Factories shared by every test area (area-specific ones live in tests/<area>/factories.py).

A month closes only when each of its sources' ingest windows covers it, done and complete.
Test pools meter a day or two of a month; `windows_complete` declares the rest of the month
ingested and empty, as a real source that saw nothing there would have left it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from decimal import Decimal

from billing.selectors import period_bounds
from metering.models import IngestWindow, Source
from metering.selectors import windows_missing

HOUR = dt.timedelta(hours=1)


def windows_complete(*, periods: Iterable[str], sources: Iterable[Source] = ()) -> int:
    """Done, complete windows (an hour at most each) wherever no window of a source covers
    the months `periods` (YYYY-MM, pool time zone); every source when none is named.
    Returns how many windows it wrote."""
    source_ids = [source.pk for source in sources] or list(
        Source.objects.values_list("pk", flat=True)
    )
    windows = []
    for period in periods:
        bounds = period_bounds(period)
        for gap in windows_missing(source_ids=source_ids, start=bounds.start, end=bounds.end):
            start = gap.start
            while start < gap.end:
                end = min(gap.end, start.replace(minute=0, second=0, microsecond=0) + HOUR)
                windows.append(
                    IngestWindow(
                        source_id=gap.source_id,
                        start=start,
                        end=end,
                        status=IngestWindow.Status.DONE,
                        completeness=Decimal(1),
                        first_written=end,
                    )
                )
                start = end
    IngestWindow.objects.bulk_create(windows, batch_size=2000)
    return len(windows)
