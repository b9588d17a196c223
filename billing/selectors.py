"""Reads for billing: which price book applies, periods, readiness of a month, quotas."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal, localcontext
from zoneinfo import ZoneInfo

from django.conf import settings
from django.db import connection
from django.db.models import Max, Min, Prefetch, Q, QuerySet
from django.utils import timezone

from billing import pricing
from billing.models import (
    PeriodClose,
    PeriodScenario,
    PlatformLine,
    PriceBook,
    PriceBookGpuClass,
    Quota,
    StatementLine,
    period_year_error,
)
from billing.scenarios import scenario_build, scenario_digest
from metering.models import TRAINING_KINDS, CapacityInterval, IngestWindow, Source, Team
from metering.selectors import range_split, windows_missing

ZERO = Decimal(0)
CENT = Decimal("0.01")
HUNDREDTH = Decimal("0.01")
DEFAULT_MIN_COMPLETENESS = Decimal("0.99")
PERIOD_PATTERN = re.compile(r"^(\d{4})-(0[1-9]|1[0-2])$")


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
    return ZoneInfo(settings.TANDEM_TIMEZONE)


def period_bounds(period: str) -> PeriodBounds:
    """Bounds of `period` ("YYYY-MM"); ValueError naming the value when it is not a month."""
    match = PERIOD_PATTERN.match(period or "")
    if match is None:
        raise ValueError(f"period must be YYYY-MM (e.g. 2026-10), got {period!r}")
    year, month = int(match[1]), int(match[2])
    if error := period_year_error(period, year):
        raise ValueError(error)
    zone = pool_timezone()
    first_day = dt.date(year, month, 1)
    next_first = dt.date(year + month // 12, month % 12 + 1, 1)
    return PeriodBounds(
        period=period,
        timezone=settings.TANDEM_TIMEZONE,
        first_day=first_day,
        start=dt.datetime.combine(first_day, dt.time(), zone).astimezone(dt.UTC),
        end=dt.datetime.combine(next_first, dt.time(), zone).astimezone(dt.UTC),
    )


def period_containing(at: dt.datetime) -> str:
    """The period ("YYYY-MM", pool time zone) that contains the instant `at`."""
    return f"{at.astimezone(pool_timezone()):%Y-%m}"


def period_label(period: str) -> str:
    """ "2026-09" as a finance reader says it: "September 2026"."""
    return f"{period_bounds(period).first_day:%B %Y}"


def period_previous(period: str) -> str:
    first_day = period_bounds(period).first_day
    return f"{first_day - dt.timedelta(days=1):%Y-%m}"


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


def min_completeness() -> Decimal:
    return Decimal(str(getattr(settings, "TANDEM_MIN_COMPLETENESS", DEFAULT_MIN_COMPLETENESS)))


@dataclass(frozen=True)
class WindowProblem:
    """A contiguous range of one source's metering that keeps a month from closing: no
    window covers it (`missing`), its windows are `pending`, `running` or `failed`, or they
    are done but below TANDEM_MIN_COMPLETENESS (`short`)."""

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
        if self.problem == "missing":
            return f"{self.source} has no ingest window from {span} ({_duration(self)})"
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


# Windows overlapping the month that are not done, or done below the threshold, grouped into
# runs of one source and one problem whose windows follow each other without a gap.
PROBLEM_RUNS_SQL = """
WITH flagged AS (
    SELECT source_id, start, "end", completeness,
           CASE WHEN status <> 'done' THEN status ELSE 'short' END AS problem
    FROM metering_ingestwindow
    WHERE start < %(end)s AND "end" > %(start)s
      AND (status <> 'done' OR completeness < %(threshold)s)
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
    (period_sources) that is done and at least `TANDEM_MIN_COMPLETENESS` complete (default
    0.99). Two queries, however many windows the month has."""
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
    return sorted(problems, key=lambda p: (p.start, p.source, p.problem))


# --- Quotas ---------------------------------------------------------------------------


@dataclass(frozen=True)
class QuotaStatus:
    """A team's month so far against its quota (what `quotas/export` serves).

    `used_money` applies the book in force's rates to the month's usage rows (pricing.md rule
    3 without the baseline split): training kinds in off-peak hours at the off-peak rate, all
    other usage (inference included) at the standard rate. It leaves out SLA penalties,
    credits and compensation, which are only known at the close. Amounts are rounded to the
    cent, GPU-hours to two places, both ROUND_HALF_UP.
    """

    team: str
    period: str
    allowance_gpu_hours: Decimal | None
    used_gpu_hours: Decimal
    remaining_gpu_hours: Decimal | None
    allowance_money: Decimal | None
    used_money: Decimal | None
    remaining_money: Decimal | None
    currency: str | None
    over_quota: bool
    concurrent_gpu_cap: Decimal | None
    io_caps: dict
    as_of: dt.datetime | None
    lag_seconds: int | None
    price_book_version: int | None


def quota_status(team: Team, at: dt.datetime | None = None) -> QuotaStatus:
    """One team's quota status at `at` (default now)."""
    return quota_statuses(at=at, teams=[team])[0]


def quota_statuses(
    *, at: dt.datetime | None = None, teams: list[Team] | None = None
) -> list[QuotaStatus]:
    """Quota status of `teams` (default: every team with a quota), with one usage query."""
    at = at or timezone.now()
    if teams is None:
        teams = [quota.team for quota in Quota.objects.select_related("team")]
    quotas = {quota.team_id: quota for quota in Quota.objects.filter(team__in=teams)}
    bounds = period_bounds(period_containing(at))
    as_of = ingested_until(at)
    upto = min(as_of, at) if as_of else at
    try:
        book = price_book_in_force(bounds.first_day)
    except PriceBookNotFound:
        book = None
    usage = _usage_by_team(
        team_ids=[team.pk for team in teams], start=bounds.start, end=upto, book=book
    )
    return [
        _quota_status(team, quotas.get(team.pk), bounds.period, usage.get(team.pk), book, as_of, at)
        for team in teams
    ]


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
    """Allocated GPU-seconds per team, kind class and local hour, priced in Python."""
    if not team_ids or end <= start:
        return {}
    zone = book.timezone if book else settings.TANDEM_TIMEZONE
    # Whole hours from the team-hour rollup, the edges (the hour ingested so far) from the
    # intervals; empty ranges stand in for a part the split does not have.
    split = range_split(start=start, end=end, zone=zone)
    hours = split.hours or (start, start)
    edges = [*split.edges, *[(start, start)] * (2 - len(split.edges))]
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT u.team_id, u.kind = ANY(%s),"
            " extract(hour FROM u.moment AT TIME ZONE %s)::int, sum(u.alloc_gpu_seconds)"
            " FROM (SELECT team_id, kind, hour_start AS moment, alloc_gpu_seconds"
            "       FROM metering_teamhour WHERE hour_start >= %s AND hour_start < %s"
            "       UNION ALL"
            "       SELECT t.team_id, t.kind, i.interval_start, i.alloc_gpu_seconds"
            "       FROM metering_usageinterval i JOIN metering_task t ON t.id = i.task_id"
            "       WHERE (i.interval_start >= %s AND i.interval_start < %s)"
            "          OR (i.interval_start >= %s AND i.interval_start < %s)"
            " ) u WHERE u.team_id = ANY(%s) GROUP BY 1, 2, 3",
            [list(TRAINING_KINDS), zone, *hours, *edges[0], *edges[1], team_ids],
        )
        grouped = cursor.fetchall()
    rates = rates_per_gpu_hour(book) if book else None
    engine_book = engine_price_book(book) if book else None
    usage: dict[int, _TeamUsage] = {}
    for team_id, is_training, hour, gpu_seconds in grouped:
        entry = usage.get(team_id)
        if entry is None:
            entry = usage[team_id] = _TeamUsage(Decimal(0), Decimal(0) if rates else None)
        entry.gpu_seconds += gpu_seconds
        if rates:
            offpeak = is_training and not engine_book.is_peak_hour(hour)
            entry.gpu_seconds_times_rate += gpu_seconds * (rates[1] if offpeak else rates[0])
    return usage


