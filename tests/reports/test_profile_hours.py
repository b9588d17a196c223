"""The 24-hour profile's average GPUs per hour of day (utilization page, monthly report and
its PDF): an hour's GPU-seconds over the time the range showed that hour, not over its days.

Europe/Berlin's October shows 02:00 32 times (the clocks go back on the 25th) and its March 30
times; a month whose close moved with a change of the pool's zone is 31 days and 6 hours
long. Divided by days x 3,600 s, a pool whose 8 GPUs are held all month read 8.26 GPUs at
02:00 in October and 7.74 in March.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest
from django.urls import reverse
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from billing.services import period_close
from metering.models import CapacityInterval, UsageInterval
from reports.health import hour_of_day_seconds
from reports.rows import report_page
from tests.dashboards.conftest import make_user
from tests.factories import SourceFactory, TaskFactory, TeamFactory, windows_complete

BERLIN = ZoneInfo("Europe/Berlin")
STEP = dt.timedelta(seconds=300)
GPUS = Decimal(8)


def local(*args: int, zone: ZoneInfo = BERLIN) -> dt.datetime:
    return dt.datetime(*args, tzinfo=zone).astimezone(dt.UTC)


def hours_shown(start: dt.datetime, end: dt.datetime, zone: ZoneInfo) -> list[Decimal]:
    return [Decimal(seconds) / 3600 for seconds in hour_of_day_seconds(start, end, zone, 300)]


def test_it_counts_each_hour_of_day_as_often_as_the_clock_showed_it() -> None:
    october = hours_shown(local(2026, 10, 1), local(2026, 11, 1), BERLIN)
    assert october == [31, 31, 32, *[31] * 21]  # 02:00 CEST and 02:00 CET on the 25th
    march = hours_shown(local(2026, 3, 1), local(2026, 4, 1), BERLIN)
    assert march == [31, 31, 30, *[31] * 21]  # 02:00 never showed on the 29th
    # A half-hour zone: its hours start at :30 UTC, each shown once a day.
    kolkata = ZoneInfo("Asia/Kolkata")
    assert (
        hours_shown(local(2026, 10, 1, zone=kolkata), local(2026, 11, 1, zone=kolkata), kolkata)
        == [31] * 24
    )
    # October as closed after the pool moved from Asia/Shanghai: from 30 September 18:00.
    moved = hours_shown(dt.datetime(2026, 9, 30, 16, tzinfo=dt.UTC), local(2026, 11, 1), BERLIN)
    assert moved == [31, 31, 32, *[31] * 15, *[32] * 6]
    # Part of a day: the hours still to come are not shown.
    assert hours_shown(local(2026, 10, 5), local(2026, 10, 5, 9, 30), BERLIN) == [
        *[1] * 9, Decimal("0.5"), *[0] * 14
    ]  # fmt: skip


def shown_one_by_one(start: dt.datetime, end: dt.datetime, zone: ZoneInfo, step: int) -> list[int]:
    """Each interval start's local hour read on its own: what the profile groups by."""
    seconds = [0] * 24
    moment = -(-int(start.timestamp()) // step) * step
    while moment < end.timestamp():
        seconds[dt.datetime.fromtimestamp(moment, zone).hour] += step
        moment += step
    return seconds


ZONES = ["Europe/Berlin", "Asia/Kolkata", "Australia/Lord_Howe", "America/St_Johns", "UTC"]


@hypothesis_settings(max_examples=40, deadline=None)
@given(
    zone=st.sampled_from(ZONES),
    step=st.sampled_from([60, 300, 900, 1200, 3600]),
    first=st.integers(0, 366 * 24 * 60),  # minutes into 2026
    minutes=st.integers(0, 40 * 24 * 60),
)
def test_it_counts_each_interval_by_the_local_hour_it_starts_in(zone, step, first, minutes):
    # Zones that move their clocks on the hour, on the half hour (Lord Howe), or sit half an
    # hour off UTC; ranges of any length starting anywhere in the year.
    start = dt.datetime(2026, 1, 1, tzinfo=dt.UTC) + dt.timedelta(minutes=first)
    end = start + dt.timedelta(minutes=minutes)
    expected = shown_one_by_one(start, end, ZoneInfo(zone), step)
    assert hour_of_day_seconds(start, end, ZoneInfo(zone), step) == expected


def eight_gpus_training(start: dt.datetime, end: dt.datetime) -> None:
    """A pool of 8 GPUs, all held by one training task, from `start` to `end`."""
    source = SourceFactory()
    task = TaskFactory(source=source, team=TeamFactory(name="vision"), kind="training_batch")
    starts = []
    while start < end:
        starts.append(start)
        start += STEP
    CapacityInterval.objects.bulk_create(
        CapacityInterval(
            source=source, interval_start=at, gpus_present=GPUS, capacity_gpu_seconds=GPUS * 300
        )
        for at in starts
    )
    UsageInterval.objects.bulk_create(
        UsageInterval(task=task, interval_start=at, alloc_gpu_seconds=GPUS * 300) for at in starts
    )


@pytest.mark.django_db
def test_it_charts_a_full_pool_at_its_size_on_the_night_clocks_go_back(client, settings) -> None:
    settings.TANDEM_TIMEZONE = "Europe/Berlin"
    eight_gpus_training(local(2026, 10, 24), local(2026, 10, 27))  # 73 hours, 02:00 four times
    client.force_login(make_user("finance", "finance"))

    url = reverse("dashboards:utilization")
    response = client.get(f"{url}?start=2026-10-24&end=2026-10-26&csv=profile")

    assert response.status_code == 200
    rows = list(csv.reader(io.StringIO(response.content.decode())))[1:]
    training = {row[0]: Decimal(row[2]) for row in rows}
    # Before: 02:00 read 10.67 GPUs (four hours' GPU-seconds over three days).
    assert set(training.values()) == {GPUS}, training


@pytest.mark.django_db
def test_it_reports_a_full_pool_at_its_size_in_a_month_with_a_repeated_hour(settings) -> None:
    settings.TANDEM_TIMEZONE = "Europe/Berlin"
    eight_gpus_training(local(2026, 10, 1), local(2026, 11, 1))
    windows_complete(periods=["2026-10"])
    period_close(period="2026-10", now=dt.datetime(2026, 11, 2, tzinfo=dt.UTC))

    page = report_page("2026-10")

    # Before: 8.2580645 at 02:00 (32 hours' GPU-seconds over 31 days), 8 elsewhere.
    assert {row["training_gpus"] for row in page.profile_rows} == {GPUS}
    assert {row["inference_gpus"] for row in page.profile_rows} == {Decimal(0)}
