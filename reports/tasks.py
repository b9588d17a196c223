"""Celery tasks for report runs: thin wrappers around reports.services.

Both are safe to run twice (acks_late): executing a done run does nothing, and the beat task
creates a period's monthly run only once (a unique constraint backs it).
"""

from __future__ import annotations

import logging

from celery import shared_task
from django.db import OperationalError

from reports import services
from reports.models import ReportRun
from reports.rows import ReportInputError

logger = logging.getLogger(__name__)


@shared_task(
    acks_late=True,
    autoretry_for=(OperationalError, OSError),
    retry_backoff=30,
    retry_backoff_max=600,
    max_retries=5,
)
def report_run_execute(run_id: int) -> str:
    """Write the files of run `run_id`. A month that is not closed fails the run, no retry.
    A run that no longer exists (deleted, or a stale message from another database) is
    skipped with one line in the log."""
    try:
        run = services.report_run_execute(run_id=run_id)
    except ReportRun.DoesNotExist:
        logger.warning("report run %s does not exist; skipped", run_id)
        return "skipped"
    except ReportInputError as error:
        return f"failed: {error}"
    return run.status


@shared_task(acks_late=True)
def report_runs_create_due() -> int | None:
    """Beat (hourly): queue last month's monthly report once its period is closed."""
    run = services.report_run_create_due()
    return None if run is None else run.pk
