"""The rows behind every report file and the report page, read from closed statements.

Reports are written only for a *closed* period: statements are immutable once closed, so the
same run gives the same CSV and FOCUS bytes every time. Everything here reads; nothing writes.

- `team_csv_rows`: one team's statement lines, each followed by its GPU classes (when it has
  any but `default`) and the tasks (or services) that contributed to it, and a total row.
- `focus_charges`: every charge of the period in FOCUS 1.2 columns, one row per statement line
  and contributing task, or per GPU class for a line priced in several; a line's rounded
  amount is shared among its tasks (or classes) to the currency's minor unit (the cent; the
  yen in JPY) so that BilledCost sums exactly to the statements.
- `report_page`: the numbers on the management page (and so in the PDF).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import ROUND_DOWN, Decimal

from django.conf import settings
from django.db.models import Count, Prefetch, Q

from billing.models import (
    DEFAULT_GPU_CLASS,
    LineKind,
    PeriodClose,
    PlatformLine,
    SlaBreach,
    Statement,
    StatementLine,
    StatementLineClass,
    StatementLineTask,
    StatementLineTaskClass,
)
from billing.pricing.money import per_hour
from billing.selectors import rates_per_gpu_class
from kernel.money import money_quantum, round_money, round_places
from kernel.period import PeriodError, period_utc_range, previous_period, time_zone
from kernel.tasks import TASK_KIND_LABELS as KIND_LABELS
from reports import health
from reports.cards import HealthCard, health_cards
from reports.formatting import CENT, gpu_hours
from reports.period_health import PreemptedTask, period_health
from reports.render_csv import Cell

# A missing health number reads "n/a" in the report and its PDF (an en dash on the dashboards).
REPORT_EMPTY = "n/a"


class ReportInputError(ValueError):
    """The report cannot be written from what is stored (bad period, period not closed)."""


# --- Periods ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Period:
    """A calendar month in the pool's time zone, as a half-open UTC range [start, end)."""

    label: str
    start: dt.datetime
    end: dt.datetime
    timezone: str

    @property
    def previous(self) -> Period:
        return period_bounds(previous_period(self.label), timezone=self.timezone)

    @property
    def days(self) -> int:
        local = time_zone(self.timezone)
        return (self.end.astimezone(local).date() - self.start.astimezone(local).date()).days


def period_bounds(label: str, *, timezone: str | None = None) -> Period:
    """The month `label` (YYYY-MM) in `timezone` (default the pool's) as UTC instants."""
    zone_name = timezone or settings.TANDEM_TIMEZONE
    try:
        start, end = period_utc_range(label, zone_name)
    except PeriodError as error:
        raise ReportInputError(str(error)) from None
    return Period(label=label, start=start, end=end, timezone=zone_name)


def closed_period(label: str) -> PeriodClose:
    """The close of `label`, or a ReportInputError saying the month must be closed first."""
    period_bounds(label)  # validates the label before touching the database
    close = PeriodClose.objects.select_related("price_book").filter(period=label).first()
    if close is None:
        raise ReportInputError(
            f"period {label} is not closed: run `close_period --period {label}` first"
        )
    return close


def close_period_bounds(close: PeriodClose) -> Period:
    return Period(
        label=close.period, start=close.period_start, end=close.period_end, timezone=close.timezone
    )


def corrected_period_bounds(close: PeriodClose) -> dict[str, Period]:
    """The months `close` books corrections of, each on the bounds its own close stored: after
    a change of the pool's zone that month on `close`'s clock is hours off what it billed.
    One query."""
    corrected = StatementLine.objects.filter(
        statement__period_close=close, is_correction=True
    ).values("corrects_period")
    closes = PeriodClose.objects.filter(period__in=corrected)
    return {month.period: close_period_bounds(month) for month in closes}


