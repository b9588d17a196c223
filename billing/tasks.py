"""Celery tasks for billing: close a month, close the previous month once it is complete, and
price the current month so far for the quota export (the month-to-date draft).

Beat runs both (CELERY_BEAT_SCHEDULE in config/settings.py). `close_previous_month` decides
itself whether anything is due, so an hourly run closes the month on day 1 as soon as
ingestion has passed the month's end. `refresh_month_to_date` runs every step; ingestion also
queues it after every window it writes (metering/tasks.py), and beat catches what ingestion
does not announce: a newly published book, a new month, windows ingested from the command line.
"""

from __future__ import annotations

import datetime as dt
import logging

from celery import shared_task
from django.db import OperationalError

from billing.selectors import period_bounds
from billing.services import month_to_date_draft_refresh, period_close, period_close_due

logger = logging.getLogger(__name__)


# A database that is briefly away (a restart, a failover) is retried with backoff; the work
# is safe to run twice (acks_late: a worker killed mid-way leaves the message to another).
RETRY_POLICY = {
    "acks_late": True,
    "autoretry_for": (OperationalError,),
    "retry_backoff": True,
    "retry_backoff_max": 600,
    "max_retries": 10,
}


@shared_task(**RETRY_POLICY)
def close_period(period: str) -> str:
    """Close `period` (YYYY-MM); safe to run twice (a closed month is left as it is). A label
    that is no month (a stale or mistyped message) is skipped with one line in the log."""
    try:
        period_bounds(period)
    except ValueError:
        logger.warning("period %r is not a month (YYYY-MM); skipped", period)
        return "skipped"
    outcome = period_close(period=period)
    return outcome.period_close.period


@shared_task(**RETRY_POLICY)
def close_previous_month(now: str | None = None) -> str | None:
    """Close the month before `now` (ISO, default the current time) when it is due; returns
    the period closed, or None when nothing was due yet."""
    try:
        moment = dt.datetime.fromisoformat(now) if now else None
    except ValueError:
        logger.warning("now %r is not an ISO 8601 time; skipped", now)
        return None
    return period_close_due(now=moment)


@shared_task(**RETRY_POLICY)
def refresh_month_to_date(now: str | None = None) -> str | None:
    """Price the current month so far for the quota export; safe to run twice (nothing
    happens when the draft already priced today's data, or another refresh is running).
    Returns the draft's data version, or None when it skipped."""
    try:
        moment = dt.datetime.fromisoformat(now) if now else None
    except ValueError:
        logger.warning("now %r is not an ISO 8601 time; skipped", now)
        return None
    draft = month_to_date_draft_refresh(now=moment)
    return draft.data_version if draft else None
