"""Metering writes: sources, ingest windows, and the ingestion of a window from Prometheus.

A window is one metering step of one source. Ingesting it is safe to repeat: its rows are
deleted and written again in ONE transaction, so a redelivered or repeated task never double
counts, and a worker killed half-way leaves the previous content (or nothing) in place. It
never replaces a window's rows with fewer samples than they came from (a Prometheus that lost
the data) unless an operator accepts the loss, which the audit log records.

Back-fill batches consecutive windows of a source into one range query per meter (step = the
metering step) and writes all of them in one transaction: per-statement and per-commit costs,
not rows, dominate a back-fill. The batch is all or nothing, like a single window.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import time
from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from fractions import Fraction
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

from audit.services import audit_record, object_snapshot
from billing.pricing.quantile import P99, histogram_quantile
from metering import measure, selectors, sources
from metering.measure import IntervalFacts, Measured, PodIdentity, PodKey
from metering.models import (
    DEFAULT_LABEL_MAPPING,
    DEFAULT_PRIORITY_CLASS_KINDS,
    CapacityInterval,
    IngestWindow,
    LatencyInterval,
    Preemption,
    Service,
    Source,
    Task,
    Team,
)

logger = logging.getLogger(__name__)

MAX_WARNINGS_KEPT = 50
DEFAULT_KIND = "training_batch"
# First keys of PostgreSQL advisory locks: query slots per source, and one writer per window.
QUERY_SLOT_LOCK_CLASS = 0x7A6E
WINDOW_LOCK_CLASS = 0x7A6F
# A batch runs this many queries at once when the source's slots allow: Prometheus evaluates
# them on two cores while Python reads answers; two workers then fill four slots.
QUERIES_IN_FLIGHT_PER_BATCH = 2


class WindowError(ValueError):
    """A window that cannot be ingested as asked (not aligned, wrong length); names the window."""


# --- Sources and windows ---------------------------------------------------------------


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

    `start` is rounded down and `end` up to the step grid (UTC, aligned to the epoch).
    """
    step = settings.TANDEM_STEP_SECONDS
    if start.tzinfo is None or end.tzinfo is None:
        raise WindowError("start and end must carry a time zone (ISO 8601 with Z or an offset)")
    first = int(start.timestamp()) // step * step
    last = -(-int(end.timestamp()) // step) * step
    if last <= first:
        raise WindowError(f"end {end.isoformat()} must be after start {start.isoformat()}")
    starts = [datetime.fromtimestamp(t, UTC) for t in range(first, last, step)]
    IngestWindow.objects.bulk_create(
        [IngestWindow(source=source, start=s, end=s + timedelta(seconds=step)) for s in starts],
        ignore_conflicts=True,
        batch_size=2000,
    )
    return list(
        IngestWindow.objects.filter(source=source, start__gte=starts[0], start__lte=starts[-1])
        .filter(end=F("start") + timedelta(seconds=step))
        .order_by("start")
    )


def window_newest_closed_create(*, source: Source, now: datetime | None = None) -> IngestWindow:
    """The newest window whose end is older than the ingest lag (created if missing)."""
    step = settings.TANDEM_STEP_SECONDS
    now = now or timezone.now()
    lag = settings.TANDEM_INGEST_LAG_SECONDS
    end = (int(now.timestamp()) - lag) // step * step
    start = datetime.fromtimestamp(end - step, UTC)
    window, _ = IngestWindow.objects.get_or_create(
        source=source, start=start, end=start + timedelta(seconds=step)
    )
    return window


def windows_due_create(*, source: Source, now: datetime | None = None) -> list[list[IngestWindow]]:
    """The windows beat should queue now, one list per task: the newest closed window alone,
    then a bounded batch of the source's backlog, in time order (lost windows first, they are
    few, then the oldest missing ones).

    The backlog is every window since the source's `ingest_from` (else its first window)
    that is missing (an outage of beat, the broker or the database, however long) or lost
    (pending or running, untouched for longer than a retry waits: a worker killed with its
    message unacknowledged, a broker restarted without persistence). Ingesting is idempotent,
    so queueing a window that was merely slow costs a query, never a double count.

    Bounded so that an outage of weeks never becomes thousands of tasks in one tick: at most
    TANDEM_INGEST_CATCHUP_WINDOWS backlog windows are in flight per source (those queued by
    earlier ticks and not done yet count), split into at most `max_concurrent_queries` tasks,
    the source's cap on queries in flight. Repeated ticks converge: each one tops the backlog
    in flight up again as the workers finish.
    """
    now = now or timezone.now()
    newest = window_newest_closed_create(source=source, now=now)
    budget = _backlog_budget(source, newest, now)
    if not budget:
        return [[newest]]
    lost = list(
        IngestWindow.objects.filter(
            source=source, status__in=_IN_FLIGHT, updated__lt=_stale_before(now)
        )
        .exclude(pk=newest.pk)
        .order_by("start")[:budget]
    )
    # Only windows queued now are created: one left pending unqueued would count as in flight.
    missing = _missing_starts(source, before=newest.start, limit=budget - len(lost))
    backlog = sorted([*lost, *_windows_add(source, missing)], key=lambda w: w.start)
    # Touched now: until the retry horizon passes they count as in flight, not lost again.
    IngestWindow.objects.filter(pk__in=[w.pk for w in backlog]).update(updated=now)
    tasks = max(1, source.max_concurrent_queries)
    per_task = max(1, -(-settings.TANDEM_INGEST_CATCHUP_WINDOWS // tasks))
    return [[newest]] + [backlog[i : i + per_task] for i in range(0, len(backlog), per_task)]


_IN_FLIGHT = (IngestWindow.Status.PENDING, IngestWindow.Status.RUNNING)


def _stale_before(now: datetime) -> datetime:
    """A pending or running window untouched since then was lost: a live one is retried (and
    touched) at least every TANDEM_INGEST_RETRY_BACKOFF_MAX_SECONDS."""
    step = timedelta(seconds=settings.TANDEM_STEP_SECONDS)
    backoff = timedelta(seconds=settings.TANDEM_INGEST_RETRY_BACKOFF_MAX_SECONDS)
    return now - backoff - 2 * step


def _backlog_budget(source: Source, newest: IngestWindow, now: datetime) -> int:
    in_flight = (
        IngestWindow.objects.filter(
            source=source, status__in=_IN_FLIGHT, updated__gte=_stale_before(now)
        )
        .exclude(pk=newest.pk)
        .count()
    )
    return max(0, settings.TANDEM_INGEST_CATCHUP_WINDOWS - in_flight)


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
    )
    return list(IngestWindow.objects.filter(source=source, start__in=starts, end=F("start") + step))


# --- Ingestion -------------------------------------------------------------------------


def window_ingest(*, window_id: int) -> IngestWindow:
    """Ingest one window (see windows_ingest)."""
    windows = windows_ingest(window_ids=[window_id])
    if not windows:
        raise IngestWindow.DoesNotExist(f"ingest window {window_id} does not exist")
    return windows[0]


def windows_ingest(
    *, window_ids: Sequence[int], accept_loss: LossAcceptance | None = None
) -> list[IngestWindow]:
    """Query Prometheus for these windows and replace their rows.

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
        try:
            _run_ingest(run, accept_loss)
        except sources.PrometheusUnavailable as error:
            unavailable = error
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


def _run_ingest(run: list[IngestWindow], accept_loss: LossAcceptance | None) -> None:
    source = run[0].source
    step = settings.TANDEM_STEP_SECONDS
    ids = [w.pk for w in run]
    for window in run:
        if (window.end - window.start).total_seconds() != step or window.start.timestamp() % step:
            _windows_mark(ids, IngestWindow.Status.FAILED, f"window {window} is not one step")
            return
    IngestWindow.objects.filter(pk__in=ids).update(
        status=IngestWindow.Status.RUNNING, attempts=F("attempts") + 1, updated=timezone.now()
    )
    try:
        plan = sources.query_plan_for(source, step_seconds=step)
        measured = _measure(source, plan, run[0].start, run[-1].start)
    except sources.SourceConfigurationError as error:
        _windows_mark(ids, IngestWindow.Status.FAILED, f"source {source.name}: {error}")
        return
    except sources.PrometheusUnavailable as error:
        _windows_mark(ids, IngestWindow.Status.PENDING, str(error))
        raise
    except sources.PrometheusQueryError as error:
        _windows_mark(ids, IngestWindow.Status.FAILED, str(error))
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
    client = sources.PrometheusClient.for_source(source)
    try:
        # Where the server's ranges start decides the range that holds [start, end).
        plan = dataclasses.replace(plan, closed_ranges=client.ranges_closed())
        with _query_slots(source, wanted=QUERIES_IN_FLIGHT_PER_BATCH) as slots:
            return measure.measure(
                client, plan, int(first.timestamp()), int(last.timestamp()), parallel=slots
            )
    finally:
        client.close()


@contextmanager
def _query_slots(source: Source, *, wanted: int) -> Iterator[int]:
    """Hold 1..wanted of the source's `max_concurrent_queries` slots, waiting for at least
    one: the cap on queries in flight against a source, across all workers.

    PostgreSQL session advisory locks, so a worker that dies releases its slots with its
    connection.
    """
    keys = [source.pk * 1000 + slot for slot in range(max(1, source.max_concurrent_queries))]
    held: list[int] = []
    with connection.cursor() as cursor:
        while not held:
            for key in keys:
                cursor.execute("SELECT pg_try_advisory_lock(%s, %s)", [QUERY_SLOT_LOCK_CLASS, key])
                if cursor.fetchone()[0]:
                    held.append(key)
                    if len(held) == wanted:
                        break
            if not held:
                time.sleep(0.2)
    try:
        yield len(held)
    finally:
        with connection.cursor() as cursor:
            for key in held:
                cursor.execute("SELECT pg_advisory_unlock(%s, %s)", [QUERY_SLOT_LOCK_CLASS, key])


# --- Identity: pods -> tasks, teams, kinds; services ---------------------------------------


@dataclass(frozen=True)
class TaskIdentity:
    namespace: str
    external_id: str
    team: str
    kind: str
    fault_domain: str
    from_kube: bool


# A task row: (namespace, name, team). A key moved to another team gets a row of that team.
TaskRowKey = tuple[str, str, str]


def _pod_identity(measured: Measured, start: int, pod: PodKey) -> PodIdentity:
    """This interval's kube-state-metrics view of the pod, else the nearest one in the run."""
    return measured.pod_identity(start, pod)


def _task_identity(plan: sources.QueryPlan, pod: PodKey, identity: PodIdentity) -> TaskIdentity:
    namespace, pod_name = pod
    kind = plan.priority_class_kinds.get(identity.priority_class, DEFAULT_KIND)
    return TaskIdentity(
        namespace=namespace,
        external_id=identity.task_label or identity.owner_name or pod_name,
        team=identity.team_label or namespace,
        kind=kind,
        fault_domain=identity.node,
        from_kube=identity.from_kube,
    )


def _active_pods(facts: IntervalFacts) -> set[PodKey]:
    return (
        set(facts.alloc)
        | set(facts.busy)
        | set(facts.memory_peak)
        | set(facts.io)
        | set(facts.waits)
        | {pod for pod, event in facts.preemptions.items() if "at" in event}
    )


def _tasks_upsert(
    source: Source, plan: sources.QueryPlan, measured: Measured
) -> dict[tuple[int, PodKey], int]:
    """Create or update every task active in the run; returns (interval, pod) -> task pk.

    Each interval goes to the row of the team its pod had in that interval, so a relabel
    moves only the intervals from the relabel on (see `Task`).
    """
    step = plan.step_seconds
    seen: dict[tuple[int, PodKey], tuple[TaskIdentity, PodIdentity]] = {}
    # A pod is the same task interval after interval: its identity is derived once per view.
    derived: dict[tuple, TaskIdentity] = {}
    for start, facts in measured.intervals.items():
        for pod in _active_pods(facts):
            identity = measured.pod_identity(start, pod)
            view = (
                pod,
                identity.task_label,
                identity.owner_name,
                identity.team_label,
                identity.priority_class,
                identity.node,
                identity.from_kube,
            )
            task = derived.get(view)
            if task is None:
                task = derived[view] = _task_identity(plan, pod, identity)
            seen[(start, pod)] = (task, identity)
    if not seen:
        return {}
    teams = _teams_without_kube(source, seen)
    merged: dict[TaskRowKey, dict[str, Any]] = {}
    pod_tasks: dict[tuple[int, PodKey], TaskRowKey] = {}
    for (start, pod), (task, identity) in sorted(seen.items()):
        key = (task.namespace, task.external_id, teams.get((start, pod), task.team))
        pod_tasks[(start, pod)] = key
        row = merged.get(key)
        if row is None or (task.from_kube and not row["from_kube"]):
            row = merged[key] = {
                **task.__dict__,
                "team": key[2],
                "first_seen": start,
                "last_seen": start,
                "created": None,
                "first_started": None,
                "ended": None,
            }
        row["first_seen"] = min(row["first_seen"], start)
        row["last_seen"] = max(row["last_seen"], start)
        row["created"] = _least(row["created"], identity.created)
        row["first_started"] = _least(row["first_started"], identity.scheduled)
        if identity.ended:
            row["ended"] = max(row["ended"] or 0, start + step)
    team_ids = _teams_upsert({row["team"] for row in merged.values()}, source=source)
    _legacy_tasks_adopt(source, merged, team_ids)
    pks, inserted = _task_rows_upsert(source, merged, team_ids)
    _relabels_audit(source, inserted)
    return {key: pks[row_key] for key, row_key in pod_tasks.items()}


def _teams_without_kube(
    source: Source, seen: dict[tuple[int, PodKey], tuple[TaskIdentity, PodIdentity]]
) -> dict[tuple[int, PodKey], str]:
    """The team of pods that kube-state-metrics never described in the run (their team would
    only be a guess from the namespace): the team the same task had in this run's nearest
    interval, else its most recently metered row's, else none (the namespace applies)."""
    guessed = [(start, pod, task) for (start, pod), (task, _) in seen.items() if not task.from_kube]
    if not guessed:
        return {}
    known: dict[tuple[str, str], list[tuple[int, str]]] = defaultdict(list)
    for (start, _), (task, _) in seen.items():
        if task.from_kube:
            known[(task.namespace, task.external_id)].append((start, task.team))
    stored: dict[tuple[str, str], str] = {}
    names = {(task.namespace, task.external_id) for _, _, task in guessed} - set(known)
    if names:
        rows = (
            Task.objects.filter(source=source, external_id__in={name for _, name in names})
            .order_by("namespace", "external_id", "-last_seen", "-first_seen")
            .values_list("namespace", "external_id", "team__name")
        )
        for namespace, name, team in rows:
            stored.setdefault((namespace, name), team)
    teams = {}
    for start, pod, task in guessed:
        name = (task.namespace, task.external_id)
        if known.get(name):
            teams[(start, pod)] = min(known[name], key=lambda seen: abs(seen[0] - start))[1]
        elif name in stored:
            teams[(start, pod)] = stored[name]
    return teams


def _least(current: int | None, new: int | None) -> int | None:
    if current is None:
        return new
    if new is None:
        return current
    return min(current, new)


def _teams_upsert(names: set[str], *, source: Source) -> dict[str, int]:
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO metering_team (name, created) SELECT unnest(%s::text[]), now()"
            " ON CONFLICT (name) DO NOTHING RETURNING id",
            [sorted(names)],
        )
        _audit_created(Team, [pk for (pk,) in cursor.fetchall()], source=source)
    return dict(Team.objects.filter(name__in=names).values_list("name", "pk"))


def _audit_created(model: type[Team | Service], pks: list[int], *, source: Source) -> None:
    """One audit entry per team or service that ingestion created: a new team starts being
    billed, a new service starts being judged against an SLO. `RETURNING` names only the rows
    this worker inserted, so a team two workers meet at once is recorded once."""
    for obj in model.objects.filter(pk__in=pks).order_by("pk"):
        audit_record(
            action="create",
            obj=obj,
            changes={**object_snapshot(obj), "created_by": f"ingest of source {source.name}"},
        )


def _moment(epoch: int | None) -> datetime | None:
    return None if epoch is None else datetime.fromtimestamp(epoch, UTC)


def _legacy_tasks_adopt(
    source: Source, merged: dict[TaskRowKey, dict[str, Any]], team_ids: dict[str, int]
) -> None:
    """Rows metered before tasks were keyed by namespace (namespace empty) become the row of
    the first namespace that runs the same name under the same team, so a running task keeps
    its history on one row. A name under another team is another task and stays apart."""
    keys = sorted((ns, name, team_ids[team]) for ns, name, team in merged if ns)
    if not keys:
        return
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE metering_task t SET namespace = k.ns"
            " FROM (SELECT DISTINCT ON (name, team) ns, name, team"
            "       FROM unnest(%s::text[], %s::text[], %s::bigint[]) AS u(ns, name, team)"
            "       ORDER BY name, team, ns) AS k"
            " WHERE t.source_id = %s AND t.namespace = '' AND t.external_id = k.name"
            " AND t.team_id = k.team AND NOT EXISTS (SELECT 1 FROM metering_task o"
            "   WHERE o.source_id = t.source_id AND o.namespace = k.ns"
            "   AND o.external_id = k.name AND o.team_id = k.team)",
            [[k[0] for k in keys], [k[1] for k in keys], [k[2] for k in keys], source.pk],
        )


