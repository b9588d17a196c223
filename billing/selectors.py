"""Reads for billing: which price book applies, periods, readiness of a month, quotas."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from dataclasses import dataclass, replace
from decimal import Decimal, localcontext
from pathlib import Path
from zoneinfo import ZoneInfo

from django.conf import settings
from django.db import connection
from django.db.models import Max, Min, Prefetch, Q, QuerySet
from django.utils import timezone

from audit.models import AuditEntry
from billing import pricing
from billing.models import (
    MonthToDateDraft,
    PeriodClose,
    PeriodScenario,
    PlatformLine,
    PriceBook,
    PriceBookGpuClass,
    Quota,
    StatementLine,
)
from billing.scenarios import (
    billed_kinds,
    gpu_classes_by_model,
    judged_slos,
    scenario_build,
    scenario_sha256,
)
from kernel.money import ROUNDING, round_money
from kernel.period import first_day, period_of, period_utc_range, previous_period, time_zone
from kernel.tasks import TRAINING_KINDS
from metering import partitions
from metering.models import CapacityInterval, IngestWindow, Source, Team
from metering.selectors import (
    MeteredTwice,
    gpus_metered_twice,
    range_split,
    windows_missing,
    windows_unsighted,
)

ZERO = Decimal(0)
HUNDREDTH = Decimal("0.01")
DEFAULT_MIN_COMPLETENESS = Decimal("0.99")


class PriceBookNotFound(LookupError):
    """No published price book is in force at the requested date."""


@dataclass(frozen=True)
class PeriodBounds:
    """A calendar month in the pool's time zone, and the UTC instants that bound it."""

    period: str
    timezone: str
    first_day: dt.date
    start: dt.datetime  # UTC, inclusive
    end: dt.datetime  # UTC, exclusive


def pool_timezone() -> ZoneInfo:
    return time_zone(settings.TANDEM_TIMEZONE)


def period_bounds(period: str) -> PeriodBounds:
    """Bounds of `period` ("YYYY-MM") in the pool's time zone (`kernel.period`); ValueError
    naming the value when it is not a month."""
    start, end = period_utc_range(period, settings.TANDEM_TIMEZONE)
    return PeriodBounds(
        period=period,
        timezone=settings.TANDEM_TIMEZONE,
        first_day=first_day(period),
        start=start,
        end=end,
    )


def closed_period_bounds(close: PeriodClose) -> PeriodBounds:
    """The bounds `close` priced its month on, as it stored them. A closed month is re-built
    (corrections, `verify_period`, a close run again) on these, never on the pool's zone as
    it is now: after a change of `TANDEM_TIMEZONE` the month re-computed on the new clock
    would take in hours the next month bills, or drop hours it billed, and the difference
    would be booked as late data (docs/pricing.md, "The pool's zone changed")."""
    return PeriodBounds(
        period=close.period,
        timezone=close.timezone,
        first_day=first_day(close.period),
        start=close.period_start,
        end=close.period_end,
    )


def period_bounds_billed(period: str) -> PeriodBounds:
    """`period` on the bounds its close priced when it is closed, else on the pool's zone."""
    close = PeriodClose.objects.filter(period=period).first()
    return closed_period_bounds(close) if close is not None else period_bounds(period)


def period_bounds_to_price(period: str) -> PeriodBounds:
    """The bounds a close of `period` prices: `period_bounds`, except that the month starts
    where the month before it, as closed, ended. The two differ only when `TANDEM_TIMEZONE`
    changed after that close; starting on the new clock's midnight would leave the hours
    between the two unbilled (a zone moved west) or bill them twice (east)."""
    bounds = period_bounds(period)
    ended = (
        PeriodClose.objects.filter(period=previous_period(period))
        .values_list("period_end", flat=True)
        .first()
    )
    if ended is None or ended == bounds.start or ended >= bounds.end:
        return bounds
    return replace(bounds, start=ended)


def period_containing(at: dt.datetime) -> str:
    """The period ("YYYY-MM", pool time zone) that contains the instant `at`."""
    return period_of(at, settings.TANDEM_TIMEZONE)


def period_label(period: str) -> str:
    """ "2026-09" as a finance reader says it: "September 2026"."""
    return f"{first_day(period):%B %Y}"


def period_previous(period: str) -> str:
    return previous_period(period)


def price_book_in_force(at: dt.date | dt.datetime) -> PriceBook:
    """The published book with the latest `effective_from` on or before `at` (pool zone).

    Among books effective the same day, the highest version wins. Drafts never apply.
    """
    if isinstance(at, dt.datetime):
        at = at.astimezone(pool_timezone()).date()
    book = (
        PriceBook.objects.filter(status=PriceBook.Status.PUBLISHED, effective_from__lte=at)
        .order_by("-effective_from", "-version")
        .first()
    )
    if book is None:
        raise PriceBookNotFound(f"no published price book is in force on {at:%Y-%m-%d}")
    return book


@dataclass(frozen=True)
class SlaTerms:
    """What SLA breaches (rule 4) are judged by: SLOs by service primary key where they are
    not the services' own (a closed month's: its latest revision's; empty for a revision
    stored before they were kept, whose services take today's), and the minimum of requests
    (of the book a closed month was priced with)."""

    slos: dict[int, int]
    min_requests: int


