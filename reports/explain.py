"""Explain a charge: for one statement line, the tasks behind it, the metered intervals that
made their share, and the PromQL and time range those intervals were read with.

Which intervals belong to a line follows docs/pricing.md: the baseline and inference usage come
from every interval of inference tasks; training usage at the standard rate from peak
intervals, at the off-peak rate from off-peak intervals; an SLA penalty from the penalized
breach intervals; compensation from the task's preemptions. A correction line is explained by
the month it corrects.

The PromQL is what the ingest windows recorded when they ran (IngestQueries, one per run of
windows; IngestWindow.queries for windows written before); for windows that recorded none,
the meter's query is rebuilt from the source's mapping.
`query_range` names the evaluation times: a value at T covers the interval (T - step, T] and
is stored under T - step (docs/telemetry.md), so the range runs from the first interval's end to
the last one's.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import asdict, dataclass, field
from decimal import Decimal
from zoneinfo import ZoneInfo

from django.conf import settings
from django.db.models import Count, Max, Min, Q, QuerySet, Sum
from django.db.models.functions import ExtractHour

from billing.models import (
    LineKind,
    PeriodClose,
    PriceBook,
    SlaBreach,
    StatementLine,
    StatementLineTask,
)
from kernel.money import exact_total
from kernel.period import time_zone
from kernel.tasks import TRAINING_KINDS
from metering import sources
from metering.models import IngestQueries, IngestWindow, Preemption, Source, UsageInterval
from reports.rows import Period, close_period_bounds, period_bounds

# Which meters produce the numbers behind each line kind.
# The meters (metering.sources.METERS) whose PromQL produced the facts behind each line kind:
# allocation comes from the GPU exporter's device series, preemptions from the pods' identity
# (kube-state-metrics' status reason) and SLA breaches from the latency histograms.
LINE_METERS = {
    LineKind.BASELINE: ("devices",),
    LineKind.STANDARD: ("devices",),
    LineKind.OFFPEAK: ("devices",),
    LineKind.SLA_PENALTY: ("devices", "latency"),
    LineKind.SLA_CREDIT: ("latency",),
    LineKind.COMPENSATION: ("identity",),
}
MAX_INTERVALS_SHOWN = 2000  # per task, when one task's intervals are asked for


@dataclass
class QueryRange:
    meter: str
    promql: str
    start: dt.datetime  # first evaluation time
    end: dt.datetime  # last evaluation time
    step_seconds: int
    recorded: bool  # True: the text an ingest window ran; False: rebuilt from the source


@dataclass
class IntervalUsage:
    interval_start: dt.datetime
    alloc_gpu_seconds: Decimal
    busy_gpu_seconds: Decimal


@dataclass
class Contributor:
    contribution_id: int
    task_id: int | None
    task: str | None
    kind: str | None
    service_id: int | None
    service: str | None
    gpu_seconds: Decimal | None
    amount_unrounded: Decimal
    selection: str  # which intervals or events count for this line
    intervals: int = 0
    alloc_gpu_seconds: Decimal = Decimal(0)
    busy_gpu_seconds: Decimal = Decimal(0)
    first_interval: dt.datetime | None = None
    last_interval: dt.datetime | None = None
    preemptions: list[dict] = field(default_factory=list)
    interval_usage: list[IntervalUsage] | None = None


@dataclass
class ClassShare:
    """A GPU class's part of the line (docs/pricing.md "GPU classes"), exact."""

    gpu_class: str
    quantity_gpu_hours: Decimal
    rate_per_gpu_hour: Decimal | None
    amount_unrounded: Decimal


@dataclass
class Explanation:
    line_id: int
    period: str
    team: str
    kind: str
    description: str
    is_correction: bool
    corrects_period: str
    currency: str
    quantity_gpu_hours: Decimal | None
    rate_per_gpu_hour: Decimal | None
    amount_unrounded: Decimal
    amount: Decimal
    range_start: dt.datetime
    range_end: dt.datetime
    timezone: str
    peak_hours: list[int]
    peak_timezone: str  # the clock of the peak hours: the zone of the book that priced the line
    step_seconds: int
    contributors: list[Contributor]
    queries: list[QueryRange]
    ingest_windows: int
    # Empty when the line was priced in `default` alone (or has no classes: latency lines).
    classes: list[ClassShare] = field(default_factory=list)

    @property
    def contributions_sum(self) -> Decimal:
        return exact_total(c.amount_unrounded for c in self.contributors)

    def as_json(self) -> dict:
        """JSON-ready: decimals as strings, instants as ISO 8601 UTC."""
        return _jsonable(asdict(self)) | {"contributions_sum": str(self.contributions_sum)}