def _task_rows_upsert(
    source: Source, merged: dict[TaskRowKey, dict[str, Any]], team_ids: dict[str, int]
) -> tuple[dict[TaskRowKey, int], list[int]]:
    """INSERT ... ON CONFLICT: times only widen; kind follows kube-state-metrics. Returns the
    rows' pks by key, and the pks this statement inserted.

    Rows go in sorted order so that concurrent workers cannot deadlock on them.
    """
    pks: dict[TaskRowKey, int] = {}
    inserted: list[int] = []
    names = {team_id: name for name, team_id in team_ids.items()}
    for from_kube in (True, False):
        rows = [
            (
                source.pk,
                row["namespace"],
                row["external_id"],
                team_ids[row["team"]],
                row["kind"],
                row["fault_domain"],
                _moment(row["first_seen"]),
                _moment(row["last_seen"]),
                _moment(row["created"]),
                _moment(row["first_started"]),
                _moment(row["ended"]),
            )
            for _, row in sorted(merged.items())
            if row["from_kube"] == from_kube
        ]
        identity_update = (
            "kind = EXCLUDED.kind,"
            " fault_domain = COALESCE(NULLIF(EXCLUDED.fault_domain, ''), t.fault_domain),"
            if from_kube
            else ""
        )
        for chunk in _chunked(rows, size=5000):
            # One array per column: a statement of constant text, whatever the rows.
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute(
                    "INSERT INTO metering_task AS t (source_id, namespace, external_id, team_id,"
                    " kind, fault_domain, first_seen, last_seen, created, first_started, ended)"
                    " SELECT * FROM unnest(%s::bigint[], %s::text[], %s::text[], %s::bigint[],"
                    " %s::text[], %s::text[], %s::timestamptz[], %s::timestamptz[],"
                    " %s::timestamptz[], %s::timestamptz[], %s::timestamptz[])"
                    " ON CONFLICT (source_id, namespace, external_id, team_id) DO UPDATE SET"
                    f" {identity_update}"
                    " first_seen = LEAST(t.first_seen, EXCLUDED.first_seen),"
                    " last_seen = GREATEST(t.last_seen, EXCLUDED.last_seen),"
                    " created = LEAST(t.created, EXCLUDED.created),"
                    " first_started = LEAST(t.first_started, EXCLUDED.first_started),"
                    " ended = GREATEST(t.ended, EXCLUDED.ended)"
                    " RETURNING namespace, external_id, team_id, id, xmax = 0",
                    [list(column) for column in zip(*chunk, strict=True)],
                )
                for namespace, name, team_id, pk, is_new in cursor.fetchall():
                    pks[(namespace, name, names[team_id])] = pk
                    if is_new:
                        inserted.append(pk)
    return pks, inserted