def sla_terms_billed_in(start: dt.datetime, end: dt.datetime) -> SlaTerms | None:
    """The terms a closed month was billed by, where [start, end) lies within it: a page of a
    billed month judges by them, not by an SLO stated or a book published since. None
    otherwise. A revision stored before SLOs were kept is not read here (its whole scenario
    is a close's work, not a page's)."""
    close = _close_holding(start, end)
    if close is None:
        return None
    latest = PeriodScenario.objects.filter(period=close.period).order_by("-revision").first()
    slos = judged_slos(latest) if latest is not None and latest.service_slos else {}
    return SlaTerms(slos=slos, min_requests=close.price_book.sla_min_requests)


def _close_holding(start: dt.datetime, end: dt.datetime) -> PeriodClose | None:
    """The close whose stored bounds hold [start, end), else the closed month holding it on
    the pool's clock as it is now; one query.

    The stored bounds come first: after a change of `TANDEM_TIMEZONE` a closed month on
    today's clock is hours off what it billed, so its bounds as stored would start in the
    month before (and be judged by today's terms) and the hours the next month billed would
    be judged by this one's. A page's calendar month on today's clock (its edge hours billed
    by the neighbouring month) keeps that month's terms, as before."""
    period = period_containing(start)
    holds = Q(period_start__lte=start, period_end__gte=end)
    if end <= period_bounds(period).end:
        holds |= Q(period=period)
    closes = list(PeriodClose.objects.filter(holds).select_related("price_book").order_by("period"))
    stored = [c for c in closes if c.period_start <= start and end <= c.period_end]
    return (stored or [c for c in closes if c.period == period] or [None])[0]


def periods_archived(periods: list[str]) -> set[str]:
    """Those of `periods` whose metering was archived out of the database (`period_archive`
    records it on the close's audit trail): rebuilt from the tables, such a month would hold
    nothing, so nothing is corrected from it."""
    closes = dict(PeriodClose.objects.filter(period__in=periods).values_list("pk", "period"))
    archived = AuditEntry.objects.filter(
        object_type="billing.periodclose",
        object_id__in=[str(pk) for pk in closes],
        changes__has_key="archived_to",
    ).values_list("object_id", flat=True)
    return {closes[int(pk)] for pk in archived}


def min_completeness() -> Decimal:
    return settings.TANDEM_MIN_COMPLETENESS


# Windows beside another source's written before their GPUs were recorded (GpuSighting).
GPUS_UNRECORDED = "GPUs unrecorded"


@dataclass(frozen=True)
class WindowProblem:
    """A contiguous range of one source's metering that keeps a month from closing: no
    window covers it (`missing`), its windows are `pending`, `running` or `failed`, they
    are done but below TANDEM_MIN_COMPLETENESS (`short`), or their preemptions could not be
    seen (`preemptions unseen`: kube-state-metrics before v2.19, see
    IngestWindow.preemptions_unreadable), which leaves rule 5's starvation credits unknown."""

    source: str
    problem: str
    start: dt.datetime
    end: dt.datetime
    windows: int  # 0 for a missing range
    lowest_completeness: Decimal | None = None
    threshold: Decimal = DEFAULT_MIN_COMPLETENESS
    # The short windows' completeness warnings: which nodes and GPUs were missing, how long.
    missing_targets: tuple[str, ...] = ()

    @property
    def message(self) -> str:
        span = f"{self.start:%Y-%m-%dT%H:%MZ} to {self.end:%Y-%m-%dT%H:%MZ}"
        if self.problem == GPUS_UNRECORDED:
            return (
                f"{self.windows} window(s) of {self.source} between {span} were written before"
                " Tandem recorded the GPUs each window meters, and another source meters this"
                " month too: whether the two meter one GPU there (billing it twice) cannot be"
                f" told; ingest them again (manage.py ingest --source {self.source} --start"
                f" {self.start:%Y-%m-%dT%H:%M:%SZ} --end {self.end:%Y-%m-%dT%H:%M:%SZ}), or"
                " accept the month without it"
            )
        if self.problem == "missing":
            return f"{self.source} has no ingest window from {span} ({_duration(self)})"
        if self.problem == PREEMPTIONS_UNSEEN:
            if self.windows == 1:
                what = f"window {self.source} {span} shows"
            else:
                what = f"windows {self.source} {span} ({self.windows} windows) show"
            return (
                f"{what} no preemptions: kube-state-metrics wrote no preemption reason (its"
                " releases before v2.19.0 write none), so starvation credits (rule 5) cannot"
                " be computed; upgrade it for the months ahead, and accept this one without them"
            )
        required = f"below the {self.threshold:.2%} required"
        required += "".join(f" ({target})" for target in self.missing_targets)
        if self.windows == 1:
            state = self.problem
            if self.problem == "short":
                state = f"{self.lowest_completeness:.2%} complete, {required}"
            return f"window {self.source} {span} is {state}"
        state = self.problem
        if self.problem == "short":
            state = f"{required} (lowest {self.lowest_completeness:.2%})"
        return f"windows {self.source} {span} ({self.windows} windows) are {state}"

    def as_record(self) -> dict[str, object]:
        """What a close accepted incomplete keeps of it (JSON)."""
        return {
            "source": self.source,
            "problem": self.problem,
            "start": self.start.isoformat(),
            "end": self.end.isoformat(),
            "windows": self.windows,
            "message": self.message,
        }


