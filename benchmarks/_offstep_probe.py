"""What the check for windows off the metering step's grid (`metering.selectors.windows_off_step`)
costs where nothing is off it, on a year of windows: two sources at 300 s, 210,240 windows.
The overview asks it for the month on every visit (`range`), beat for each source on every
tick (`one source`). Prints the best of 7 of each. Not run by `make bench` (a probe).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/probe_offstep \\
      .venv/bin/python benchmarks/_offstep_probe.py

The scratch database is migrated and its windows written on the first run, kept after.
"""

from __future__ import annotations

import datetime as dt
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402

from metering.models import IngestWindow, Source  # noqa: E402
from metering.selectors import windows_off_step  # noqa: E402

STEP = dt.timedelta(seconds=300)
FIRST, LAST = dt.datetime(2025, 12, 1, tzinfo=dt.UTC), dt.datetime(2026, 12, 1, tzinfo=dt.UTC)
MONTH = (dt.datetime(2026, 11, 1, tzinfo=dt.UTC), LAST)


def year_of_windows() -> None:
    for name in ("a", "b"):
        source = Source.objects.create(name=name, url="http://127.0.0.1:9")
        windows, moment = [], FIRST
        while moment < LAST:
            windows.append(
                IngestWindow(source=source, start=moment, end=moment + STEP, status="done")
            )
            moment += STEP
        IngestWindow.objects.bulk_create(windows, batch_size=5000)
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE metering_ingestwindow")


def best_ms(run: Callable[[], object]) -> float:
    times = []
    for _ in range(7):
        began = time.perf_counter()
        run()
        times.append(time.perf_counter() - began)
    return min(times) * 1000


def main() -> None:
    call_command("migrate", verbosity=0)
    if not Source.objects.exists():
        year_of_windows()
    source = Source.objects.order_by("name").first()
    print(f"{IngestWindow.objects.count():,} windows")
    month = best_ms(lambda: windows_off_step(start=MONTH[0], end=MONTH[1]))
    print(f"range (a month)  {month:6.1f} ms")
    one = best_ms(lambda: windows_off_step(source_ids=[source.pk]))
    print(f"one source       {one:6.1f} ms")


if __name__ == "__main__":
    main()
