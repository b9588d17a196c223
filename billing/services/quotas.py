"""Writes for billing's quotas: a team's quota, and the month-to-date draft the export reads."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from contextlib import contextmanager
from decimal import Decimal

from django.db import connection
from django.utils import timezone

from audit.services import audit_record
from billing.models import (
    MonthToDateDraft,
    Quota,
    validate_io_caps,
)
from billing.pricing import ScenarioError
from billing.scenarios import (
    scenario_build,
    scenario_price,
)
from billing.selectors import (
    MonthToDateState,
    month_to_date_state,
    month_to_date_usage,
)
from billing.services.books import PERIOD_CLOSE_LOCK, BillingError
from billing.services.close import _metering_snapshot
from metering.models import Team

# --- Quotas ---------------------------------------------------------------------------


def quota_set(
    *,
    team: Team,
    allowance_gpu_hours: Decimal | None = None,
    allowance_money: Decimal | None = None,
    concurrent_gpu_cap: Decimal | None = None,
    io_caps: dict | None = None,
) -> Quota:
    """Create or replace a team's quota. A None allowance means "no limit of that kind"."""
    for name, value in (
        ("allowance_gpu_hours", allowance_gpu_hours),
        ("allowance_money", allowance_money),
        ("concurrent_gpu_cap", concurrent_gpu_cap),
    ):
        if value is not None and (not isinstance(value, Decimal | int) or value < 0):
            raise BillingError(f"{name} must be a non-negative Decimal, got {value!r}")
    try:
        validate_io_caps(io_caps or {})
    except ValueError as error:
        raise BillingError(str(error)) from None
    quota, created = Quota.objects.update_or_create(
        team=team,
        defaults={
            "allowance_gpu_hours": allowance_gpu_hours,
            "allowance_money": allowance_money,
            "concurrent_gpu_cap": concurrent_gpu_cap,
            "io_caps": io_caps or {},
        },
    )
    audit_record(action="create" if created else "change", obj=quota)
    return quota


# --- Month-to-date draft ----------------------------------------------------------------

# One refresh at a time; a second one (a duplicate task, beat) skips rather than waits.
MONTH_TO_DATE_LOCK = PERIOD_CLOSE_LOCK + 2


def month_to_date_draft_refresh(*, now: dt.datetime | None = None) -> MonthToDateDraft | None:
    """Price the month containing `now` so far and keep the result for the quota export.

    The scenario is built as `period_close` builds it (`scenario_build`, the book in force,
    the same engine), from the month's start to the end of the ingested data, but without
    the close's readiness checks: it prices whatever metering holds so far and stores no
    statement, only the per-team totals and lines in `MonthToDateDraft` (one row per
    period, replaced). Data the engine refuses, or no book in force, is stored as the
    draft's `error`, naming the record.

    Does nothing when the stored draft already priced today's data (same `data_version`);
    returns None without waiting when another refresh is running. A 1,000-GPU month takes
    tens of seconds: call it from a Celery task, never from a request.
    """
    now = now or timezone.now()
    state = month_to_date_state(now)
    stored = MonthToDateDraft.objects.filter(period=state.bounds.period).first()
    if stored is not None and stored.data_version == state.version:
        return stored
    with _try_lock(MONTH_TO_DATE_LOCK) as locked:
        if not locked:
            return None
        with _metering_snapshot():
            # Read the key inside the snapshot: it must name exactly the data priced.
            state = month_to_date_state(now)
            values = _month_to_date_priced(state)
            values["usage"], values["usage_key"] = month_to_date_usage(state)
        draft, _ = MonthToDateDraft.objects.update_or_create(
            period=state.bounds.period,
            defaults={"data_version": state.version, "computed_at": timezone.now(), **values},
        )
    return draft


def _month_to_date_priced(state: MonthToDateState) -> dict:
    values = {
        "as_of": state.end,
        "price_book": state.book,
        "price_book_version": state.book.version if state.book else None,
        "currency": state.book.currency if state.book else "",
        "scenario_sha256": "",
        "teams": {},
        "error": "",
    }
    if state.book is None:
        values["error"] = f"no published price book is in force on {state.bounds.first_day}"
        return values
    if state.end <= state.bounds.start:
        return values  # nothing of the month is ingested yet: nothing charged so far
    try:
        built = scenario_build(start=state.bounds.start, end=state.end, price_book=state.book)
        priced = scenario_price(built)
    except ScenarioError as error:
        values["error"] = f"the month so far cannot be priced: {error}"
        return values
    values["scenario_sha256"] = priced.sha256
    values["teams"] = {
        team.team: {
            "total": str(team.total),
            "lines": {line.kind: str(line.rounded) for line in team.lines},
        }
        for team in priced.result.teams
    }
    return values


@contextmanager
def _try_lock(key: int) -> Iterator[bool]:
    """A session advisory lock taken without waiting; yields whether it was taken."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s)", [key])
        locked = cursor.fetchone()[0]
    try:
        yield locked
    finally:
        if locked:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(%s)", [key])