def _statements(close: PeriodClose) -> list[Statement]:
    lines = StatementLine.objects.order_by("is_correction", "corrects_period", "id")
    contributions = StatementLineTask.objects.select_related("task", "service").order_by(
        "task__external_id", "service__external_id", "id"
    )
    return list(
        close.statements.select_related("team")
        .prefetch_related(
            Prefetch("lines", queryset=lines),
            Prefetch("lines__tasks", queryset=contributions),
            "lines__tasks__classes",
            "lines__classes",
        )
        .order_by("team__name")
    )


# --- Team CSV ---------------------------------------------------------------------------

TEAM_CSV_HEADER = [
    "period",
    "team",
    "record",
    "line_kind",
    "line_description",
    "correction_of_period",
    "task",
    "task_kind",
    "service",
    "gpu_class",
    "gpu_seconds",
    "gpu_hours",
    "rate_per_gpu_hour",
    "amount_unrounded",
    "amount",
    "currency",
]


def _contributor(contribution: StatementLineTask) -> tuple[str | None, str | None, str | None]:
    """(task, task kind, service) names of one contribution."""
    if contribution.task is not None:
        return contribution.task.external_id, contribution.task.kind, None
    return None, None, contribution.service.external_id


def team_csv_rows(statement: Statement) -> list[list[Cell]]:
    """A team's statement: each line, its GPU classes, its contributions, then the total.

    Line rows carry the rounded `amount` (they sum to the total); class and contribution rows
    carry only the unrounded share, which sums to the line's unrounded amount (a line rounds
    once, docs/pricing.md "GPU classes"). Class rows appear only on lines priced in a class
    besides `default`, so a single-class month lists what it did before classes.
    """
    rows: list[list[Cell]] = []
    base = [statement.period, statement.team.name]
    for line in statement.lines.all():
        rows.append(
            [
                *base, "line", line.kind, line.description, line.corrects_period or None,
                None, None, None, None, line.quantity_gpu_seconds, line.quantity_gpu_hours,
                line.rate_per_gpu_hour, line.amount_unrounded, line.amount, statement.currency,
            ]
        )  # fmt: skip
        for part in line.class_parts:
            rows.append(
                [
                    *base, "class", line.kind, None, line.corrects_period or None, None, None,
                    None, part.gpu_class, part.quantity_gpu_seconds, part.quantity_gpu_hours,
                    part.rate_per_gpu_hour, part.amount_unrounded, None, statement.currency,
                ]
            )  # fmt: skip
        for contribution in line.tasks.all():
            task, kind, service = _contributor(contribution)
            rows.append(
                [
                    *base, "contribution", line.kind, None, line.corrects_period or None,
                    task, kind, service, None, contribution.gpu_seconds,
                    gpu_hours(contribution.gpu_seconds), None, contribution.amount_unrounded,
                    None, statement.currency,
                ]
            )  # fmt: skip
    rows.append([*base, "total", *[None] * 11, statement.total, statement.currency])
    return rows


def team_statements(close: PeriodClose) -> list[Statement]:
    return _statements(close)


# --- FOCUS ------------------------------------------------------------------------------


@dataclass(frozen=True)
class FocusSku:
    """The GPU class a charge was priced in, as a FOCUS SKU (one per class and price book)."""

    gpu_class: str
    price_book_version: int
    gpu_models: tuple[str, ...]  # empty for `default`: every model no other class names
    rate_per_gpu_hour: Decimal | None  # the class's book rate of the line, if it has one
    capacity_gpu_seconds: Decimal | None  # the class's capacity in the month (None: not stored)
    average_gpus: Decimal | None  # that capacity over the month's length, 2 places


@dataclass(frozen=True)
class FocusCharge:
    """One FOCUS row before formatting: a line, one GPU class's share of a line, or one
    task's share of a line priced in a single class."""

    close: PeriodClose
    statement: Statement
    line: StatementLine
    billed_cost: Decimal
    list_cost: Decimal
    gpu_seconds: Decimal | None
    resource_id: str | None
    resource_type: str | None
    task_kind: str | None
    sku: FocusSku | None = None


