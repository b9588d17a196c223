"""Reads the pages need that no other app's selectors answer (yet).

The health numbers, the hourly profile and the usage summary come from `reports.selectors`;
what is here is shaped for charts and tables: per-bucket time series, per-interval latency, a
task's trajectory, statement drill-downs. Every function aggregates in SQL (values + annotate,
date_trunc in the pool's time zone) and returns plain rows, and takes the teams the user may
see, so the role boundary is applied in the query, not after it.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from dataclasses import dataclass, field
from decimal import Decimal

from django.db.models import (
    Avg,
    BooleanField,
    Count,
    DecimalField,
    ExpressionWrapper,
    F,
    Max,
    Min,
    Q,
    QuerySet,
    Sum,
    Value,
)
from django.db.models.functions import TruncDay

from billing.models import (
    LineKind,
    PeriodClose,
    PlatformLine,
    PriceBook,
    SlaBreach,
    Statement,
    StatementLine,
    StatementLineTask,
)
from dashboards.filters import local_midnight_utc, pool_zone
from kernel.breach import p99_breached
from kernel.period import period_of_day
from kernel.tasks import TRAINING_KINDS
from metering.models import (
    IngestWindow,
    LatencyInterval,
    PodWait,
    Preemption,
    Service,
    Source,
    Task,
    Team,
    UsageInterval,
)
from metering.selectors import (
    LocalHourStart,
    MeteredTwice,
    OffStep,
    ServiceTeamMoved,
    blind_spot_counts,
    capacity_parts,
    gpus_metered_twice,
    hour_start,
    hourly_rollup_serves,
    services_slo_unstated,
    services_team_moved,
    team_usage_parts,
    usage_parts,
    windows_off_step,
)
from metering.services import latency_p99
from reports import health
from reports.models import ReportFile, ReportRun
from reports.selectors import stored_p99_breach_condition

ZERO = Decimal(0)
GIB = Decimal(1024**3)
MIB = Decimal(1024**2)
# docs/pricing.md's example book, when no book is in force.
DEFAULT_PEAK_HOURS = (9, 22)


# --- Time series ------------------------------------------------------------------------


def bucket_for(start: dt.datetime, end: dt.datetime) -> str:
    """Hours up to a month and a half (≈1,100 points), days beyond."""
    return "hour" if (end - start) <= dt.timedelta(days=45) else "day"


def _trunc(bucket: str, field: str) -> LocalHourStart | TruncDay:
    if bucket == "hour":
        # Not TruncHour: it adds up the hour a zone repeats when it falls back.
        return LocalHourStart(field, pool_zone().key)
    return TruncDay(field, tzinfo=pool_zone())


def _bucket_seconds(moment: dt.datetime, bucket: str) -> Decimal:
    """Wall-clock length of the bucket starting at `moment` (a DST day is 23 or 25 hours)."""
    if bucket == "hour":
        return Decimal(3600)
    local = moment.astimezone(pool_zone())
    following = local_midnight_utc(local.date() + dt.timedelta(days=1))
    return Decimal(int((following - moment).total_seconds()))


def pool_timeline(
    *,
    start: dt.datetime,
    end: dt.datetime,
    bucket: str,
    teams: QuerySet[Team] | None = None,
    kind: str | None = None,
) -> list[dict]:
    """Capacity, allocation per task kind and busy GPUs, as average GPUs per bucket.

    Capacity is the pool's whatever the team filter: a team's allocation is read against
    the whole pool it shares.
    """
    usage_filter = Q()
    if teams is not None:
        usage_filter &= Q(team_id__in=teams)
    if kind:
        usage_filter &= Q(kind=kind)
    # Rollup hours and interval edges: a bucket holding an edge adds up both parts.
    usage = [
        values
        for usage_rows, usage_time in team_usage_parts(start=start, end=end)
        for values in usage_rows.filter(usage_filter)
        .annotate(t=_trunc(bucket, usage_time))
        .values("t", "kind")
        .annotate(alloc=Sum("alloc_gpu_seconds"), busy=Sum("busy_gpu_seconds"))
        .order_by()
    ]
    capacity = [
        values
        for capacity_rows, capacity_time in capacity_parts(start=start, end=end)
        for values in capacity_rows.annotate(t=_trunc(bucket, capacity_time))
        .values("t")
        .annotate(capacity=Sum("capacity_gpu_seconds"))
        .order_by()
    ]
    rows: dict[dt.datetime, dict] = {}

    def row_at(moment: dt.datetime) -> dict:
        if moment not in rows:
            rows[moment] = {"time": moment, "capacity": ZERO, "busy": ZERO, "allocated": {}}
        return rows[moment]

    for values in capacity:
        row_at(values["t"])["capacity"] += values["capacity"]
    for values in usage:
        row = row_at(values["t"])
        row["allocated"][values["kind"]] = (
            row["allocated"].get(values["kind"], ZERO) + values["alloc"]
        )
        row["busy"] += values["busy"]
    timeline = []
    for moment in sorted(rows):
        row, seconds = rows[moment], _bucket_seconds(moment, bucket)
        timeline.append(
            {
                "time": moment,
                "capacity_gpus": row["capacity"] / seconds,
                "busy_gpus": row["busy"] / seconds,
                "allocated_gpus": {k: v / seconds for k, v in row["allocated"].items()},
            }
        )
    return timeline


def usage_by_day_and_kind(
    *, start: dt.datetime, end: dt.datetime, teams: QuerySet[Team], kind: str | None = None
) -> list[dict]:
    """GPU-hours allocated and busy per local day and task kind."""
    filters = Q(team_id__in=teams)
    if kind:
        filters &= Q(kind=kind)
    sums: dict[tuple[dt.datetime, str], list[Decimal]] = {}
    for usage_rows, usage_time in team_usage_parts(start=start, end=end):
        rows = (
            usage_rows.filter(filters)
            .annotate(day=_trunc("day", usage_time))
            .values("day", "kind")
            .annotate(alloc=Sum("alloc_gpu_seconds"), busy=Sum("busy_gpu_seconds"))
            .order_by()
        )
        for row in rows:
            alloc_busy = sums.setdefault((row["day"], row["kind"]), [ZERO, ZERO])
            alloc_busy[0] += row["alloc"]
            alloc_busy[1] += row["busy"]
    return [
        {
            "day": day.astimezone(pool_zone()).date(),
            "kind": kind,
            "gpu_hours": alloc / 3600,
            "busy_gpu_hours": busy / 3600,
        }
        for (day, kind), (alloc, busy) in sorted(sums.items())
    ]


# --- Data completeness ------------------------------------------------------------------


@dataclass(frozen=True)
class WindowProblems:
    pending: int
    running: int
    failed: int
    incomplete: int
    examples: list[IngestWindow]
    # Done windows that nothing will change, so not "not complete yet", but whose preemptions,
    # inference latency or pods' identity could not be seen, or in which Kueue preempted
    # workloads no pod shows, or GPUs no pod held were busy (metering.selectors.BlindSpots).
    preemptions_unseen_windows: int = 0
    latency_unseen_windows: int = 0
    identity_guessed_windows: int = 0
    kueue_preemption_windows: int = 0
    kind_guessed_windows: int = 0
    unheld_busy_windows: int = 0
    # Services rule 4 judged in the range by the default SLO, which nobody stated (by name).
    slo_unstated: list[str] = field(default_factory=list)
    # Services judged in the range whose namespace ran as another team than theirs, unstated.
    team_moved: list[ServiceTeamMoved] = field(default_factory=list)
    # Pairs of sources that both meter some GPU at the same time: the month cannot close.
    metered_twice: list[MeteredTwice] = field(default_factory=list)
    # Windows written under another TANDEM_STEP_SECONDS: the source is metered no more.
    off_step: list[OffStep] = field(default_factory=list)

    @property
    def any(self) -> bool:
        return bool(self.pending or self.running or self.failed or self.incomplete)


def window_problems(
    *, start: dt.datetime, end: dt.datetime, min_requests: int = 1, limit: int = 8
) -> WindowProblems:
    """Windows in the range that are not done, or done with samples missing; and, apart,
    those done where kube-state-metrics could not show preemptions or did not describe GPU
    pods, where inference pods served without the latency histogram, where Kueue preempted
    workloads, or where GPUs no pod held were busy; and the sources that meter one GPU twice."""
    in_range = IngestWindow.objects.filter(start__lt=end, end__gt=start)
    incomplete = Q(status=IngestWindow.Status.DONE, completeness__lt=1)
    problems = Q(status__in=["pending", "running", "failed"]) | incomplete
    counts = in_range.aggregate(
        pending=Count("id", filter=Q(status="pending")),
        running=Count("id", filter=Q(status="running")),
        failed=Count("id", filter=Q(status="failed")),
        incomplete=Count("id", filter=incomplete),
        **blind_spot_counts(),
    )
    examples = list(in_range.filter(problems).select_related("source").order_by("start")[:limit])
    unstated = services_slo_unstated(start=start, end=end, min_requests=min_requests)
    return WindowProblems(
        examples=examples,
        slo_unstated=sorted(set(unstated)),
        team_moved=services_team_moved(start=start, end=end, min_requests=min_requests),
        metered_twice=gpus_metered_twice(start=start, end=end),
        off_step=windows_off_step(start=start, end=end),
        **counts,
    )


def completeness_by_day(
    *, start: dt.datetime, end: dt.datetime, now: dt.datetime | None = None
) -> list[dict]:
    """Per local day, the share of expected samples that arrived; missing windows count 0.

    Days in the future are left out; today counts only up to now.
    """
    now = now or dt.datetime.now(dt.UTC)
    sources = Source.objects.filter(enabled=True).count() or 1
    windows = IngestWindow.objects.filter(
        start__lt=end, end__gt=start, status=IngestWindow.Status.DONE
    ).values_list("start", "end", "completeness")
    covered: dict[dt.date, Decimal] = defaultdict(Decimal)
    zone = pool_zone()
    for w_start, w_end, completeness in windows:
        # Windows are short (minutes to an hour); split one that straddles local midnight.
        moment = max(w_start, start)
        while moment < min(w_end, end):
            day = moment.astimezone(zone).date()
            day_end = min(local_midnight_utc(day + dt.timedelta(days=1)), w_end, end)
            covered[day] += Decimal(int((day_end - moment).total_seconds())) * completeness
            moment = day_end
    rows = []
    day = start.astimezone(zone).date()
    while local_midnight_utc(day) < min(end, now):
        day_start = local_midnight_utc(day)
        day_end = min(local_midnight_utc(day + dt.timedelta(days=1)), end, now)
        expected = Decimal(int((day_end - day_start).total_seconds())) * sources
        rows.append({"day": day, "completeness": min(covered[day] / expected, Decimal(1))})
        day += dt.timedelta(days=1)
    return rows


# --- Profiles ---------------------------------------------------------------------------


def suggested_peak_hours(profile: list[health.HourProfile], length: int) -> tuple[int, int] | None:
    """The `length`-hour window (wrapping past midnight) in which inference holds the most.

    That is when latency matters most, so the window the data suggests for the standard rate.
    Returns local `[start, end)` hours, `end` may exceed 24 when the window wraps.
    """
    held = [hour.inference_gpu_seconds for hour in sorted(profile, key=lambda h: h.hour)]
    if len(held) != 24 or not any(held) or not 0 < length < 24:
        return None
    best_start, best_total = 0, None
    for first in range(24):
        total = sum((held[(first + i) % 24] for i in range(length)), ZERO)
        if best_total is None or total > best_total:
            best_start, best_total = first, total
    return best_start, best_start + length


# --- Teams ------------------------------------------------------------------------------


def team_preemptions(*, team: Team, start: dt.datetime, end: dt.datetime) -> list[Preemption]:
    return list(
        Preemption.objects.filter(task__team=team, at__gte=start, at__lt=end)
        .select_related("task")
        .order_by("at")
    )


def waits_by_kind(*, teams: QuerySet[Team], start: dt.datetime, end: dt.datetime) -> list[dict]:
    rows = (
        PodWait.objects.filter(task__team__in=teams, ended__gte=start, ended__lt=end)
        .values("task__kind")
        .annotate(
            n=Count("id"),
            total=Sum("seconds"),
            longest=Max("seconds"),
            gave_up=Count("id", filter=Q(scheduled=None)),
        )
        .order_by("task__kind")
    )
    return [
        {
            "kind": row["task__kind"],
            "attempts": row["n"],
            "gave_up": row["gave_up"],
            "average_seconds": Decimal(row["total"]) / row["n"],
            "longest_seconds": row["longest"],
        }
        for row in rows
    ]


def top_tasks_by_usage(
    *, team: Team, start: dt.datetime, end: dt.datetime, limit: int = 10
) -> list[dict]:
    parts = usage_parts(start=start, end=end)
    rows = [
        row
        for part in parts
        for row in part.rows.filter(task__team=team)
        .values("task_id", "task__external_id", "task__kind")
        .annotate(alloc=Sum("alloc_gpu_seconds"), busy=Sum("busy_gpu_seconds"))
        .order_by("-alloc", "task_id")[: limit if len(parts) == 1 else None]
    ]
    tasks: dict[int, dict] = {}
    for row in rows:  # a task in both the rollup hours and the edges: add its two sums up
        if row["task_id"] in tasks:
            tasks[row["task_id"]]["alloc"] += row["alloc"]
            tasks[row["task_id"]]["busy"] += row["busy"]
        else:
            tasks[row["task_id"]] = row
    return sorted(tasks.values(), key=lambda row: (-row["alloc"], row["task_id"]))[:limit]


def top_tasks_by_cost(*, team: Team, period: str, limit: int = 10) -> list[dict]:
    """Tasks ranked by what they contributed to the team's closed statement for `period`."""
    rows = (
        StatementLineTask.objects.filter(
            line__statement__team=team, line__statement__period=period, task__isnull=False
        )
        .values("task_id", "task__external_id", "task__kind")
        .annotate(amount=Sum("amount_unrounded"), gpu_seconds=Sum("gpu_seconds"))
        .order_by("-amount", "task_id")[:limit]
    )
    return list(rows)


