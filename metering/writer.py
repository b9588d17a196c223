"""Metering writes, the rows of a run of windows: built in bulk from the run's facts (one
COPY line per usage row, exact rationals rounded once to six places) and written in ONE
transaction, one DELETE per table and stretch of consecutive windows, usage by COPY.

A window that holds rows is never replaced by fewer samples unless an operator accepts the
loss (audited). Per-statement and per-commit costs, not rows, dominate a back-fill."""

from __future__ import annotations

import hashlib
import json
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from fractions import Fraction
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from audit.services import audit_record
from kernel.collector import collector_paused
from kernel.histogram import stored_p99
from kernel.money import half_up_rational_text, round_places
from kernel.numbers import exact_sum
from metering import sources
from metering.identity import TaskIds, _chunked, _moment, _pod_identity
from metering.measure import IntervalFacts, Measured, ModelKey, PodKey
from metering.models import (
    CapacityInterval,
    IngestBatch,
    IngestWindow,
    LatencyInterval,
    Preemption,
    Source,
    sighting_month,
)
from metering.windows import WindowError

MAX_WARNINGS_KEPT = 50


WINDOW_LOCK_CLASS = 0x7A6F


def _quantize(value: Fraction | int) -> Decimal:
    return Decimal(_six_places(value))


# What a window stores of its interval's findings beside its rows, each column with its SQL
# type and its value from the facts: a window written takes them from the facts, a window
# kept (a loss refused) keeps the stored ones. One list for the read, the row and the UPDATE.
WINDOW_FINDINGS: tuple[tuple[str, str, Callable[[IntervalFacts], object]], ...] = (
    ("preemptions_unreadable", "boolean", lambda facts: facts.preemptions_unreadable),
    ("latency_unseen_pods", "int", lambda facts: len(facts.latency_unseen)),
    (
        "undescribed_gpu_seconds",
        "numeric",
        lambda facts: _quantize(facts.undescribed_gpu_seconds),
    ),
    ("described_gpu_seconds", "numeric", lambda facts: _quantize(facts.described_gpu_seconds)),
    ("kueue_preempted_workloads", "int", lambda facts: sum(facts.kueue_preemptions.values())),
    ("kueue_counts_unplaced", "int", lambda facts: facts.kueue_unplaced),
    (
        "unmapped_kind_gpu_seconds",
        "numeric",
        lambda facts: _quantize(exact_sum(facts.unmapped_kinds.values())),
    ),
    (
        "unheld_busy_gpu_seconds",
        "numeric",
        lambda facts: _quantize(exact_sum(facts.unheld_busy.values())),
    ),
    # Written here, a window's GPUs are in its sightings (`_sightings_replace`).
    ("gpus_sighted", "boolean", lambda facts: True),
    ("kueue_admissions", "jsonb", lambda facts: _admissions_json(facts)),
)
FINDING_COLUMNS = tuple(column for column, _, _ in WINDOW_FINDINGS)


def _admissions_json(facts: IntervalFacts) -> str:
    """`IngestWindow.kueue_admissions`: Kueue's seconds are a float's sum, kept to 6 places."""
    return json.dumps(
        {
            kind: {
                "workloads": admitted.workloads,
                "seconds": str(round_places(admitted.seconds, 6)),
            }
            for kind, admitted in facts.kueue_admissions.items()
        }
    )


def _finding_stored(value: object) -> object:
    """A stored finding as the UPDATE's parameter: a JSON column's value as its text."""
    return json.dumps(value) if isinstance(value, dict | list) else value


def _six_places(value: Fraction | int) -> str:
    """`value` rounded once to 6 places as text (`kernel.money`), for COPY lines."""
    if value.denominator == 1:  # most GPU-seconds: whole seconds, nothing to round
        return f"{value.numerator}.000000"
    return half_up_rational_text(value, 6)


@dataclass
class WindowRows:
    usage: list[str] = field(default_factory=list)  # COPY lines
    capacity: list[CapacityInterval] = field(default_factory=list)
    latency: list[LatencyInterval] = field(default_factory=list)
    preemptions: list[Preemption] = field(default_factory=list)
    # (task, pod, created, scheduled or None: gave up waiting, ended, seconds)
    waits: list[tuple] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    gpus: dict[str, str] = field(default_factory=dict)  # present: UUID -> node (GpuSighting)

    def count(self) -> int:
        return sum(
            map(len, (self.usage, self.capacity, self.latency, self.preemptions, self.waits))
        )