def apportion(
    total: Decimal, weights: Sequence[Decimal], *, quantum: Decimal = CENT
) -> list[Decimal]:
    """Split `total` (a whole number of `quantum`s, the currency's minor unit: the cent, or
    the yen for JPY) in proportion to `weights`, to that unit, summing exactly.

    Largest remainder: each share is rounded toward zero, then the units left over go to the
    shares that lost most, earliest first on ties, so the result is deterministic. Weights
    must all have the sign of `total` (or be zero); with no usable weight, None is returned.
    """
    units = int((total / quantum).to_integral_value())
    if Decimal(units) * quantum != total:
        unit = "cents" if quantum == CENT else f"units of {quantum}"
        raise ValueError(f"{total} is not a whole number of {unit}")
    sign = -1 if units < 0 else 1
    magnitudes = [abs(Decimal(w)) for w in weights]
    weight_sum = sum(magnitudes, Decimal(0))
    if weight_sum == 0:
        raise ValueError("cannot apportion over weights that are all zero")
    exact = [Decimal(abs(units)) * w / weight_sum for w in magnitudes]
    floors = [int(e.to_integral_value(ROUND_DOWN)) for e in exact]
    left = abs(units) - sum(floors)
    order = sorted(range(len(exact)), key=lambda i: (-(exact[i] - floors[i]), i))
    for i in order[:left]:
        floors[i] += 1
    return [Decimal(sign * f) * quantum for f in floors]


def _single_sign(values: Sequence[Decimal], total: Decimal) -> bool:
    if total > 0:
        return all(v >= 0 for v in values)
    if total < 0:
        return all(v <= 0 for v in values)
    return True


def _list_cost(
    line: StatementLine,
    gpu_seconds: Decimal | None,
    billed: Decimal,
    close,
    standard_rate: Decimal | None = None,
) -> Decimal:
    """List price of a charge: the standard rate R (of the charge's GPU class when given),
    from which off-peak training is a discount.

    Every other charge is billed at its list price (ListCost = BilledCost).
    """
    if line.kind != LineKind.OFFPEAK or line.is_correction or gpu_seconds is None:
        return billed
    rate = close.standard_rate if standard_rate is None else standard_rate
    # The engine's own arithmetic: the exact amount, then rounded once to the currency's unit.
    return round_money(per_hour(gpu_seconds, rate), close.currency)


@dataclass(frozen=True)
class _ClassCatalog:
    """A close's GPU classes: their models and standard rates, read once per file."""

    price_book_version: int
    models: dict[str, tuple[str, ...]]
    standard_rates: dict[str, Decimal]
    capacity_gpu_seconds: dict[str, Decimal]
    period_seconds: Decimal

    def sku(self, part: StatementLineClass) -> FocusSku:
        capacity = self.capacity_gpu_seconds.get(part.gpu_class)
        average = None
        if capacity is not None and self.period_seconds:
            average = round_places(capacity / self.period_seconds, 2)
        return FocusSku(
            gpu_class=part.gpu_class,
            price_book_version=self.price_book_version,
            gpu_models=self.models.get(part.gpu_class, ()),
            rate_per_gpu_hour=part.rate_per_gpu_hour,
            capacity_gpu_seconds=capacity,
            average_gpus=average,
        )


def _class_catalog(close: PeriodClose) -> _ClassCatalog:
    book = close.price_book
    return _ClassCatalog(
        price_book_version=close.price_book_version,
        models={item.name: tuple(item.models) for item in book.gpu_classes.all()},
        standard_rates={name: rates[0] for name, rates in rates_per_gpu_class(book).items()},
        capacity_gpu_seconds={
            name: Decimal(seconds) for name, seconds in close.capacity_gpu_seconds_by_class.items()
        },
        period_seconds=Decimal((close.period_end - close.period_start).total_seconds()),
    )