# --- Tasks ------------------------------------------------------------------------------


# Beyond a week of five-minute intervals a task's chart is drawn per hour: a month of intervals
# is 8,640 points per series, more than a chart's width in pixels.
TRAJECTORY_MAX_POINTS = 2016
BYTES = DecimalField(max_digits=30, decimal_places=6)


def task_trajectory(
    *,
    task: Task,
    step_seconds: int,
    bucket: str = "interval",
    first: dt.datetime | None = None,
    last: dt.datetime | None = None,
) -> list[dict]:
    """The task's life per interval (or per hour): GPUs held and busy (averages over the
    bucket), memory (GiB, average and peak), I/O (MiB and operations within the bucket).

    Per hour it reads the task-hour rollup: a month-long task's 8,640 intervals lie on as many
    pages of the interval table (ingest writes every task's interval together), its 720 hours
    on a few dozen. The hours are UTC hours, which are the pool's hours in every zone whose
    offset is whole hours; elsewhere the intervals are grouped by local hour instead. `first`
    and `last` are the task's first and last interval (`task_summary` has them).
    """
    preempted_at = list(task.preemptions.values_list("at", flat=True))
    if bucket == "hour" and (first is None or last is None):
        first, last = _interval_bounds(task)
    if bucket == "hour" and _local_hours_over(first, last):
        rows = task.usage_hours.annotate(
            t=F("hour_start"),
            alloc=F("alloc_gpu_seconds"),
            busy=F("busy_gpu_seconds"),
            memory_avg=ExpressionWrapper(
                F("memory_avg_bytes_sum") / F("intervals"), output_field=BYTES
            ),
            memory_peak=F("memory_peak_bytes"),
            read=F("read_bytes"),
            written=F("write_bytes"),
            operations=F("read_operations") + F("write_operations"),
        ).values("t", "alloc", "busy", "memory_avg", "memory_peak", "read", "written", "operations")
        seconds = Decimal(3600)
    else:
        usage = task.usage.all()
        if bucket == "hour":
            usage = usage.annotate(t=_trunc("hour", "interval_start")).values("t")
            seconds = Decimal(3600)
        else:
            usage = usage.annotate(t=F("interval_start")).values("t")
            seconds = Decimal(step_seconds)
        rows = usage.annotate(
            alloc=Sum("alloc_gpu_seconds"),
            busy=Sum("busy_gpu_seconds"),
            memory_avg=Avg("memory_avg_bytes", output_field=BYTES),
            memory_peak=Max("memory_peak_bytes"),
            read=Sum("read_bytes"),
            written=Sum("write_bytes"),
            operations=Sum("read_operations") + Sum("write_operations"),
        )
    return [
        {
            "time": row["t"],
            "alloc_gpus": row["alloc"] / seconds,
            "busy_gpus": row["busy"] / seconds,
            "memory_avg_gib": Decimal(row["memory_avg"]) / GIB,
            "memory_peak_gib": Decimal(row["memory_peak"]) / GIB,
            "read_mib": Decimal(row["read"]) / MIB,
            "write_mib": Decimal(row["written"]) / MIB,
            "operations": int(row["operations"]),
            "preempted": any(row["t"] <= at < row["t"] + dt.timedelta(seconds=int(seconds))
                             for at in preempted_at),
        }
        for row in rows.order_by("t")
    ]  # fmt: skip


