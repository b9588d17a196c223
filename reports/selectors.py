"""Reads behind the health numbers, the sharing analytics and the usage summary.

Each function takes a half-open range `[start, end)` of aware datetimes over interval starts
(usage, capacity, latency), preemption times and pod scheduling times, and an optional team
queryset (`access.selectors.visible_teams`): None means every team. The database aggregates;
`reports/health.py` does the arithmetic that SQL cannot do exactly (quantiles, correlations).
A fixed number of queries per call, whatever the number of rows or groups.
"""

from __future__ import annotations

import datetime as dt
import operator
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal

from django.db import connection
from django.db.models import (
    Case,
    Count,
    DecimalField,
    Expression,
    F,
    IntegerField,
    Max,
    Q,
    QuerySet,
    Sum,
    Value,
    When,
)
from django.db.models.functions import Coalesce, ExtractHour, Least, TruncDay
from django.db.models.lookups import GreaterThan, GreaterThanOrEqual

from billing.defaults import DEFAULT_PRICE_BOOK
from billing.selectors import (
    PriceBookNotFound,
    SlaTerms,
    pool_timezone,
    price_book_in_force,
    sla_terms_billed_in,
)
from kernel.breach import p99_breached
from kernel.histogram import parse_bound
from kernel.lost_work import lost_gpu_seconds
from kernel.tasks import INTERRUPTIBLE_KINDS, TRAINING_KINDS
from metering.models import (
    IngestWindow,
    LatencyInterval,
    PodWait,
    Preemption,
    Service,
    Source,
    Task,
    Team,
)
from metering.selectors import (
    LocalHourStart,
    capacity_parts,
    enough_requests_condition,
    kueue_admissions,
    range_split,
    team_usage_parts,
    usage_parts,
)
from metering.services import latency_p99
from reports import health

# docs/pricing.md's example book: used when no price book is in force for the period.
DEFAULT_SLA_MIN_REQUESTS = DEFAULT_PRICE_BOOK["sla_min_requests"]
DEFAULT_LOST_WORK_CAP_SECONDS = DEFAULT_PRICE_BOOK["starvation_lost_work_cap_seconds"]

GROUP_BY_CHOICES = ("team", "task", "kind", "day", "hour")
ZERO = Decimal(0)
GPU_SECONDS = DecimalField(max_digits=30, decimal_places=6)


@dataclass(frozen=True)
class PriceBookTerms:
    """The few price-book terms the health numbers depend on."""

    sla_min_requests: int = DEFAULT_SLA_MIN_REQUESTS
    lost_work_cap_seconds: int = DEFAULT_LOST_WORK_CAP_SECONDS


def price_book_terms(at: dt.datetime) -> PriceBookTerms:
    """Terms of the book in force at `at`, or docs/pricing.md's example values without one."""
    try:
        book = price_book_in_force(at)
    except PriceBookNotFound:
        return PriceBookTerms()
    return PriceBookTerms(
        sla_min_requests=book.sla_min_requests,
        lost_work_cap_seconds=book.starvation_lost_work_cap_seconds,
    )


def sla_terms(start: dt.datetime, end: dt.datetime) -> SlaTerms:
    """A range within a closed month is judged by the terms it was billed by
    (`billing.selectors.sla_terms_billed_in`), so a page shows the breaches its statements
    billed, not those of an SLO stated or a book published since; any other range by today's
    SLOs and the book in force at its start."""
    billed = sla_terms_billed_in(start, end)
    if billed is None:
        return SlaTerms(slos={}, min_requests=price_book_terms(start).sla_min_requests)
    return billed


def _team_filter(teams: QuerySet[Team] | None, path: str = "task__team") -> Q:
    return Q() if teams is None else Q(**{f"{path}__in": teams})


# --- The three health numbers -----------------------------------------------------------


def utilization(*, start: dt.datetime, end: dt.datetime) -> health.Utilization:
    """Pool-wide: busy GPU-seconds of every task over the GPUs present."""
    busy = sum(
        (
            rows.aggregate(v=Sum("busy_gpu_seconds"))["v"] or ZERO
            for rows, _ in team_usage_parts(start=start, end=end)
        ),
        ZERO,
    )
    capacity = sum(
        (
            rows.aggregate(v=Sum("capacity_gpu_seconds"))["v"] or ZERO
            for rows, _ in capacity_parts(start=start, end=end)
        ),
        ZERO,
    )
    return health.Utilization(busy_gpu_seconds=busy, capacity_gpu_seconds=capacity)


