"""Metering writes, sources and windows: the `default` source for PROMETHEUS_URL, the
windows covering a span, and which windows beat queues (the newest closed one and a bounded
backlog of missing or lost ones)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db.models import F, Q
from django.utils import timezone

from audit.services import audit_record
from metering import selectors
from metering.models import (
    DEFAULT_LABEL_MAPPING,
    DEFAULT_PRIORITY_CLASS_KINDS,
    IngestWindow,
    Source,
)


class WindowError(ValueError):
    """A window that cannot be ingested as asked (not aligned, wrong length); names the window."""


class StepChanged(WindowError):
    """TANDEM_STEP_SECONDS is not the length of the source's stored windows (selectors.OffStep
    says why nothing is metered beside them); names the source, the lengths and the fix."""


def _step_unchanged(source: Source) -> None:
    """Refuse to create windows for a source holding windows off the present step's grid."""
    off = selectors.windows_off_step(source_ids=[source.pk])
    if off:
        raise StepChanged("; ".join(found.message for found in off))


def _one_step(step: int) -> Q:
    return Q(end=F("start") + timedelta(seconds=step))


def _untaken(source: Source, starts: list[datetime]) -> list[datetime]:
    """Those of `starts` (in order) whose step overlaps no window of another length: a coarser
    step's, kept where TANDEM_STEP_SECONDS became finer. Its span is metered; a window of
    the present step beside it would bill its GPU-seconds twice."""
    if not starts:
        return starts
    step = timedelta(seconds=settings.TANDEM_STEP_SECONDS)
    longer = list(
        IngestWindow.objects.filter(source=source, start__lt=starts[-1] + step, end__gt=starts[0])
        .exclude(_one_step(settings.TANDEM_STEP_SECONDS))
        .values_list("start", "end")
    )
    return [s for s in starts if not any(a < s + step and s < b for a, b in longer)]


def source_default_ensure() -> Source | None:
    """The `default` source for PROMETHEUS_URL, created with the default mapping if missing.

    PROMETHEUS_URL defines it: when the variable names another address (Prometheus moved, or
    the demo started its Prometheus on another free port), the source follows, and the audit
    log records the change. Its other settings (auth, mapping) stay as the admin left them."""
    url = settings.PROMETHEUS_URL
    if not url:
        return Source.objects.filter(name="default").first()
    source, created = Source.objects.get_or_create(
        name="default",
        defaults={
            "url": url,
            "scrape_interval_seconds": settings.TANDEM_SCRAPE_INTERVAL_SECONDS,
            "label_mapping": dict(DEFAULT_LABEL_MAPPING),
            "priority_class_kinds": dict(DEFAULT_PRIORITY_CLASS_KINDS),
        },
    )
    if created:
        audit_record(action="create", obj=source)
    elif source.url != url:
        changes = {"url": [source.url, url]}
        Source.objects.filter(pk=source.pk).update(url=url)
        source.url = url
        audit_record(action="change", obj=source, changes=changes)
    return source


