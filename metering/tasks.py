"""Celery tasks: ingest windows. Thin: ids in, one service call, a retry policy.

Every task is safe to run twice (a window's rows are replaced in one transaction) and is
acknowledged late, so a worker that dies mid-window gets the task redelivered. While
Prometheus is unreachable or answering 5xx the task retries with exponential backoff; the
windows stay `pending` with the error, never silently empty.

Beat (CELERY_BEAT_SCHEDULE in config/settings.py): every step, ingest the newest
window that has closed for every enabled source, and catch up its missing or lost windows a
bounded batch per tick (services.windows_due_create).
"""

from __future__ import annotations

import logging
from datetime import datetime

from celery import current_app, shared_task
from django.conf import settings
from django.db import OperationalError

from metering import partitions, services, sources
from metering.models import IngestBatch, IngestShard, IngestWindow, Source

logger = logging.getLogger(__name__)

RETRY_POLICY = {
    "acks_late": True,
    "autoretry_for": (sources.PrometheusUnavailable,),
    "retry_backoff": settings.TANDEM_INGEST_RETRY_BACKOFF_SECONDS,
    "retry_backoff_max": settings.TANDEM_INGEST_RETRY_BACKOFF_MAX_SECONDS,
    "retry_jitter": True,
    # Prometheus may be down for days; a window keeps trying (every 10 minutes at most).
    "max_retries": 10_000,
}

# After new rows, billing prices the month so far again for the quota export. Queued by name
# (metering imports nothing from billing) and a little later, so that windows finishing
# together cost one refresh: a refresh whose data has not changed since does nothing.
MONTH_TO_DATE_REFRESH = "billing.tasks.refresh_month_to_date"


@shared_task(**RETRY_POLICY)
def ingest_window(window_id: int) -> str:
    """A window that no longer exists (deleted, or a stale message from another database) is
    skipped with one line in the log, not a traceback."""
    try:
        window = services.window_ingest(window_id=window_id, shard_dispatch=_shards_queue)
    except IngestWindow.DoesNotExist:
        logger.warning("ingest window %s does not exist; skipped", window_id)
        return "skipped"
    current_app.signature(MONTH_TO_DATE_REFRESH, countdown=30).apply_async()
    return window.status


@shared_task(**RETRY_POLICY)
def ingest_windows(
    window_ids: list[int], accept_loss: dict[str, str] | None = None, sharded: bool = True
) -> list[str]:
    """Consecutive windows of one source, one range query per meter (back-fill); windows
    that no longer exist are skipped with one line in the log.
    `accept_loss` ({"operator", "reason"}): replace stored rows even with fewer samples.
    A sharded source's run is queued as one task per shard unless `sharded` is false."""
    acceptance = services.LossAcceptance(**accept_loss) if accept_loss else None
    windows = services.windows_ingest(
        window_ids=window_ids,
        accept_loss=acceptance,
        shard_dispatch=_shards_queue,
        sharded=sharded,
    )
    missing = sorted(set(window_ids) - {window.pk for window in windows})
    if missing:
        logger.warning(
            "ingest windows %s do not exist; skipped", ", ".join(str(pk) for pk in missing)
        )
    current_app.signature(MONTH_TO_DATE_REFRESH, countdown=30).apply_async()
    return [window.status for window in windows]


def _shards_queue(shard_ids: list[int]) -> None:
    """A sharded run's shards, one task each (any worker), once the batch is committed."""
    for shard_id in shard_ids:
        ingest_shard.delay_on_commit(shard_id)


@shared_task(**RETRY_POLICY)
def ingest_shard(shard_id: int) -> str:
    """Measure one shard of a sharded run and stage it; the last shard staged queues the
    combiner. A shard of an attempt written or started again since is skipped."""
    try:
        batch_id = services.shard_ingest(shard_id=shard_id)
    except IngestShard.DoesNotExist:
        logger.warning("ingest shard %s does not exist; skipped", shard_id)
        return "skipped"
    if batch_id is None:
        return "staged"
    ingest_shards_combine.delay_on_commit(batch_id)
    return "staged, combining"


# The combiner asks Prometheus the follow-up queries of the whole pool: it retries as the
# shards do while Prometheus is unavailable (the batch stays staged), and on a lost database
# connection.
@shared_task(**{**RETRY_POLICY, "autoretry_for": (sources.PrometheusUnavailable, OperationalError)})
def ingest_shards_combine(batch_id: int) -> list[str] | str:
    """Write a sharded run's windows from its staged shards, in one transaction (safe to run
    twice: the batch is deleted with the write, and a second run finds nothing)."""
    try:
        windows = services.shards_combine(batch_id=batch_id)
    except IngestBatch.DoesNotExist:
        logger.warning("ingest batch %s does not exist; skipped", batch_id)
        return "skipped"
    current_app.signature(MONTH_TO_DATE_REFRESH, countdown=30).apply_async()
    return [window.status for window in windows]


@shared_task(acks_late=True)
def ingest_newest_windows(now: str | None = None) -> list[int]:
    """Queue every enabled source's newest closed window and a bounded batch of its backlog
    (missing or lost windows, oldest first); `now` (ISO) is for replaying a moment."""
    moment = datetime.fromisoformat(now) if now else None
    services.source_default_ensure()
    window_ids = []
    for source in Source.objects.filter(enabled=True):
        try:
            newest, *backlog = services.windows_due_create(source=source, now=moment)
        except services.StepChanged as error:
            # Every tick says it (the overview and the close say it too) until the setting
            # is set back; the other sources are metered meanwhile.
            logger.error("source %s not metered: %s", source.name, error)
            continue
        if newest:  # none while a coarser step's window covers it
            ingest_window.delay_on_commit(newest[0].pk)
        for batch in backlog:
            ingest_windows.delay_on_commit([window.pk for window in batch])
        window_ids += [window.pk for batch in [newest, *backlog] for window in batch]
    return window_ids


@shared_task(acks_late=True)
def partitions_create_ahead() -> list[str]:
    """Create the interval tables' partitions of this month and the months ahead that are
    missing (metering.partitions); beat runs it daily, and running it twice creates nothing."""
    return partitions.partitions_ensure()