def service_latencies(
    *,
    start: dt.datetime,
    end: dt.datetime,
    teams: QuerySet[Team] | None = None,
    min_requests: int = DEFAULT_SLA_MIN_REQUESTS,
    slos: Mapping[int, int] | None = None,
) -> list[health.ServiceLatency]:
    """Every key service (also those without traffic in the range), P99 from merged buckets;
    each judged by its SLO in `slos` (by primary key: a closed month's terms), else its own.

    Three queries whatever the range, none of which sends an interval's buckets to Python:
    intervals and breaches are counted in SQL on the P99 stored at ingest (docs/pricing.md rule 4:
    enough requests and the interval's own P99 above the objective), and the buckets are
    summed in SQL per service and bound, leaving one quantile per service for Python. Rows
    written without a stored P99 (raw SQL loads) are judged from their buckets instead, one
    more query per service that has such rows.
    """
    services = list(
        Service.objects.filter(_team_filter(teams, "team"), is_key=True)
        .select_related("team")
        .order_by("external_id", "id")
    )
    if not services:
        return []
    ids = [s.id for s in services]
    slo_of = {s.id: (slos or {}).get(s.id, s.slo_p99_ms) for s in services}
    counts = _latency_counts(
        ids=ids, start=start, end=end, min_requests=min_requests, slos=slos or {}
    )
    merged = _merged_buckets(ids=ids, start=start, end=end, intervals=counts)
    result = []
    for s in services:
        intervals, breached, unstored = counts.get(s.id, (0, 0, 0))
        if unstored:
            breached += _unstored_breaches(
                service_id=s.id,
                start=start,
                end=end,
                slo_p99_ms=slo_of[s.id],
                min_requests=min_requests,
            )
        buckets = merged.get(s.id, [])
        p99 = latency_p99(buckets)
        result.append(
            health.ServiceLatency(
                service_id=s.id,
                service=s.external_id,
                team=s.team.name,
                slo_p99_ms=slo_of[s.id],
                p99_ms=None if p99 is None else p99 * 1000,
                requests=Decimal(buckets[-1][1]) if buckets else ZERO,
                intervals=intervals,
                breached_intervals=breached,
            )
        )
    return result


def stored_p99_breach_condition(slo_p99_ms: Expression | F, min_requests: int) -> Q:
    """`kernel.breach.p99_breached` over a LatencyInterval's stored P99, evaluated by the
    database (docs/pricing.md rule 4): enough requests and the stored P99 in milliseconds
    strictly above `slo_p99_ms` (a column or a `Value`). A NULL P99 makes it NULL: not breached."""
    return p99_breached(
        requests=F("request_count"),
        p99_seconds=F("p99_seconds"),
        slo_p99_ms=slo_p99_ms,
        min_requests=min_requests,
        at_least=GreaterThanOrEqual,
        above=GreaterThan,
        both=operator.and_,
    )


def _latency_counts(
    *,
    ids: list[int],
    start: dt.datetime,
    end: dt.datetime,
    min_requests: int,
    slos: Mapping[int, int],
) -> dict[int, tuple[int, int, int]]:
    """Per service: intervals, intervals breached by their stored P99 (against its SLO in
    `slos`, else its own), and intervals that may breach but have no stored P99 (enough
    requests, `p99_seconds` null)."""
    slo: Expression | F = F("service__slo_p99_ms")
    if slos:
        whens = [When(service_id=pk, then=Value(ms)) for pk, ms in sorted(slos.items())]
        slo = Case(*whens, default=F("service__slo_p99_ms"), output_field=IntegerField())
    rows = (
        LatencyInterval.objects.filter(
            service_id__in=ids, interval_start__gte=start, interval_start__lt=end
        )
        .values("service_id")
        .annotate(
            n=Count("id"),
            breached=Count("id", filter=stored_p99_breach_condition(slo, min_requests)),
            unstored=Count(
                "id", filter=enough_requests_condition(min_requests) & Q(p99_seconds__isnull=True)
            ),
        )
        .order_by()
    )
    return {r["service_id"]: (r["n"], r["breached"], r["unstored"]) for r in rows}