def _local_hours_over(first: dt.datetime | None, last: dt.datetime | None) -> bool:
    """Whether the pool's zone is whole hours from UTC from `first` to `last` (a task's life)."""
    if first is None or last is None:
        return True
    return hourly_rollup_serves(
        start=hour_start(first), end=hour_start(last) + dt.timedelta(hours=1)
    )


def _interval_bounds(task: Task) -> tuple[dt.datetime | None, dt.datetime | None]:
    """The task's first and last interval start: two probes of the (task, start) index."""
    starts = task.usage.order_by("interval_start").values_list("interval_start", flat=True)
    return starts.first(), starts.last()


def task_summary(task: Task) -> dict:
    """First and last interval (two index probes), and the sums: from the task-hour rollup,
    which holds exactly the task's intervals summed per hour, whatever the zone."""
    first, last = _interval_bounds(task)
    summary = {"first": first, "last": last}
    sums = task.usage_hours.aggregate(
        alloc=Sum("alloc_gpu_seconds"),
        busy=Sum("busy_gpu_seconds"),
        intervals=Sum("intervals"),
        memory_peak=Max("memory_peak_bytes"),
    )
    return summary | sums | {"intervals": sums["intervals"] or 0}


def task_charges(task: Task) -> list[StatementLineTask]:
    """Every statement line the task contributed to, newest period first."""
    return list(
        StatementLineTask.objects.filter(task=task)
        .select_related("line__statement")
        .order_by("-line__statement__period", "line__kind", "line__id")
    )