def _window_rows(
    window: IngestWindow,
    measured: Measured,
    task_ids: TaskIds,
    service_ids: dict[tuple[str, str], int],
) -> WindowRows:
    start = int(window.start.timestamp())
    facts = measured.intervals[start]
    tasks = task_ids.get(start, {})
    rows = WindowRows(warnings=list(facts.warnings), gpus=facts.gpus_present)
    rows.usage = _usage_lines(window, facts, tasks)
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
    rows.preemptions = _preemption_rows(facts, tasks, rows.warnings)
    for pod, scheduled in sorted(facts.waits.items()):
        created = _pod_identity(measured, start, pod).created
        if created is None or scheduled < created:
            rows.warnings.append(
                f"waits: pod {pod[0]}/{pod[1]} has no creation time before its scheduling"
            )
            continue
        rows.waits.append(
            (
                tasks[pod],
                pod[1],
                _moment(created),
                _moment(scheduled),
                _moment(scheduled),
                scheduled - created,
            )
        )
    for pod, gave_up in sorted(facts.gave_up.items()):
        rows.waits.append(
            (
                tasks[pod],
                pod[1],
                _moment(gave_up.created),
                None,
                _moment(gave_up.ended),
                gave_up.ended - gave_up.created,
            )
        )
    return rows


def _usage_lines(window: IngestWindow, facts: IntervalFacts, tasks: dict[PodKey, int]) -> list[str]:
    """One COPY line per task and GPU model (a task holding GPUs of two models gets two), in
    (task, model) order; rows of nothing at all are left out.

    Memory is per GPU (see sources.devices_parts): the task's peak is its pods' highest, its
    average the mean over its pods; GPU-time and I/O of several pods add up, exactly (the
    rationals of the pods, rounded once). I/O is the pod's, not a GPU's: counted once, on the
    row of its first model.

    Most rows are one pod's: the pods' keys are grouped by row first, and a row of one pod
    takes its values as they are, without the arithmetic of a sum (a 1,000-GPU day has
    90,000 rows)."""
    alloc, busy = facts.alloc_by_model, facts.busy_by_model
    peaks, averages = facts.memory_peak_by_model, facts.memory_avg_by_model
    # Every pod that held a GPU has an allocation per model it held (measure._derive_gpus),
    # and its busy time and memory are keyed the same way.
    groups: dict[tuple[int, str], list[ModelKey]] = {}
    for key in alloc:
        row = (tasks[key[0], key[1]], key[2])
        found = groups.get(row)
        if found is None:
            groups[row] = [key]
        else:
            found.append(key)
    # A pod's I/O goes on the row of its first model by name, or of no model.
    first_model = {(key[0], key[1]): key[2] for key in alloc}
    if len(first_model) < len(alloc):  # some pod held GPUs of two models
        for key in alloc:
            first_model[key[0], key[1]] = min(first_model[key[0], key[1]], key[2])
    io_rows: dict[tuple[int, str], list[int]] = {}
    for pod, counters in facts.io.items():
        if not counters:
            continue
        row = (tasks[pod], first_model.get(pod, ""))
        values = [counters.get(meter, 0) for meter in IO_FIELDS]
        known = io_rows.get(row)
        if known is not None:
            values = [a + b for a, b in zip(known, values, strict=True)]
        io_rows[row] = values
        groups.setdefault(row, [])
    moment = window.start.isoformat()
    models = {model: _copy_text(model) for model in {model for _, model in groups}}
    lines = []
    for row in sorted(groups):
        keys = groups[row]
        if len(keys) == 1:
            (key,) = keys
            allocated, busy_seconds = alloc[key], busy.get(key, 0)
            average, peak = averages.get(key, 0), peaks.get(key, 0)
        elif keys:
            allocated = exact_sum(alloc[key] for key in keys)
            busy_seconds = exact_sum(busy[key] for key in keys if key in busy)
            found = [averages[key] for key in keys if key in averages]
            average = round(sum(found) / len(found)) if found else 0
            peak = max(peaks.get(key, 0) for key in keys)
        else:  # a pod's I/O alone
            allocated = busy_seconds = average = peak = 0
        io = io_rows.get(row, NO_IO)
        if not (allocated or busy_seconds or peak or any(io)):
            continue
        # One line of COPY text per row (columns as USAGE_COLUMNS): written and hashed as is.
        lines.append(
            f"{row[0]}\t{moment}\t{_six_places(allocated)}\t{_six_places(busy_seconds)}\t"
            f"{average}\t{peak}\t{io[0]}\t{io[1]}\t{io[2]}\t{io[3]}\t{models[row[1]]}\n"
        )
    return lines