def _duration(problem: WindowProblem) -> str:
    minutes = int((problem.end - problem.start).total_seconds()) // 60
    days, minutes = divmod(minutes, 24 * 60)
    hours, minutes = divmod(minutes, 60)
    parts = [f"{days} day{'s' if days != 1 else ''}"] if days else []
    parts += [f"{hours} h"] if hours else []
    parts += [f"{minutes} min"] if minutes or not parts else []
    return " ".join(parts)


PREEMPTIONS_UNSEEN = "preemptions unseen"  # PROBLEM_RUNS_SQL writes it too

# Windows overlapping the month that are not done, done below the threshold, or done without
# a view of preemptions, grouped into runs of one source and one problem whose windows follow
# each other without a gap. A window both short and without preemptions is in a run of each.
PROBLEM_RUNS_SQL = """
WITH flagged AS (
    SELECT source_id, start, "end", completeness,
           CASE WHEN status <> 'done' THEN status ELSE 'short' END AS problem
    FROM metering_ingestwindow
    WHERE start < %(end)s AND "end" > %(start)s
      AND (status <> 'done' OR completeness < %(threshold)s)
    UNION ALL
    SELECT source_id, start, "end", completeness, 'preemptions unseen'
    FROM metering_ingestwindow
    WHERE start < %(end)s AND "end" > %(start)s AND status = 'done' AND preemptions_unreadable
), opened AS (
    SELECT *, CASE WHEN start = LAG("end") OVER (
        PARTITION BY source_id, problem ORDER BY start, "end") THEN 0 ELSE 1 END AS opens
    FROM flagged
), numbered AS (
    SELECT *, SUM(opens) OVER (PARTITION BY source_id, problem ORDER BY start, "end") AS run
    FROM opened
)
SELECT source_id, problem, MIN(start), MAX("end"), COUNT(*), MIN(completeness)
FROM numbered GROUP BY source_id, problem, run
"""


# A short run names at most this many of its windows' missing targets: enough to say which
# node went silent, not a page per window.
MISSING_TARGETS_NAMED = 3


def _missing_targets(
    source_id: int, start: dt.datetime, end: dt.datetime, threshold: Decimal
) -> tuple[str, ...]:
    windows = IngestWindow.objects.filter(
        source_id=source_id, start__gte=start, end__lte=end, completeness__lt=threshold
    ).order_by("start")
    named: dict[str, None] = {}
    for window in windows.only("warnings"):
        for warning in window.completeness_warnings:
            named.setdefault(str(warning))
            if len(named) == MISSING_TARGETS_NAMED:
                return tuple(named)
    return tuple(named)


def period_sources(bounds: PeriodBounds) -> list[Source]:
    """The sources whose metering a month needs: those with a window or capacity in it, and
    every enabled source that existed before it ended (a source added later has none)."""
    overlapping = IngestWindow.objects.filter(start__lt=bounds.end, end__gt=bounds.start)
    capacity = CapacityInterval.objects.filter(
        interval_start__gte=bounds.start, interval_start__lt=bounds.end
    )
    return list(
        Source.objects.filter(
            Q(pk__in=overlapping.values("source_id"))
            | Q(pk__in=capacity.values("source_id"))
            | Q(enabled=True, created__lt=bounds.end)
        ).order_by("name")
    )


def period_window_problems(bounds: PeriodBounds) -> list[WindowProblem]:
    """Why the month's metering is not ready to bill, one entry per contiguous range, in
    time order: every step of the month must be covered by a window of each of its sources
    (period_sources) that is done, at least `TANDEM_MIN_COMPLETENESS` complete (default
    0.99), and able to show preemptions (not `IngestWindow.preemptions_unreadable`); and,
    where two sources or more meter the month, have its GPUs recorded (not written before
    metering migration 0026: `GPUS_UNRECORDED`). A few queries, however many windows the
    month has."""
    threshold = min_completeness()
    sources = {source.pk: source.name for source in period_sources(bounds)}
    problems = [
        WindowProblem(sources[gap.source_id], "missing", gap.start, gap.end, 0)
        for gap in windows_missing(source_ids=list(sources), start=bounds.start, end=bounds.end)
    ]
    with connection.cursor() as cursor:
        cursor.execute(
            PROBLEM_RUNS_SQL, {"start": bounds.start, "end": bounds.end, "threshold": threshold}
        )
        runs = cursor.fetchall()
    names = dict(Source.objects.filter(pk__in={run[0] for run in runs}).values_list("pk", "name"))
    problems += [
        WindowProblem(
            names[source_id], problem, start, end, count, lowest, threshold,
            _missing_targets(source_id, start, end, threshold) if problem == "short" else (),
        )
        for source_id, problem, start, end, count, lowest in runs
    ]  # fmt: skip
    problems += [
        WindowProblem(found.source, GPUS_UNRECORDED, found.first, found.last, found.windows)
        for found in windows_unsighted(start=bounds.start, end=bounds.end)
    ]
    return sorted(problems, key=lambda p: (p.start, p.source, p.problem))


# --- Quotas ---------------------------------------------------------------------------

# `remaining_money_basis`: which figure the money allowance is counted against.
BASIS_MONTH_TO_DATE = "month_to_date_amount"
BASIS_LIST_PRICE = "list_price_estimate"