def _relabels_audit(source: Source, inserted: list[int]) -> None:
    """A new row for a key that has rows under another team is a relabel: record which team
    the key leaves (its row metered last before this one), which it joins, and from which
    interval on."""
    if not inserted:
        return
    new = Task.objects.filter(pk__in=inserted).select_related("team").order_by("pk")
    rows: dict[tuple[str, str], list[Task]] = defaultdict(list)
    for task in (
        Task.objects.filter(source=source, external_id__in={t.external_id for t in new})
        .exclude(namespace="")
        .select_related("team")
        .order_by("first_seen", "pk")
    ):
        rows[(task.namespace, task.external_id)].append(task)
    for task in new:
        others = [t for t in rows[(task.namespace, task.external_id)] if t.pk != task.pk]
        if not others:
            continue
        before = [t for t in others if t.first_seen < task.first_seen] or others
        audit_record(
            action="change",
            obj=task,
            changes={
                "team": [before[-1].team.name, task.team.name],
                "namespace": task.namespace,
                "task": task.external_id,
                "from_interval": task.first_seen,
                "other_task_rows": [t.pk for t in others],
                "changed_by": f"ingest of source {source.name} (a relabel in kube-state-metrics)",
            },
        )


def _chunked(rows: list[tuple], size: int = 5000) -> Iterator[list[tuple]]:
    """Slices small enough for PostgreSQL's 65,535 bind parameters per statement."""
    for index in range(0, len(rows), size):
        yield rows[index : index + size]


