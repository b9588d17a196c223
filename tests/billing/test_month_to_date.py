"""The month-to-date draft: the month so far priced as its close will price it, for quotas."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from django.db import connections
from django.utils import timezone

from billing import tasks
from billing.models import MonthToDateDraft, Statement
from billing.selectors import (
    BASIS_LIST_PRICE,
    BASIS_MONTH_TO_DATE,
    quota_statuses,
)
from billing.services import (
    MONTH_TO_DATE_LOCK,
    month_to_date_draft_refresh,
    period_close,
    price_book_create_draft,
    price_book_publish,
)
from metering.models import IngestWindow, Team, UsageInterval
from tests.factories import QuotaFactory, TeamFactory, UsageIntervalFactory

pytestmark = pytest.mark.django_db
UTC = dt.UTC
OCTOBER_START = dt.datetime(2026, 9, 30, 16, tzinfo=UTC)  # 1 October 00:00 Asia/Shanghai
OCTOBER_END = dt.datetime(2026, 10, 31, 16, tzinfo=UTC)
LAST_HOUR = dt.datetime(2026, 10, 31, 15, 30, tzinfo=UTC)  # 23:30 on 31 October, local


@pytest.fixture
def october(boundary_pool):
    """The small pool (its October part: 1 October 00:00 to 12:00 local), with every hour of
    October after it ingested, empty (the boundary_pool fixture's), so a close of October prices the
    same rows."""
    QuotaFactory(team=boundary_pool.teams["search"], allowance_money=Decimal("100.00"))
    return boundary_pool


def statuses_at(at: dt.datetime) -> dict:
    teams = list(Team.objects.order_by("name"))
    return {status.team: status for status in quota_statuses(at=at, teams=teams, active_only=True)}


def test_it_gives_each_team_the_total_its_statement_gets_when_the_same_data_is_closed(october):
    draft = month_to_date_draft_refresh(now=LAST_HOUR)
    statuses = statuses_at(LAST_HOUR)

    outcome = period_close(period="2026-10", now=OCTOBER_END + dt.timedelta(days=1))

    statements = Statement.objects.filter(period_close=outcome.period_close)
    closed = {s.team.name: s for s in statements.select_related("team")}
    assert draft.as_of == dt.datetime(2026, 10, 31, 15, tzinfo=UTC)  # the newest window's end
    assert draft.scenario_sha256 == outcome.period_close.scenario_sha256  # the same input
    assert sorted(closed) == ["chat", "nlp", "search", "vision"]
    for team, statement in closed.items():
        status = statuses[team]
        assert status.month_to_date_amount == statement.total, team
        assert status.month_to_date_lines == {
            line.kind: line.amount for line in statement.lines.all()
        }, team
        assert not status.month_to_date_stale
        assert status.month_to_date_as_of == draft.as_of


def test_it_includes_an_inference_teams_baseline_that_the_list_estimate_leaves_out(october):
    month_to_date_draft_refresh(now=LAST_HOUR)

    search = statuses_at(LAST_HOUR)["search"]

    assert search.month_to_date_lines["baseline"] > 0
    assert search.month_to_date_amount == sum(search.month_to_date_lines.values())
    assert search.list_price_estimate is not None
    assert search.month_to_date_amount != search.list_price_estimate
    # The money allowance is counted against what the statement will say.
    assert search.remaining_money_basis == BASIS_MONTH_TO_DATE
    assert search.remaining_money == Decimal("100.00") - search.month_to_date_amount


def test_it_lists_teams_with_usage_with_or_without_a_quota_and_no_idle_team(october):
    TeamFactory(name="idle")
    QuotaFactory(team=TeamFactory(name="capped"), allowance_gpu_hours=Decimal("5"))
    month_to_date_draft_refresh(now=LAST_HOUR)

    statuses = statuses_at(LAST_HOUR)

    assert sorted(statuses) == ["capped", "chat", "nlp", "search", "vision"]
    vision = statuses["vision"]
    assert vision.used_gpu_hours > 0 and vision.month_to_date_amount > 0
    assert (vision.allowance_gpu_hours, vision.allowance_money) == (None, None)
    assert (vision.remaining_gpu_hours, vision.remaining_money) == (None, None)
    assert vision.remaining_money_basis is None and vision.over_quota is False
    capped = statuses["capped"]
    assert capped.used_gpu_hours == 0 and capped.month_to_date_amount == Decimal("0.00")


def test_it_serves_the_last_draft_as_stale_until_a_refresh_prices_the_new_data(october):
    first = month_to_date_draft_refresh(now=LAST_HOUR)
    before = statuses_at(LAST_HOUR)["vision"]
    # Windows of October written again, with less of vision's training in them.
    UsageInterval.objects.filter(
        task=october.tasks["vit-pretrain"], interval_start__gte=OCTOBER_START
    ).update(alloc_gpu_seconds=Decimal(0))
    IngestWindow.objects.filter(start__gte=OCTOBER_START).update(updated=timezone.now())

    stale = statuses_at(LAST_HOUR)["vision"]
    refreshed = month_to_date_draft_refresh(now=LAST_HOUR)
    after = statuses_at(LAST_HOUR)["vision"]

    assert stale.month_to_date_stale and stale.month_to_date_amount == before.month_to_date_amount
    assert stale.used_gpu_hours < before.used_gpu_hours  # live figures move at once
    assert refreshed.data_version != first.data_version
    assert not after.month_to_date_stale
    assert after.month_to_date_amount < before.month_to_date_amount
    assert MonthToDateDraft.objects.filter(period="2026-10").count() == 1


def test_it_adds_what_was_ingested_after_the_drafts_end_to_the_usage_it_stored(october):
    early = dt.datetime(2026, 9, 30, 18, 30, tzinfo=UTC)  # the pool runs until 04:00 UTC
    month_to_date_draft_refresh(now=early)
    from_draft = statuses_at(LAST_HOUR)
    MonthToDateDraft.objects.all().delete()

    summed = statuses_at(LAST_HOUR)

    assert all(status.month_to_date_stale for status in from_draft.values())
    assert sorted(from_draft) == sorted(summed) == ["chat", "nlp", "search", "vision"]
    for team, status in summed.items():
        assert from_draft[team].used_gpu_hours == status.used_gpu_hours > 0, team
        assert from_draft[team].list_price_estimate == status.list_price_estimate, team


def test_it_does_nothing_when_the_data_it_priced_has_not_changed(october):
    first = month_to_date_draft_refresh(now=LAST_HOUR)
    again = month_to_date_draft_refresh(now=LAST_HOUR + dt.timedelta(minutes=10))

    assert again.computed_at == first.computed_at
    assert again.data_version == first.data_version


def test_it_prices_again_with_a_newly_published_book(october):
    first = month_to_date_draft_refresh(now=LAST_HOUR)
    before = statuses_at(LAST_HOUR)["search"]
    book = price_book_create_draft(
        effective_from=dt.date(2026, 10, 1), depreciation_per_gpu_hour="23.00"
    )
    price_book_publish(price_book_id=book.pk)

    stale = statuses_at(LAST_HOUR)["search"]
    draft = month_to_date_draft_refresh(now=LAST_HOUR)
    search = statuses_at(LAST_HOUR)["search"]

    assert stale.month_to_date_stale
    assert stale.list_price_estimate > before.list_price_estimate  # the new rates, at once
    assert (draft.price_book_version, first.price_book_version) == (book.version, 1)
    assert not search.month_to_date_stale
    assert search.month_to_date_amount > stale.month_to_date_amount


def test_it_skips_rather_than_waits_while_another_refresh_runs(october):
    other = connections.create_connection("default")
    try:
        with other.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_lock(%s)", [MONTH_TO_DATE_LOCK])

        assert month_to_date_draft_refresh(now=LAST_HOUR) is None
        assert not MonthToDateDraft.objects.exists()
    finally:
        other.close()  # ends its session, and with it the lock
    assert month_to_date_draft_refresh(now=LAST_HOUR) is not None


def test_it_stores_why_the_month_so_far_cannot_be_priced(october):
    interval = OCTOBER_START + dt.timedelta(hours=20)  # after the pool: no capacity there
    UsageIntervalFactory(task=october.tasks["llm-sft"], interval_start=interval)

    draft = month_to_date_draft_refresh(now=LAST_HOUR)
    nlp = statuses_at(LAST_HOUR)["nlp"]

    assert "the month so far cannot be priced" in draft.error
    assert "llm-sft" in draft.error and "no capacity record" in draft.error
    assert draft.teams == {}
    assert nlp.month_to_date_amount is None and nlp.month_to_date_error == draft.error
    assert nlp.list_price_estimate > 0  # the live estimate is still there


def test_it_prices_nothing_before_the_months_first_window(october):
    QuotaFactory(team=october.teams["nlp"], allowance_money=Decimal("50.00"))
    november = dt.datetime(2026, 10, 31, 17, tzinfo=UTC)  # 01:00 on 1 November, local
    IngestWindow.objects.filter(start__gte=OCTOBER_END - dt.timedelta(hours=1)).delete()

    draft = month_to_date_draft_refresh(now=november)
    nlp = statuses_at(november)["nlp"]

    assert (draft.period, draft.as_of, draft.teams, draft.error) == (
        "2026-11",
        OCTOBER_END,
        {},
        "",
    )
    assert nlp.month_to_date_amount == Decimal("0.00") and nlp.used_gpu_hours == 0
    assert nlp.remaining_money == Decimal("50.00")


def test_it_falls_back_to_the_list_estimate_while_there_is_no_draft(october):
    search = statuses_at(LAST_HOUR)["search"]

    assert search.month_to_date_amount is None and search.month_to_date_stale
    assert search.remaining_money_basis == BASIS_LIST_PRICE
    assert search.remaining_money == Decimal("100.00") - search.list_price_estimate


def test_it_refreshes_from_a_celery_task_safe_to_run_twice(october):
    run = tasks.refresh_month_to_date.apply(kwargs={"now": LAST_HOUR.isoformat()}).get
    version = run()

    assert version == MonthToDateDraft.objects.get(period="2026-10").data_version
    assert run() == version
    assert tasks.refresh_month_to_date.acks_late
