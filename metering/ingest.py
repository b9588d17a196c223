"""Metering writes, ingestion: a run of consecutive windows of one source measured from
Prometheus (metering.measure) and written (metering.writer).

A window is one metering step of one source. Ingesting it is safe to repeat: its rows are
deleted and written again in ONE transaction, so a redelivered or repeated task never double
counts, and a worker killed half-way leaves the previous content (or nothing) in place. It
never replaces a window's rows with fewer samples than they came from (a Prometheus that lost
the data) unless an operator accepts the loss, which the audit log records.

Back-fill batches consecutive windows of a source into one range query per meter part (step =
the metering step) and writes all of them in one transaction. The batch is all or nothing,
like a single window."""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import F
from django.utils import timezone

from kernel.collector import collector_paused
from metering import measure, querying, selectors, shards, sources
from metering.identity import _services_upsert, _tasks_upsert
from metering.models import (
    IngestWindow,
    Source,
)
from metering.windows import windows_fail
from metering.writer import LossAcceptance, _run_write

logger = logging.getLogger(__name__)


def window_ingest(
    *, window_id: int, shard_dispatch: Callable[[list[int]], None] | None = None
) -> IngestWindow:
    """Ingest one window (see windows_ingest)."""
    windows = windows_ingest(window_ids=[window_id], shard_dispatch=shard_dispatch)
    if not windows:
        raise IngestWindow.DoesNotExist(f"ingest window {window_id} does not exist")
    return windows[0]


def windows_ingest(
    *,
    window_ids: Sequence[int],
    accept_loss: LossAcceptance | None = None,
    shard_dispatch: Callable[[list[int]], None] | None = None,
    sharded: bool = True,
) -> list[IngestWindow]:
    """Query Prometheus for these windows and replace their rows.

    A source with `shard_node_patterns` is measured in shards (metering.shards):
    `shard_dispatch` queues them as tasks (the windows stay running until the combiner has
    written them), else they run here one after the other; `sharded=False` measures such a
    source in one piece, as any other.

    A window whose stored rows came from more samples than Prometheus now returns keeps them,
    with a warning, unless `accept_loss` (an operator's audited decision) says to replace them.
    Consecutive windows of a source share one range query per meter. Raises
    `sources.PrometheusUnavailable` (windows stay pending, with the error) so that the caller
    retries; a refused query or an unusable source marks the windows failed instead.
    """
    windows = list(
        IngestWindow.objects.select_related("source")
        .filter(pk__in=window_ids)
        .order_by("source_id", "start")
    )
    unavailable: sources.PrometheusUnavailable | None = None
    for run in _consecutive_runs(windows):
        for batch in _batches(run):
            dispatch = shard_dispatch
            if dispatch is not None and batch[-1] is not run[-1] and _unsized(batch):
                # Queued, every batch of the run would be sized before any is written: the
                # default, small and dear. Its first batch's shards run here instead, and the
                # window it writes sizes the rest (a run of one batch has no rest: queued).
                dispatch = None
            try:
                _run_ingest(batch, accept_loss, dispatch, sharded=sharded)
            except sources.PrometheusUnavailable as error:
                unavailable = error
                # The run's later batches would wait on the same Prometheus: they stay
                # pending, with the error, for the retry.
                rest = [w.pk for w in run if w.start > batch[-1].start]
                _windows_mark(rest, IngestWindow.Status.PENDING, str(error))
                break
    if unavailable is not None:
        raise unavailable
    return list(
        IngestWindow.objects.select_related("source")
        .filter(pk__in=window_ids)
        .order_by("source_id", "start")
    )


def _consecutive_runs(windows: list[IngestWindow]) -> Iterator[list[IngestWindow]]:
    step = timedelta(seconds=settings.TANDEM_STEP_SECONDS)
    run: list[IngestWindow] = []
    for window in windows:
        if run and (window.source_id != run[-1].source_id or window.start != run[-1].start + step):
            yield run
            run = []
        run.append(window)
    if run:
        yield run


def _unsized(batch: list[IngestWindow]) -> bool:
    """A batch of a source measured in shards that has no window written yet to size it."""
    source = batch[0].source
    return bool(source.shard_node_patterns) and selectors.source_gpus_latest(source=source) is None