# --- SLA --------------------------------------------------------------------------------


def service_intervals(
    *,
    service: Service,
    start: dt.datetime,
    end: dt.datetime,
    min_requests: int,
    slo_p99_ms: int | None = None,
) -> list[dict]:
    """P99 per interval (stored at ingest from that interval's own buckets) and whether it
    breached its SLO (docs/pricing.md rule 4, decided in SQL). Rows written without a stored P99
    (raw SQL loads) get it from their buckets, in one more query.

    NULL P99s make the SQL test NULL, read as not breached: no quantile, no breach. Judged by
    `slo_p99_ms` where given (a closed month's), else the service's own."""
    slo = service.slo_p99_ms if slo_p99_ms is None else slo_p99_ms
    in_range = LatencyInterval.objects.filter(
        service=service, interval_start__gte=start, interval_start__lt=end
    )
    rows = list(
        in_range.annotate(
            breached=ExpressionWrapper(
                stored_p99_breach_condition(Value(slo), min_requests),
                output_field=BooleanField(),
            )
        )
        .order_by("interval_start")
        .values_list("id", "interval_start", "request_count", "p99_seconds", "breached")
    )
    unstored = {pk for pk, _, requests, p99, _ in rows if p99 is None and requests > 0}
    # An empty `pk__in` runs no query.
    computed = {
        pk: latency_p99(buckets)
        for pk, buckets in in_range.filter(pk__in=unstored).values_list("id", "buckets")
    }
    result = []
    for pk, moment, requests, p99, breached in rows:
        if pk in computed:
            p99 = computed[pk]
            breached = p99_breached(
                requests=requests,
                p99_seconds=p99,
                slo_p99_ms=slo,
                min_requests=min_requests,
            )
        result.append(
            {
                "time": moment,
                "requests": Decimal(requests),
                "p99_ms": None if p99 is None else p99 * 1000,
                "breached": bool(breached),
            }
        )
    return result