def _class_charges(
    close: PeriodClose,
    statement: Statement,
    line: StatementLine,
    parts: list[StatementLineClass],
    catalog: _ClassCatalog,
) -> list[FocusCharge] | None:
    """One charge per GPU class and contributing task of a line priced in several classes
    (or one besides `default`), by class then task. The line's rounded amount is shared among
    its classes to the currency's minor unit (the cent; the yen in JPY: apportion), then each
    class's share among that class's tasks, so the rows of a class sum to what the class
    alone was always billed and all rows to the line, exactly. A class whose tasks cannot be
    apportioned (mixed signs, all zero), and every class of a close made before contributions
    were stored per class (billing migration 0008), has one charge naming no task. None when
    the classes themselves cannot be apportioned."""
    weights = [part.amount_unrounded for part in parts]
    if line.amount == 0 or not any(weights) or not _single_sign(weights, line.amount_unrounded):
        return None
    tasks_by_class: dict[str, list[tuple[StatementLineTask, StatementLineTaskClass]]] = {}
    for contribution in line.tasks.all():
        for item in contribution.classes.all():
            tasks_by_class.setdefault(item.gpu_class, []).append((contribution, item))
    charges = []
    unit = money_quantum(close.currency)  # shares are whole units of the billed currency
    class_shares = apportion(line.amount, weights, quantum=unit)
    for part, class_billed in zip(parts, class_shares, strict=True):
        standard = catalog.standard_rates.get(part.gpu_class)
        shares = tasks_by_class.get(part.gpu_class, [])
        task_weights = [item.amount_unrounded for _, item in shares]
        if not (
            shares
            and class_billed != 0
            and any(task_weights)
            and _single_sign(task_weights, part.amount_unrounded)
        ):
            charges.append(
                FocusCharge(
                    close=close, statement=statement, line=line, billed_cost=class_billed,
                    list_cost=_list_cost(
                        line, part.quantity_gpu_seconds, class_billed, close, standard
                    ),
                    gpu_seconds=part.quantity_gpu_seconds, resource_id=None,
                    resource_type=None, task_kind=None, sku=catalog.sku(part),
                )
            )  # fmt: skip
            continue
        for (contribution, item), billed in zip(
            shares, apportion(class_billed, task_weights, quantum=unit), strict=True
        ):
            task, kind, service = _contributor(contribution)
            charges.append(
                FocusCharge(
                    close=close, statement=statement, line=line, billed_cost=billed,
                    list_cost=_list_cost(line, item.gpu_seconds, billed, close, standard),
                    gpu_seconds=item.gpu_seconds, resource_id=task or service,
                    resource_type=KIND_LABELS.get(kind, kind) if task else "Inference service",
                    task_kind=kind, sku=catalog.sku(part),
                )
            )  # fmt: skip
    return charges


def _line_charges(
    close: PeriodClose, statement: Statement, line: StatementLine, catalog: _ClassCatalog
) -> list[FocusCharge]:
    parts = list(line.classes.all())
    if line.class_parts:
        charges = _class_charges(close, statement, line, parts, catalog)
        if charges is not None:
            return charges
    # A line priced in one class (`default` in a month without classes) names it as its SKU.
    sku = catalog.sku(parts[0]) if len(parts) == 1 else None
    contributions = list(line.tasks.all())
    weights = [c.amount_unrounded for c in contributions]
    usable = (
        contributions
        and line.amount != 0
        and any(weights)
        and _single_sign(weights, line.amount_unrounded)
    )
    if not usable:
        return [
            FocusCharge(
                close=close, statement=statement, line=line, billed_cost=line.amount,
                list_cost=_list_cost(line, line.quantity_gpu_seconds, line.amount, close),
                gpu_seconds=line.quantity_gpu_seconds, resource_id=None, resource_type=None,
                task_kind=None, sku=sku,
            )
        ]  # fmt: skip
    charges = []
    unit = money_quantum(close.currency)  # shares are whole units of the billed currency
    shares = apportion(line.amount, weights, quantum=unit)
    for contribution, billed in zip(contributions, shares, strict=True):
        task, kind, service = _contributor(contribution)
        charges.append(
            FocusCharge(
                close=close, statement=statement, line=line, billed_cost=billed,
                list_cost=_list_cost(line, contribution.gpu_seconds, billed, close),
                gpu_seconds=contribution.gpu_seconds, resource_id=task or service,
                resource_type=KIND_LABELS.get(kind, kind) if task else "Inference service",
                task_kind=kind, sku=sku,
            )
        )  # fmt: skip
    return charges


