"""The engine's input: a scenario (docs/pricing.md "Scenario files") as frozen dataclasses.

A `Scenario` validates itself when it is built, so a scenario that exists is one the engine can
price: every error names the offending record (`usage[12]: unknown task 'x'`). Amounts and
quantities are `Decimal` only; a float (or any other number type) raises TypeError.
Intervals are whole Unix seconds (UTC) of the interval's start, aligned to `step_seconds`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from itertools import chain, groupby, repeat
from operator import itemgetter
from typing import NamedTuple

from billing.pricing.money import ZERO
from billing.pricing.times import format_instant, format_interval, zone
from kernel.price_book_fields import ENGINE_DECIMAL_FIELDS as DECIMAL_BOOK_FIELDS
from kernel.price_book_fields import GPU_CLASS_DECIMAL_FIELDS as CLASS_DECIMAL_FIELDS
from kernel.tasks import TASK_KINDS, TRAINING_KINDS

# The class every GPU belongs to unless a class of the book names its model (docs/pricing.md v2).
DEFAULT_CLASS = "default"
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
class GpuClass:
    """A GPU class of a price book (docs/pricing.md "GPU classes"): its own hardware figures.

    `reserved_inference_share` None means the book's share. The tariff, peak hours and the
    SLA and starvation figures are the book's, shared by every class.
    """

    name: str
    models: tuple[str, ...]
    depreciation_per_gpu_hour: Decimal
    facility_per_gpu_hour: Decimal
    gpu_average_power_kw: Decimal
    reserved_inference_share: Decimal | None = None

    def __post_init__(self) -> None:
        _check_text("name", self.name)
        if self.name == DEFAULT_CLASS:
            raise ScenarioError(
                f"name: {DEFAULT_CLASS!r} is the class of the book's own figures; "
                "a listed class takes another name"
            )
        if not isinstance(self.models, tuple):
            raise ScenarioError(f"models must be a tuple of model names, got {self.models!r}")
        for model in self.models:
            _check_text("models", model)
        if len(set(self.models)) != len(self.models):
            raise ScenarioError(f"models: a model is listed twice in {list(self.models)!r}")
        for name in CLASS_DECIMAL_FIELDS:
            _check_decimal(name, getattr(self, name))
        if self.reserved_inference_share is not None:
            _check_decimal("reserved_inference_share", self.reserved_inference_share, maximum=ONE)


class ClassFigures(NamedTuple):
    """A class's D, F, W and resolved reserve share s (the book's when the class has none)."""

    name: str
    depreciation_per_gpu_hour: Decimal
    facility_per_gpu_hour: Decimal
    gpu_average_power_kw: Decimal
    reserved_inference_share: Decimal


def _check_classes(classes: object) -> None:
    """Unique names, and no model name in two classes (docs/pricing.md "GPU classes")."""
    if not isinstance(classes, tuple):
        raise ScenarioError(f"gpu_classes must be a tuple of GpuClass, got {classes!r}")
    names: set[str] = set()
    owners: dict[str, str] = {}
    for number, item in enumerate(classes):
        if not isinstance(item, GpuClass):
            raise TypeError(f"gpu_classes[{number}] must be a GpuClass, not {item!r}")
        if item.name in names:
            raise ScenarioError(f"gpu_classes[{number}]: duplicate class name {item.name!r}")
        names.add(item.name)
        for model in item.models:
            if model in owners:
                raise ScenarioError(
                    f"gpu_classes[{number}]: model {model!r} of class {item.name!r} is already "
                    f"in class {owners[model]!r}; a model belongs to one class"
                )
            owners[model] = item.name


@dataclass(frozen=True, slots=True)
class PriceBook:
    """One price book version (docs/pricing.md "Price book"); rates are per GPU-hour."""

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
    gpu_classes: tuple[GpuClass, ...] = ()

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
        _check_classes(self.gpu_classes)

    @property
    def class_names(self) -> tuple[str, ...]:
        """Every class of the book, `default` included, in sorted (code point) order."""
        return tuple(sorted((DEFAULT_CLASS, *(item.name for item in self.gpu_classes))))

    def class_figures(self) -> dict[str, ClassFigures]:
        """Per class name (sorted), the figures its rates and reserve come from; `default`
        is the book's own D, F, W and s."""
        figures = {
            DEFAULT_CLASS: ClassFigures(
                DEFAULT_CLASS,
                self.depreciation_per_gpu_hour,
                self.facility_per_gpu_hour,
                self.gpu_average_power_kw,
                self.reserved_inference_share,
            )
        }
        for item in self.gpu_classes:
            share = item.reserved_inference_share
            figures[item.name] = ClassFigures(
                item.name,
                item.depreciation_per_gpu_hour,
                item.facility_per_gpu_hour,
                item.gpu_average_power_kw,
                self.reserved_inference_share if share is None else share,
            )
        return {name: figures[name] for name in sorted(figures)}

    def is_peak_hour(self, hour: int) -> bool:
        """`peak_hours` is `[start, end)` on the local clock; start > end wraps midnight, and
        start = end means no peak hours."""
        start, end = self.peak_hours
        if start <= end:
            return start <= hour < end
        return hour >= start or hour < end


