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

from celery import shared_task
from django.db import OperationalError

from billing.services import period_close, period_close_due

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
    """Close `period` (YYYY-MM); safe to run twice (a closed month is left as it is)."""
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
    moment = dt.datetime.fromisoformat(now) if now else None
    return period_close_due(now=moment)
