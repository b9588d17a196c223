"""`usage?group_by=hour` on the nights a zone changes its clocks. Europe/Berlin falls back on
2026-10-25 (02:00-03:00 happens twice: 00:00Z in summer time, 01:00Z in winter time) and
springs forward on 2026-03-29 (02:00-03:00 never happens: 01:00Z is 03:00 CEST). Each hour
that happened is a row of its own with its own GPU-seconds, preemptions and waits."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from django.urls import reverse
from rest_framework.test import APIClient

from access.models import Role
from metering.models import UsageInterval
from tests.factories import PodWaitFactory, PreemptionFactory, RoleFactory, TaskFactory

pytestmark = pytest.mark.django_db
STEP = dt.timedelta(seconds=300)
EIGHT_GPUS = Decimal(8 * 300)  # GPU-seconds of one interval
FALL_BACK = dt.datetime(2026, 10, 24, 23, tzinfo=dt.UTC)  # 01:00 CEST
SPRING_FORWARD = dt.datetime(2026, 3, 28, 23, tzinfo=dt.UTC)  # 00:00 CET


def eight_gpus_for_four_hours(start: dt.datetime) -> None:
    """A task holding 8 GPUs through four UTC hours, and one preemption and one pod's wait in
    each of them (at :30)."""
    task = TaskFactory()
    moment, rows = start, []
    while moment < start + dt.timedelta(hours=4):
        rows.append(UsageInterval(task=task, interval_start=moment, alloc_gpu_seconds=EIGHT_GPUS))
        moment += STEP
    UsageInterval.objects.bulk_create(rows)
    for hour in range(4):
        half_past = start + dt.timedelta(hours=hour, minutes=30)
        PreemptionFactory(task=task, at=half_past)
        PodWaitFactory(task=task, created=half_past - dt.timedelta(seconds=60))


def hourly_usage(start: dt.datetime) -> list[dict]:
    client = APIClient()
    client.force_login(RoleFactory(name=Role.Name.FINANCE).user)
    end = start + dt.timedelta(hours=4)
    query = {"start": start.isoformat(), "end": end.isoformat(), "group_by": "hour"}
    body = client.get(reverse("api-usage"), query)
    assert body.status_code == 200, body.content
    return body.json()["results"]


@pytest.mark.parametrize("rollup", [True, False], ids=["rollup", "intervals"])
def test_it_reports_the_repeated_hour_twice_not_doubled(settings, rollup: bool) -> None:
    settings.TANDEM_TIMEZONE = "Europe/Berlin"
    settings.TANDEM_READ_HOURLY_ROLLUP = rollup
    eight_gpus_for_four_hours(FALL_BACK)

    rows = hourly_usage(FALL_BACK)

    # Four hours of 8 GPUs: 01:00 CEST, 02:00 CEST, 02:00 CET, 03:00 CET, 28,800 GPU-seconds
    # each (before: three rows, 02:00 CEST at 57,600 and 2 preemptions, 02:00 CET missing).
    assert [row["key"] for row in rows] == [
        "2026-10-25T01:00:00+02:00",
        "2026-10-25T02:00:00+02:00",
        "2026-10-25T02:00:00+01:00",
        "2026-10-25T03:00:00+01:00",
    ]
    assert [Decimal(row["allocated_gpu_seconds"]) for row in rows] == [EIGHT_GPUS * 12] * 4
    assert [(row["preemptions"], row["waits"]) for row in rows] == [(1, 1)] * 4


@pytest.mark.parametrize("rollup", [True, False], ids=["rollup", "intervals"])
def test_it_reports_the_hours_around_the_missing_hour_in_place(settings, rollup: bool) -> None:
    settings.TANDEM_TIMEZONE = "Europe/Berlin"
    settings.TANDEM_READ_HOURLY_ROLLUP = rollup
    eight_gpus_for_four_hours(SPRING_FORWARD)

    rows = hourly_usage(SPRING_FORWARD)

    # 02:00 never happened that night: no row for it, and nothing moved into or out of it.
    assert [row["key"] for row in rows] == [
        "2026-03-29T00:00:00+01:00",
        "2026-03-29T01:00:00+01:00",
        "2026-03-29T03:00:00+02:00",
        "2026-03-29T04:00:00+02:00",
    ]
    assert [Decimal(row["allocated_gpu_seconds"]) for row in rows] == [EIGHT_GPUS * 12] * 4
    assert [(row["preemptions"], row["waits"]) for row in rows] == [(1, 1)] * 4


def test_it_keeps_a_half_hour_zone_on_its_local_hours(settings) -> None:
    settings.TANDEM_TIMEZONE = "Asia/Kolkata"  # +05:30: local hours start at :30 UTC
    start = dt.datetime(2026, 10, 1, 3, 30, tzinfo=dt.UTC)  # 09:00 local
    eight_gpus_for_four_hours(start)

    rows = hourly_usage(start)

    assert [row["key"][11:16] for row in rows] == ["09:00", "10:00", "11:00", "12:00"]
    assert [Decimal(row["allocated_gpu_seconds"]) for row in rows] == [EIGHT_GPUS * 12] * 4
