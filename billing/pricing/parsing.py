"""Scenario files (docs/pricing.md "Scenario files") to and from the engine's dataclasses.

`scenario_from_dict` refuses a bad scenario with a `ScenarioError` naming the record
(`usage[12]: unknown task 'x'`). Price-book amounts must be strings or ints (a JSON float
such as `11.5` is refused: binary floats have no place near money); measured quantities
(allocations, capacity, latency buckets, preemption figures) may also be JSON floats, which
are read by their shortest text (`150.0` → `Decimal("150.0")`).

`canonical_json` is the scenario in one fixed text: keys sorted, no whitespace, records
sorted by their natural key, decimals as strings. Its SHA-256 (`scenario_hash`) pins a
statement to its exact input.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Iterable, Iterator
from decimal import Decimal, InvalidOperation
from itertools import chain
from operator import itemgetter
from typing import Any

from billing.pricing.model import (
    CLASS_DECIMAL_FIELDS,
    DECIMAL_BOOK_FIELDS,
    DEFAULT_CLASS,
    Capacity,
    GpuClass,
    Latency,
    Preemption,
    PriceBook,
    Scenario,
    ScenarioError,
    Service,
    Task,
)
from billing.pricing.money import canonical_decimal
from billing.pricing.times import epoch_seconds, format_instant, format_interval, parse_instant
from kernel.histogram import INFINITY, is_infinity
from kernel.price_book_fields import GPU_CLASS_FIELDS as CLASS_FIELDS
from kernel.price_book_fields import PRICE_BOOK_FIELDS as BOOK_FIELDS

DEFAULT_STEP_SECONDS = 300
SCENARIO_FIELDS = (
    "step_seconds",
    "price_book",
    "tasks",
    "services",
    "capacity",
    "usage",
    "latency",
    "preemptions",
)
OPTIONAL_BOOK_FIELDS = ("gpu_classes",)


class _FieldError(Exception):
    """A field-level problem, turned into a ScenarioError naming the record."""


def scenario_from_dict(data: dict) -> Scenario:
    """Parse and validate a scenario (the JSON object of docs/pricing.md "Scenario files").

    `step_seconds` defaults to 300; `services`, `latency` and `preemptions` may be absent;
    so may the version-2 fields: the book's `gpu_classes`, a task's `preemptions_before` (0)
    and a record's `gpu_class` (`default`). Raises ScenarioError naming the offending record:
    unknown task, service or GPU class, negative allocation, allocations above the
    interval's capacity, unparsable or misaligned time, missing or invalid price-book field,
    float where money is required (in the book and its classes), unknown kind, duplicate
    record, a GPU model in two classes, a class named `default`, two classes of one name.
    """
    if not isinstance(data, dict):
        raise ScenarioError(f"scenario: expected a JSON object, got {type(data).__name__}")
    _refuse_unknown("scenario", data, SCENARIO_FIELDS)
    for name in ("price_book", "tasks", "capacity", "usage"):
        if name not in data:
            raise ScenarioError(f"scenario: missing field {name!r}")
    step = data.get("step_seconds", DEFAULT_STEP_SECONDS)
    if type(step) is not int:
        raise ScenarioError(f"scenario: step_seconds must be a whole number, got {step!r}")
    return Scenario(
        step_seconds=step,
        price_book=_price_book(data["price_book"]),
        tasks=_records("tasks", data["tasks"], _task),
        services=_records("services", data.get("services", []), _service),
        capacity=_records("capacity", data["capacity"], _capacity),
        usage=_usage(data["usage"]),
        latency=_records("latency", data.get("latency", []), _latency),
        preemptions=_records("preemptions", data.get("preemptions", []), _preemption),
    )


def scenario_to_dict(scenario: Scenario) -> dict:
    """The scenario as a JSON-ready dict in canonical order (records sorted)."""
    return json.loads(canonical_json(scenario))


def canonical_json(data: dict | Scenario) -> str:
    """The one text of a scenario: sorted keys, no whitespace, records sorted, decimals as
    strings. A dict is parsed (and validated) first, so equal scenarios give equal text."""
    return "".join(canonical_json_parts(data))


def canonical_json_parts(data: dict | Scenario) -> Iterator[str]:
    """`canonical_json` in consecutive pieces, whose concatenation is its text: a month's is
    hundreds of MB, which a hash or a compressor takes piece by piece (`scenario_hash`).

    The object's keys in sorted order, each value as `json.dumps(sort_keys=True)` writes it;
    latency and usage (a month has hundreds of thousands of histograms and millions of usage
    rows) are written record by record as the same text, without a dict per record, a few
    thousand records a piece.
    """
    scenario = data if isinstance(data, Scenario) else scenario_from_dict(data)
    parts: dict[str, object] = _small_parts(scenario)
    parts["latency"] = _latency_pieces
    parts["usage"] = _usage_pieces
    yield "{"
    for number, key in enumerate(sorted(parts)):
        value = parts[key]
        yield ("," if number else "") + _dumps(key) + ":"
        if callable(value):
            yield "["
            yield from _comma_separated(value(scenario))
            yield "]"
        else:
            yield _dumps(value)
    yield "}"


def _comma_separated(pieces: Iterable[str]) -> Iterator[str]:
    """Pieces of comma-separated records as one comma-separated sequence (empty ones dropped)."""
    first = True
    for piece in pieces:
        if piece:
            yield piece if first else "," + piece
            first = False


def _dumps(value: object) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def scenario_hash(data: dict | Scenario) -> str:
    """SHA-256 (hex) of `canonical_json(data)`: pins a statement to its exact input."""
    digest = hashlib.sha256()
    for part in canonical_json_parts(data):
        digest.update(part.encode())
    return digest.hexdigest()


# --- reading ---------------------------------------------------------------------------


def _refuse_unknown(where: str, record: dict, known: tuple[str, ...]) -> None:
    unknown = sorted(set(record) - set(known))
    if unknown:
        raise ScenarioError(f"{where}: unknown field {unknown[0]!r}")


def _records(where: str, rows: Any, parse: Callable[[dict], Any]) -> list:
    if not isinstance(rows, list):
        raise ScenarioError(f"{where}: expected a list, got {type(rows).__name__}")
    parsed = []
    for number, row in enumerate(rows):
        try:
            if not isinstance(row, dict):
                raise _FieldError(f"expected an object, got {type(row).__name__}")
            parsed.append(parse(row))
        except (_FieldError, ScenarioError) as error:
            raise ScenarioError(f"{where}[{number}]: {error}") from None
    return parsed


def _field(record: dict, name: str, known: tuple[str, ...] | None = None) -> Any:
    if known is not None:
        unknown = sorted(set(record) - set(known))
        if unknown:
            raise _FieldError(f"unknown field {unknown[0]!r}")
    if name not in record:
        raise _FieldError(f"missing field {name!r}")
    return record[name]


def _money(name: str, value: Any) -> Decimal:
    """A price-book amount: a decimal string, an int or a Decimal; never a float."""
    if isinstance(value, float):
        raise _FieldError(
            f'{name} must be a decimal string such as "{value!r}", not the JSON float {value!r}'
        )
    return _decimal(name, value)


def _decimal(name: str, value: Any) -> Decimal:
    """A measured quantity: decimal string, int, Decimal, or a finite float read by its
    shortest text."""
    kind = type(value)
    if kind is Decimal:
        number = value
    elif kind is str or kind is int:
        try:
            number = Decimal(value)
        except InvalidOperation:
            raise _FieldError(f"{name} is not a decimal number: {value!r}") from None
    elif kind is float and math.isfinite(value):
        number = Decimal(repr(value))
    else:
        raise _FieldError(f"{name} must be a decimal number, got {value!r}")
    if not number.is_finite():
        raise _FieldError(f"{name} must be a finite number, got {value!r}")
    return number


def _whole(name: str, value: Any) -> int:
    if type(value) is not int:
        raise _FieldError(f"{name} must be a whole number, got {value!r}")
    return value


def _text(name: str, value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise _FieldError(f"{name} must be a non-empty string, got {value!r}")
    return value


def _interval(name: str, value: Any) -> int:
    try:
        moment = parse_instant(value)
    except ValueError as error:
        raise _FieldError(f"{name}: {error}") from None
    if moment.microsecond:
        raise _FieldError(f"{name}: an interval starts on a whole second, got {value!r}")
    return epoch_seconds(moment)


def _price_book(book: Any) -> PriceBook:
    try:
        if not isinstance(book, dict):
            raise _FieldError(f"expected an object, got {type(book).__name__}")
        for name in BOOK_FIELDS:
            _field(book, name, (*BOOK_FIELDS, *OPTIONAL_BOOK_FIELDS))
        peak_hours = book["peak_hours"]
        if not (isinstance(peak_hours, list) and len(peak_hours) == 2):
            raise _FieldError(f"peak_hours must be [start, end), got {peak_hours!r}")
        return PriceBook(
            currency=_text("currency", book["currency"]),
            timezone=_text("timezone", book["timezone"]),
            **{name: _money(name, book[name]) for name in DECIMAL_BOOK_FIELDS},
            peak_hours=tuple(_whole("peak_hours", hour) for hour in peak_hours),
            sla_min_requests=_whole("sla_min_requests", book["sla_min_requests"]),
            starvation_preemption_threshold=_whole(
                "starvation_preemption_threshold", book["starvation_preemption_threshold"]
            ),
            gpu_classes=tuple(_records("gpu_classes", book.get("gpu_classes", []), _gpu_class)),
        )
    except (_FieldError, ScenarioError) as error:
        raise ScenarioError(f"price_book: {error}") from None


def _gpu_class(row: dict) -> GpuClass:
    """A class of the book (docs/pricing.md "GPU classes"); its amounts are money: no floats."""
    name = _text("name", _field(row, "name", CLASS_FIELDS))
    models = _field(row, "models")
    if not isinstance(models, list):
        raise _FieldError(f"models must be a list of GPU model names, got {models!r}")
    share = row.get("reserved_inference_share")
    return GpuClass(
        name=name,
        models=tuple(_text("models", model) for model in models),
        **{field: _money(field, _field(row, field)) for field in CLASS_DECIMAL_FIELDS},
        reserved_inference_share=(
            None if share is None else _money("reserved_inference_share", share)
        ),
    )


def _gpu_class_name(row: dict) -> str:
    return _text("gpu_class", row.get("gpu_class", DEFAULT_CLASS))


def _task(row: dict) -> Task:
    known = ("id", "team", "kind", "preemptions_before")
    return Task(
        id=_text("id", _field(row, "id", known)),
        team=_text("team", _field(row, "team")),
        kind=_field(row, "kind"),
        preemptions_before=_whole("preemptions_before", row.get("preemptions_before", 0)),
    )


def _service(row: dict) -> Service:
    known = ("id", "team", "slo_p99_ms")
    return Service(
        id=_text("id", _field(row, "id", known)),
        team=_text("team", _field(row, "team")),
        slo_p99_ms=_decimal("slo_p99_ms", _field(row, "slo_p99_ms")),
    )


def _capacity(row: dict) -> Capacity:
    known = ("interval", "capacity_gpu_seconds", "gpu_class")
    return Capacity(
        interval=_interval("interval", _field(row, "interval", known)),
        capacity_gpu_seconds=_decimal("capacity_gpu_seconds", _field(row, "capacity_gpu_seconds")),
        gpu_class=_gpu_class_name(row),
    )


def _usage(rows: Any) -> list[tuple]:
    """Usage rows as plain tuples, `(interval, task, alloc)` for the default class and
    `(interval, task, alloc, gpu_class)` otherwise; the hot path of a month's scenario
    (millions of rows)."""
    if not isinstance(rows, list):
        raise ScenarioError(f"usage: expected a list, got {type(rows).__name__}")
    intervals: dict[str, int] = {}
    parsed = []
    append = parsed.append
    for number, row in enumerate(rows):
        try:
            interval_text = row["interval"]
            task = row["task"]
            alloc = row["alloc_gpu_seconds"]
            gpu_class = row["gpu_class"] if len(row) == 4 else DEFAULT_CLASS
            if len(row) > 4 or type(task) is not str or type(interval_text) is not str:
                raise KeyError
            if type(gpu_class) is not str or not gpu_class:
                raise _FieldError(f"gpu_class must be a non-empty string, got {gpu_class!r}")
            interval = intervals.get(interval_text)
            if interval is None:
                interval = intervals[interval_text] = _interval("interval", interval_text)
            # Decimal text is the common case (and the cheapest to read): no helper call.
            value = Decimal(alloc) if type(alloc) is str else _decimal("alloc_gpu_seconds", alloc)
            if not value.is_finite():
                raise _FieldError(f"alloc_gpu_seconds must be a finite number, got {alloc!r}")
            if gpu_class == DEFAULT_CLASS:
                append((interval, task, value))
            else:
                append((interval, task, value, gpu_class))
        except (KeyError, TypeError):
            raise ScenarioError(f"usage[{number}]: {_usage_shape(row)}") from None
        except InvalidOperation:
            message = f"alloc_gpu_seconds is not a decimal number: {alloc!r}"
            raise ScenarioError(f"usage[{number}]: {message}") from None
        except _FieldError as error:
            raise ScenarioError(f"usage[{number}]: {error}") from None
    return parsed


def _usage_shape(row: Any) -> str:
    """Why a usage row could not be read (the fast path only knows that it could not)."""
    if not isinstance(row, dict):
        return f"expected an object, got {type(row).__name__}"
    try:
        _field(row, "interval", ("interval", "task", "alloc_gpu_seconds", "gpu_class"))
        _field(row, "alloc_gpu_seconds")
        _text("task", _field(row, "task"))
        _interval("interval", row["interval"])
    except _FieldError as error:
        return str(error)
    return f"unreadable usage record {row!r}"


def _latency(row: dict) -> Latency:
    known = ("service", "interval", "buckets")
    service = _text("service", _field(row, "service", known))
    interval = _interval("interval", _field(row, "interval"))
    buckets = _field(row, "buckets")
    if not isinstance(buckets, list) or not buckets:
        raise _FieldError(f"buckets must be a list of [le, cumulative_count], got {buckets!r}")
    parsed = []
    for bucket in buckets:
        if not (isinstance(bucket, list) and len(bucket) == 2):
            raise _FieldError(f"a bucket must be [le, cumulative_count], got {bucket!r}")
        le, count = bucket
        upper = INFINITY if is_infinity(le) else _decimal("le", le)
        parsed.append((upper, _decimal("cumulative_count", count)))
    parsed.sort(key=itemgetter(0))
    return Latency(service=service, interval=interval, buckets=tuple(parsed))


def _preemption(row: dict) -> Preemption:
    known = ("task", "at", "gpus", "seconds_since_start", "lost_gpu_seconds", "pod", "gpu_class")
    try:
        at = parse_instant(_field(row, "at", known))
    except ValueError as error:
        raise _FieldError(f"at: {error}") from None
    lost = _field(row, "lost_gpu_seconds")
    return Preemption(
        task=_text("task", _field(row, "task")),
        at=at,
        gpus=_decimal("gpus", _field(row, "gpus")),
        seconds_since_start=_decimal("seconds_since_start", _field(row, "seconds_since_start")),
        lost_gpu_seconds=None if lost is None else _decimal("lost_gpu_seconds", lost),
        pod=row.get("pod", ""),
        gpu_class=_gpu_class_name(row),
    )


# --- writing ---------------------------------------------------------------------------


def _small_parts(scenario: Scenario) -> dict:
    """Everything but latency and usage, as JSON-ready values (the JSON dump sorts the keys).

    Version-2 fields are written only when they say something (classes listed, a class
    other than `default`, earlier preemptions): a version-1 scenario keeps its text and hash.
    """
    book = scenario.price_book
    text = canonical_decimal
    price_book = {}
    for name in BOOK_FIELDS:
        value = getattr(book, name)
        if name in DECIMAL_BOOK_FIELDS:
            value = text(value)
        elif name == "peak_hours":
            value = list(value)
        price_book[name] = value
    if book.gpu_classes:
        price_book["gpu_classes"] = [
            _gpu_class_dict(item) for item in sorted(book.gpu_classes, key=lambda c: c.name)
        ]
    return {
        "step_seconds": scenario.step_seconds,
        "price_book": price_book,
        "tasks": [_task_dict(task) for task in sorted(scenario.tasks, key=lambda task: task.id)],
        "services": [
            {"id": service.id, "team": service.team, "slo_p99_ms": text(service.slo_p99_ms)}
            for service in sorted(scenario.services, key=lambda service: service.id)
        ],
        "capacity": [
            _with_class(
                {
                    "interval": format_interval(row.interval),
                    "capacity_gpu_seconds": text(row.capacity_gpu_seconds),
                },
                row.gpu_class,
            )
            for row in sorted(scenario.capacity, key=lambda row: (row.interval, row.gpu_class))
        ],
        "preemptions": [
            _preemption_dict(row)
            for row in sorted(
                scenario.preemptions, key=lambda row: (row.task, row.at, row.pod, row.gpu_class)
            )
        ],
    }


def _gpu_class_dict(item: GpuClass) -> dict:
    record = {
        "name": item.name,
        "models": list(item.models),
        **{name: canonical_decimal(getattr(item, name)) for name in CLASS_DECIMAL_FIELDS},
    }
    if item.reserved_inference_share is not None:
        record["reserved_inference_share"] = canonical_decimal(item.reserved_inference_share)
    return record


def _task_dict(task: Task) -> dict:
    record = {"id": task.id, "team": task.team, "kind": task.kind}
    if task.preemptions_before:
        record["preemptions_before"] = task.preemptions_before
    return record


def _with_class(record: dict, gpu_class: str) -> dict:
    if gpu_class != DEFAULT_CLASS:
        record["gpu_class"] = gpu_class
    return record


PIECE_RECORDS = 4096  # latency records per piece of `canonical_json_parts`


def _latency_pieces(scenario: Scenario) -> Iterator[str]:
    """Latency records sorted by (service, interval), each `{"buckets":[[le,count],...],
    "interval":...,"service":...}` exactly as `json.dumps(sort_keys=True,
    separators=(",", ":"))` writes it (`"+Inf"` for the infinite bound), comma-separated,
    a few thousand a piece. A record is one `%` format of its figures, by its number of
    buckets (a lower bound of -Infinity, which also writes "+Inf", goes the long way)."""
    quoted: dict[str, str] = {}
    formats: dict[int, str] = {}
    parts: list[str] = []
    append = parts.append
    for row in sorted(scenario.latency, key=lambda row: (row.service, row.interval)):
        service = quoted.get(row.service)
        if service is None:
            service = quoted[row.service] = json.dumps(row.service)
        buckets = row.buckets
        when = format_interval(row.interval)
        if len(buckets) > 1 and buckets[0][0].is_infinite():
            append(_latency_record(buckets, when, service))
        else:
            text = formats.get(len(buckets))
            if text is None:
                text = formats[len(buckets)] = _latency_format(len(buckets))
            append(text % (*chain.from_iterable(buckets[:-1]), buckets[-1][1], when, service))
        if len(parts) == PIECE_RECORDS:
            yield ",".join(parts)
            parts.clear()
    yield ",".join(parts)


def _latency_format(buckets: int) -> str:
    """The `%` format of a latency record of `buckets` buckets, the last one `+Inf`: each
    finite bucket's le and count, the last count, the interval, the quoted service."""
    finite = '["%s","%s"],' * (buckets - 1)
    return '{"buckets":[' + finite + '["+Inf","%s"]],"interval":"%s","service":%s}'


