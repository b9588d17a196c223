"""The engine's output: frozen dataclasses holding every figure a statement stores."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from decimal import Decimal

from billing.pricing.money import hours
from billing.pricing.times import format_interval

DEFAULT_CLASS = "default"

TEAM_LINE_KINDS = ("baseline", "standard", "offpeak", "sla_penalty", "sla_credit", "compensation")
PLATFORM_LINE_NAMES = (
    "idle_capacity",
    "reserve_resold",
    "offpeak_discount",
    "starvation_compensation",
    "unassigned_reservation",
    "rounding",
)


@dataclass(frozen=True, slots=True)
class Rates:
    """The derived rates per GPU-hour (never rounded) and the book figures behind them."""

    currency: str
    depreciation_per_gpu_hour: Decimal  # D
    facility_per_gpu_hour: Decimal  # F
    electricity_per_kwh: Decimal  # E
    gpu_average_power_kw: Decimal  # W
    electricity_per_gpu_hour: Decimal  # E * W
    standard_per_gpu_hour: Decimal  # R = D + F + E * W
    offpeak_training_per_gpu_hour: Decimal  # R_off = D + E * W
    derivation: str
    gpu_class: str = DEFAULT_CLASS  # the class these rates price (docs/pricing.md v2)


@dataclass(frozen=True, slots=True)
class ClassPart:
    """The part of a line that one GPU class priced (unrounded; a line rounds their sum)."""

    gpu_class: str
    gpu_seconds: Decimal
    amount: Decimal
    rate_per_gpu_hour: Decimal | None  # the class's book rate (None on baseline, compensation)

    @property
    def gpu_hours(self) -> Decimal:
        return hours(self.gpu_seconds)


@dataclass(frozen=True, slots=True)
class Contribution:
    """What one task (or, on SLA credit lines, one service) adds to a line, unrounded."""

    id: str
    is_service: bool
    amount: Decimal
    gpu_seconds: Decimal
    # On GPU-time lines: the task's exact part per GPU class, summing to it (v2).
    by_class: tuple[ClassPart, ...] = ()


@dataclass(frozen=True, slots=True)
class Line:
    """One line of a team statement or of the platform balance.

    `gpu_seconds` and `rate_per_gpu_hour` describe GPU-time lines (None on SLA lines, whose
    quantity is `breached_intervals` at `rate_per_interval`). `amount` is the unrounded
    amount; `rounded` is it rounded once to the currency's minor unit.
    """

    kind: str
    amount: Decimal
    rounded: Decimal
    description: str
    gpu_seconds: Decimal | None = None
    rate_per_gpu_hour: Decimal | None = None
    breached_intervals: Decimal | None = None
    rate_per_interval: Decimal | None = None
    contributions: tuple[Contribution, ...] = ()
    # GPU-time lines: each class's part, by class name (docs/pricing.md v2); sums to the line.
    by_class: tuple[ClassPart, ...] = ()

    @property
    def gpu_hours(self) -> Decimal | None:
        """The quantity in GPU-hours, rounded to 2 places, as statements show it."""
        return None if self.gpu_seconds is None else hours(self.gpu_seconds)


@dataclass(frozen=True, slots=True)
class TeamResult:
    """A team's lines (in `TEAM_LINE_KINDS` order, absent when nothing happened) and total."""

    team: str
    lines: tuple[Line, ...]
    total: Decimal  # the sum of the rounded lines

    def line(self, kind: str) -> Line | None:
        return next((line for line in self.lines if line.kind == kind), None)


@dataclass(frozen=True, slots=True)
class PlatformResult:
    """The platform balance, `round(pool cost) - Σ team totals`, and its named lines."""

    lines: tuple[Line, ...]
    total: Decimal

    def line(self, kind: str) -> Line:
        return next(line for line in self.lines if line.kind == kind)


@dataclass(frozen=True, slots=True)
class Breach:
    """A service interval with enough requests whose P99 exceeded the objective."""

    service: str
    team: str
    interval: int
    request_count: Decimal
    p99_seconds: Decimal | None
    slo_p99_ms: Decimal
    is_peak: bool
    training_gpu_seconds: Decimal  # T(i), what training kinds held in the interval
    penalized: bool  # money moved: a peak interval with training running

    @property
    def interval_name(self) -> str:
        return format_interval(self.interval)


@dataclass(frozen=True, slots=True)
class CompensatedPreemption:
    """A preemption beyond the threshold and the credit it earned its task's team."""

    task: str
    team: str
    at: dt.datetime
    number: int  # 1 for the task's first preemption in time order
    lost_gpu_seconds: Decimal
    lost_was_reported: bool
    rate_per_gpu_hour: Decimal
    amount: Decimal  # unrounded credit (positive; the team line shows it negative)
    gpu_class: str = DEFAULT_CLASS  # whose rates priced it


@dataclass(frozen=True, slots=True)
class PricingResult:
    """Everything `price` found for one scenario."""

    engine_version: str
    currency: str
    timezone: str
    step_seconds: int
    period_start: int | None  # first interval priced (Unix seconds), None if no capacity
    period_end: int | None  # end of the last interval priced
    rates: Rates  # the `default` class's
    rates_by_class: tuple[Rates, ...]  # every class of the book by name, `default` included
    capacity_gpu_seconds: Decimal
    capacity_gpu_seconds_by_class: tuple[tuple[str, Decimal], ...]  # every class, by name
    pool_cost: Decimal  # C, unrounded
    pool_cost_rounded: Decimal
    reserved_baseline: Decimal  # B = s * C, unrounded
    teams: tuple[TeamResult, ...]  # sorted by team name
    platform: PlatformResult
    sla_breaches: tuple[Breach, ...]
    compensated_preemptions: tuple[CompensatedPreemption, ...]

    def team(self, name: str) -> TeamResult | None:
        return next((team for team in self.teams if team.team == name), None)