def _services_upsert(source: Source, measured: Measured) -> dict[tuple[str, str], int]:
    """Services seen in the run: `namespace/model`, owned by the team of its namespace."""
    keys = {key for facts in measured.intervals.values() for key in facts.latency}
    if not keys:
        return {}
    namespace_teams: dict[str, Counter] = defaultdict(Counter)
    for facts in measured.intervals.values():
        for (namespace, _), identity in facts.identity.items():
            if identity.team_label:
                namespace_teams[namespace][identity.team_label] += 1
    teams = {key: (namespace_teams[key[0]].most_common(1) or [(key[0], 0)])[0][0] for key in keys}
    team_ids = _teams_upsert(set(teams.values()), source=source)
    external = {key: f"{key[0]}/{key[1]}" for key in keys}
    ordered = sorted(keys)
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO metering_service (source_id, external_id, team_id, slo_p99_ms, is_key)"
            " SELECT %s, e, t, %s, %s FROM unnest(%s::text[], %s::bigint[]) AS n(e, t)"
            " ON CONFLICT (source_id, external_id) DO NOTHING RETURNING id",
            [
                source.pk,
                Service._meta.get_field("slo_p99_ms").default,
                Service._meta.get_field("is_key").default,
                [external[key] for key in ordered],
                [team_ids[teams[key]] for key in ordered],
            ],
        )
        _audit_created(Service, [pk for (pk,) in cursor.fetchall()], source=source)
    pks = dict(
        Service.objects.filter(source=source, external_id__in=external.values()).values_list(
            "external_id", "pk"
        )
    )
    return {key: pks[external[key]] for key in keys}