def training_at(
    *, moments: list[dt.datetime], teams: QuerySet[Team] | None = None
) -> dict[dt.datetime, list[dict]]:
    """Who was training in each of these intervals: GPUs held per team, most first."""
    if not moments:
        return {}
    filters = Q(interval_start__in=moments, task__kind__in=TRAINING_KINDS)
    if teams is not None:
        filters &= Q(task__team__in=teams)
    rows = (
        UsageInterval.objects.filter(filters)
        .values("interval_start", "task__team__name")
        .annotate(alloc=Sum("alloc_gpu_seconds"))
        .order_by("interval_start", "-alloc")
    )
    found: dict[dt.datetime, list[dict]] = defaultdict(list)
    for row in rows:
        found[row["interval_start"]].append(
            {"team": row["task__team__name"], "gpu_seconds": row["alloc"]}
        )
    return found


def sla_money(*, teams: QuerySet[Team], periods: list[str]) -> list[dict]:
    """SLA penalties and credits per team and period, from closed statements."""
    return list(
        StatementLine.objects.filter(
            statement__team__in=teams,
            statement__period__in=periods,
            kind__in=[LineKind.SLA_PENALTY, LineKind.SLA_CREDIT],
        )
        .values("statement__period", "statement__team__name", "statement__team_id", "kind")
        .annotate(amount=Sum("amount"))
        .order_by("statement__period", "statement__team__name", "kind")
    )