def _quota_status(
    team: Team,
    quota: Quota | None,
    period: str,
    usage: _TeamUsage | None,
    book: PriceBook | None,
    as_of: dt.datetime | None,
    at: dt.datetime,
) -> QuotaStatus:
    gpu_seconds = usage.gpu_seconds if usage else Decimal(0)
    used_gpu_hours = (gpu_seconds / 3600).quantize(HUNDREDTH, ROUND_HALF_UP)
    used_money = None
    if book is not None:
        with localcontext(prec=50):
            money = usage.gpu_seconds_times_rate / 3600 if usage else Decimal(0)
            used_money = money.quantize(CENT, ROUND_HALF_UP)
    allowance_hours = quota.allowance_gpu_hours if quota else None
    allowance_money = quota.allowance_money if quota else None
    remaining_hours = allowance_hours - used_gpu_hours if allowance_hours is not None else None
    remaining_money = None
    if allowance_money is not None and used_money is not None:
        remaining_money = allowance_money - used_money
    return QuotaStatus(
        team=team.name,
        period=period,
        allowance_gpu_hours=allowance_hours,
        used_gpu_hours=used_gpu_hours,
        remaining_gpu_hours=remaining_hours,
        allowance_money=allowance_money,
        used_money=used_money,
        remaining_money=remaining_money,
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


def period_verification(period: str) -> Verification:
    """Re-price a closed period's stored scenario and compare it with what was stored; then
    re-build the scenario from the metering tables and compare its hash with the latest one
    priced (a difference means the data changed after the close and no close carried it)."""
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
    bounds = period_bounds(close.period)
    try:
        built = scenario_build(start=bounds.start, end=bounds.end, price_book=close.price_book)
    except pricing.ScenarioError as error:
        return [f"metering rows of {close.period} can no longer be priced: {error}"]
    digest = scenario_digest(built)[1]
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