@dataclass(frozen=True, slots=True)
class Task:
    """A billed unit of work; `kind` decides the rules that apply to it."""

    id: str
    team: str
    kind: str
    # Preemptions the task had before the period: its first one here is number this + 1.
    preemptions_before: int = 0

    def __post_init__(self) -> None:
        _check_text("id", self.id)
        _check_text("team", self.team)
        if self.kind not in TASK_KINDS:
            known = ", ".join(TASK_KINDS)
            raise ScenarioError(f"unknown kind {self.kind!r} (expected one of {known})")
        _check_int("preemptions_before", self.preemptions_before)

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
    """GPUs of one class present * seconds, for the interval starting at `interval` (Unix
    seconds)."""

    interval: int
    capacity_gpu_seconds: Decimal
    gpu_class: str = DEFAULT_CLASS

    def __post_init__(self) -> None:
        _check_int("interval", self.interval)
        _check_decimal("capacity_gpu_seconds", self.capacity_gpu_seconds)
        _check_text("gpu_class", self.gpu_class)


class Usage(NamedTuple):
    """GPU-seconds a task held of one GPU class in one interval. A plain `(interval, task,
    alloc)` tuple (class `default`) or `(interval, task, alloc, gpu_class)` works too: a month
    of a large pool has millions of these, so they stay tuples."""

    interval: int
    task: str
    alloc_gpu_seconds: Decimal
    gpu_class: str = DEFAULT_CLASS


Run = tuple[int, str, tuple[str, ...], tuple[Decimal, ...]]


class UsageRuns(tuple):
    """Usage rows made from runs, each the rows of one interval and class: `(interval,
    gpu_class, task ids, allocations)`. A builder that reads usage grouped (billing's, from
    the metering tables) hands them over as they are, and the Scenario checks and indexes a
    run at a time without regrouping millions of rows. The tuple holds the plain rows, in
    run order (`default` rows without a class), so it is a `Scenario.usage` like any other.
    """

    runs: tuple[Run, ...]

    def __new__(cls, runs: Iterable[tuple[int, str, Iterable[str], Iterable[Decimal]]]):
        kept = []
        for interval, gpu_class, tasks, allocs in runs:
            tasks, allocs = tuple(tasks), tuple(allocs)
            if len(tasks) != len(allocs):
                raise TypeError(f"usage run of {interval!r}: as many allocations as tasks")
            kept.append((interval, gpu_class, tasks, allocs))
        self = super().__new__(cls, chain.from_iterable(map(_run_rows, kept)))
        self.runs = tuple(kept)
        return self

    def __getnewargs__(self) -> tuple:
        return (self.runs,)


def _run_rows(run: Run) -> Iterator[tuple]:
    interval, gpu_class, tasks, allocs = run
    if gpu_class == DEFAULT_CLASS:
        return zip(repeat(interval), tasks, allocs, strict=False)  # repeat() is endless
    return zip(repeat(interval), tasks, allocs, repeat(gpu_class), strict=False)


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
    gpu_class: str = DEFAULT_CLASS  # the class of the GPUs it lost, whose rates credit it

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
        _check_text("gpu_class", self.gpu_class)


@dataclass(frozen=True, slots=True)
class ClassIndex:
    """One GPU class's sub-pool: its capacity and usage per interval."""

    capacity: dict[int, Decimal]  # interval -> capacity GPU-seconds of the class
    usage: dict[int, dict[str, Decimal]]  # interval -> task -> GPU-seconds of the class