def breaches(*, services: list[Service], start: dt.datetime, end: dt.datetime) -> list[SlaBreach]:
    """Breaches as the closes recorded them (docs/pricing.md rule 4), for the given services."""
    return list(
        SlaBreach.objects.filter(
            service__in=services, interval_start__gte=start, interval_start__lt=end
        )
        .select_related("service", "period_close")
        .order_by("interval_start", "service__external_id")
    )


# --- Statements -------------------------------------------------------------------------


@dataclass(frozen=True)
class PeriodRow:
    period: str
    status: str  # open, closed, corrected
    close: PeriodClose | None
    teams_total: Decimal | None
    visible_total: Decimal | None


def statement_periods(*, teams: QuerySet[Team], months_with_data: list[str]) -> list[PeriodRow]:
    """Every month with a close or with data, newest first, with its status.

    *corrected*: a later close carried correction lines for this month (late data arrived).
    *open*: metered but not closed yet.
    """
    closes = {close.period: close for close in PeriodClose.objects.all()}
    corrected = set(
        StatementLine.objects.filter(is_correction=True)
        .values_list("corrects_period", flat=True)
        .distinct()
    ) | set(
        PlatformLine.objects.filter(is_correction=True)
        .values_list("corrects_period", flat=True)
        .distinct()
    )
    visible = dict(
        Statement.objects.filter(team__in=teams)
        .values("period")
        .annotate(total=Sum("total"))
        .values_list("period", "total")
    )
    rows = []
    for period in sorted(set(closes) | set(months_with_data), reverse=True):
        close = closes.get(period)
        status = "open" if close is None else "corrected" if period in corrected else "closed"
        rows.append(
            PeriodRow(
                period=period,
                status=status,
                close=close,
                teams_total=close.teams_total if close else None,
                visible_total=visible.get(period),
            )
        )
    return rows


def months_with_usage() -> list[str]:
    """Local months holding usage, from the first and last interval (cheap: two index reads)."""
    bounds = UsageInterval.objects.aggregate(
        first=Min("interval_start"), last=Max("interval_start")
    )
    if bounds["first"] is None:
        return []
    zone = pool_zone()
    month = bounds["first"].astimezone(zone).date().replace(day=1)
    last = bounds["last"].astimezone(zone).date().replace(day=1)
    months = []
    while month <= last:
        months.append(period_of_day(month))
        month = (month + dt.timedelta(days=32)).replace(day=1)
    return months