def _jsonable(value):
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, dt.datetime):
        return value.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")
    if isinstance(value, dict):
        return {key: _jsonable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(item) for item in value]
    return value


def _line_month(line: StatementLine) -> tuple[Period, PriceBook]:
    """The range a line priced and the book it was priced with. A correction re-prices its
    month on that month's own bounds (kept by its close, whatever the pool's zone is now)
    and with that month's own book, not the correcting close's."""
    close = line.statement.period_close
    if line.is_correction:
        corrected = (
            PeriodClose.objects.select_related("price_book")
            .filter(period=line.corrects_period)
            .first()
        )
        if corrected is not None:
            return close_period_bounds(corrected), corrected.price_book
        return period_bounds(line.corrects_period, timezone=close.timezone), close.price_book
    return close_period_bounds(close), close.price_book


def _peak_q(peak_hours: list[int], zone: ZoneInfo) -> tuple[dict, Q]:
    """An annotation of the local hour and the filter 'interval starts in peak hours', as the
    engine's `PriceBook.is_peak_hour` decides it: start > end wraps midnight ([22, 6] is
    22:00 to 06:00), start = end is no peak hour at all."""
    start, end = peak_hours
    if start < end:
        peak = Q(local_hour__gte=start, local_hour__lt=end)
    elif start > end:
        peak = Q(local_hour__gte=start) | Q(local_hour__lt=end)
    else:
        peak = Q(pk__in=[])
    return {"local_hour": ExtractHour("interval_start", tzinfo=zone)}, peak


def _selection(line: StatementLine, kind: str | None) -> str:
    training = kind in TRAINING_KINDS
    return {
        LineKind.BASELINE: "every interval (the covered part of the reserve)",
        LineKind.STANDARD: "peak intervals" if training else "every interval (beyond the reserve)",
        LineKind.OFFPEAK: "off-peak intervals",
        LineKind.SLA_PENALTY: "penalized SLA breach intervals",
        LineKind.SLA_CREDIT: "penalized SLA breach intervals of the service",
        LineKind.COMPENSATION: "preemptions beyond the threshold",
    }[LineKind(line.kind)]


def _usage_rows(
    line: StatementLine, period: Period, task_ids: list[int], book: PriceBook
) -> QuerySet:
    """Usage rows of `task_ids` in the period that this line's kind draws on."""
    rows = UsageInterval.objects.filter(
        task_id__in=task_ids, interval_start__gte=period.start, interval_start__lt=period.end
    )
    # The engine reads peak hours on the book's clock (pricing.md "Derived rates"), which
    # need not be the pool's zone the month's bounds were taken on.
    annotation, peak = _peak_q(list(book.peak_hours), time_zone(book.timezone))
    if line.kind == LineKind.OFFPEAK:
        return rows.annotate(**annotation).exclude(peak)
    if line.kind == LineKind.STANDARD:
        # Training tasks pay the standard rate only in peak hours; inference every interval.
        return rows.annotate(**annotation).filter(peak | ~Q(task__kind__in=TRAINING_KINDS))
    if line.kind == LineKind.SLA_PENALTY:
        breaches = SlaBreach.objects.filter(
            period_close__period=period.label, penalized=True
        ).values("interval_start")
        return rows.filter(interval_start__in=breaches)
    return rows


def _fill_usage(
    line: StatementLine, period: Period, contributors: list[Contributor], book: PriceBook
) -> None:
    by_task = {c.task_id: c for c in contributors if c.task_id is not None}
    if not by_task or line.kind in (LineKind.COMPENSATION, LineKind.SLA_CREDIT):
        return
    summary = (
        _usage_rows(line, period, list(by_task), book)
        .values("task_id")
        .annotate(
            n=Count("id"),
            alloc=Sum("alloc_gpu_seconds"),
            busy=Sum("busy_gpu_seconds"),
            first=Min("interval_start"),
            last=Max("interval_start"),
        )
        .order_by()
    )
    for row in summary:
        contributor = by_task[row["task_id"]]
        contributor.intervals = row["n"]
        contributor.alloc_gpu_seconds = row["alloc"]
        contributor.busy_gpu_seconds = row["busy"]
        contributor.first_interval, contributor.last_interval = row["first"], row["last"]


def _fill_interval_usage(
    line: StatementLine, period: Period, contributor: Contributor, book: PriceBook
) -> None:
    rows = (
        _usage_rows(line, period, [contributor.task_id], book)
        .order_by("interval_start")
        .values_list("interval_start", "alloc_gpu_seconds", "busy_gpu_seconds")
    )[:MAX_INTERVALS_SHOWN]
    contributor.interval_usage = [IntervalUsage(*row) for row in rows]