@dataclass(frozen=True, slots=True)
class ScenarioIndex:
    """What pricing needs, grouped once while the scenario is validated.

    `capacity` and `usage` are summed over the GPU classes (rule 4 and the period's bounds
    read them); `classes` holds each class of the book on its own (rules 1, 2, 3, 5, 6).
    With one class present they are the same dicts, so a version-1 scenario costs nothing more.
    """

    tasks: dict[str, Task]
    services: dict[str, Service]
    capacity: dict[int, Decimal]  # interval -> capacity GPU-seconds, all classes
    usage: dict[int, dict[str, Decimal]]  # interval -> task -> allocated GPU-seconds, all classes
    classes: dict[str, ClassIndex]  # every class of the book, `default` included, sorted


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
        known = self.price_book.class_names
        tasks = _index_by_id("tasks", self.tasks, Task)
        services = _index_by_id("services", self.services, Service)
        capacity = _index_capacity(self.capacity, self.step_seconds, known)
        usage = _index_usage(self.usage, self.step_seconds, tasks, capacity, known)
        _check_latency(self.latency, self.step_seconds, services)
        _check_preemptions(self.preemptions, tasks, known)
        classes = {name: ClassIndex(capacity.get(name, {}), usage.get(name, {})) for name in known}
        index = ScenarioIndex(
            tasks, services, _summed_capacity(capacity), _summed_usage(usage), classes
        )
        object.__setattr__(self, "index", index)


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


def _unknown_class(where: str, gpu_class: object, known: tuple[str, ...]) -> ScenarioError:
    return ScenarioError(
        f"{where}: unknown gpu_class {gpu_class!r} (the price book's classes: {', '.join(known)})"
    )


def _index_capacity(
    records: tuple[Capacity, ...], step: int, known: tuple[str, ...]
) -> dict[str, dict[int, Decimal]]:
    """class -> interval -> capacity; one record per class and interval."""
    capacity: dict[str, dict[int, Decimal]] = {}
    for number, record in enumerate(records):
        if not isinstance(record, Capacity):
            raise TypeError(f"capacity[{number}] must be a Capacity, not {record!r}")
        _check_aligned(f"capacity[{number}]", record.interval, step)
        if record.gpu_class not in known:
            raise _unknown_class(f"capacity[{number}]", record.gpu_class, known)
        in_class = capacity.setdefault(record.gpu_class, {})
        if record.interval in in_class:
            name = format_interval(record.interval)
            of_class = "" if record.gpu_class == DEFAULT_CLASS else f" of {record.gpu_class!r}"
            raise ScenarioError(f"capacity[{number}]: duplicate interval {name}{of_class}")
        in_class[record.interval] = record.capacity_gpu_seconds
    return capacity


METERED_RESOLUTION = Decimal("0.000001")


def _index_usage(
    rows: tuple[Usage, ...],
    step: int,
    tasks: dict[str, Task],
    capacity: dict[str, dict[int, Decimal]],
    known: tuple[str, ...],
) -> dict[str, dict[int, dict[str, Decimal]]]:
    """Group usage by class and interval, refusing what docs/pricing.md cannot price.

    A row's class must have a capacity record in its interval, and the interval's
    allocations over all classes must fit its capacity over all classes (a task may run on
    another class's GPU of the same interval: the worked examples overbook `default`).

    Checked in bulk first (`_index_usage_runs`); when that cannot vouch for every row, row
    by row (`_index_usage_rows`), which names the offending record. Both give the same index.
    """
    index = _index_usage_runs(rows, step, tasks, capacity, known)
    if index is None:
        index = _index_usage_rows(rows, step, tasks, capacity, known)
    return index