def _latency_record(buckets: tuple, when: str, service: str) -> str:
    """One latency record written bucket by bucket (every infinite bound as "+Inf")."""
    written = ",".join(
        '["' + ("+Inf" if le.is_infinite() else str(le)) + '","' + str(count) + '"]'
        for le, count in buckets
    )
    return '{"buckets":[' + written + '],"interval":"' + when + '","service":' + service + "}"


def _preemption_dict(row: Preemption) -> dict:
    lost = row.lost_gpu_seconds
    record = {
        "task": row.task,
        "at": format_instant(row.at),
        "gpus": canonical_decimal(row.gpus),
        "seconds_since_start": canonical_decimal(row.seconds_since_start),
        "lost_gpu_seconds": None if lost is None else canonical_decimal(lost),
    }
    if row.pod:
        record["pod"] = row.pod
    return _with_class(record, row.gpu_class)


def _usage_pieces(scenario: Scenario) -> Iterator[str]:
    """Usage rows sorted by (interval, task, class), each `{"alloc_gpu_seconds":...,
    "interval":...,"task":...}` (with `"gpu_class"` after the allocation when the class is
    not `default`) exactly as `json.dumps(sort_keys=True, separators=(",", ":"))` writes it,
    comma-separated, an interval a piece.

    Walks the scenario's per-interval groups (sorting a few hundred task ids per interval is
    cheaper than sorting millions of rows); each row is one `%` format of its allocation and
    its task's quoted id, run by `map` (no Python code per row): the hot path of hashing a
    month. A task's rows follow each other by class name, `default` first (as its empty name
    sorts first).
    """
    classes = scenario.index.classes
    used = [name for name, item in classes.items() if item.usage]
    ordered = sorted(used, key=lambda name: "" if name == DEFAULT_CLASS else name)
    # Between the allocation and the interval's text: the class (none for `default`).
    class_text = {
        name: '","interval":"'
        if name == DEFAULT_CLASS
        else f'","gpu_class":{json.dumps(name)},"interval":"'
        for name in used
    }
    quoted = {task: json.dumps(task) for task in scenario.index.tasks}
    intervals = sorted({interval for name in used for interval in classes[name].usage})
    for interval in intervals:
        when = format_interval(interval)
        rows: dict[str, str] = {}
        count = 0
        for name in ordered:
            group = classes[name].usage.get(interval)
            if group:
                middle = (class_text[name] + when).replace("%", "%%")  # a "%" in a class name
                row = '{"alloc_gpu_seconds":"%s' + middle + '","task":%s}'
                pairs = zip(group.values(), map(quoted.__getitem__, group), strict=True)
                texts = map(row.__mod__, pairs)
                rows.update(zip(group, texts, strict=True))
                count += len(group)
        if count == len(rows):
            yield ",".join(map(rows.__getitem__, sorted(rows)))
        else:  # a task on two classes in this interval (rare): its rows by class name
            yield _interval_with_shared_tasks(classes, ordered, class_text, quoted, interval)


def _interval_with_shared_tasks(
    classes: dict, ordered: list[str], class_text: dict[str, str], quoted: dict, interval: int
) -> str:
    """One interval of `_usage_pieces` where a task has rows of several classes: each
    task's rows in class order, the tasks in order."""
    when = format_interval(interval)
    by_task: dict[str, list[str]] = {}
    for name in ordered:  # by class name: a task's rows come out in that order
        middle = class_text[name] + when
        for task, alloc in classes[name].usage.get(interval, {}).items():
            text = '{"alloc_gpu_seconds":"' + str(alloc) + middle + '","task":' + quoted[task]
            by_task.setdefault(task, []).append(text + "}")
    return ",".join(text for task in sorted(by_task) for text in by_task[task])