# --- Writing a run of windows -------------------------------------------------------------


def _quantize(value: Fraction | int) -> Decimal:
    return Decimal(_six_places(value))


def _six_places(value: Fraction | int) -> str:
    """`value` rounded once to 6 places, half away from zero (ROUND_HALF_UP), as text: integer
    arithmetic on the exact rational, what Decimal's quantize gives at a fraction of its cost."""
    numerator, denominator = value.numerator, value.denominator
    sign = "-" if numerator < 0 else ""
    micros, rest = divmod(abs(numerator) * 1_000_000, denominator)
    if 2 * rest >= denominator:
        micros += 1
    whole, fraction = divmod(micros, 1_000_000)
    return f"{sign}{whole}.{fraction:06d}"


@dataclass
class WindowRows:
    usage: list[str] = field(default_factory=list)  # COPY lines
    capacity: list[CapacityInterval] = field(default_factory=list)
    latency: list[LatencyInterval] = field(default_factory=list)
    preemptions: list[Preemption] = field(default_factory=list)
    waits: list[tuple] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def count(self) -> int:
        return sum(
            map(len, (self.usage, self.capacity, self.latency, self.preemptions, self.waits))
        )


def _window_rows(
    window: IngestWindow,
    measured: Measured,
    task_ids: dict[tuple[int, PodKey], int],
    service_ids: dict[tuple[str, str], int],
) -> WindowRows:
    start = int(window.start.timestamp())
    facts = measured.intervals[start]
    rows = WindowRows(warnings=list(facts.warnings))
    rows.usage = _usage_lines(window, facts, task_ids)
    for (domain, model), gpu_seconds in sorted(facts.capacity_by_model.items()):
        rows.capacity.append(
            CapacityInterval(
                source_id=window.source_id,
                fault_domain=domain,
                gpu_model=model,
                interval_start=window.start,
                gpus_present=_quantize(gpu_seconds / measured.plan.step_seconds),
                capacity_gpu_seconds=_quantize(gpu_seconds),
            )
        )
    rows.latency = _latency_rows(window, facts, service_ids)
    rows.preemptions = _preemption_rows(facts, start, task_ids, rows.warnings)
    for pod, scheduled in sorted(facts.waits.items()):
        created = _pod_identity(measured, start, pod).created
        if created is None or scheduled < created:
            rows.warnings.append(
                f"waits: pod {pod[0]}/{pod[1]} has no creation time before its scheduling"
            )
            continue
        rows.waits.append(
            (
                task_ids[(start, pod)],
                pod[1],
                _moment(created),
                _moment(scheduled),
                scheduled - created,
            )
        )
    return rows


def _usage_lines(
    window: IngestWindow, facts: IntervalFacts, task_ids: dict[tuple[int, PodKey], int]
) -> list[str]:
    """One COPY line per task and GPU model (a task holding GPUs of two models gets two), in
    (task, model) order; rows of nothing at all are left out.

    Memory is per GPU (see sources.devices_parts): the task's peak is its pods' highest, its
    average the mean over its pods; GPU-time and I/O of several pods add up, exactly (the
    rationals of the pods, rounded once). I/O is the pod's, not a GPU's: counted once, on the
    row of its first model."""
    start = int(window.start.timestamp())
    models_of: dict[PodKey, list[str]] = defaultdict(list)
    for namespace, pod, model in sorted(facts.alloc_by_model):
        models_of[(namespace, pod)].append(model)
    alloc, busy = facts.alloc_by_model, facts.busy_by_model
    peaks, averages = facts.memory_peak_by_model, facts.memory_avg_by_model
    # (task, model) -> [alloc, busy, memory averages, memory peak, *I/O in IO_METRICS order]
    usage: dict[tuple[int, str], list[Any]] = {}
    io_meters = list(sources.IO_METRICS)
    for pod in _active_pods(facts):
        task_id = task_ids[(start, pod)]
        models = models_of.get(pod) or [""]
        for model in models:
            key = (*pod, model)
            row = usage.get((task_id, model))
            if row is None:
                row = usage[(task_id, model)] = [0, 0, [], 0, 0, 0, 0, 0]
            if key in alloc:
                row[0] = row[0] + alloc[key] if row[0] else alloc[key]
            if key in busy:
                row[1] = row[1] + busy[key] if row[1] else busy[key]
            if key in averages:
                row[2].append(averages[key])
            row[3] = max(row[3], peaks.get(key, 0))
        counters = facts.io.get(pod)
        if counters:
            row = usage[(task_id, models[0])]
            for index, meter in enumerate(io_meters, start=4):
                row[index] += counters.get(meter, 0)
    moment = window.start.isoformat()
    lines = []
    for (task_id, model), row in sorted(usage.items()):
        if not (row[0] or row[1] or row[3] or any(row[4:])):
            continue
        memory = row[2] or [0]
        # One line of COPY text per row (columns as USAGE_COLUMNS): written and hashed as is.
        lines.append(
            f"{task_id}\t{moment}\t{_six_places(row[0])}\t{_six_places(row[1])}\t"
            f"{round(sum(memory) / len(memory))}\t{row[3]}\t"
            f"{row[4]}\t{row[5]}\t{row[6]}\t{row[7]}\t{_copy_text(model)}\n"
        )
    return lines