def _index_usage_runs(
    rows: tuple[Usage, ...],
    step: int,
    tasks: dict[str, Task],
    capacity: dict[str, dict[int, Decimal]],
    known: tuple[str, ...],
) -> dict[str, dict[int, dict[str, Decimal]]] | None:
    """`_index_usage_rows`'s index, built and checked a run at a time, or None when a check
    fails (or might: a row that is not a plain tuple of the expected types).

    A run is consecutive rows of one interval and class, as a builder writes a month: each is
    checked and grouped with a few C-level passes (types, finiteness, bounds, duplicates,
    unknown tasks) instead of Python code per row. Every check is at least as strict as the
    row-by-row one, the interval's allocations are added in the same order in the same
    context, and a run whose total fits the interval's capacity cannot have passed it on the
    way (allocations are not negative), so when this returns an index, the row-by-row pass
    would have returned the same one.
    """
    by_class: dict[str, dict[int, dict[str, Decimal]]] = {}
    total_capacity = _summed_capacity(capacity)
    allocated: dict[int, Decimal] = {}
    try:
        runs = rows.runs if type(rows) is UsageRuns else _runs(rows)
        for interval, gpu_class, task_ids, allocs in runs:
            if not task_ids:
                continue  # a run of no rows
            if not _run_indexed(
                interval, gpu_class, task_ids, allocs, step, tasks, capacity, known
            ):
                return None
            group = dict(zip(task_ids, allocs, strict=True))
            if len(group) != len(task_ids):
                return None  # a task twice in the run
            in_class = by_class.setdefault(gpu_class, {})
            in_interval = in_class.get(interval)
            if in_interval is None:
                in_class[interval] = group
            elif in_interval.keys().isdisjoint(group):
                in_interval.update(group)
            else:
                return None
            total = allocated[interval] = sum(allocs, allocated.get(interval, ZERO))
            if total > total_capacity[interval]:
                return None  # maybe within the metered resolution: the rows decide
    except (_NotRuns, TypeError, ValueError, ArithmeticError, KeyError):
        return None
    return by_class


class _NotRuns(Exception):
    """Rows that `_index_usage_runs` does not vouch for: the row-by-row pass decides."""


def _runs(rows: tuple) -> Iterator[Run]:
    """Plain rows as runs of consecutive rows of one interval and class (any order of rows
    works; a builder's come in long runs). Every row's interval must be an int: runs group
    equal keys, and 300.0 equals 300."""
    for length, same_length in groupby(rows, len):
        if length not in (3, 4):
            raise _NotRuns
        run_key = itemgetter(0, 3) if length == 4 else itemgetter(0)
        for key, run in groupby(same_length, run_key):
            interval, gpu_class = key if length == 4 else (key, DEFAULT_CLASS)
            run = list(run)
            if set(map(type, map(itemgetter(0), run))) != {int}:
                raise _NotRuns
            yield interval, gpu_class, list(map(itemgetter(1), run)), list(map(itemgetter(2), run))


def _run_indexed(
    interval: object,
    gpu_class: object,
    task_ids: Sequence[str],
    allocs: Sequence[Decimal],
    step: int,
    tasks: dict[str, Task],
    capacity: dict[str, dict[int, Decimal]],
    known: tuple[str, ...],
) -> bool:
    """Whether every row of a run (one interval and class) passes `_index_usage_rows`'s
    checks of a single row; duplicates and the capacity bound are the caller's."""
    if type(interval) is not int or interval % step:
        return False
    if gpu_class not in known or interval not in capacity.get(gpu_class, {}):
        return False
    if set(map(type, allocs)) != {Decimal} or not all(map(Decimal.is_finite, allocs)):
        return False
    if allocs and min(allocs) < ZERO:
        return False
    return set(task_ids).issubset(tasks)


def _index_usage_rows(
    rows: tuple[Usage, ...],
    step: int,
    tasks: dict[str, Task],
    capacity: dict[str, dict[int, Decimal]],
    known: tuple[str, ...],
) -> dict[str, dict[int, dict[str, Decimal]]]:
    """`_index_usage` one row at a time: the first row the rules refuse raises, named."""
    by_class: dict[str, dict[int, dict[str, Decimal]]] = {}
    classes: dict[str, tuple[dict, dict]] = {}  # class -> (its usage, its capacity)
    total_capacity = _summed_capacity(capacity)
    allocated: dict[int, Decimal] = {}
    for number, row in enumerate(rows):
        try:
            if len(row) == 3:
                interval, task, alloc = row
                gpu_class = DEFAULT_CLASS
            else:
                interval, task, alloc, gpu_class = row
        except (TypeError, ValueError):
            raise TypeError(
                f"usage[{number}] must be an (interval, task, alloc[, gpu_class]) tuple"
            ) from None
        if type(alloc) is not Decimal:
            raise TypeError(f"usage[{number}]: alloc_gpu_seconds must be a Decimal, not {alloc!r}")
        in_class = classes.get(gpu_class)
        if in_class is None:
            if gpu_class not in known:
                raise _unknown_class(f"usage[{number}]", gpu_class, known)
            in_class = classes[gpu_class] = ({}, capacity.get(gpu_class, {}))
            by_class[gpu_class] = in_class[0]
        by_interval, class_capacity = in_class
        in_interval = by_interval.get(interval)
        if in_interval is None:
            in_interval = by_interval[interval] = _new_usage_interval(number, interval, step)
        if task in in_interval:
            name = format_interval(interval)
            on_class = "" if gpu_class == DEFAULT_CLASS else f" on {gpu_class!r}"
            raise ScenarioError(
                f"usage[{number}]: duplicate usage of task {task!r}{on_class} in {name}"
            )
        if task not in tasks:
            raise ScenarioError(f"usage[{number}]: unknown task {task!r}")
        if not alloc.is_finite() or alloc < ZERO:
            raise ScenarioError(f"usage[{number}]: negative or invalid allocation '{alloc}'")
        in_interval[task] = alloc
        total = allocated[interval] = allocated.get(interval, ZERO) + alloc
        if interval not in class_capacity:
            raise _no_capacity(number, task, interval, gpu_class)
        interval_capacity = total_capacity[interval]
        if total > interval_capacity:
            # Metered allocations are stored to the micro-GPU-second, each rounded on its
            # own (a MIG slice is 3/7 of a GPU), so a full interval may overshoot by that.
            count = sum(len(usage[0].get(interval, ())) for usage in classes.values())
            if total > interval_capacity + METERED_RESOLUTION * count:
                raise _above_capacity(number, task, interval, total, interval_capacity)
    return by_class