NO_IO = (0, 0, 0, 0)  # a row's I/O where its pods had none


def _preemption_rows(
    facts: IntervalFacts, tasks: dict[PodKey, int], warnings: list[str]
) -> list[Preemption]:
    """One preemption per task in the interval (docs/pricing.md "Preemptions across periods"):
    a gang's pods evicted together are one eviction of the task, so the engine counts it
    once. Its GPUs (and lost work, when reported) add up the pods', it ran as long as the
    longest-running pod, happened at the first pod's tick and is named by the first pod. Its
    GPU model is the one that held most of its pods' GPUs (ties: the first name), which
    prices its compensation (docs/pricing.md "GPU classes", rule 5)."""
    events: dict[int, Preemption] = {}
    models: dict[int, dict[str, Fraction]] = defaultdict(lambda: defaultdict(Fraction))
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
        task_id = tasks[pod]
        models[task_id][event.get("model", "")] += gpus
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
    for task_id, event in events.items():
        event.gpus = _quantize(event.gpus)  # the pods' sum, rounded once
        held = models[task_id]
        event.gpu_model = min(held, key=lambda name: (-held[name], name))
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


def latency_p99(buckets: Sequence[Sequence[object]]) -> Decimal | None:
    """P99 in seconds of one histogram as stored (`[[le, cumulative_count], ...]`, le as text
    or number, "+Inf" last), by `kernel.histogram` as the pricing engine computes it: the one
    quantile implementation, so stored P99s, health numbers and SLA credits agree. None where
    Prometheus gives NaN (no requests, no +Inf bucket, no finite bucket).

    Every writer of LatencyInterval rows sets `p99_seconds` with this; readers fall back to it
    for rows written without (raw SQL loads).
    """
    return stored_p99(buckets)


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
        # The model only where there is one, as for capacity.
        "preemptions": [
            [
                r.task_id,
                r.pod,
                r.at.isoformat(),
                str(r.gpus),
                r.seconds_since_start,
                *([r.gpu_model] if r.gpu_model else []),
            ]
            for r in rows.preemptions
        ],
        # A scheduled wait as it was hashed before waits of pods that gave up were stored.
        "waits": [
            [str(v) for v in (task, pod, created, scheduled, seconds)]
            if scheduled is not None
            else [str(v) for v in (task, pod, created, "gave up", ended, seconds)]
            for task, pod, created, scheduled, ended, seconds in rows.waits
        ],
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
# The I/O meters, in the order of their columns.
IO_FIELDS = USAGE_COLUMNS[6:10]
assert set(IO_FIELDS) == set(sources.IO_METRICS)


def _copy_text(value: str) -> str:
    """A text value as COPY's text format reads it (an exporter's label may hold anything)."""
    return (
        value.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")
    )