def windows_create(*, source: Source, start: datetime, end: datetime) -> list[IngestWindow]:
    """The source's windows covering [start, end), one per step, created where missing.

    `start` is rounded down and `end` up to the step grid (UTC, aligned to the epoch). Where
    windows of a coarser step cover part of the span, theirs are left as they are (not
    returned); raises `StepChanged` where the source holds windows off this step's grid.
    """
    step = settings.TANDEM_STEP_SECONDS
    if start.tzinfo is None or end.tzinfo is None:
        raise WindowError("start and end must carry a time zone (ISO 8601 with Z or an offset)")
    _step_unchanged(source)
    first = int(start.timestamp()) // step * step
    last = -(-int(end.timestamp()) // step) * step
    if last <= first:
        raise WindowError(f"end {end.isoformat()} must be after start {start.isoformat()}")
    starts = [datetime.fromtimestamp(t, UTC) for t in range(first, last, step)]
    IngestWindow.objects.bulk_create(
        [
            IngestWindow(source=source, start=s, end=s + timedelta(seconds=step))
            for s in _untaken(source, starts)
        ],
        ignore_conflicts=True,
        batch_size=2000,
    )
    return list(
        IngestWindow.objects.filter(source=source, start__gte=starts[0], start__lte=starts[-1])
        .filter(_one_step(step))
        .order_by("start")
    )


def windows_fail(window_ids: list[int], error: str) -> None:
    """Windows whose attempt failed for good (an unusable source, a refused query): failed,
    unless they hold rows from an earlier attempt (an operator's ingest again, beat's second
    look at a short window). Those stay done with their rows and say the attempt was
    refused: a refused second attempt never takes a measured window out of a month."""
    now = timezone.now()  # `updated` by hand: update() skips auto_now
    windows = IngestWindow.objects.filter(pk__in=window_ids)
    windows.filter(first_written__isnull=False).update(
        status=IngestWindow.Status.DONE,
        error=f"ingested again and refused, the rows stored before kept: {error}"[:2000],
        updated=now,
    )
    windows.filter(first_written__isnull=True).update(
        status=IngestWindow.Status.FAILED, error=error[:2000], updated=now
    )


def window_newest_closed_create(
    *, source: Source, now: datetime | None = None
) -> IngestWindow | None:
    """The newest window whose end is older than the ingest lag (created if missing); None
    while a window of a coarser step covers it (`_untaken`)."""
    start = _newest_closed_start(now or timezone.now())
    if not _untaken(source, [start]):
        return None
    window, _ = IngestWindow.objects.get_or_create(
        source=source, start=start, end=start + timedelta(seconds=settings.TANDEM_STEP_SECONDS)
    )
    return window


def _newest_closed_start(now: datetime) -> datetime:
    step = settings.TANDEM_STEP_SECONDS
    end = (int(now.timestamp()) - settings.TANDEM_INGEST_LAG_SECONDS) // step * step
    return datetime.fromtimestamp(end - step, UTC)


def windows_due_create(*, source: Source, now: datetime | None = None) -> list[list[IngestWindow]]:
    """The windows beat should queue now, one list per task: the newest closed window alone,
    then a bounded batch of the source's backlog, in time order (lost windows first, they are
    few, then the oldest missing ones).

    The backlog is every window since the source's `ingest_from` (else its first window)
    that is missing (an outage of beat, the broker or the database, however long) or lost
    (pending or running, untouched for longer than a retry waits: a worker killed with its
    message unacknowledged, a broker restarted without persistence), and every recent window
    that came out incomplete, for a second look at samples that arrived late (`_late_windows`).
    Ingesting is idempotent, so queueing a window that was merely slow costs a query, never a
    double count.

    Bounded so that an outage of weeks never becomes thousands of tasks in one tick: at most
    TANDEM_INGEST_CATCHUP_WINDOWS backlog windows are in flight per source (those queued by
    earlier ticks and not done yet count), split into at most `max_concurrent_queries` tasks,
    the source's cap on queries in flight. Repeated ticks converge: each one tops the backlog
    in flight up again as the workers finish.

    Only windows one step long are queued (the first list is empty while a coarser step's
    window covers the newest); raises `StepChanged`, creating nothing, where the source holds
    windows off this step's grid (selectors.OffStep).
    """
    now = now or timezone.now()
    _step_unchanged(source)
    found = window_newest_closed_create(source=source, now=now)
    newest = [found] if found else []
    newest_pk = found.pk if found else None
    budget = _backlog_budget(source, newest_pk, now)
    if not budget:
        return [newest]
    lost = list(
        IngestWindow.objects.filter(
            _one_step(settings.TANDEM_STEP_SECONDS),
            source=source,
            status__in=_IN_FLIGHT,
            updated__lt=_stale_before(now),
        )
        .exclude(pk=newest_pk)
        .order_by("start")[:budget]
    )
    late = _late_windows(source, newest_pk, now, limit=budget - len(lost))
    # Only windows queued now are created: one left pending unqueued would count as in flight.
    before = found.start if found else _newest_closed_start(now)
    missing = _missing_starts(source, before=before, limit=budget - len(lost) - len(late))
    backlog = sorted([*lost, *late, *_windows_add(source, missing)], key=lambda w: w.start)
    # Touched now: until the retry horizon passes they count as in flight, not lost again.
    IngestWindow.objects.filter(pk__in=[w.pk for w in backlog]).update(updated=now)
    per_task = catchup_windows_per_task(source)
    return [newest] + [backlog[i : i + per_task] for i in range(0, len(backlog), per_task)]


def catchup_windows_per_task(source: Source) -> int:
    """The windows of a catch-up task: TANDEM_INGEST_CATCHUP_WINDOWS over the source's query
    slots (72 with the default 4). Each task measures its windows in batches sized to the
    pool (metering.ingest._batches)."""
    tasks = max(1, source.max_concurrent_queries)
    return max(1, -(-settings.TANDEM_INGEST_CATCHUP_WINDOWS // tasks))


_IN_FLIGHT = (IngestWindow.Status.PENDING, IngestWindow.Status.RUNNING)


def _stale_before(now: datetime) -> datetime:
    """A pending or running window untouched since then was lost: a live one is retried (and
    touched) at least every TANDEM_INGEST_RETRY_BACKOFF_MAX_SECONDS."""
    step = timedelta(seconds=settings.TANDEM_STEP_SECONDS)
    backoff = timedelta(seconds=settings.TANDEM_INGEST_RETRY_BACKOFF_MAX_SECONDS)
    return now - backoff - 2 * step


def _backlog_budget(source: Source, newest_pk: int | None, now: datetime) -> int:
    in_flight = (
        IngestWindow.objects.filter(
            source=source, status__in=_IN_FLIGHT, updated__gte=_stale_before(now)
        )
        .exclude(pk=newest_pk)
        .count()
    )
    return max(0, settings.TANDEM_INGEST_CATCHUP_WINDOWS - in_flight)


def _late_windows(
    source: Source, newest_pk: int | None, now: datetime, *, limit: int
) -> list[IngestWindow]:
    """Done windows below TANDEM_MIN_COMPLETENESS that ended less than
    TANDEM_INGEST_LATE_SECONDS ago, untouched for a quarter of that span: a second look at
    samples that reached Prometheus after the window was ingested (remote write catching up
    after a network cut, an agent replaying its write-ahead log after a restart). The writer
    never replaces stored rows with rows of a lower completeness, so a look that finds no
    more changes nothing. A window incomplete for good (an exporter silent) is looked at
    three times or so, one narrow query each, then left to the close."""
    if limit <= 0:
        return []
    late = timedelta(seconds=settings.TANDEM_INGEST_LATE_SECONDS)
    return list(
        IngestWindow.objects.filter(
            _one_step(settings.TANDEM_STEP_SECONDS),  # a coarser step's is not measured again
            source=source,
            status=IngestWindow.Status.DONE,
            completeness__lt=settings.TANDEM_MIN_COMPLETENESS,
            end__gte=now - late,
            updated__lt=now - late / 4,
        )
        .exclude(pk=newest_pk)
        .order_by("start")[:limit]
    )


def _missing_starts(source: Source, *, before: datetime, limit: int) -> list[datetime]:
    """The first `limit` step starts, oldest first, that no window of the source covers
    between its `ingest_from` (else its first window) and `before`; the gaps come from one
    query (see selectors.windows_missing), only the steps handed out are enumerated."""
    step = settings.TANDEM_STEP_SECONDS
    starts: list[datetime] = []
    start = source.ingest_from if source.ingest_from and source.ingest_from < before else None
    if limit <= 0:
        return starts
    for gap in selectors.windows_missing(source_ids=[source.pk], start=start, end=before):
        first = int(gap.start.timestamp()) // step * step
        for moment in range(first, int(gap.end.timestamp()), step):
            if len(starts) == limit:
                return starts
            starts.append(datetime.fromtimestamp(moment, UTC))
    return starts


def _windows_add(source: Source, starts: list[datetime]) -> list[IngestWindow]:
    if not starts:  # only the gaps: ON CONFLICT DO NOTHING would still burn an id per row
        return []
    step = timedelta(seconds=settings.TANDEM_STEP_SECONDS)
    IngestWindow.objects.bulk_create(
        [IngestWindow(source=source, start=start, end=start + step) for start in starts],
        ignore_conflicts=True,
    )  # the gaps no window covers: nothing of a coarser step overlaps them
    return list(IngestWindow.objects.filter(source=source, start__in=starts, end=F("start") + step))
