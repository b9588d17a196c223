"""The engine's input: a scenario (pricing.md "Scenario files") as frozen dataclasses.

A `Scenario` validates itself when it is built, so a scenario that exists is one the engine can
price: every error names the offending record (`usage[12]: unknown task 'x'`). Amounts and
quantities are `Decimal` only; a float (or any other number type) raises TypeError.
Intervals are whole Unix seconds (UTC) of the interval's start, aligned to `step_seconds`.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from decimal import Decimal
from typing import NamedTuple

from billing.pricing.money import ZERO
from billing.pricing.times import format_instant, format_interval, zone

INFERENCE = "inference"
TASK_KINDS = ("inference", "training_interactive", "training_batch", "preprocessing")
TRAINING_KINDS = frozenset(TASK_KINDS[1:])
ONE = Decimal(1)


class ScenarioError(ValueError):
    """A scenario the engine refuses; the message names the offending record and field."""


def _check_decimal(name: str, value: object, *, maximum: Decimal | None = None) -> None:
    """A finite, non-negative Decimal (at most `maximum`); floats are a TypeError."""
    if type(value) is not Decimal:
        raise TypeError(f"{name} must be a Decimal, not {type(value).__name__} ({value!r})")
    if not value.is_finite():
        raise ScenarioError(f"{name} must be a finite number, got '{value}'")
    if value < ZERO:
        raise ScenarioError(f"{name} must not be negative, got '{value}'")
    if maximum is not None and value > maximum:
        raise ScenarioError(f"{name} must be at most {maximum}, got '{value}'")


def _check_int(name: str, value: object, *, low: int = 0, high: int | None = None) -> None:
    if type(value) is not int:
        raise TypeError(f"{name} must be an int, not {type(value).__name__} ({value!r})")
    if value < low or (high is not None and value > high):
        bound = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise ScenarioError(f"{name} must be {bound}, got {value}")


def _check_text(name: str, value: object) -> None:
    if not isinstance(value, str) or not value:
        raise ScenarioError(f"{name} must be a non-empty string, got {value!r}")


@dataclass(frozen=True, slots=True)
class PriceBook:
    """One price book version (pricing.md "Price book"); rates are per GPU-hour."""

    currency: str
    timezone: str
    depreciation_per_gpu_hour: Decimal
    facility_per_gpu_hour: Decimal
    electricity_per_kwh: Decimal
    gpu_average_power_kw: Decimal
    reserved_inference_share: Decimal
    peak_hours: tuple[int, int]
    sla_penalty_per_interval: Decimal
    sla_min_requests: int
    starvation_preemption_threshold: int
    starvation_lost_work_cap_seconds: Decimal

    def __post_init__(self) -> None:
        if not (isinstance(self.currency, str) and len(self.currency) == 3):
            raise ScenarioError(f"currency must be an ISO 4217 code, got {self.currency!r}")
        if not (self.currency.isascii() and self.currency.isalpha() and self.currency.isupper()):
            raise ScenarioError(f"currency must be an ISO 4217 code, got {self.currency!r}")
        _check_text("timezone", self.timezone)
        try:
            zone(self.timezone)
        except ValueError as error:
            raise ScenarioError(f"timezone: {error}") from None
        for name in DECIMAL_BOOK_FIELDS:
            _check_decimal(name, getattr(self, name))
        _check_decimal("reserved_inference_share", self.reserved_inference_share, maximum=ONE)
        if not (isinstance(self.peak_hours, tuple) and len(self.peak_hours) == 2):
            raise ScenarioError(f"peak_hours must be [start, end), got {self.peak_hours!r}")
        for hour in self.peak_hours:
            _check_int("peak_hours", hour, high=24)
        _check_int("sla_min_requests", self.sla_min_requests)
        _check_int("starvation_preemption_threshold", self.starvation_preemption_threshold)

    def is_peak_hour(self, hour: int) -> bool:
        """`peak_hours` is `[start, end)` on the local clock; start > end wraps midnight, and
        start = end means no peak hours."""
        start, end = self.peak_hours
        if start <= end:
            return start <= hour < end
        return hour >= start or hour < end


DECIMAL_BOOK_FIELDS = (
    "depreciation_per_gpu_hour",
    "facility_per_gpu_hour",
    "electricity_per_kwh",
    "gpu_average_power_kw",
    "reserved_inference_share",
    "sla_penalty_per_interval",
    "starvation_lost_work_cap_seconds",
)


@dataclass(frozen=True, slots=True)
class Task:
    """A billed unit of work; `kind` decides the rules that apply to it."""

    id: str
    team: str
    kind: str

    def __post_init__(self) -> None:
        _check_text("id", self.id)
        _check_text("team", self.team)
        if self.kind not in TASK_KINDS:
            known = ", ".join(TASK_KINDS)
            raise ScenarioError(f"unknown kind {self.kind!r} (expected one of {known})")

    @property
    def is_training(self) -> bool:
        return self.kind in TRAINING_KINDS


@dataclass(frozen=True, slots=True)
class Service:
    """An inference service with a latency objective on its P99, in milliseconds."""

    id: str
    team: str
    slo_p99_ms: Decimal

    def __post_init__(self) -> None:
        _check_text("id", self.id)
        _check_text("team", self.team)
        _check_decimal("slo_p99_ms", self.slo_p99_ms)


@dataclass(frozen=True, slots=True)
class Capacity:
    """GPUs present * seconds, for the interval starting at `interval` (Unix seconds)."""

    interval: int
    capacity_gpu_seconds: Decimal

    def __post_init__(self) -> None:
        _check_int("interval", self.interval)
        _check_decimal("capacity_gpu_seconds", self.capacity_gpu_seconds)


class Usage(NamedTuple):
    """GPU-seconds a task held in one interval. A plain `(interval, task, alloc)` tuple works
    too: a month of a large pool has millions of these, so they stay tuples."""

    interval: int
    task: str
    alloc_gpu_seconds: Decimal


@dataclass(frozen=True, slots=True)
class Latency:
    """A service's request-latency histogram within one interval.

    `buckets` are `(le, cumulative_count)` in increasing `le` (seconds); the last `le` is
    `Decimal("Infinity")` (Prometheus' `+Inf`), whose count is the interval's request count.
    """

    service: str
    interval: int
    buckets: tuple[tuple[Decimal, Decimal], ...]

    def __post_init__(self) -> None:
        _check_text("service", self.service)
        _check_int("interval", self.interval)
        if not isinstance(self.buckets, tuple) or not self.buckets:
            raise ScenarioError("buckets must be a non-empty tuple of (le, cumulative_count)")
        previous = None
        for le, count in self.buckets:
            if type(le) is not Decimal or le.is_nan():
                raise TypeError(f"buckets: le must be a Decimal, not {le!r}")
            _check_decimal("buckets: cumulative_count", count)
            if previous is not None and le <= previous:
                raise ScenarioError(f"buckets: le must increase, got {le} after {previous}")
            previous = le
        if not previous.is_infinite():
            raise ScenarioError("buckets: the last bucket must be le=+Inf")

    @property
    def request_count(self) -> Decimal:
        return self.buckets[-1][1]


@dataclass(frozen=True, slots=True)
class Preemption:
    """A task evicted at `at` (aware UTC) after running `seconds_since_start` on `gpus`.

    `pod` tells apart pods of one task preempted at the same instant (optional).
    """

    task: str
    at: dt.datetime
    gpus: Decimal
    seconds_since_start: Decimal
    lost_gpu_seconds: Decimal | None
    pod: str = ""

    def __post_init__(self) -> None:
        _check_text("task", self.task)
        if not isinstance(self.at, dt.datetime) or self.at.utcoffset() != dt.timedelta(0):
            raise ScenarioError(f"at must be an aware UTC datetime, got {self.at!r}")
        _check_decimal("gpus", self.gpus)
        _check_decimal("seconds_since_start", self.seconds_since_start)
        if self.lost_gpu_seconds is not None:
            _check_decimal("lost_gpu_seconds", self.lost_gpu_seconds)
        if not isinstance(self.pod, str):
            raise ScenarioError(f"pod must be a string, got {self.pod!r}")


@dataclass(frozen=True, slots=True)
class ScenarioIndex:
    """What pricing needs, grouped once while the scenario is validated."""

    tasks: dict[str, Task]
    services: dict[str, Service]
    capacity: dict[int, Decimal]  # interval -> capacity GPU-seconds
    usage: dict[int, dict[str, Decimal]]  # interval -> task -> allocated GPU-seconds


@dataclass(frozen=True, slots=True)
class Scenario:
    """The engine's whole input for one period (or any window)."""

    step_seconds: int
    price_book: PriceBook
    tasks: tuple[Task, ...]
    services: tuple[Service, ...]
    capacity: tuple[Capacity, ...]
    usage: tuple[Usage, ...]
    latency: tuple[Latency, ...] = ()
    preemptions: tuple[Preemption, ...] = ()
    index: ScenarioIndex = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        for name in ("tasks", "services", "capacity", "usage", "latency", "preemptions"):
            if not isinstance(getattr(self, name), tuple):
                object.__setattr__(self, name, tuple(getattr(self, name)))
        _check_step(self.step_seconds)
        if not isinstance(self.price_book, PriceBook):
            raise TypeError(f"price_book must be a PriceBook, not {type(self.price_book)}")
        tasks = _index_by_id("tasks", self.tasks, Task)
        services = _index_by_id("services", self.services, Service)
        capacity = _index_capacity(self.capacity, self.step_seconds)
        usage = _index_usage(self.usage, self.step_seconds, tasks, capacity)
        _check_latency(self.latency, self.step_seconds, services)
        _check_preemptions(self.preemptions, tasks)
        object.__setattr__(self, "index", ScenarioIndex(tasks, services, capacity, usage))


def _check_step(step: object) -> None:
    try:
        _check_int("step_seconds", step, low=1, high=3600)
    except ScenarioError as error:
        raise ScenarioError(f"scenario: {error}") from None
    if 3600 % step:
        raise ScenarioError(f"scenario: step_seconds must divide 3600, got {step}")


def _index_by_id(where: str, records: tuple, kind: type) -> dict:
    index: dict = {}
    for number, record in enumerate(records):
        if not isinstance(record, kind):
            raise TypeError(f"{where}[{number}] must be a {kind.__name__}, not {record!r}")
        if record.id in index:
            raise ScenarioError(f"{where}[{number}]: duplicate id {record.id!r}")
        index[record.id] = record
    return index


def _check_aligned(where: str, interval: int, step: int) -> None:
    if interval % step:
        raise ScenarioError(
            f"{where}: interval {format_interval(interval)} is not aligned to the "
            f"{step}-second step"
        )


def _index_capacity(records: tuple[Capacity, ...], step: int) -> dict[int, Decimal]:
    capacity: dict[int, Decimal] = {}
    for number, record in enumerate(records):
        if not isinstance(record, Capacity):
            raise TypeError(f"capacity[{number}] must be a Capacity, not {record!r}")
        _check_aligned(f"capacity[{number}]", record.interval, step)
        if record.interval in capacity:
            name = format_interval(record.interval)
            raise ScenarioError(f"capacity[{number}]: duplicate interval {name}")
        capacity[record.interval] = record.capacity_gpu_seconds
    return capacity


METERED_RESOLUTION = Decimal("0.000001")


def _index_usage(
    rows: tuple[Usage, ...], step: int, tasks: dict[str, Task], capacity: dict[int, Decimal]
) -> dict[int, dict[str, Decimal]]:
    """Group usage by interval, refusing what pricing.md cannot price.

    One pass with plain dict operations: this runs once per row of a month's usage.
    """
    by_interval: dict[int, dict[str, Decimal]] = {}
    allocated: dict[int, Decimal] = {}
    for number, row in enumerate(rows):
        try:
            interval, task, alloc = row
        except (TypeError, ValueError):
            raise TypeError(f"usage[{number}] must be an (interval, task, alloc) tuple") from None
        if type(alloc) is not Decimal:
            raise TypeError(f"usage[{number}]: alloc_gpu_seconds must be a Decimal, not {alloc!r}")
        in_interval = by_interval.get(interval)
        if in_interval is None:
            in_interval = by_interval[interval] = _new_usage_interval(number, interval, step)
        if task in in_interval:
            name = format_interval(interval)
            raise ScenarioError(f"usage[{number}]: duplicate usage of task {task!r} in {name}")
        if task not in tasks:
            raise ScenarioError(f"usage[{number}]: unknown task {task!r}")
        if not alloc.is_finite() or alloc < ZERO:
            raise ScenarioError(f"usage[{number}]: negative or invalid allocation '{alloc}'")
        in_interval[task] = alloc
        total = allocated[interval] = allocated.get(interval, ZERO) + alloc
        interval_capacity = capacity.get(interval)
        # Metered allocations are stored to the micro-GPU-second, each rounded on its own (a
        # MIG slice is 3/7 of a GPU), so a full interval may overshoot by that rounding.
        slack = METERED_RESOLUTION * len(in_interval)
        if interval_capacity is None or total > interval_capacity + slack:
            raise _above_capacity(number, task, interval, total, interval_capacity)
    return by_interval


def _new_usage_interval(number: int, interval: object, step: int) -> dict[str, Decimal]:
    if type(interval) is not int:
        raise TypeError(f"usage[{number}]: interval must be an int, not {interval!r}")
    _check_aligned(f"usage[{number}]", interval, step)
    return {}


def _above_capacity(
    number: int, task: str, interval: int, total: Decimal, capacity: Decimal | None
) -> ScenarioError:
    name = format_interval(interval)
    if capacity is None:
        return ScenarioError(
            f"usage[{number}]: task {task!r} has an allocation in {name}, "
            "an interval with no capacity record"
        )
    return ScenarioError(
        f"usage[{number}]: allocations of {name} reach {total} GPU-seconds with task {task!r}, "
        f"above the interval's capacity of {capacity}"
    )


def _check_latency(records: tuple[Latency, ...], step: int, services: dict[str, Service]) -> None:
    seen: set[tuple[str, int]] = set()
    for number, record in enumerate(records):
        if not isinstance(record, Latency):
            raise TypeError(f"latency[{number}] must be a Latency, not {record!r}")
        if record.service not in services:
            raise ScenarioError(f"latency[{number}]: unknown service {record.service!r}")
        _check_aligned(f"latency[{number}]", record.interval, step)
        key = (record.service, record.interval)
        if key in seen:
            name = format_interval(record.interval)
            raise ScenarioError(f"latency[{number}]: duplicate {record.service!r} in {name}")
        seen.add(key)


def _check_preemptions(records: tuple[Preemption, ...], tasks: dict[str, Task]) -> None:
    seen: set[tuple[str, str, dt.datetime]] = set()
    for number, record in enumerate(records):
        if not isinstance(record, Preemption):
            raise TypeError(f"preemptions[{number}] must be a Preemption, not {record!r}")
        if record.task not in tasks:
            raise ScenarioError(f"preemptions[{number}]: unknown task {record.task!r}")
        key = (record.task, record.pod, record.at)
        if key in seen:
            at = format_instant(record.at)
            raise ScenarioError(
                f"preemptions[{number}]: duplicate preemption of {record.task!r} at {at}"
            )
        seen.add(key)