@collector_paused
def _windows_lock(ids: list[int]) -> None:
    """One writer per window at a time, till the transaction ends (in id order, so two runs
    cannot deadlock): a second writer waits, then rewrites the same rows."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_advisory_xact_lock(%s, (id %% 2147483647)::int)"
            " FROM unnest(%s::bigint[]) AS id ORDER BY id",
            [WINDOW_LOCK_CLASS, sorted(ids)],
        )


def _run_write(
    run: list[IngestWindow],
    measured: Measured,
    task_ids: TaskIds,
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
        _windows_lock([window.pk for window in run])
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
                *FINDING_COLUMNS,
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
            identity = IdentityCoverage(
                described=_quantize(facts.described_gpu_seconds),
                undescribed=_quantize(facts.undescribed_gpu_seconds),
            )
            if _loses_samples(before, completeness, identity, content_hash):
                if accept_loss is None:
                    results.append(_kept_result(before, completeness, identity, now))
                    continue
                losses.append((window, before, completeness, identity, rows.count()))
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
                    *(value(facts) for _, _, value in WINDOW_FINDINGS),
                )
            )
        usage_seconds = _rows_replace(replaced)
        _windows_result_update(run, results, measured.queries, prometheus_seconds, now)
        if losses:
            _losses_audit(losses, accept_loss)
        _sightings_replace(replaced)  # the last write: it takes the source's lock (see there)
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


@dataclass(frozen=True)
class IdentityCoverage:
    """A window's GPU-seconds on pods kube-state-metrics described, and on those it did not
    (measure._identity_coverage), rounded as stored."""

    described: Decimal
    undescribed: Decimal


def _loses_samples(
    before: dict[str, Any], completeness: Decimal, identity: IdentityCoverage, content_hash: str
) -> bool:
    """Writing would replace the window's stored rows with less than they came from: fewer
    samples, from a Prometheus that lost the data (retention, a new empty TSDB, another URL)
    and answers with less or nothing, which covers a window falling below
    TANDEM_MIN_COMPLETENESS from above it; or GPU-seconds whose pods kube-state-metrics no
    longer describes (its series lost, or missing from another Prometheus), whose task, team
    and kind would then be guesses where the stored rows knew them (`_identity_lost`). Rows
    identical to the stored ones are never a loss."""
    return (
        before["first_written"] is not None
        and content_hash != before["content_hash"]
        and (completeness < before["completeness"] or _identity_lost(before, identity))
    )


def _identity_lost(before: dict[str, Any], identity: IdentityCoverage) -> bool:
    """GPU-seconds moved from pods kube-state-metrics described to pods it did not: fewer
    described and more guessed. Fewer GPU-seconds in all (a source's matchers narrowed, a
    correction) and late samples of pods it never described lose nothing."""
    return (
        identity.described < before["described_gpu_seconds"]
        and identity.undescribed > before["undescribed_gpu_seconds"]
    )


def _kept_result(
    before: dict[str, Any], completeness: Decimal, identity: IdentityCoverage, now: datetime
) -> tuple:
    """The window as it was, done, with a warning saying what was refused and how to force it."""
    minimum = settings.TANDEM_MIN_COMPLETENESS
    lost = (
        f"Prometheus gave completeness {completeness} (stored {before['completeness']},"
        f" minimum {minimum})"
    )
    if _identity_lost(before, identity):
        lost += (
            f" and {identity.described} GPU-seconds on pods kube-state-metrics described"
            f" (stored {before['described_gpu_seconds']}), {identity.undescribed} on pods whose"
            f" task, team and kind would be guesses (stored {before['undescribed_gpu_seconds']});"
            " where its view of the window came from the windows around it, ingest them together"
        )
    warning = (
        f"{LOSS_REFUSED}: re-ingested at {now:%Y-%m-%dT%H:%M:%SZ}, {lost}; replace them only"
        " with `manage.py ingest --accept-loss --reason ...` or the admin action"
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
        *(_finding_stored(before[column]) for column in FINDING_COLUMNS),
    )


def _rows_replace(replaced: list[tuple[IngestWindow, WindowRows]]) -> float:
    """Delete and write again the rows of these windows, table by table, one DELETE per
    stretch of consecutive windows; returns the seconds the usage DELETE + COPY took."""
    stretches = _stretches([window for window, _ in replaced])
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
        for stretch in stretches:
            cursor.execute(GAVE_UP_DELETE, _gave_up_span(stretch))
    _waits_insert([row for _, rows in replaced for row in rows.waits])
    return usage_seconds


def _stretches(windows: list[IngestWindow]) -> list[list[IngestWindow]]:
    """The windows (in start order) in stretches of consecutive ones."""
    step = timedelta(seconds=settings.TANDEM_STEP_SECONDS)
    stretches: list[list[IngestWindow]] = []
    for window in windows:
        if stretches and window.start == stretches[-1][-1].start + step:
            stretches[-1].append(window)
        else:
            stretches.append([window])
    return stretches


# A source's sightings are written one transaction at a time (see _sightings_replace).
SIGHTING_LOCK_CLASS = 0x7A70
# The spans of the windows replaced, by month.
_REPLACED_SPANS = (
    "SELECT m AS month, range_agg(tstzrange(s, e)) AS span FROM unnest(%(cleared_months)s::date[],"
    " %(cleared_starts)s::timestamptz[], %(cleared_ends)s::timestamptz[]) AS c(m, s, e) GROUP BY m"
)


def _sightings_replace(replaced: list[tuple[IngestWindow, WindowRows]]) -> None:
    """The GPUs these windows count present (`GpuSighting`) in place of those they counted
    before: the windows' span is taken out of the source's sightings of their months, and each
    GPU's stretches of consecutive windows put in (a multirange merges them with its
    neighbours). One upsert per run; a GPU the windows no longer count (re-ingested with a
    narrower matcher) loses their span, and its row goes when nothing is left of it.

    Two runs of a source (beat's catch-up) touch the same rows, each in an order of its own:
    each takes the source's lock first, as its last write to the metering tables, so the
    second waits for the first's commit holding none of these rows, and no deadlock can form."""
    if not replaced:
        return
    spans: dict[tuple[date, str], list[list]] = {}  # -> [[start, end, node], ...] by start
    for window, rows in replaced:
        month = sighting_month(window.start)
        if sighting_month(window.end - timedelta(microseconds=1)) != month:
            raise WindowError(f"window {window} crosses a month's end: the step divides no hour")
        for uuid, node in rows.gpus.items():
            stretches = spans.get((month, uuid))
            if stretches and stretches[-1][1] == window.start:
                stretches[-1][1:] = [window.end, node]
            elif stretches:
                stretches.append([window.start, window.end, node])
            else:
                spans[(month, uuid)] = [[window.start, window.end, node]]
    ranges = [(*key, *span) for key, found in spans.items() for span in found]
    months, uuids, starts, ends, nodes = [list(c) for c in zip(*ranges, strict=True)] or [[]] * 5
    arguments = {
        "source": replaced[0][0].source_id,
        "months": months,
        "uuids": uuids,
        # Each window's span, by month (range_agg merges consecutive ones).
        "cleared_months": [sighting_month(window.start) for window, _ in replaced],
        "cleared_starts": [window.start for window, _ in replaced],
        "cleared_ends": [window.end for window, _ in replaced],
    }
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_advisory_xact_lock(%s, %s)", [SIGHTING_LOCK_CLASS, arguments["source"]]
        )
        # The windows' span out of every row first (a live window's is new: nothing to
        # take), then each GPU's spans added: a row is updated twice only where windows are
        # written again.
        cursor.execute(
            f"WITH cleared AS ({_REPLACED_SPANS})"
            " UPDATE metering_gpusighting g SET seen = g.seen - c.span FROM cleared c"
            " WHERE g.source_id = %(source)s AND g.month = c.month AND g.seen && c.span",
            arguments,
        )
        cursor.execute(
            "INSERT INTO metering_gpusighting (source_id, month, uuid, node, seen)"
            " SELECT %(source)s, month, uuid, (array_agg(node ORDER BY s DESC))[1],"
            " range_agg(tstzrange(s, e))"
            " FROM unnest(%(months)s::date[], %(uuids)s::text[], %(from)s::timestamptz[],"
            " %(to)s::timestamptz[], %(nodes)s::text[]) AS b(month, uuid, s, e, node)"
            " GROUP BY month, uuid ORDER BY month, uuid"
            " ON CONFLICT (source_id, month, uuid) DO UPDATE"
            " SET seen = metering_gpusighting.seen + EXCLUDED.seen, node = EXCLUDED.node",
            {**arguments, "from": starts, "to": ends, "nodes": nodes},
        )
        cursor.execute(
            "DELETE FROM metering_gpusighting WHERE source_id = %(source)s"
            " AND month = ANY(%(cleared_months)s::date[]) AND isempty(seen)",
            arguments,
        )


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
                    "described_gpu_seconds": [before["described_gpu_seconds"], identity.described],
                    "undescribed_gpu_seconds": [
                        before["undescribed_gpu_seconds"],
                        identity.undescribed,
                    ],
                    "rows_written": [before["rows_written"], rows],
                }
                for window, before, completeness, identity, rows in losses
            ],
        },
    )


