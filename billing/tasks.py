"""Celery tasks for billing: close a month, and close the previous month once it is complete.

Beat entry for config/settings.py (the task itself decides whether anything is due, so an
hourly run closes the month on day 1 as soon as ingestion has passed the month's end):

    CELERY_BEAT_SCHEDULE = {
        "billing-close-previous-month": {
            "task": "billing.tasks.close_previous_month",
            "schedule": 3600.0,
        },
    }
"""

from __future__ import annotations

import datetime as dt
import logging

from celery import shared_task
from django.db import OperationalError

from billing.selectors import period_bounds
from billing.services import period_close, period_close_due

logger = logging.getLogger(__name__)

BEAT_SCHEDULE = {
    "billing-close-previous-month": {
        "task": "billing.tasks.close_previous_month",
        "schedule": 3600.0,
    },
}


@shared_task(
    acks_late=True,
    autoretry_for=(OperationalError,),
    retry_backoff=True,
    retry_backoff_max=600,
    max_retries=10,
)
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


@shared_task(
    acks_late=True,
    autoretry_for=(OperationalError,),
    retry_backoff=True,
    retry_backoff_max=600,
    max_retries=10,
)
def close_previous_month(now: str | None = None) -> str | None:
    """Close the month before `now` (ISO, default the current time) when it is due; returns
    the period closed, or None when nothing was due yet."""
    try:
        moment = dt.datetime.fromisoformat(now) if now else None
    except ValueError:
        logger.warning("now %r is not an ISO 8601 time; skipped", now)
        return None
    return period_close_due(now=moment)