def _unstored_breaches(
    *, service_id: int, start: dt.datetime, end: dt.datetime, slo_p99_ms: int, min_requests: int
) -> int:
    """Breaches among a service's intervals with enough requests and no stored P99."""
    rows = LatencyInterval.objects.filter(
        enough_requests_condition(min_requests),
        service_id=service_id,
        interval_start__gte=start,
        interval_start__lt=end,
        p99_seconds__isnull=True,
    ).values_list("request_count", "buckets")
    breached = 0
    for requests, buckets in rows.iterator(chunk_size=5000):
        breached += p99_breached(
            requests=requests,
            p99_seconds=latency_p99(buckets),
            slo_p99_ms=slo_p99_ms,
            min_requests=min_requests,
        )
    return breached


# Sum of each bound's counts per service, and in how many intervals the bound appears: from
# the hourly rollup (the sums are kept there), or from the intervals' own buckets.
_MERGED_HOURLY_BUCKETS_SQL = """
SELECT service_id, le, sum(count), sum(intervals)
FROM metering_latencyhourbucket
WHERE service_id = ANY(%s) AND hour_start >= %s AND hour_start < %s
GROUP BY service_id, le
"""
_MERGED_BUCKETS_SQL = """
SELECT l.service_id, b.bucket ->> 0, sum((b.bucket ->> 1)::numeric), count(*)
FROM metering_latencyinterval l
CROSS JOIN LATERAL jsonb_array_elements(l.buckets) AS b(bucket)
WHERE l.service_id = ANY(%s) AND l.interval_start >= %s AND l.interval_start < %s
GROUP BY l.service_id, b.bucket ->> 0
"""


def _merged_buckets(
    *,
    ids: list[int],
    start: dt.datetime,
    end: dt.datetime,
    intervals: dict[int, tuple[int, int, int]],
) -> dict[int, list[list[object]]]:
    """Each service's buckets summed over the range, as stored (`[[le, count], ...]`).

    Like `health.merge_buckets`: when a service's layout changed inside the range, only the
    bounds present in every interval are kept (summing a bound some intervals lack would
    under-count it and bend the quantile).
    """
    # The quantile needs no grouping by local time: whole UTC hours are enough. The rollup's
    # hours and the edges' intervals give sums and presence counts that simply add up.
    split = range_split(start=start, end=end, zone="UTC")
    queries = [(_MERGED_BUCKETS_SQL, [ids, first, last]) for first, last in split.edges]
    if split.hours:
        queries.append((_MERGED_HOURLY_BUCKETS_SQL, [ids, *split.hours]))
    rows = []
    with connection.cursor() as cursor:
        for sql, parameters in queries:
            cursor.execute(sql, parameters)
            rows.extend(cursor.fetchall())
    bounds: dict[int, dict[Decimal, list]] = {}
    for service_id, le, total, seen in rows:
        bound = parse_bound(le)
        # "1" and "1.0" are the same bound: add them up before checking presence.
        entry = bounds.setdefault(service_id, {}).setdefault(bound, [ZERO, 0])
        entry[0] += total
        entry[1] += seen
    return {
        service_id: [
            [le, count]
            for le, (count, seen) in sorted(per_bound.items())
            if seen == intervals[service_id][0]
        ]
        for service_id, per_bound in bounds.items()
    }


def waits(
    *, start: dt.datetime, end: dt.datetime, teams: QuerySet[Team] | None = None
) -> health.Waits:
    """Waits of pods that ended in the range (scheduled, or gone never scheduled: they gave
    up waiting), per task kind; and, for the whole pool, Kueue's admissions in the range with
    their waits. Kueue counts those per cluster queue, not per team: narrowed to `teams`, the
    waits are the pods' only."""
    rows = (
        PodWait.objects.filter(_team_filter(teams), ended__gte=start, ended__lt=end)
        .values("task__kind")
        .annotate(
            n=Count("id"), total=Sum("seconds"), gave_up=Count("id", filter=Q(scheduled=None))
        )
        .order_by("task__kind")
    )
    per_kind = {
        row["task__kind"]: health.MeanWait(
            waits=row["n"], total_seconds=Decimal(row["total"]), gave_up=row["gave_up"]
        )
        for row in rows
    }
    if teams is not None:
        return health.Waits(per_kind=per_kind)
    admissions = kueue_admissions(start=start, end=end)
    return health.Waits(
        per_kind=per_kind,
        admissions={
            a.kind: health.MeanWait(waits=a.workloads, total_seconds=a.seconds)
            for a in admissions.per_kind
        },
        admissions_unread=bool(admissions.windows_unread),
    )