@dataclass(frozen=True)
class QuotaStatus:
    """A team's month so far against its quota (what `quotas/export` serves).

    Two money figures, labelled apart:

    - `month_to_date_amount`: the month so far as the engine prices it (docs/pricing.md in full:
      baseline, usage, SLA penalties and credits, compensation), from the latest
      month-to-date draft (`MonthToDateDraft`); its lines in `month_to_date_lines`, the end of
      the data it priced in `month_to_date_as_of`. `month_to_date_stale` says that metering
      or the book in force changed since it was priced (a refresh is on its way). None while
      the period has no draft or the draft could not be priced (`month_to_date_error` says
      why). It is what the statement will say for the same data, less any corrections of
      earlier months that the close adds.
    - `list_price_estimate`: the book in force's rates applied to the month's usage rows
      (docs/pricing.md rule 3 without the baseline split): training kinds in off-peak hours at the
      off-peak rate, all other usage at the standard rate, each GPU model at its class's rates.
      Live, but without the baseline, penalties and credits: an inference team's statement is
      well above it.

    `remaining_money` and the money side of `over_quota` count the draft's amount when there
    is one, else the list estimate; `remaining_money_basis` names the figure used. Amounts are
    rounded to the currency's minor unit (the cent; the yen in JPY), GPU-hours to two places,
    both ROUND_HALF_UP.
    """

    team: str
    period: str
    allowance_gpu_hours: Decimal | None
    used_gpu_hours: Decimal
    remaining_gpu_hours: Decimal | None
    allowance_money: Decimal | None
    month_to_date_amount: Decimal | None
    month_to_date_lines: dict[str, Decimal]
    month_to_date_as_of: dt.datetime | None
    month_to_date_stale: bool
    month_to_date_error: str | None
    list_price_estimate: Decimal | None
    remaining_money: Decimal | None
    remaining_money_basis: str | None
    currency: str | None
    over_quota: bool
    concurrent_gpu_cap: Decimal | None
    io_caps: dict
    as_of: dt.datetime | None
    lag_seconds: int | None
    price_book_version: int | None


@dataclass(frozen=True)
class MonthToDateState:
    """What a month-to-date draft of the month containing an instant prices, and its key.

    `end` is where the ingested data of every source ends, within the month (the month's
    start when nothing of it is ingested yet). `version` changes whenever a draft would
    price something else: an ingest window of the month done (again), the book in force, a
    service's objective, the step.
    """

    bounds: PeriodBounds
    ingested_until: dt.datetime | None
    end: dt.datetime
    book: PriceBook | None
    version: str


def month_to_date_state(at: dt.datetime) -> MonthToDateState:
    # The range the month's close will price, so that the draft is that close's figures.
    bounds = period_bounds_to_price(period_containing(at))
    as_of = ingested_until(at)
    end = min(max(as_of, bounds.start), bounds.end) if as_of else bounds.start
    try:
        book = price_book_in_force(bounds.first_day)
    except PriceBookNotFound:
        book = None
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT w.done, w.newest, s.services, s.objectives FROM"
            " (SELECT count(*) AS done, max(updated) AS newest FROM metering_ingestwindow"
            '  WHERE status = %s AND start < %s AND "end" > %s) w,'
            " (SELECT count(*) AS services,"
            "  coalesce(sum(id::numeric * slo_p99_ms), 0) AS objectives FROM metering_service) s",
            [IngestWindow.Status.DONE, bounds.end, bounds.start],
        )
        done, newest, services, objectives = cursor.fetchone()
    parts = [
        bounds.period,
        f"end {end:%Y-%m-%dT%H:%M:%SZ}",
        f"windows {done} {newest.timestamp() if newest else '-'}",
        f"book {book.pk}.{book.version}" if book else "book -",
        f"services {services} {objectives}",
        f"step {settings.TANDEM_STEP_SECONDS}",
    ]
    return MonthToDateState(bounds, as_of, end, book, "|".join(parts))


def month_to_date_draft_of(period: str) -> MonthToDateDraft | None:
    return MonthToDateDraft.objects.filter(period=period).first()


def quota_metered_twice(at: dt.datetime | None = None) -> list[MeteredTwice]:
    """Pairs of sources that meter the same GPUs in the month containing `at` (default now):
    the month's usage, and the quota's `used`, count those GPUs' pods twice until one source
    is narrowed and ingested again (docs/telemetry.md, "One GPU, two sources")."""
    bounds = period_bounds(period_containing(at or timezone.now()))
    return gpus_metered_twice(start=bounds.start, end=bounds.end)


def quota_status(team: Team, at: dt.datetime | None = None) -> QuotaStatus:
    """One team's quota status at `at` (default now)."""
    return quota_statuses(at=at, teams=[team])[0]