def _summed_capacity(by_class: dict[str, dict[int, Decimal]]) -> dict[int, Decimal]:
    """interval -> capacity over all classes (the one class's own dict when there is one)."""
    if len(by_class) <= 1:
        return next(iter(by_class.values()), {})
    summed: dict[int, Decimal] = {}
    for capacity in by_class.values():
        for interval, seconds in capacity.items():
            summed[interval] = summed.get(interval, ZERO) + seconds
    return summed


def _summed_usage(
    by_class: dict[str, dict[int, dict[str, Decimal]]],
) -> dict[int, dict[str, Decimal]]:
    """interval -> task -> a(t,i) = Σ_c a_c(t,i) (the one class's own dict when there is one)."""
    if len(by_class) <= 1:
        return next(iter(by_class.values()), {})
    summed: dict[int, dict[str, Decimal]] = {}
    for usage in by_class.values():
        for interval, rows in usage.items():
            in_interval = summed.get(interval)
            if in_interval is None:
                summed[interval] = dict(rows)
            elif in_interval.keys().isdisjoint(rows):
                # The usual case, a task on one class per interval: merged in C, no sums.
                in_interval.update(rows)
            else:
                for task, alloc in rows.items():
                    in_interval[task] = in_interval.get(task, ZERO) + alloc
    return summed


def _new_usage_interval(number: int, interval: object, step: int) -> dict[str, Decimal]:
    if type(interval) is not int:
        raise TypeError(f"usage[{number}]: interval must be an int, not {interval!r}")
    _check_aligned(f"usage[{number}]", interval, step)
    return {}


def _no_capacity(number: int, task: str, interval: int, gpu_class: str) -> ScenarioError:
    name = format_interval(interval)
    if gpu_class == DEFAULT_CLASS:
        return ScenarioError(
            f"usage[{number}]: task {task!r} has an allocation in {name}, "
            "an interval with no capacity record"
        )
    return ScenarioError(
        f"usage[{number}]: task {task!r} has an allocation on {gpu_class!r} in {name}, "
        f"an interval with no capacity record of class {gpu_class!r}"
    )


def _above_capacity(
    number: int, task: str, interval: int, total: Decimal, capacity: Decimal
) -> ScenarioError:
    name = format_interval(interval)
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


def _check_preemptions(
    records: tuple[Preemption, ...], tasks: dict[str, Task], known: tuple[str, ...]
) -> None:
    seen: set[tuple[str, str, dt.datetime]] = set()
    for number, record in enumerate(records):
        if not isinstance(record, Preemption):
            raise TypeError(f"preemptions[{number}] must be a Preemption, not {record!r}")
        if record.task not in tasks:
            raise ScenarioError(f"preemptions[{number}]: unknown task {record.task!r}")
        if record.gpu_class not in known:
            raise _unknown_class(f"preemptions[{number}]", record.gpu_class, known)
        key = (record.task, record.pod, record.at)
        if key in seen:
            at = format_instant(record.at)
            raise ScenarioError(
                f"preemptions[{number}]: duplicate preemption of {record.task!r} at {at}"
            )
        seen.add(key)