def health_numbers(
    *, start: dt.datetime, end: dt.datetime, teams: QuerySet[Team] | None = None
) -> health.HealthNumbers:
    """Utilization is the pool's; services and waits are narrowed to `teams` when given. A
    closed month's services are judged by the terms it was billed by (`sla_terms`)."""
    terms = sla_terms(start, end)
    return health.HealthNumbers(
        utilization=utilization(start=start, end=end),
        services=service_latencies(
            start=start, end=end, teams=teams, min_requests=terms.min_requests, slos=terms.slos
        ),
        waits=waits(start=start, end=end, teams=teams),
    )


def health_comparison(
    *,
    before: tuple[dt.datetime, dt.datetime],
    after: tuple[dt.datetime, dt.datetime],
    teams: QuerySet[Team] | None = None,
) -> tuple[health.HealthNumbers, health.HealthNumbers, health.Verdict]:
    earlier = health_numbers(start=before[0], end=before[1], teams=teams)
    later = health_numbers(start=after[0], end=after[1], teams=teams)
    return earlier, later, health.verdict(earlier, later)


# --- Sharing analytics ------------------------------------------------------------------


def lost_gpu_seconds_expression(cap_seconds: int) -> Coalesce:
    """`kernel.lost_work.lost_gpu_seconds` over a Preemption's columns, evaluated by the
    database: reported loss, else min(cap, run time) * GPUs. Sums over a month of
    preemptions stay one query; the rule itself is the kernel's."""
    return lost_gpu_seconds(
        reported=F("lost_gpu_seconds"),
        seconds_since_start=F("seconds_since_start"),
        gpus=F("gpus"),
        cap_seconds=Value(cap_seconds),
        reported_else=lambda reported, assumed: Coalesce(
            reported, assumed, output_field=GPU_SECONDS
        ),
        least=Least,
    )


def lost_gpu_seconds_per_team(
    *, start: dt.datetime, end: dt.datetime, teams: QuerySet[Team] | None = None
) -> dict[str, Decimal]:
    cap = price_book_terms(start).lost_work_cap_seconds
    rows = (
        Preemption.objects.filter(_team_filter(teams), at__gte=start, at__lt=end)
        .values("task__team__name")
        .annotate(lost=Sum(lost_gpu_seconds_expression(cap)))
        .order_by("task__team__name")
    )
    return {row["task__team__name"]: row["lost"] for row in rows}


def hourly_profile(*, start: dt.datetime, end: dt.datetime) -> list[health.HourProfile]:
    """Pool-wide GPU-seconds held by training and by inference per local hour of day."""
    zone = pool_timezone()
    is_training = Q(kind__in=TRAINING_KINDS)
    training: dict[int, Decimal] = defaultdict(Decimal)
    inference: dict[int, Decimal] = defaultdict(Decimal)
    for usage_rows, usage_time in team_usage_parts(start=start, end=end):
        usage = (
            usage_rows.annotate(hour=ExtractHour(usage_time, tzinfo=zone))
            .values("hour")
            .annotate(
                training=Sum("alloc_gpu_seconds", filter=is_training),
                inference=Sum("alloc_gpu_seconds", filter=~is_training),
            )
        )
        for row in usage:
            training[row["hour"]] += row["training"] or ZERO
            inference[row["hour"]] += row["inference"] or ZERO
    present: dict[int, Decimal] = defaultdict(Decimal)
    for capacity_rows, time_field in capacity_parts(start=start, end=end):
        capacity = (
            capacity_rows.annotate(hour=ExtractHour(time_field, tzinfo=zone))
            .values("hour")
            .annotate(total=Sum("capacity_gpu_seconds"))
        )
        for row in capacity:
            present[row["hour"]] += row["total"]
    return [
        health.HourProfile(
            hour=h,
            capacity_gpu_seconds=present.get(h, ZERO),
            training_gpu_seconds=training.get(h, ZERO),
            inference_gpu_seconds=inference.get(h, ZERO),
        )
        for h in range(24)
    ]


def sharing_analytics(
    *, start: dt.datetime, end: dt.datetime, teams: QuerySet[Team] | None = None
) -> health.SharingAnalytics:
    """The profile and the interruptible share are the pool's; preemption cost per team."""
    allocated = interruptible = ZERO
    for usage_rows, _ in team_usage_parts(start=start, end=end):
        totals = usage_rows.aggregate(
            allocated=Sum("alloc_gpu_seconds"),
            interruptible=Sum("alloc_gpu_seconds", filter=Q(kind__in=INTERRUPTIBLE_KINDS)),
        )
        allocated += totals["allocated"] or ZERO
        interruptible += totals["interruptible"] or ZERO
    return health.SharingAnalytics(
        profile=hourly_profile(start=start, end=end),
        interruptible_gpu_seconds=interruptible,
        allocated_gpu_seconds=allocated,
        lost_gpu_seconds_per_team=lost_gpu_seconds_per_team(start=start, end=end, teams=teams),
    )