def quota_statuses(
    *, at: dt.datetime | None = None, teams: list[Team] | None = None, active_only: bool = False
) -> list[QuotaStatus]:
    """Quota status of `teams` (default: every team with a quota), in their order.

    With `active_only`, only the teams with a quota or with usage this month (ingested, or
    in the month-to-date draft). A fixed number of queries, and cheap ones while the draft
    is recent: usage up to the draft's end is read from it (see `_month_usage`).
    """
    at = at or timezone.now()
    if teams is None:
        teams = [quota.team for quota in Quota.objects.select_related("team")]
    quotas = {quota.team_id: quota for quota in Quota.objects.filter(team__in=teams)}
    state = month_to_date_state(at)
    as_of = state.ingested_until
    upto = min(as_of, at) if as_of else at
    draft = month_to_date_draft_of(state.bounds.period)
    usage = _month_usage([team.pk for team in teams], state, upto, draft)
    drafted = set(draft.teams) if draft else set()
    statuses = []
    for team in teams:
        quota = quotas.get(team.pk)
        if active_only and not (quota or team.pk in usage or team.name in drafted):
            continue
        month_to_date = _MonthToDate.of(team.name, draft, state)
        statuses.append(_quota_status(team, quota, usage.get(team.pk), month_to_date, state, at))
    return statuses


@dataclass(frozen=True)
class _MonthToDate:
    amount: Decimal | None
    lines: dict[str, Decimal]
    as_of: dt.datetime | None
    stale: bool
    error: str | None

    @classmethod
    def of(cls, team: str, draft: MonthToDateDraft | None, state: MonthToDateState) -> _MonthToDate:
        if draft is None:
            return cls(None, {}, None, True, None)
        stale = draft.data_version != state.version
        if draft.error:
            return cls(None, {}, draft.as_of, stale, draft.error)
        # A team the draft does not name was charged nothing in the data it priced.
        priced = draft.teams.get(team, {"total": "0.00", "lines": {}})
        lines = {kind: Decimal(amount) for kind, amount in priced["lines"].items()}
        return cls(Decimal(priced["total"]), lines, draft.as_of, stale, None)


def month_to_date_usage(state: MonthToDateState) -> tuple[dict[str, list], str]:
    """Every team's usage sums over a draft's range, as the quota status counts them, to be
    stored with the draft, and the key under which they hold (see `_month_usage`)."""
    team_ids = list(Team.objects.values_list("pk", flat=True))
    usage = _usage_by_team(
        team_ids=team_ids, start=state.bounds.start, end=state.end, book=state.book
    )
    stored = {
        str(pk): [str(entry.gpu_seconds), _text_or_none(entry.gpu_seconds_times_rate)]
        for pk, entry in usage.items()
    }
    return stored, _usage_key(state.bounds, state.end, state.book)