def focus_charges(close: PeriodClose) -> list[FocusCharge]:
    """Every team charge of the period; BilledCost sums to the statements' totals exactly."""
    catalog = _class_catalog(close)
    charges: list[FocusCharge] = []
    for statement in _statements(close):
        for line in statement.lines.all():
            charges.extend(_line_charges(close, statement, line, catalog))
    return charges


# --- The report page ---------------------------------------------------------------------


@dataclass(frozen=True)
class TeamCost:
    team: str
    total: Decimal
    lines: dict[str, Decimal]
    previous_total: Decimal | None


@dataclass(frozen=True)
class ServiceRecord:
    service: str
    team: str
    slo_p99_ms: int
    p99_ms: Decimal | None
    previous_p99_ms: Decimal | None
    meets_slo: bool | None
    breached_intervals: int
    penalized_intervals: int


@dataclass(frozen=True)
class ClassRow:
    """One GPU class's part of a team's line, for the report's GPU classes table."""

    team: str
    line: str
    gpu_class: str
    quantity_gpu_hours: Decimal
    rate_per_gpu_hour: Decimal | None
    amount_unrounded: Decimal


def _class_rows(close: PeriodClose) -> list[ClassRow]:
    """Every class part of the month's lines, by team, line and class, when any line has a
    class besides `default` (else none: the report keeps its single-class look)."""
    parts = (
        StatementLineClass.objects.filter(
            line__statement__period_close=close, line__is_correction=False
        )
        .select_related("line__statement__team")
        .order_by("line__statement__team__name", "line__id", "gpu_class")
    )
    rows = [
        ClassRow(
            team=part.line.statement.team.name,
            line=part.line.get_kind_display(),
            gpu_class=part.gpu_class,
            quantity_gpu_hours=part.quantity_gpu_hours,
            rate_per_gpu_hour=part.rate_per_gpu_hour,
            amount_unrounded=part.amount_unrounded,
        )
        for part in parts
    ]
    if all(row.gpu_class == DEFAULT_GPU_CLASS for row in rows):
        return []
    return rows


@dataclass
class ReportPage:
    period: Period
    previous: Period
    close: PeriodClose
    cards: list[HealthCard]
    verdict: health.Verdict
    teams: list[TeamCost]
    platform_lines: list[PlatformLine]
    services: list[ServiceRecord]
    top_preempted: list[PreemptedTask]
    sharing: health.SharingAnalytics
    profile_rows: list[dict] = field(default_factory=list)
    wait_rows: list[dict] = field(default_factory=list)
    # Each team line's GPU classes; empty in a month priced in `default` alone.
    class_rows: list[ClassRow] = field(default_factory=list)
    # No health numbers were stored with the close (closed before snapshots): read live.
    health_read_live: bool = False

    @property
    def currency(self) -> str:
        return self.close.currency

    @property
    def teams_total(self) -> Decimal:
        return sum((team.total for team in self.teams), Decimal("0.00"))

    @property
    def platform_total(self) -> Decimal:
        return sum((line.amount for line in self.platform_lines), Decimal("0.00"))

    @property
    def pool_cost_with_corrections(self) -> Decimal:
        return self.close.pool_cost + self.close.pool_cost_corrections

    @property
    def reconciles(self) -> bool:
        """docs/pricing.md: round(C) = Σ team totals + platform balance, to the cent."""
        return self.teams_total + self.platform_total == self.pool_cost_with_corrections

    @property
    def reconciliation_rows(self) -> list[dict]:
        rows = [{"label": team.team, "amount": team.total} for team in self.teams]
        rows += [
            {"label": f"Platform: {line.get_name_display().lower()}", "amount": line.amount}
            for line in self.platform_lines
            if line.amount
        ]
        return rows