# --- Usage summary ----------------------------------------------------------------------

# Groupings that follow from the task: the database sums per task only (a month of a large
# pool is millions of rows, and joining them to tasks and teams doubles the work), and the
# few hundred task sums are rolled up to team or kind here.
TASK_GROUPINGS = ("team", "task", "kind")


@dataclass
class UsageRow:
    key: str
    team: str | None = None
    task_id: int | None = None
    task: str | None = None
    kind: str | None = None
    start: dt.datetime | None = None
    allocated_gpu_seconds: Decimal = ZERO
    busy_gpu_seconds: Decimal = ZERO
    memory_peak_bytes: int = 0
    memory_byte_intervals: int = 0  # sum of per-interval average bytes, for the mean
    usage_intervals: int = 0
    read_operations: int = 0
    write_operations: int = 0
    read_bytes: int = 0
    write_bytes: int = 0
    preemptions: int = 0
    lost_gpu_seconds: Decimal = ZERO
    waits: int = 0
    wait_seconds: int = 0

    @property
    def memory_avg_bytes(self) -> int:
        """Mean of the per-task-interval averages, rounded half up to a whole byte."""
        if not self.usage_intervals:
            return 0
        return (2 * self.memory_byte_intervals + self.usage_intervals) // (2 * self.usage_intervals)

    @property
    def mean_wait_seconds(self) -> Decimal | None:
        return health.ratio(Decimal(self.wait_seconds), Decimal(self.waits))

    def add(self, other: UsageRow) -> None:
        """Fold another part of the same group in (sums, and the peak's maximum)."""
        for name in SUMMED:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.memory_peak_bytes = max(self.memory_peak_bytes, other.memory_peak_bytes)


SUMMED = (
    "allocated_gpu_seconds",
    "busy_gpu_seconds",
    "memory_byte_intervals",
    "usage_intervals",
    "read_operations",
    "write_operations",
    "read_bytes",
    "write_bytes",
    "preemptions",
    "lost_gpu_seconds",
    "waits",
    "wait_seconds",
)


def _group_column(group_by: str, time_field: str) -> F | TruncDay | LocalHourStart:
    if group_by in TASK_GROUPINGS:
        return F("task_id")
    if group_by == "day":
        return TruncDay(time_field, tzinfo=pool_timezone())
    if group_by == "hour":
        # Not TruncHour: it adds up the hour a zone repeats when it falls back (two hours'
        # GPU-seconds in one row).
        return LocalHourStart(time_field, pool_timezone().key)
    raise ValueError(f"group_by must be one of {GROUP_BY_CHOICES}, got {group_by!r}")


def _parts(
    *, start: dt.datetime, end: dt.datetime, group_by: str, teams_q: Q
) -> dict[object, UsageRow]:
    """One partial row per task (task groupings) or per local day or hour, three queries."""
    parts: dict[object, UsageRow] = {}

    def part(group: object) -> UsageRow:
        return parts.setdefault(group, UsageRow(key=""))

    for sums in usage_parts(start=start, end=end):  # rollup hours, interval edges: add up
        usage = (
            sums.rows.filter(teams_q)
            .values(group=_group_column(group_by, sums.time_field))
            .annotate(
                alloc=Sum("alloc_gpu_seconds"),
                busy=Sum("busy_gpu_seconds"),
                peak=Max("memory_peak_bytes"),
                memory=sums.memory_avg_bytes_sum,
                n=sums.intervals,
                reads=Sum("read_operations"),
                writes=Sum("write_operations"),
                read_bytes=Sum("read_bytes"),
                write_bytes=Sum("write_bytes"),
            )
            .order_by()
        )
        for v in usage:
            part(v["group"]).add(
                UsageRow(
                    key="",
                    allocated_gpu_seconds=v["alloc"],
                    busy_gpu_seconds=v["busy"],
                    memory_peak_bytes=v["peak"],
                    memory_byte_intervals=int(v["memory"]),
                    usage_intervals=v["n"],
                    read_operations=int(v["reads"]),
                    write_operations=int(v["writes"]),
                    read_bytes=int(v["read_bytes"]),
                    write_bytes=int(v["write_bytes"]),
                )
            )
    cap = price_book_terms(start).lost_work_cap_seconds
    preemptions = (
        Preemption.objects.filter(teams_q, at__gte=start, at__lt=end)
        .values(group=_group_column(group_by, "at"))
        .annotate(n=Count("id"), lost=Sum(lost_gpu_seconds_expression(cap)))
        .order_by()
    )
    for v in preemptions:
        row = part(v["group"])
        row.preemptions, row.lost_gpu_seconds = v["n"], v["lost"]
    pod_waits = (
        PodWait.objects.filter(teams_q, ended__gte=start, ended__lt=end)
        .values(group=_group_column(group_by, "ended"))
        .annotate(n=Count("id"), seconds=Sum("seconds"))
        .order_by()
    )
    for v in pod_waits:
        row = part(v["group"])
        row.waits, row.wait_seconds = v["n"], v["seconds"]
    return parts