def _usage_key(bounds: PeriodBounds, end: dt.datetime, book: PriceBook | None) -> str:
    """What usage sums over `[bounds.start, end)` depend on: the book (its rates and peak
    hours) and the done windows that overlap the range (re-ingesting one moves `updated`)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*), max(updated) FROM metering_ingestwindow"
            ' WHERE status = %s AND start < %s AND "end" > %s',
            [IngestWindow.Status.DONE, end, bounds.start],
        )
        done, newest = cursor.fetchone()
    stamp = newest.timestamp() if newest else "-"
    return f"{end:%Y-%m-%dT%H:%M:%SZ}|book {book.pk if book else '-'}|windows {done} {stamp}"


def _month_usage(
    team_ids: list[int],
    state: MonthToDateState,
    upto: dt.datetime,
    draft: MonthToDateDraft | None,
) -> dict[int, _TeamUsage]:
    """The month's usage per team up to `upto`.

    Summing a month of the team-hour rollup costs a poll about a hundred milliseconds at
    1,000 GPUs, so while the draft's stored sums still hold (same book, no window before its
    end ingested again since) only what was ingested after the draft's end is summed and
    added to them: the same numbers. Rows written outside ingestion (a fix in psql, which
    moves no window) show once the next window makes the draft refresh.
    """
    start = state.bounds.start
    usable = (
        draft is not None
        and draft.usage_key
        and start <= draft.as_of <= upto
        and draft.usage_key == _usage_key(state.bounds, draft.as_of, state.book)
    )
    if not usable:
        return _usage_by_team(team_ids=team_ids, start=start, end=upto, book=state.book)
    usage = _usage_by_team(team_ids=team_ids, start=draft.as_of, end=upto, book=state.book)
    for pk in team_ids:
        stored = draft.usage.get(str(pk))
        if stored is None:
            continue
        seconds = Decimal(stored[0])
        times_rate = None if stored[1] is None else Decimal(stored[1])
        entry = usage.setdefault(
            pk, _TeamUsage(Decimal(0), None if times_rate is None else Decimal(0))
        )
        entry.gpu_seconds += seconds
        if entry.gpu_seconds_times_rate is not None and times_rate is not None:
            entry.gpu_seconds_times_rate += times_rate
    return usage


def _text_or_none(value: Decimal | None) -> str | None:
    return None if value is None else str(value)


def ingested_until(at: dt.datetime) -> dt.datetime | None:
    """End of the newest done ingest window up to `at`; with several sources the earliest of
    their newest ends, since data is complete only up to the slowest source."""
    newest = (
        IngestWindow.objects.filter(status=IngestWindow.Status.DONE, end__lte=at)
        .values("source")
        .annotate(newest=Max("end"))
        .aggregate(as_of=Min("newest"))
    )
    return newest["as_of"]


def engine_price_book(book: PriceBook, gpu_classes: list | None = None) -> pricing.PriceBook:
    """The engine's view of a stored book (with `gpu_classes` instead of its stored classes
    when given), read and validated as a scenario file's would be.

    Raises the engine's ScenarioError naming the field when the book cannot price anything.
    """
    book_dict = book.to_scenario_dict(gpu_classes)
    empty = {"price_book": book_dict, "tasks": [], "capacity": [], "usage": []}
    return pricing.scenario_from_dict(empty).price_book


def price_books_with_classes() -> QuerySet[PriceBook]:
    """Price books with their GPU classes (by name) fetched in one more query."""
    return PriceBook.objects.prefetch_related(
        Prefetch("gpu_classes", PriceBookGpuClass.objects.order_by("name"))
    )


def rates_per_gpu_hour(book: PriceBook) -> tuple[Decimal, Decimal]:
    """(standard R, off-peak training R_off) per GPU-hour of the book's own figures (the
    `default` class), derived by the engine, unrounded."""
    rates = pricing.derive_rates(engine_price_book(book))
    return rates.standard_per_gpu_hour, rates.offpeak_training_per_gpu_hour


def rates_per_gpu_class(book: PriceBook) -> dict[str, tuple[Decimal, Decimal]]:
    """Per GPU class of the book (`default` included, by name): (R_c, R_off,c) per GPU-hour,
    derived by the engine, unrounded."""
    return {
        name: (rates.standard_per_gpu_hour, rates.offpeak_training_per_gpu_hour)
        for name, rates in pricing.derive_class_rates(engine_price_book(book)).items()
    }


@dataclass
class _TeamUsage:
    gpu_seconds: Decimal
    gpu_seconds_times_rate: Decimal | None  # sum of alloc * rate, divided by 3600 once


def _usage_by_team(
    *, team_ids: list[int], start: dt.datetime, end: dt.datetime, book: PriceBook | None
) -> dict[int, _TeamUsage]:
    """Allocated GPU-seconds per team, kind class and local hour, priced in Python at the
    rates of each GPU model's class where the book has classes (docs/pricing.md "GPU
    classes"): one team's H100 hours at the `default` class's rate were a third of their
    price in `list_price_estimate`."""
    if not team_ids or end <= start:
        return {}
    zone = book.timezone if book else settings.TANDEM_TIMEZONE
    # Whole hours from a rollup, the edges (the hour ingested so far) from the intervals;
    # empty ranges stand in for a part the split does not have.
    split = range_split(start=start, end=end, zone=zone)
    hours = split.hours or (start, start)
    edges = [*split.edges, *[(start, start)] * (2 - len(split.edges))]
    # Matched as the close matches them now (by `gpu_model_key`): the estimate is this month's.
    classes = gpu_classes_by_model(book) if book else None
    # Without classes, the team-hour rollup (ten times fewer rows); with them, the task-hour
    # one, which keeps the GPU model (joined to the task row, as the team-hour rollup
    # follows its team and kind).
    whole_hours = (
        "SELECT t.team_id, t.kind, h.hour_start AS moment, h.gpu_model, h.alloc_gpu_seconds"
        " FROM metering_usagehour h JOIN metering_task t ON t.id = h.task_id"
        " WHERE h.hour_start >= %s AND h.hour_start < %s"
        if classes
        else "SELECT team_id, kind, hour_start AS moment, '' AS gpu_model, alloc_gpu_seconds"
        " FROM metering_teamhour WHERE hour_start >= %s AND hour_start < %s"
    )
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT u.team_id, u.kind = ANY(%s),"
            " extract(hour FROM u.moment AT TIME ZONE %s)::int, u.gpu_model,"
            " sum(u.alloc_gpu_seconds)"
            f" FROM ({whole_hours}"
            "       UNION ALL"
            "       SELECT t.team_id, t.kind, i.interval_start, i.gpu_model, i.alloc_gpu_seconds"
            "       FROM metering_usageinterval i JOIN metering_task t ON t.id = i.task_id"
            "       WHERE (i.interval_start >= %s AND i.interval_start < %s)"
            "          OR (i.interval_start >= %s AND i.interval_start < %s)"
            " ) u WHERE u.team_id = ANY(%s) GROUP BY 1, 2, 3, 4",
            [list(TRAINING_KINDS), zone, *hours, *edges[0], *edges[1], team_ids],
        )
        grouped = cursor.fetchall()
    rates = rates_per_gpu_class(book) if book else None
    engine_book = engine_price_book(book) if book else None
    usage: dict[int, _TeamUsage] = {}
    for team_id, is_training, hour, model, gpu_seconds in grouped:
        entry = usage.get(team_id)
        if entry is None:
            entry = usage[team_id] = _TeamUsage(Decimal(0), Decimal(0) if rates else None)
        entry.gpu_seconds += gpu_seconds
        if rates:
            standard, offpeak_rate = rates[classes.of(model) if classes else pricing.DEFAULT_CLASS]
            offpeak = is_training and not engine_book.is_peak_hour(hour)
            entry.gpu_seconds_times_rate += gpu_seconds * (offpeak_rate if offpeak else standard)
    return usage


def _quota_status(
    team: Team,
    quota: Quota | None,
    usage: _TeamUsage | None,
    month_to_date: _MonthToDate,
    state: MonthToDateState,
    at: dt.datetime,
) -> QuotaStatus:
    book, as_of = state.book, state.ingested_until
    gpu_seconds = usage.gpu_seconds if usage else Decimal(0)
    used_gpu_hours = (gpu_seconds / 3600).quantize(HUNDREDTH, ROUNDING)
    list_price = None
    if book is not None:
        with localcontext(prec=50):
            money = usage.gpu_seconds_times_rate / 3600 if usage else Decimal(0)
            # The book's minor unit, as the statement will round it: whole yen in JPY.
            list_price = round_money(money, book.currency)
    allowance_hours = quota.allowance_gpu_hours if quota else None
    allowance_money = quota.allowance_money if quota else None
    remaining_hours = allowance_hours - used_gpu_hours if allowance_hours is not None else None
    # Count the money allowance against what the statement will say once a draft exists.
    spent, basis = month_to_date.amount, BASIS_MONTH_TO_DATE
    if spent is None:
        spent, basis = list_price, BASIS_LIST_PRICE
    remaining_money = None
    if allowance_money is not None and spent is not None:
        remaining_money = allowance_money - spent
    else:
        basis = None
    return QuotaStatus(
        team=team.name,
        period=state.bounds.period,
        allowance_gpu_hours=allowance_hours,
        used_gpu_hours=used_gpu_hours,
        remaining_gpu_hours=remaining_hours,
        allowance_money=allowance_money,
        month_to_date_amount=month_to_date.amount,
        month_to_date_lines=month_to_date.lines,
        month_to_date_as_of=month_to_date.as_of,
        month_to_date_stale=month_to_date.stale,
        month_to_date_error=month_to_date.error,
        list_price_estimate=list_price,
        remaining_money=remaining_money,
        remaining_money_basis=basis,
        currency=book.currency if book else None,
        over_quota=(remaining_hours is not None and remaining_hours < 0)
        or (remaining_money is not None and remaining_money < 0),
        concurrent_gpu_cap=quota.concurrent_gpu_cap if quota else None,
        io_caps=dict(quota.io_caps) if quota else {},
        as_of=as_of,
        lag_seconds=int((at - as_of).total_seconds()) if as_of else None,
        price_book_version=book.version if book else None,
    )


# --- Stored periods: their scenario, verification, what-if ----------------------------


class PeriodNotClosed(LookupError):
    pass


def period_close_of(period: str) -> PeriodClose:
    period_bounds(period)  # refuses a malformed period with a clear message
    close = PeriodClose.objects.select_related("price_book").filter(period=period).first()
    if close is None:
        raise PeriodNotClosed(f"period {period} is not closed")
    return close


def period_scenario_text(period: str, revision: int | None = None) -> str:
    """The canonical scenario JSON a period was priced from (revision 0: the close itself;
    later revisions: the month re-built from late data, priced as corrections)."""
    close = period_close_of(period)
    snapshots = PeriodScenario.objects.filter(period=close.period)
    if revision is None:
        snapshot = snapshots.filter(revision=0).first()
    else:
        snapshot = snapshots.filter(revision=revision).first()
    if snapshot is None:
        raise PeriodNotClosed(f"period {period} has no scenario revision {revision}")
    return snapshot.scenario_text()


def _price_text(text: str, price_book: PriceBook | None = None) -> pricing.PricingResult:
    data = json.loads(text)
    if price_book is not None:
        data["price_book"] = price_book.to_scenario_dict()
    return pricing.price(pricing.scenario_from_dict(data))


@dataclass(frozen=True)
class Verification:
    """What `verify_period` found: `differences` make it fail, `notes` are for information."""

    period: str
    differences: list[str]
    notes: list[str]

    @property
    def ok(self) -> bool:
        return not self.differences


def period_verification(period: str, archive: Path | None = None) -> Verification:
    """Re-price a closed period's stored scenario and compare it with what was stored; then
    re-build the scenario from the metering tables and compare its hash with the latest one
    priced (a difference means the data changed after the close and no close carried it).

    With `archive` (a month's folder written by `archive_month`), the metering of a month
    whose partitions were archived is read from the archive instead, put back for the
    verification only (metering.partitions.archive_loaded); ArchiveError when it cannot be.
    """
    if archive is not None:
        with partitions.archive_loaded(archive) as month:
            if month.name != period:
                raise partitions.ArchiveError(f"{archive} holds {month.name}, not {period}")
            return period_verification(period)
    close = period_close_of(period)
    differences: list[str] = []
    notes: list[str] = []
    original = PeriodScenario.objects.get(period=period, revision=0)
    text = original.scenario_text()
    digest = hashlib.sha256(text.encode()).hexdigest()
    if digest != close.scenario_sha256:
        differences.append(
            f"stored scenario hashes to {digest}, the close recorded {close.scenario_sha256}"
        )
    if close.engine_version != pricing.ENGINE_VERSION:
        notes.append(
            f"closed with engine {close.engine_version}, re-priced with {pricing.ENGINE_VERSION}"
        )
    differences += _stored_differences(close, _price_text(text))
    differences += _metering_differences(close, notes)
    return Verification(period=period, differences=differences, notes=notes)


def _stored_differences(close: PeriodClose, result: pricing.PricingResult) -> list[str]:
    found: list[str] = []

    def compare(what: str, stored: object, repriced: object) -> None:
        if stored != repriced:
            found.append(f"{what}: stored {stored}, re-priced {repriced}")

    compare("pool cost", close.pool_cost, result.pool_cost_rounded)
    compare("pool cost (unrounded)", close.pool_cost_unrounded, result.pool_cost)
    stored_lines = {
        (team, kind): (amount, unrounded, seconds)
        for team, kind, amount, unrounded, seconds in StatementLine.objects.filter(
            statement__period_close=close, is_correction=False
        ).values_list(
            "statement__team__name", "kind", "amount", "amount_unrounded", "quantity_gpu_seconds"
        )
    }
    repriced_lines = {
        (team.team, line.kind): (line.rounded, line.amount, line.gpu_seconds)
        for team in result.teams
        for line in team.lines
    }
    for team, kind in sorted(set(stored_lines) | set(repriced_lines)):
        compare(
            f"{team} {kind} (amount, unrounded, GPU-seconds)",
            stored_lines.get((team, kind)),
            repriced_lines.get((team, kind)),
        )
    stored_platform = dict(
        PlatformLine.objects.filter(period_close=close, is_correction=False).values_list(
            "name", "amount"
        )
    )
    for line in result.platform.lines:
        compare(f"platform {line.kind}", stored_platform.get(line.kind), line.rounded)
    stored_breaches = sorted(close.sla_breaches.values_list("interval_start", "penalized"))
    repriced_breaches = sorted(
        (dt.datetime.fromtimestamp(breach.interval, dt.UTC), breach.penalized)
        for breach in result.sla_breaches
    )
    compare("SLA breaches (interval, penalized)", stored_breaches, repriced_breaches)
    return found


def _metering_differences(close: PeriodClose, notes: list[str]) -> list[str]:
    latest = PeriodScenario.objects.filter(period=close.period).order_by("-revision").first()
    if latest.revision:
        notes.append(
            f"late data was priced as corrections: revision {latest.revision}, carried by "
            f"the close of {latest.priced_in.period}"
        )
    bounds = closed_period_bounds(close)
    try:
        built = scenario_build(
            start=bounds.start,
            end=bounds.end,
            price_book=close.price_book,
            builder_version=close.scenario_builder_version,
            slos=judged_slos(latest),
            kinds=billed_kinds(latest),
        )
    except pricing.ScenarioError as error:
        return [f"metering rows of {close.period} can no longer be priced: {error}"]
    digest = scenario_sha256(built)
    if digest != latest.scenario_sha256:
        return [
            f"metering rows of {close.period} no longer match the scenario priced "
            f"(hash {digest}, stored {latest.scenario_sha256}): the data changed after the "
            "close; the next close adds correction lines"
        ]
    return []


@dataclass(frozen=True)
class WhatIfAmount:
    statement: Decimal
    what_if: Decimal

    @property
    def difference(self) -> Decimal:
        return self.what_if - self.statement


@dataclass(frozen=True)
class WhatIfTeam:
    team: str
    lines: dict[str, WhatIfAmount]  # by line kind
    total: WhatIfAmount


@dataclass(frozen=True)
class WhatIf:
    """A closed month re-priced with another book, against its statements (nothing stored).

    Statement figures are the month's own lines as closed (corrections excluded), so both
    sides price the same scenario.
    """

    period: str
    statement_price_book_version: int
    what_if_price_book_version: int
    currency: str
    standard_rate: WhatIfAmount
    offpeak_rate: WhatIfAmount
    pool_cost: WhatIfAmount
    platform_total: WhatIfAmount
    teams: list[WhatIfTeam]


def period_whatif(*, period: str, price_book_id: int) -> WhatIf:
    """Price closed `period` with book `price_book_id` (a draft or any other) and compare."""
    close = period_close_of(period)
    book = PriceBook.objects.filter(pk=price_book_id).first()
    if book is None:
        raise PriceBookNotFound(f"price book {price_book_id} does not exist")
    result = _price_text(period_scenario_text(period), price_book=book)
    stored: dict[str, dict[str, Decimal]] = {}
    for team, kind, amount in StatementLine.objects.filter(
        statement__period_close=close, is_correction=False
    ).values_list("statement__team__name", "kind", "amount"):
        stored.setdefault(team, {})[kind] = amount
    repriced = {
        team.team: {line.kind: line.rounded for line in team.lines} for team in result.teams
    }
    teams = []
    for name in sorted(set(stored) | set(repriced)):
        old, new = stored.get(name, {}), repriced.get(name, {})
        lines = {
            kind: WhatIfAmount(old.get(kind, ZERO), new.get(kind, ZERO))
            for kind in pricing.TEAM_LINE_KINDS
            if kind in old or kind in new
        }
        teams.append(
            WhatIfTeam(
                team=name,
                lines=lines,
                total=WhatIfAmount(sum(old.values(), ZERO), sum(new.values(), ZERO)),
            )
        )
    stored_platform = PlatformLine.objects.filter(period_close=close, is_correction=False)
    return WhatIf(
        period=period,
        statement_price_book_version=close.price_book_version,
        what_if_price_book_version=book.version,
        currency=result.currency,
        standard_rate=WhatIfAmount(close.standard_rate, result.rates.standard_per_gpu_hour),
        offpeak_rate=WhatIfAmount(close.offpeak_rate, result.rates.offpeak_training_per_gpu_hour),
        pool_cost=WhatIfAmount(close.pool_cost, result.pool_cost_rounded),
        platform_total=WhatIfAmount(
            sum(stored_platform.values_list("amount", flat=True), ZERO), result.platform.total
        ),
        teams=teams,
    )