def period_statements(*, close: PeriodClose, teams: QuerySet[Team]) -> list[Statement]:
    return list(
        Statement.objects.filter(period_close=close, team__in=teams)
        .select_related("team")
        .prefetch_related("lines")
        .order_by("team__name")
    )


def team_statements(*, team: Team) -> list[Statement]:
    return list(Statement.objects.filter(team=team).prefetch_related("lines").order_by("period"))


def line_contributions(*, line: StatementLine) -> list[StatementLineTask]:
    return list(line.tasks.select_related("task", "service").order_by("-amount_unrounded", "id"))


# --- Report files -----------------------------------------------------------------------


def statement_totals(*, teams: QuerySet[Team], period: str) -> dict[int, Decimal]:
    """Team pk -> its statement's total for `period` (YYYY-MM), for the teams that have one."""
    return dict(
        Statement.objects.filter(team__in=teams, period=period).values_list("team_id", "total")
    )


def compensation_line(*, team: Team, period: str) -> StatementLine | None:
    return (
        StatementLine.objects.filter(
            statement__team=team, statement__period=period, kind="compensation"
        )
        .select_related("statement")
        .first()
    )


def statements_with_lines() -> QuerySet[Statement]:
    return Statement.objects.select_related("period_close").prefetch_related(
        "lines", "lines__classes"
    )


def statement_lines_of(*, teams: QuerySet[Team]) -> QuerySet[StatementLine]:
    return (
        StatementLine.objects.filter(statement__team__in=teams)
        .select_related("statement__team")
        .prefetch_related("classes")
    )


def period_close(*, period: str) -> PeriodClose | None:
    return PeriodClose.objects.filter(period=period).select_related("price_book").first()


def period_corrected(*, period: str) -> bool:
    """Whether a later close carried corrections of `period`."""
    return (
        StatementLine.objects.filter(is_correction=True, corrects_period=period).exists()
        or PlatformLine.objects.filter(is_correction=True, corrects_period=period).exists()
    )


def draft_price_books() -> QuerySet[PriceBook]:
    return PriceBook.objects.filter(status=PriceBook.Status.DRAFT).order_by("-version")


# --- Tasks and services -----------------------------------------------------------------


def tasks_of(*, teams: QuerySet[Team]) -> QuerySet[Task]:
    return Task.objects.filter(team__in=teams).select_related("team", "source")


def task_preemptions(*, task: Task) -> list[Preemption]:
    return list(task.preemptions.order_by("at"))


def task_waits(*, task: Task) -> list[PodWait]:
    return list(task.waits.order_by("created"))


def service(*, pk: int) -> Service:
    return Service.objects.get(pk=pk)


def services(*, pks: list[int]) -> list[Service]:
    return list(Service.objects.filter(pk__in=pks))


@dataclass(frozen=True)
class ReportDownloads:
    """The files of a month's newest finished report run, by kind."""

    run: ReportRun | None
    pdf: ReportFile | None
    focus: ReportFile | None
    team_csv: dict[int, ReportFile]  # team id -> file


def report_downloads(*, period: str, teams: QuerySet[Team]) -> ReportDownloads:
    run = (
        ReportRun.objects.filter(period=period, status=ReportRun.Status.DONE)
        .order_by("-finished", "-id")
        .first()
    )
    if run is None:
        return ReportDownloads(run=None, pdf=None, focus=None, team_csv={})
    files = list(run.files.all())
    visible = set(teams.values_list("pk", flat=True))
    by_kind = {f.kind: f for f in files if f.team_id is None}
    return ReportDownloads(
        run=run,
        pdf=by_kind.get(ReportFile.Kind.PDF),
        focus=by_kind.get(ReportFile.Kind.FOCUS_CSV),
        team_csv={
            f.team_id: f
            for f in files
            if f.kind == ReportFile.Kind.TEAM_CSV and f.team_id in visible
        },
    )
