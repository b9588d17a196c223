"""The dashboards' own reads: filters from the address, time series, the cache's freshness."""

from __future__ import annotations

import datetime as dt
import re
from decimal import Decimal

import pytest
from django.urls import reverse

from dashboards import selectors
from dashboards.cache import data_fingerprint, remembered
from dashboards.filters import DateRange, parse_filters
from metering.models import IngestWindow, Task, Team, UsageInterval
from reports.health import HourProfile

ZERO = Decimal(0)


def test_it_reads_a_month_as_local_midnights_in_utc(db) -> None:
    filters = parse_filters({"month": "2026-10"}, teams=Team.objects.none())
    assert filters.errors == []
    assert filters.range == DateRange(dt.date(2026, 10, 1), dt.date(2026, 10, 31))
    # Asia/Shanghai is UTC+8: the month starts at 16:00 UTC the day before.
    assert filters.range.start == dt.datetime(2026, 9, 30, 16, tzinfo=dt.UTC)
    assert filters.range.end == dt.datetime(2026, 10, 31, 16, tzinfo=dt.UTC)
    assert filters.range.is_whole_month and filters.range.label == "October 2026"


def test_it_defaults_to_the_month_of_the_newest_data(closed_pool) -> None:
    filters = parse_filters({}, teams=Team.objects.none())
    assert filters.range == DateRange(dt.date(2026, 10, 1), dt.date(2026, 10, 31))


def test_it_averages_gpus_per_hour_by_kind(closed_pool) -> None:
    start = closed_pool.start + dt.timedelta(hours=9)  # 09:00 local: inference's daytime
    rows = selectors.pool_timeline(start=start, end=start + dt.timedelta(hours=1), bucket="hour")
    assert len(rows) == 1
    row = rows[0]
    assert row["capacity_gpus"] == Decimal(8)
    # Daytime: search-ranker 3 + speech-asr 1 inference GPUs; 1 + 1 + 1 training GPUs.
    assert row["allocated_gpus"]["inference"] == Decimal(4)
    assert row["allocated_gpus"]["training_batch"] == Decimal(2)
    assert row["allocated_gpus"]["training_interactive"] == Decimal(1)
    assert ZERO < row["busy_gpus"] < Decimal(7)


def test_it_narrows_the_timeline_to_a_team_and_kind(closed_pool) -> None:
    start = closed_pool.start + dt.timedelta(hours=9)
    rows = selectors.pool_timeline(
        start=start,
        end=start + dt.timedelta(hours=1),
        bucket="hour",
        teams=Team.objects.filter(name="vision"),
        kind="training_batch",
    )
    assert rows[0]["allocated_gpus"] == {"training_batch": Decimal(1)}
    assert rows[0]["capacity_gpus"] == Decimal(8)  # a team is read against the whole pool


def test_it_counts_missing_windows_against_completeness(closed_pool) -> None:
    day = dt.date(2026, 10, 1)
    window = IngestWindow.objects.filter(start__gte=closed_pool.start).order_by("start").first()
    window.delete()  # one hour of 24 never ingested
    rows = selectors.completeness_by_day(
        start=closed_pool.start, end=closed_pool.start + dt.timedelta(days=1)
    )
    assert rows == [{"day": day, "completeness": Decimal(23) / Decimal(24)}]


def test_it_suggests_the_hours_inference_holds_most() -> None:
    profile = [
        HourProfile(
            hour=h,
            capacity_gpu_seconds=Decimal(100),
            training_gpu_seconds=ZERO,
            inference_gpu_seconds=Decimal(50 if h >= 20 or h < 2 else 10),
        )
        for h in range(24)
    ]
    assert selectors.suggested_peak_hours(profile, length=6) == (20, 26)  # wraps past midnight
    flat = [HourProfile(h, Decimal(1), ZERO, ZERO) for h in range(24)]
    assert selectors.suggested_peak_hours(flat, length=6) is None


def test_it_draws_a_long_task_per_hour(closed_pool) -> None:
    task = Task.objects.get(external_id="vision-etl")
    per_interval = selectors.task_trajectory(task=task, step_seconds=300)
    per_hour = selectors.task_trajectory(task=task, step_seconds=300, bucket="hour")
    assert len(per_hour) < len(per_interval)
    # The same GPU-seconds either way: hours average their intervals.
    assert sum(r["alloc_gpus"] * 3600 for r in per_hour) == sum(
        r["alloc_gpus"] * 300 for r in per_interval
    )


def test_it_marks_the_intervals_a_task_was_preempted_in(closed_pool) -> None:
    task = Task.objects.get(external_id="vision-resnet-train")
    rows = selectors.task_trajectory(task=task, step_seconds=300)
    marked = [r["time"] for r in rows if r["preempted"]]
    events = sorted(task.preemptions.values_list("at", flat=True))
    assert len(marked) == len(events)
    assert all(t <= at < t + dt.timedelta(minutes=5) for t, at in zip(marked, events, strict=True))


def test_it_recomputes_a_remembered_read_once_the_data_changes(closed_pool) -> None:
    calls = []

    def compute() -> int:
        calls.append(1)
        return UsageInterval.objects.count()

    first = remembered("test_count", compute, "key")
    assert remembered("test_count", compute, "key") == first
    assert len(calls) == 1
    before = data_fingerprint()
    row = UsageInterval.objects.order_by("pk").first()
    UsageInterval.objects.create(
        task=row.task,
        interval_start=row.interval_start - dt.timedelta(days=1),
        alloc_gpu_seconds=Decimal(300),
    )
    assert data_fingerprint() != before
    assert remembered("test_count", compute, "key") == first + 1
    assert len(calls) == 2


def speech_allocated(html: str) -> str:
    match = re.search(r">speech</a></td>\s*<td class=\"num\">([^<]+)</td>", html)
    return match[1]


def test_it_sees_a_reingested_window_through_the_cache(client, people, closed_pool) -> None:
    client.force_login(people.finance)
    url = reverse("dashboards:teams") + "?month=2026-10"
    assert speech_allocated(client.get(url).content.decode()) != "0.00"
    # Re-ingesting rewrites a window's rows in place and marks the window changed.
    UsageInterval.objects.filter(
        task__team__name="speech", interval_start__gte=closed_pool.start
    ).update(alloc_gpu_seconds=Decimal(0))
    IngestWindow.objects.filter(start__gte=closed_pool.start).first().save()
    assert speech_allocated(client.get(url).content.decode()) == "0.00"


@pytest.mark.parametrize("query", ["service=abc", "service=999999"])
def test_it_names_a_bad_service_on_the_sla_page(client, people, query) -> None:
    client.force_login(people.vision_lead)
    response = client.get(f"{reverse('dashboards:sla')}?{query}")
    assert response.status_code == 400
    assert "service" in response.content.decode()