def _team_costs(close: PeriodClose) -> list[TeamCost]:
    previous = {
        s.team_id: s.total
        for s in Statement.objects.filter(period=close_period_bounds(close).previous.label)
    }
    costs = []
    for statement in close.statements.select_related("team").prefetch_related("lines"):
        lines: dict[str, Decimal] = {}
        for line in statement.lines.all():
            lines[line.kind] = lines.get(line.kind, Decimal("0.00")) + line.amount
        costs.append(
            TeamCost(
                team=statement.team.name,
                total=statement.total,
                lines=lines,
                previous_total=previous.get(statement.team_id),
            )
        )
    return sorted(costs, key=lambda cost: (-cost.total, cost.team))


def _service_records(
    close: PeriodClose, now: list[health.ServiceLatency], before: list[health.ServiceLatency]
) -> list[ServiceRecord]:
    breaches = {
        row["service_id"]: row
        for row in SlaBreach.objects.filter(period_close=close)
        .values("service_id")
        .annotate(n=Count("id"), penalized=Count("id", filter=Q(penalized=True)))
    }
    earlier = {s.service_id: s.p99_ms for s in before}
    return [
        ServiceRecord(
            service=s.service,
            team=s.team,
            slo_p99_ms=s.slo_p99_ms,
            p99_ms=s.p99_ms,
            previous_p99_ms=earlier.get(s.service_id),
            meets_slo=s.meets_slo,
            breached_intervals=breaches.get(s.service_id, {}).get("n", 0),
            penalized_intervals=breaches.get(s.service_id, {}).get("penalized", 0),
        )
        for s in now
    ]


def _profile_rows(analytics: health.SharingAnalytics, period: Period) -> list[dict]:
    """Average GPUs held per local hour of day: its GPU-seconds over the time the month, as
    billed, showed that hour (`health.hour_of_day_seconds`), on the close's clock."""
    shown = health.hour_of_day_seconds(
        period.start, period.end, time_zone(period.timezone), settings.TANDEM_STEP_SECONDS
    )
    return [
        {
            "hour": hour.hour,
            "inference_gpus": health.average_gpus(hour.inference_gpu_seconds, shown[hour.hour]),
            "training_gpus": health.average_gpus(hour.training_gpu_seconds, shown[hour.hour]),
        }
        for hour in analytics.profile
    ]


def report_page(label: str) -> ReportPage:
    """Everything the management page shows for a closed month (whole pool, every team).

    The health numbers are those stored with the close (reports/period_health.py), so the
    page stays as the month was closed; a close older than those snapshots reads them live.
    """
    close = closed_period(label)
    period = close_period_bounds(close)
    previous = period.previous
    numbers = period_health(close, previous=(previous.start, previous.end))
    verdict = numbers.verdict
    return ReportPage(
        period=period,
        previous=previous,
        close=close,
        cards=health_cards(
            before=numbers.before,
            after=numbers.after,
            verdict=verdict,
            empty=REPORT_EMPTY,
            span="month",
        ),
        verdict=verdict,
        teams=_team_costs(close),
        platform_lines=list(
            close.platform_lines.order_by("is_correction", "id").prefetch_related("classes")
        ),
        services=_service_records(close, numbers.after.services, numbers.before.services),
        top_preempted=numbers.top_preempted,
        sharing=numbers.sharing,
        profile_rows=_profile_rows(numbers.sharing, period),
        wait_rows=numbers.wait_rows,
        class_rows=_class_rows(close),
        health_read_live=numbers.read_live,
    )