def _preemption_rows(
    facts: IntervalFacts,
    start: int,
    task_ids: dict[tuple[int, PodKey], int],
    warnings: list[str],
) -> list[Preemption]:
    """One preemption per task in the interval (docs/pricing.md "Preemptions across periods"):
    a gang's pods evicted together are one eviction of the task, so the engine counts it
    once. Its GPUs (and lost work, when reported) add up the pods', it ran as long as the
    longest-running pod, happened at the first pod's tick and is named by the first pod."""
    events: dict[int, Preemption] = {}
    for pod, event in sorted(facts.preemptions.items()):
        if "at" not in event:
            continue
        scheduled = event.get("scheduled")
        since_start = event["at"] - scheduled if scheduled is not None else 0
        if since_start < 0:
            warnings.append(f"preemptions: pod {pod[0]}/{pod[1]} preempted before scheduled")
            since_start = 0
        at = datetime.fromtimestamp(event["at"], UTC)
        gpus = Fraction(event.get("gpus", 0))
        task_id = task_ids[(start, pod)]
        found = events.get(task_id)
        if found is None:
            events[task_id] = Preemption(
                task_id=task_id,
                pod=pod[1],
                pods=1,
                at=at,
                gpus=gpus,
                seconds_since_start=since_start,
                lost_gpu_seconds=None,  # exporters do not report lost work
            )
            continue
        if (at, pod[1]) < (found.at, found.pod):
            found.at, found.pod = at, pod[1]
        found.pods += 1
        found.gpus += gpus
        found.seconds_since_start = max(found.seconds_since_start, since_start)
    for event in events.values():
        event.gpus = _quantize(event.gpus)  # the pods' sum, rounded once
    return [events[task_id] for task_id in sorted(events)]


def _latency_rows(
    window: IngestWindow, facts: IntervalFacts, service_ids: dict[tuple[str, str], int]
) -> list[LatencyInterval]:
    return [
        LatencyInterval(
            service_id=service_ids[service],
            interval_start=window.start,
            buckets=[[bound, count] for bound, count in buckets],
            request_count=buckets[-1][1],
            p99_seconds=latency_p99(buckets),
        )
        for service, buckets in sorted(facts.latency.items())
    ]


_INFINITY_SPELLINGS = ("+Inf", "Inf", "inf", "+inf")


def latency_p99(buckets: Sequence[Sequence[object]]) -> Decimal | None:
    """P99 in seconds of one histogram as stored (`[[le, cumulative_count], ...]`, le as text
    or number, "+Inf" last), by the pricing engine's `histogram_quantile`: the one quantile
    implementation, so stored P99s, health numbers and SLA credits agree. None where
    Prometheus gives NaN (no requests, no +Inf bucket, no finite bucket).

    Every writer of LatencyInterval rows sets `p99_seconds` with this; readers fall back to it
    for rows written without (raw SQL loads).
    """
    parsed = sorted(
        (
            Decimal("Infinity") if str(le) in _INFINITY_SPELLINGS else Decimal(str(le)),
            Decimal(str(count)),
        )
        for le, count in buckets
    )
    if len(parsed) < 2 or not parsed[-1][0].is_infinite():
        return None
    return histogram_quantile(P99, tuple(parsed))


def latency_p99_fill(*, batch: int = 5000) -> int:
    """Store the P99 of latency rows written without one (raw SQL loads, restored dumps), as
    ingest would have; returns how many rows got one. Quiet intervals repeat the same
    histogram, so each distinct one is computed once."""
    known: dict[str, Decimal | None] = {}
    filled = 0
    with transaction.atomic(), connection.cursor() as read:
        read.execute(
            "SELECT id, buckets::text FROM metering_latencyinterval"
            " WHERE p99_seconds IS NULL AND request_count > 0"
        )
        while rows := read.fetchmany(batch):
            values = []
            for pk, text in rows:
                if text not in known:
                    known[text] = latency_p99(json.loads(text))
                if known[text] is not None:
                    values.append((pk, known[text]))
            with connection.cursor() as write:
                write.execute(
                    "UPDATE metering_latencyinterval l SET p99_seconds = v.p99"
                    " FROM unnest(%s::bigint[], %s::numeric[]) AS v(id, p99) WHERE l.id = v.id",
                    [[pk for pk, _ in values], [p99 for _, p99 in values]],
                )
            filled += len(values)
    return filled


def _content_hash(rows: WindowRows) -> str:
    digest = hashlib.sha256()
    payload = {
        "usage": rows.usage,
        # The model only where there is one, so rows without it hash as they did before.
        "capacity": [
            [r.fault_domain, str(r.capacity_gpu_seconds), *([r.gpu_model] if r.gpu_model else [])]
            for r in rows.capacity
        ],
        "latency": [[r.service_id, r.buckets] for r in rows.latency],
        "preemptions": [
            [r.task_id, r.pod, r.at.isoformat(), str(r.gpus), r.seconds_since_start]
            for r in rows.preemptions
        ],
        "waits": [[str(v) for v in row] for row in rows.waits],
    }
    digest.update(json.dumps(payload, sort_keys=True, default=str).encode())
    return digest.hexdigest()


USAGE_COLUMNS = (
    "task_id",
    "interval_start",
    "alloc_gpu_seconds",
    "busy_gpu_seconds",
    "memory_avg_bytes",
    "memory_peak_bytes",
    "read_operations",
    "write_operations",
    "read_bytes",
    "write_bytes",
    "gpu_model",
)


