"""Celery tasks: ingest windows. Thin: ids in, one service call, a retry policy.

Every task is safe to run twice (a window's rows are replaced in one transaction) and is
acknowledged late, so a worker that dies mid-window gets the task redelivered. While
Prometheus is unreachable or answering 5xx the task retries with exponential backoff; the
windows stay `pending` with the error, never silently empty.

Beat (add to config/settings.py, see BEAT_SCHEDULE below): every step, ingest the newest
window that has closed, for every enabled source.
"""

from __future__ import annotations

import logging

from celery import shared_task
from django.conf import settings

from metering import services, sources
from metering.models import IngestWindow, Source

logger = logging.getLogger(__name__)

RETRY_POLICY = {
    "acks_late": True,
    "autoretry_for": (sources.PrometheusUnavailable,),
    "retry_backoff": getattr(settings, "TANDEM_INGEST_RETRY_BACKOFF_SECONDS", 5),
    "retry_backoff_max": getattr(settings, "TANDEM_INGEST_RETRY_BACKOFF_MAX_SECONDS", 600),
    "retry_jitter": True,
    # Prometheus may be down for days; a window keeps trying (every 10 minutes at most).
    "max_retries": 10_000,
}

BEAT_SCHEDULE = {
    "metering-ingest-newest-windows": {
        "task": "metering.tasks.ingest_newest_windows",
        "schedule": settings.TANDEM_STEP_SECONDS,
    },
}


@shared_task(**RETRY_POLICY)
def ingest_window(window_id: int) -> str:
    """A window that no longer exists (deleted, or a stale message from another database) is
    skipped with one line in the log, not a traceback."""
    try:
        return services.window_ingest(window_id=window_id).status
    except IngestWindow.DoesNotExist:
        logger.warning("ingest window %s does not exist; skipped", window_id)
        return "skipped"


@shared_task(**RETRY_POLICY)
def ingest_windows(window_ids: list[int]) -> list[str]:
    """Consecutive windows of one source, one range query per meter (back-fill); windows
    that no longer exist are skipped with one line in the log."""
    windows = services.windows_ingest(window_ids=window_ids)
    missing = sorted(set(window_ids) - {window.pk for window in windows})
    if missing:
        logger.warning(
            "ingest windows %s do not exist; skipped", ", ".join(str(pk) for pk in missing)
        )
    return [window.status for window in windows]


@shared_task(acks_late=True)
def ingest_newest_windows() -> list[int]:
    services.source_default_ensure()
    window_ids = []
    for source in Source.objects.filter(enabled=True):
        for window in services.windows_due_create(source=source):
            ingest_window.delay_on_commit(window.pk)
            window_ids.append(window.pk)
    return window_ids
