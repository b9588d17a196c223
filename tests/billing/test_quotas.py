"""Quota status: used, remaining and over-quota for the month so far, equal to a hand count."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest

from billing.selectors import quota_status, quota_statuses
from billing.services import BillingError, quota_set
from metering.models import IngestWindow
from tests.factories import (
    IngestWindowFactory,
    QuotaFactory,
    SourceFactory,
    TaskFactory,
    TeamFactory,
    UsageIntervalFactory,
)

pytestmark = pytest.mark.django_db
UTC = dt.UTC
AT = dt.datetime(2026, 10, 2, 4, 30, tzinfo=UTC)  # 12:30 on 2 October in Asia/Shanghai


@pytest.fixture
def teams(default_book):
    source = SourceFactory(name="default")
    tiny, other = TeamFactory(name="tiny"), TeamFactory(name="other")
    infer = TaskFactory(source=source, team=tiny, kind="inference", external_id="tiny-infer")
    train = TaskFactory(source=source, team=tiny, kind="training_batch", external_id="tiny-train")
    other_task = TaskFactory(source=source, team=other, kind="training_interactive")
    usage = [
        (train, dt.datetime(2026, 10, 1, 18, tzinfo=UTC), 600),  # 02:00 local: off-peak
        (train, dt.datetime(2026, 10, 2, 2, tzinfo=UTC), 600),  # 10:00 local: peak
        (infer, dt.datetime(2026, 10, 1, 18, tzinfo=UTC), 300),  # inference: always R
        (train, dt.datetime(2026, 9, 30, 15, 55, tzinfo=UTC), 900),  # 23:55 on 30 September
        (train, dt.datetime(2026, 10, 2, 4, 5, tzinfo=UTC), 900),  # after the newest window
        (other_task, dt.datetime(2026, 10, 2, 3, tzinfo=UTC), 3600),  # 11:00 local, peak
    ]
    for task, interval, alloc in usage:
        UsageIntervalFactory(task=task, interval_start=interval, alloc_gpu_seconds=alloc)
    IngestWindowFactory(
        source=source,
        start=dt.datetime(2026, 9, 30, 15, tzinfo=UTC),
        end=dt.datetime(2026, 10, 2, 4, tzinfo=UTC),
    )
    IngestWindowFactory(
        source=source,
        start=dt.datetime(2026, 10, 2, 4, tzinfo=UTC),
        end=dt.datetime(2026, 10, 2, 5, tzinfo=UTC),
        status=IngestWindow.Status.PENDING,
    )
    QuotaFactory(
        team=tiny,
        allowance_gpu_hours=Decimal("0.40"),
        allowance_money=Decimal("10.00"),
        concurrent_gpu_cap=Decimal("2"),
        io_caps={"training_batch": 1500, "inference": "250.5"},
    )
    return {"tiny": tiny, "other": other}


def test_it_counts_the_month_so_far_like_a_hand_computation(teams):
    status = quota_status(teams["tiny"], AT)

    # (600 + 600 + 300) GPU-s = 0.41666… GPU-hours; off-peak training 600 s at 12.074, the
    # rest (900 s) at 14.374: (7244.4 + 12936.6) / 3600 = 5.605833… → 5.61
    assert status.period == "2026-10"
    assert status.used_gpu_hours == Decimal("0.42")
    assert status.list_price_estimate == Decimal("5.61")
    assert status.remaining_gpu_hours == Decimal("-0.02")
    assert status.remaining_money == Decimal("4.39")
    assert status.over_quota is True
    assert status.currency == "CNY" and status.price_book_version == 1
    assert status.as_of == dt.datetime(2026, 10, 2, 4, tzinfo=UTC)
    assert status.lag_seconds == 1800
    assert status.concurrent_gpu_cap == Decimal("2")
    assert status.io_caps == {"training_batch": 1500, "inference": "250.5"}


def test_it_reports_a_team_without_quota_as_never_over(teams):
    status = quota_status(teams["other"], AT)

    assert status.used_gpu_hours == Decimal("1.00")
    assert status.list_price_estimate == Decimal("14.37")  # 3600 s at 14.374
    assert status.allowance_gpu_hours is None and status.remaining_gpu_hours is None
    assert status.over_quota is False


def test_it_lists_every_team_with_a_quota(teams):
    assert [status.team for status in quota_statuses(at=AT)] == ["tiny"]


def test_it_waits_for_the_slowest_source(teams):
    slow = SourceFactory(name="slow")
    IngestWindowFactory(
        source=slow,
        start=dt.datetime(2026, 10, 2, 0, tzinfo=UTC),
        end=dt.datetime(2026, 10, 2, 1, tzinfo=UTC),
    )

    status = quota_status(teams["tiny"], AT)

    assert status.as_of == dt.datetime(2026, 10, 2, 1, tzinfo=UTC)
    assert status.used_gpu_hours == Decimal("0.25")  # the 10:00 local row is not in yet


def test_it_sets_a_quota_and_refuses_bad_caps(teams):
    quota = quota_set(
        team=teams["other"], allowance_money=Decimal("500"), io_caps={"preprocessing": 100}
    )
    assert quota.allowance_money == Decimal("500") and quota.allowance_gpu_hours is None

    with pytest.raises(BillingError, match="io_caps: unknown task kind 'gaming'"):
        quota_set(team=teams["other"], io_caps={"gaming": 1})
    with pytest.raises(BillingError, match="allowance_gpu_hours must be a non-negative"):
        quota_set(team=teams["other"], allowance_gpu_hours=Decimal("-1"))
    with pytest.raises(BillingError, match=r"io_caps\['inference'\]: a whole number or decimal"):
        quota_set(team=teams["other"], io_caps={"inference": 1.5})
