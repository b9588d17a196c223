"""Celery: the beat task closes the previous month on day 1, once ingestion is complete."""

from __future__ import annotations

import datetime as dt

import pytest

from billing import tasks
from billing.models import PeriodClose
from metering.models import IngestWindow

pytestmark = pytest.mark.django_db
SEPTEMBER_END = dt.datetime(2026, 9, 30, 16, tzinfo=dt.UTC)  # 1 October 00:00 local


def run_close_previous_month(now: dt.datetime):
    return tasks.close_previous_month.apply(kwargs={"now": now.isoformat()}).get()


def test_it_closes_the_previous_month_once_its_data_is_in(boundary_pool):
    assert run_close_previous_month(SEPTEMBER_END + dt.timedelta(hours=2)) == "2026-09"
    assert PeriodClose.objects.filter(period="2026-09").exists()
    assert run_close_previous_month(SEPTEMBER_END + dt.timedelta(hours=3)) is None


def test_it_waits_for_the_ingest_lag_and_for_ingestion_to_pass_the_month_end(
    boundary_pool, settings
):
    settings.TANDEM_INGEST_LAG_SECONDS = 600

    assert run_close_previous_month(SEPTEMBER_END + dt.timedelta(minutes=5)) is None
    IngestWindow.objects.filter(end__gt=SEPTEMBER_END - dt.timedelta(hours=1)).delete()
    assert run_close_previous_month(SEPTEMBER_END + dt.timedelta(hours=2)) is None
    assert not PeriodClose.objects.exists()


def test_it_retries_later_when_a_window_of_the_month_is_not_done(boundary_pool):
    IngestWindow.objects.filter(start=boundary_pool.start).update(status="failed")

    assert run_close_previous_month(SEPTEMBER_END + dt.timedelta(hours=2)) is None
    assert not PeriodClose.objects.exists()


def test_it_closes_a_named_period_and_is_safe_to_run_twice(boundary_pool):
    assert tasks.close_period.apply(args=["2026-09"]).get() == "2026-09"
    assert tasks.close_period.apply(args=["2026-09"]).get() == "2026-09"
    assert PeriodClose.objects.count() == 1
    assert tasks.close_period.acks_late