def _copy_text(value: str) -> str:
    """A text value as COPY's text format reads it (an exporter's label may hold anything)."""
    return (
        value.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")
    )


def _run_write(
    run: list[IngestWindow],
    measured: Measured,
    task_ids: dict[tuple[int, PodKey], int],
    service_ids: dict[tuple[str, str], int],
    accept_loss: LossAcceptance | None = None,
) -> tuple[int, float]:
    """Replace the rows of every window of the run, all in ONE transaction; returns the
    number of usage rows written and the seconds their DELETE + COPY took.

    A window that holds rows and would be replaced by fewer samples keeps its rows (see
    `_loses_samples`) unless `accept_loss`, which the audit log then records.

    Set-based (one DELETE per table for each stretch of consecutive windows replaced, one
    COPY for usage) because the per-statement and per-commit costs, not the rows, dominate a
    back-fill.
    """
    built = [(window, _window_rows(window, measured, task_ids, service_ids)) for window in run]
    prometheus_seconds = Decimal(str(round(measured.evaluation_seconds / len(run), 6)))
    with transaction.atomic():
        with connection.cursor() as cursor:
            # One writer per window at a time (in id order, so two runs cannot deadlock); a
            # second writer waits and then rewrites the same rows.
            cursor.execute(
                "SELECT pg_advisory_xact_lock(%s, (id %% 2147483647)::int)"
                " FROM unnest(%s::bigint[]) AS id ORDER BY id",
                [WINDOW_LOCK_CLASS, sorted(window.pk for window in run)],
            )
        previous = {
            row["pk"]: row
            for row in IngestWindow.objects.filter(pk__in=[w.pk for w in run]).values(
                "pk",
                "content_hash",
                "first_written",
                "changed_after_first_write",
                "completeness",
                "samples_seen",
                "samples_expected",
                "rows_written",
                "warnings",
            )
        }
        now = timezone.now()
        results, replaced, losses = [], [], []
        for window, rows in built:
            before = previous[window.pk]
            content_hash = _content_hash(rows)
            facts = measured.intervals[int(window.start.timestamp())]
            seen, expected = facts.samples_seen, facts.samples_expected
            completeness = _quantize(facts.completeness)
            if _loses_samples(before, completeness, content_hash):
                if accept_loss is None:
                    results.append(_kept_result(before, completeness, now))
                    continue
                losses.append((window, before, completeness, rows.count()))
            replaced.append((window, rows))
            if not seen:
                rows.warnings.append("no GPU exporter samples in this window")
            changed = bool(before["first_written"]) and before["content_hash"] != content_hash
            results.append(
                (
                    window.pk,
                    rows.count(),
                    seen,
                    expected,
                    completeness,
                    json.dumps(_capped(rows.warnings)),
                    content_hash,
                    before["first_written"] or now,
                    now if changed else before["changed_after_first_write"],
                )
            )
        usage_seconds = _rows_replace(replaced)
        _windows_result_update(results, measured.queries, prometheus_seconds, now)
        if losses:
            _losses_audit(losses, accept_loss)
    return sum(len(rows.usage) for _, rows in replaced), usage_seconds


@dataclass(frozen=True)
class LossAcceptance:
    """An operator's explicit consent to replace windows' rows with fewer samples (the
    Prometheus lost them for good), and who gave it and why, for the audit log."""

    operator: str
    reason: str

    def __post_init__(self) -> None:
        if not self.reason.strip():
            raise WindowError("accepting a loss of metered samples needs a reason")
        if not self.operator.strip():
            raise WindowError("accepting a loss of metered samples needs the operator's name")


LOSS_REFUSED = "kept the stored rows"


def _loses_samples(before: dict[str, Any], completeness: Decimal, content_hash: str) -> bool:
    """Writing would replace the window's stored rows with fewer samples than they came from:
    a Prometheus that lost the data (retention, a new empty TSDB, another URL) answers
    with less or nothing. That covers a window falling below TANDEM_MIN_COMPLETENESS from
    above it. Rows identical to the stored ones are never a loss."""
    return (
        before["first_written"] is not None
        and completeness < before["completeness"]
        and content_hash != before["content_hash"]
    )


def _kept_result(before: dict[str, Any], completeness: Decimal, now: datetime) -> tuple:
    """The window as it was, done, with a warning saying what was refused and how to force it."""
    minimum = settings.TANDEM_MIN_COMPLETENESS
    warning = (
        f"{LOSS_REFUSED}: re-ingested at {now:%Y-%m-%dT%H:%M:%SZ}, Prometheus gave completeness"
        f" {completeness} (stored {before['completeness']}, minimum {minimum}); replace them"
        " only with `manage.py ingest --accept-loss --reason ...` or the admin action"
        " 'Replace with less data'"
    )
    warnings = [w for w in before["warnings"] if not str(w).startswith(LOSS_REFUSED)]
    return (
        before["pk"],
        before["rows_written"],
        before["samples_seen"],
        before["samples_expected"],
        before["completeness"],
        json.dumps(_capped([warning, *warnings])),
        before["content_hash"],
        before["first_written"],
        before["changed_after_first_write"],
    )