def _fill_preemptions(period: Period, contributors: list[Contributor]) -> None:
    by_task = {c.task_id: c for c in contributors if c.task_id is not None}
    events = Preemption.objects.filter(
        task_id__in=list(by_task), at__gte=period.start, at__lt=period.end
    ).order_by("task_id", "at")
    for event in events:
        by_task[event.task_id].preemptions.append(
            {
                "at": event.at,
                "pod": event.pod,
                "gpus": event.gpus,
                "seconds_since_start": event.seconds_since_start,
                "lost_gpu_seconds": event.lost_gpu_seconds,
            }
        )


def _queries(line: StatementLine, period: Period, source_ids: set[int], step: int) -> tuple:
    """The PromQL behind the line's meters, recorded by the windows or rebuilt, and the range."""
    meters = LINE_METERS[LineKind(line.kind)]
    windows = IngestWindow.objects.filter(
        source_id__in=source_ids, start__lt=period.end, end__gt=period.start
    )
    count = windows.count()
    recorded: dict[str, str] = {}
    runs = IngestQueries.objects.filter(pk__in=windows.values("measured_with")).order_by(
        "first_start"
    )
    older = windows.exclude(queries=[])  # written before runs recorded their queries once
    for queries in [
        *runs.values_list("queries", flat=True)[:50],
        *older.values_list("queries", flat=True)[:50],
    ]:
        for query in queries or []:
            name, promql = query.get("name") or query.get("meter"), query.get("promql")
            if name in meters and promql and name not in recorded:
                recorded[name] = promql
    first_evaluation = period.start + dt.timedelta(seconds=step)
    result = []
    for source in Source.objects.filter(pk__in=source_ids).order_by("name"):
        try:
            plan = sources.query_plan_for(source, step_seconds=step)
        except sources.SourceConfigurationError:
            plan = None
        for meter in meters:
            promql = recorded.get(meter) or (sources.METERS[meter](plan) if plan else "")
            if promql:
                result.append(
                    QueryRange(meter, promql, first_evaluation, period.end, step, meter in recorded)
                )
    return result, count


def statement_line_explain(*, line: StatementLine, task_id: int | None = None) -> Explanation:
    """Everything behind `line`; with `task_id`, that task's intervals one by one too."""
    statement = line.statement
    period, book = _line_month(line)
    step = settings.TANDEM_STEP_SECONDS
    contributions = StatementLineTask.objects.filter(line=line).select_related("task", "service")
    contributors = [
        Contributor(
            contribution_id=c.pk,
            task_id=c.task_id,
            task=c.task.external_id if c.task else None,
            kind=c.task.kind if c.task else None,
            service_id=c.service_id,
            service=c.service.external_id if c.service else None,
            gpu_seconds=c.gpu_seconds,
            amount_unrounded=c.amount_unrounded,
            selection=_selection(line, c.task.kind if c.task else None),
        )
        for c in contributions.order_by("-amount_unrounded", "id")
    ]
    _fill_usage(line, period, contributors, book)
    if line.kind == LineKind.COMPENSATION:
        _fill_preemptions(period, contributors)
    for contributor in contributors:
        if task_id is not None and contributor.task_id == task_id:
            _fill_interval_usage(line, period, contributor, book)
    source_ids = {c.task.source_id for c in contributions if c.task} | {
        c.service.source_id for c in contributions if c.service
    }
    queries, windows = _queries(line, period, source_ids, step)
    return Explanation(
        line_id=line.pk,
        period=statement.period,
        team=statement.team.name,
        kind=line.kind,
        description=line.description,
        is_correction=line.is_correction,
        corrects_period=line.corrects_period,
        currency=statement.currency,
        quantity_gpu_hours=line.quantity_gpu_hours,
        rate_per_gpu_hour=line.rate_per_gpu_hour,
        amount_unrounded=line.amount_unrounded,
        amount=line.amount,
        range_start=period.start,
        range_end=period.end,
        timezone=period.timezone,
        peak_hours=list(book.peak_hours),
        peak_timezone=book.timezone,
        step_seconds=step,
        contributors=contributors,
        queries=queries,
        ingest_windows=windows,
        classes=[
            ClassShare(
                gpu_class=part.gpu_class,
                quantity_gpu_hours=part.quantity_gpu_hours,
                rate_per_gpu_hour=part.rate_per_gpu_hour,
                amount_unrounded=part.amount_unrounded,
            )
            for part in line.class_parts
        ],
    )