def _windows_result_update(
    run: list[IngestWindow],
    results: list[tuple],
    queries: list[dict],
    prometheus_seconds: Decimal,
    now: datetime,
) -> None:
    """One UPDATE for all windows of a run (the ORM's bulk_update builds a CASE per field),
    pointing them at one record of the run's queries (`IngestQueries`); the records of earlier
    runs over these windows that no window points at any more go."""
    row = "(%s::bigint, %s::int, %s::bigint, %s::bigint, %s::numeric, %s::jsonb, %s::text,"
    row += " %s::timestamptz, %s::timestamptz, "
    row += ", ".join(f"%s::{sql_type}" for _, sql_type, _ in WINDOW_FINDINGS) + ")"
    findings = ", ".join(f"{column} = v.{column}" for column in FINDING_COLUMNS)
    bounds = {"source": run[0].source_id, "first": run[0].start, "last": run[-1].start}
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO metering_ingestqueries (source_id, first_start, last_start, queries,"
            " recorded) VALUES (%(source)s, %(first)s, %(last)s, %(queries)s::jsonb, %(now)s)"
            " RETURNING id",
            {**bounds, "queries": json.dumps(queries), "now": now},
        )
        (record,) = cursor.fetchone()
        cursor.execute(
            "UPDATE metering_ingestwindow w SET status = %s, rows_written = v.rows,"
            " queries = '[]', measured_with_id = %s, prometheus_seconds = %s,"
            " samples_seen = v.seen,"
            " samples_expected = v.expected, completeness = v.completeness,"
            " warnings = v.warnings, error = '', content_hash = v.hash,"
            " first_written = v.first_written, changed_after_first_write = v.changed,"
            f" {findings}, updated = %s"
            f" FROM (VALUES {', '.join([row] * len(results))})"
            " AS v(id, rows, seen, expected, completeness, warnings, hash, first_written, changed,"
            f" {', '.join(FINDING_COLUMNS)})"
            " WHERE w.id = v.id",
            [
                IngestWindow.Status.DONE,
                record,
                prometheus_seconds,
                now,
                *(value for result in results for value in result),
            ],
        )
    _unused_queries_delete(**bounds)