def _by_task(parts: dict[object, UsageRow], group_by: str) -> list[UsageRow]:
    """Roll per-task parts up to tasks, teams or kinds (one query for the tasks' names)."""
    tasks = Task.objects.filter(pk__in=list(parts)).values_list(
        "id", "external_id", "team__name", "kind"
    )
    rows: dict[object, UsageRow] = {}
    for task_id, external_id, team, kind in tasks:
        key = {"team": team, "kind": kind, "task": task_id}[group_by]
        if key not in rows:
            rows[key] = (
                UsageRow(key=external_id, team=team, task_id=task_id, task=external_id, kind=kind)
                if group_by == "task"
                else UsageRow(key=key, team=team if group_by == "team" else None)
            )
            if group_by == "kind":
                rows[key].kind = kind
        rows[key].add(parts[task_id])
    return sorted(rows.values(), key=lambda r: (r.key, r.task_id or 0))


def _by_time(parts: dict[object, UsageRow], group_by: str) -> list[UsageRow]:
    rows = []
    for moment, part in sorted(parts.items()):
        local = moment.astimezone(pool_timezone())
        part.start = local
        part.key = local.date().isoformat() if group_by == "day" else local.isoformat()
        rows.append(part)
    return rows


def usage_rows(
    *,
    start: dt.datetime,
    end: dt.datetime,
    group_by: str,
    teams: QuerySet[Team] | None = None,
) -> list[UsageRow]:
    """Allocated and busy GPU-seconds, memory, I/O, preemptions and waits per group.

    Usage rows count by interval start, preemptions by their time, waits by the time the pod
    was scheduled; day and hour groups are local to the pool's time zone.
    """
    if group_by not in GROUP_BY_CHOICES:
        raise ValueError(f"group_by must be one of {GROUP_BY_CHOICES}, got {group_by!r}")
    parts = _parts(start=start, end=end, group_by=group_by, teams_q=_team_filter(teams))
    if group_by in TASK_GROUPINGS:
        return _by_task(parts, group_by)
    return _by_time(parts, group_by)


# --- Data completeness ------------------------------------------------------------------


@dataclass(frozen=True)
class Completeness:
    ratio: Decimal | None  # None: nothing was expected yet (range in the future, no sources)
    windows: dict[str, int]


def data_completeness(
    *, start: dt.datetime, end: dt.datetime, now: dt.datetime | None = None
) -> Completeness:
    """Share of the range's expected samples that arrived, counting missing windows as zero.

    Each done window contributes its completeness times its overlap with the range; the expected
    total is every enabled source for the whole range up to now (the future is not missing).
    """
    horizon = min(end, now or dt.datetime.now(dt.UTC))
    windows = list(
        IngestWindow.objects.filter(start__lt=end, end__gt=start).values_list(
            "source_id", "status", "start", "end", "completeness"
        )
    )
    statuses = {status: 0 for status in IngestWindow.Status.values}
    for _, status, *_ in windows:
        statuses[status] += 1
    sources = Source.objects.filter(enabled=True).count() or len({w[0] for w in windows})
    expected = Decimal(sources) * Decimal((horizon - start).total_seconds())
    if expected <= 0:
        return Completeness(ratio=None, windows=statuses)
    covered = ZERO
    for _, status, w_start, w_end, completeness in windows:
        if status == IngestWindow.Status.DONE:
            overlap = (min(w_end, horizon) - max(w_start, start)).total_seconds()
            covered += Decimal(max(overlap, 0)) * completeness
    return Completeness(ratio=min(covered / expected, Decimal(1)), windows=statuses)
