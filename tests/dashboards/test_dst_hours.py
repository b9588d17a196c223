"""Hourly charts on the night a zone falls back: 02:00-03:00 happens twice in Europe/Berlin
(2026-10-25, 00:00Z in summer time, 01:00Z in winter time), and each is an hour of its own."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest

from dashboards import selectors
from metering.models import CapacityInterval
from tests.factories import SourceFactory

pytestmark = pytest.mark.django_db
GPUS = Decimal(8)
STEP = dt.timedelta(seconds=300)


def eight_gpus(start: dt.datetime, end: dt.datetime) -> None:
    source = SourceFactory()
    moment, rows = start, []
    while moment < end:
        rows.append(
            CapacityInterval(
                source=source,
                interval_start=moment,
                gpus_present=GPUS,
                capacity_gpu_seconds=GPUS * 300,
            )
        )
        moment += STEP
    CapacityInterval.objects.bulk_create(rows)


@pytest.mark.parametrize("rollup", [True, False], ids=["rollup", "intervals"])
def test_it_charts_the_repeated_hour_twice_not_doubled(settings, rollup: bool) -> None:
    settings.TANDEM_TIMEZONE = "Europe/Berlin"
    settings.TANDEM_READ_HOURLY_ROLLUP = rollup
    start = dt.datetime(2026, 10, 24, 23, tzinfo=dt.UTC)  # 01:00 CEST
    end = dt.datetime(2026, 10, 25, 3, tzinfo=dt.UTC)  # 04:00 CET
    eight_gpus(start, end)

    rows = selectors.pool_timeline(start=start, end=end, bucket="hour")

    # Four hours of an 8-GPU pool: 01:00 CEST, 02:00 CEST, 02:00 CET, 03:00 CET.
    times = [row["time"].astimezone(dt.UTC) for row in rows]
    assert times == [start + dt.timedelta(hours=h) for h in range(4)]
    assert [row["capacity_gpus"] for row in rows] == [GPUS] * 4


def test_it_keeps_half_hour_zones_on_their_local_hours(settings) -> None:
    settings.TANDEM_TIMEZONE = "Asia/Kolkata"  # +05:30: local hours start at :30 UTC
    start = dt.datetime(2026, 10, 1, 3, 30, tzinfo=dt.UTC)  # 09:00 local
    end = start + dt.timedelta(hours=2)
    eight_gpus(start, end)

    rows = selectors.pool_timeline(start=start, end=end, bucket="hour")

    times = [row["time"].astimezone(dt.UTC) for row in rows]
    assert times == [start, start + dt.timedelta(hours=1)]
    assert [row["capacity_gpus"] for row in rows] == [GPUS, GPUS]