def _batches(run: list[IngestWindow]) -> Iterator[list[IngestWindow]]:
    """The run in batches, each measured with one range query per meter and written in one
    transaction: as many windows as TANDEM_INGEST_BATCH_GPU_WINDOWS allows for the GPUs the
    source's latest ingested window expected (asked again before each batch, so the run's
    own first batch sizes the rest), TANDEM_INGEST_BATCH_WINDOWS while none has been. A
    source measured in shards is sized the same: since shards stage device meters only
    (commit 965dd8b), its combiner holds what an unsharded batch holds and one shard's staged
    observation at a time (half the budget, kept until then, made its batches shorter and
    dearer for Prometheus for little memory saved; README, "Sharded windows", measures both).
    Its first batch runs its shards in the task (`windows_ingest`), so that the rest are
    sized too.

    Fewer, longer range queries cost Prometheus less (it decodes each chunk of a series
    once per query that touches it, and a chunk holds hours of samples) and the workers
    less; the worker holds a batch's answers and facts, so their size is bounded by GPUs x
    windows, not by how many windows a task carries (beat's catch-up: 72)."""
    source = run[0].source
    default = settings.TANDEM_INGEST_BATCH_WINDOWS
    budget = settings.TANDEM_INGEST_BATCH_GPU_WINDOWS
    longest = max(1, 86_400 // settings.TANDEM_STEP_SECONDS)  # a day, one transaction
    at = 0
    while at < len(run):
        if at == len(run) - 1:  # one window (beat's newest, every step): nothing to size
            yield run[at:]
            return
        gpus = selectors.source_gpus_latest(source=source)
        size = default if gpus is None else budget // gpus
        size = min(max(1, size), longest)
        yield run[at : at + size]
        at += size


@collector_paused  # the whole batch: see its docstring
def _run_ingest(
    run: list[IngestWindow],
    accept_loss: LossAcceptance | None,
    shard_dispatch: Callable[[list[int]], None] | None = None,
    *,
    sharded: bool = True,
) -> None:
    source = run[0].source
    step = settings.TANDEM_STEP_SECONDS
    ids = [w.pk for w in run]
    for window in run:
        length = int((window.end - window.start).total_seconds())
        if length != step or window.start.timestamp() % step:
            # Measured on this step's grid, such a window would be rewritten with part of its
            # span. Failed, or, holding rows, kept with them (windows_fail): a window written
            # under another TANDEM_STEP_SECONDS never loses its rows to the new one.
            windows_fail(
                ids, f"window {window} is not one step: {length} s long, TANDEM_STEP_SECONDS {step}"
            )
            return
    IngestWindow.objects.filter(pk__in=ids).update(
        status=IngestWindow.Status.RUNNING, attempts=F("attempts") + 1, updated=timezone.now()
    )
    try:
        plan = sources.query_plan_for(source, step_seconds=step)
        if source.shard_node_patterns and sharded:
            shards.run_sharded(run, plan, accept_loss, shard_dispatch)
            return
        measured = _measure(source, plan, run[0].start, run[-1].start)
    except sources.SourceConfigurationError as error:
        windows_fail(ids, f"source {source.name}: {error}")
        return
    except sources.PrometheusUnavailable as error:
        _windows_mark(ids, IngestWindow.Status.PENDING, str(error))
        raise
    except sources.PrometheusQueryError as error:
        windows_fail(ids, str(error))
        return
    began = time.perf_counter()
    task_ids = _tasks_upsert(source, plan, measured)
    service_ids = _services_upsert(source, measured)
    usage_rows, usage_seconds = _run_write(run, measured, task_ids, service_ids, accept_loss)
    timings = {
        "windows": len(run),
        "usage_rows": usage_rows,
        "usage_copy_seconds": round(usage_seconds, 3),
        "query_seconds": round(sum(q["seconds"] for q in measured.queries), 3),
        "prometheus_seconds": round(measured.evaluation_seconds, 3),
        "write_seconds": round(time.perf_counter() - began, 3),
        "meters": _meter_costs(measured.queries),
    }
    logger.info(
        "ingested %s windows of %s from %s: %s",
        len(run),
        source,
        run[0].start,
        timings,
        extra={"timings": timings},
    )


def _meter_costs(queries: list[dict[str, Any]]) -> dict[str, list[float]]:
    """Per meter: [Prometheus evaluation seconds, samples scanned] summed over its queries."""
    costs: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    for query in queries:
        cost = costs[query["meter"]]
        cost[0] = round(cost[0] + query["evaluation_seconds"], 6)
        cost[1] += query.get("samples", 0)
    return dict(costs)


def _windows_mark(ids: list[int], status: str, error: str) -> None:
    # `updated` by hand (update() skips auto_now): windows_due tells a live retry from a lost one
    IngestWindow.objects.filter(pk__in=ids).update(
        status=status, error=error[:2000], updated=timezone.now()
    )


# --- Measuring ---------------------------------------------------------------------------


def _measure(
    source: Source, plan: sources.QueryPlan, first: datetime, last: datetime
) -> measure.Measured:
    observation = querying.observe_batch(source, plan, first, last)
    return measure.derive(observation, plan, int(first.timestamp()), int(last.timestamp()))