def _unused_queries_delete(*, source: int, first: datetime, last: datetime) -> None:
    """The records of queries (`IngestQueries`) of runs over the windows starting in
    [first, last] that no window points at any more. Windows are written under their advisory
    locks, so a run that overlaps these has committed its windows (or not started them): no
    live record is taken for dead."""
    with connection.cursor() as cursor:
        cursor.execute(
            "DELETE FROM metering_ingestqueries q WHERE q.source_id = %(source)s"
            " AND q.first_start <= %(last)s AND q.last_start >= %(first)s"
            " AND NOT EXISTS (SELECT 1 FROM metering_ingestwindow w"
            " WHERE w.measured_with_id = q.id)",
            {"source": source, "first": first, "last": last},
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


# The waits of pods that gave up are read again with their windows (measure._gave_up), so
# they are taken out with them: such a wait belongs to the window after the interval it
# ended in, its end within (S - step, S] for a window starting at S (its last Pending tick's
# slot ends at the latest where that interval does). The waits of scheduled pods are only
# replaced (`_waits_insert`), as they always were.
GAVE_UP_DELETE = (
    "DELETE FROM metering_podwait w USING metering_task t WHERE w.task_id = t.id"
    " AND t.source_id = %(source)s AND w.scheduled IS NULL AND w.ended > %(before)s"
    " AND w.ended <= %(last)s"
)


def _gave_up_span(run: list[IngestWindow]) -> dict[str, Any]:
    """GAVE_UP_DELETE's bounds for consecutive windows (each as long as the first)."""
    return {
        "source": run[0].source_id,
        "before": run[0].start - (run[0].end - run[0].start),
        "last": run[-1].start,
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
    # psycopg's own COPY, wrapped as Django wraps its statements: a row naming no task is an
    # IntegrityError when the statement ends (migration 0017), as it was at the commit.
    with (
        connection.wrap_database_errors,
        cursor.cursor.copy(
            f"COPY metering_usageinterval ({', '.join(USAGE_COLUMNS)}) FROM STDIN"
        ) as copy,
    ):
        copy.write("".join(usage))


def _waits_insert(waits: list[tuple]) -> None:
    """A wait belongs to the window in which it ends: its pod's scheduled time first shows,
    or the pod is gone never scheduled (the window after its last Pending interval). The row
    is keyed by (task, pod, created), so writing it again replaces it, and a later pod of the
    same name (created anew) gets a row of its own."""
    # One row per key: a pod shown gone and then again (never in practice) keeps its later end.
    latest = {row[:3]: row for row in sorted(waits, key=lambda row: (*row[:3], row[4]))}
    for chunk in _chunked(list(latest.values())):
        with connection.cursor() as cursor:
            cursor.execute(
                "INSERT INTO metering_podwait (task_id, pod, created, scheduled, ended, seconds)"
                " SELECT * FROM unnest(%s::bigint[], %s::text[], %s::timestamptz[],"
                " %s::timestamptz[], %s::timestamptz[], %s::int[])"
                " ON CONFLICT (task_id, pod, created) DO UPDATE SET"
                " scheduled = EXCLUDED.scheduled, ended = EXCLUDED.ended,"
                " seconds = EXCLUDED.seconds",
                [list(column) for column in zip(*chunk, strict=True)],
            )


# --- Taking windows back ----------------------------------------------------------------


@dataclass(frozen=True)
class Withdrawn:
    windows: int
    rows: int  # usage, capacity, latency, preemption and wait rows deleted
    start: datetime
    end: datetime


def windows_withdraw(
    *, source: Source, start: datetime, end: datetime, operator: str, reason: str
) -> Withdrawn:
    """Take back a disabled source's windows that overlap [start, end), whole, and all they
    wrote: usage, capacity, latency, preemptions, waits, GPU sightings, the records of the
    queries they were measured with. For a source that should never have metered the span, a
    copy of another (docs/telemetry.md, "One GPU, two sources"). Disabled, beat does not ingest
    them again (enabled again, it would back-fill them), and a month it has no window left in
    is not one of its sources any more (a month it keeps other windows in has the span
    missing). Refused while a sharded ingest of the span is in flight. One
    transaction, under the windows' locks (a running ingest of them finishes first);
    audited with who and why. A closed month keeps its statements: a later close corrects
    it when asked to look again (`close_period --recheck`)."""
    if not reason.strip():
        raise WindowError("taking windows back needs a reason")
    if not operator.strip():
        raise WindowError("taking windows back needs the operator's name")
    with transaction.atomic():
        # Read again, locked: an admin enabling it meanwhile waits, and is seen.
        source = Source.objects.select_for_update().get(pk=source.pk)
        if source.enabled:
            raise WindowError(
                f"source {source.name} is enabled: beat would ingest its windows again;"
                " disable it first"
            )
        # Every window that overlaps the span, whole: a span that cuts one takes all of it.
        windows = list(
            IngestWindow.objects.filter(source=source, start__lt=end, end__gt=start).order_by(
                "start"
            )
        )
        if not windows:
            raise WindowError(
                f"source {source.name} has no window from {start:%Y-%m-%dT%H:%M:%SZ} to"
                f" {end:%Y-%m-%dT%H:%M:%SZ}"
            )
        first, last = windows[0].start, max(window.end for window in windows)
        if IngestBatch.objects.filter(
            source=source, first_start__lt=last, last_start__gte=first
        ).exists():
            raise WindowError(
                f"an ingest of source {source.name} over this span is still in flight (its"
                " shards): take the windows back once it has ended"
            )
        ids = [window.pk for window in windows]
        _windows_lock(ids)
        # Every interval starting in the windows' span (RUN_DELETES reads `last` as the last
        # interval start, whatever the windows' length).
        span = {
            "source": source.pk,
            "first": first,
            "last": last - timedelta(microseconds=1),
            "end": last,
        }
        rows = 0
        with connection.cursor() as cursor:
            for table in RUN_DELETES:
                cursor.execute(RUN_DELETES[table], span)
                rows += cursor.rowcount
            cursor.execute(
                "DELETE FROM metering_podwait w USING metering_task t WHERE w.task_id = t.id"
                " AND t.source_id = %(source)s AND w.scheduled IS NOT NULL"
                " AND w.ended >= %(first)s AND w.ended < %(end)s",
                span,
            )
            rows += cursor.rowcount
            cursor.execute(
                GAVE_UP_DELETE,
                {**_gave_up_span(windows[:1]), "last": windows[-1].start},
            )
            rows += cursor.rowcount
        _sightings_replace([(window, WindowRows()) for window in windows])  # counting none
        IngestWindow.objects.filter(pk__in=ids).delete()
        _unused_queries_delete(source=source.pk, first=first, last=windows[-1].start)
        audit_record(
            action="change",
            obj=source,
            changes={
                "withdrawn_windows": len(ids),
                "rows": rows,
                "from": first,
                "to": last,
                "withdrawn_by": operator,
                "reason": reason.strip(),
            },
            force=True,
        )
    return Withdrawn(windows=len(ids), rows=rows, start=first, end=last)