def _rows_replace(replaced: list[tuple[IngestWindow, WindowRows]]) -> float:
    """Delete and write again the rows of these windows, table by table, one DELETE per
    stretch of consecutive windows; returns the seconds the usage DELETE + COPY took."""
    step = timedelta(seconds=settings.TANDEM_STEP_SECONDS)
    stretches: list[list[IngestWindow]] = []
    for window, _ in replaced:
        if stretches and window.start == stretches[-1][-1].start + step:
            stretches[-1].append(window)
        else:
            stretches.append([window])
    with connection.cursor() as cursor:
        began = time.perf_counter()
        for stretch in stretches:
            _run_rows_delete(cursor, stretch, "usage")
        _usage_copy(cursor, [row for _, rows in replaced for row in rows.usage])
        usage_seconds = time.perf_counter() - began
        for table, model, attribute in (
            ("capacity", CapacityInterval, "capacity"),
            ("latency", LatencyInterval, "latency"),
            ("preemptions", Preemption, "preemptions"),
        ):
            for stretch in stretches:
                _run_rows_delete(cursor, stretch, table)
            model.objects.bulk_create([r for _, rows in replaced for r in getattr(rows, attribute)])
    _waits_insert([row for _, rows in replaced for row in rows.waits])
    return usage_seconds


def _losses_audit(losses: list[tuple], accept_loss: LossAcceptance) -> None:
    """One entry per run whose stored rows an operator let fewer samples replace."""
    first = losses[0][0]
    audit_record(
        action="change",
        obj=first,
        changes={
            "accepted_loss": True,
            "accepted_by": accept_loss.operator,
            "reason": accept_loss.reason,
            "windows": [
                {
                    "start": window.start,
                    "completeness": [before["completeness"], completeness],
                    "rows_written": [before["rows_written"], rows],
                }
                for window, before, completeness, rows in losses
            ],
        },
    )


def _windows_result_update(
    results: list[tuple], queries: list[dict], prometheus_seconds: Decimal, now: datetime
) -> None:
    """One UPDATE for all windows of a run (the ORM's bulk_update builds a CASE per field)."""
    row = "(%s::bigint, %s::int, %s::bigint, %s::bigint, %s::numeric, %s::jsonb, %s::text,"
    row += " %s::timestamptz, %s::timestamptz)"
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE metering_ingestwindow w SET status = %s, rows_written = v.rows,"
            " queries = %s::jsonb, prometheus_seconds = %s, samples_seen = v.seen,"
            " samples_expected = v.expected, completeness = v.completeness,"
            " warnings = v.warnings, error = '', content_hash = v.hash,"
            " first_written = v.first_written, changed_after_first_write = v.changed,"
            " updated = %s"
            f" FROM (VALUES {', '.join([row] * len(results))})"
            " AS v(id, rows, seen, expected, completeness, warnings, hash, first_written, changed)"
            " WHERE w.id = v.id",
            [
                IngestWindow.Status.DONE,
                json.dumps(queries),
                prometheus_seconds,
                now,
                *(value for result in results for value in result),
            ],
        )


def _capped(warnings: list[str]) -> list[str]:
    if len(warnings) <= MAX_WARNINGS_KEPT:
        return warnings
    return [*warnings[:MAX_WARNINGS_KEPT], f"... and {len(warnings) - MAX_WARNINGS_KEPT} more"]


RUN_DELETES = {
    "usage": "DELETE FROM metering_usageinterval u USING metering_task t WHERE u.task_id = t.id"
    " AND t.source_id = %(source)s AND u.interval_start >= %(first)s"
    " AND u.interval_start <= %(last)s",
    "capacity": "DELETE FROM metering_capacityinterval WHERE source_id = %(source)s"
    " AND interval_start >= %(first)s AND interval_start <= %(last)s",
    "latency": "DELETE FROM metering_latencyinterval l USING metering_service s"
    " WHERE l.service_id = s.id AND s.source_id = %(source)s"
    " AND l.interval_start >= %(first)s AND l.interval_start <= %(last)s",
    # A preemption's `at` is a scrape tick, so it belongs to the interval [start, end).
    "preemptions": "DELETE FROM metering_preemption p USING metering_task t"
    " WHERE p.task_id = t.id AND t.source_id = %(source)s AND p.at >= %(first)s"
    " AND p.at < %(end)s",
}


def _run_rows_delete(cursor: Any, run: list[IngestWindow], table: str) -> None:
    cursor.execute(
        RUN_DELETES[table],
        {
            "source": run[0].source_id,
            "first": run[0].start,
            "last": run[-1].start,
            "end": run[-1].end,
        },
    )


def _usage_copy(cursor: Any, usage: list[str]) -> None:
    if not usage:
        return
    with cursor.cursor.copy(
        f"COPY metering_usageinterval ({', '.join(USAGE_COLUMNS)}) FROM STDIN"
    ) as copy:
        copy.write("".join(usage))


def _waits_insert(waits: list[tuple]) -> None:
    """A wait belongs to the window in which its pod's scheduled time first shows; the row is
    keyed by (task, pod), so writing it again replaces it."""
    for chunk in _chunked(sorted(waits)):
        with connection.cursor() as cursor:
            cursor.execute(
                "INSERT INTO metering_podwait (task_id, pod, created, scheduled, seconds)"
                " SELECT * FROM unnest(%s::bigint[], %s::text[], %s::timestamptz[],"
                " %s::timestamptz[], %s::int[]) ON CONFLICT (task_id, pod) DO UPDATE SET"
                " created = EXCLUDED.created, scheduled = EXCLUDED.scheduled,"
                " seconds = EXCLUDED.seconds",
                [list(column) for column in zip(*chunk, strict=True)],
            )


def service_slo_set(*, external_id: str, slo_p99_ms: int) -> int:
    """Set the latency objective of every service named `external_id` (one per source).

    SLOs are not in the telemetry: an operator states them (here, or in the admin). Returns how
    many services changed; an unknown name is an error, not a silent no-op."""
    if slo_p99_ms <= 0:
        raise WindowError(f"slo_p99_ms must be a positive number of milliseconds, got {slo_p99_ms}")
    services = Service.objects.filter(external_id=external_id)
    if not services.exists():
        raise WindowError(f"no service named {external_id!r}")
    return services.update(slo_p99_ms=slo_p99_ms)
