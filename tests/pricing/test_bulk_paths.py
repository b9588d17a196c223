"""The engine's bulk paths give exactly what its record-by-record ones give (hypothesis).

A month has millions of usage rows, so the Scenario checks and groups usage a run at a time,
the canonical text is written in pieces and rule 4 splits a penalty with one `map`. Each is
compared here with the plain path it stands for: the row-by-row index (or its error), the
text `json.dumps(sort_keys=True)` writes of the sorted records, and `scaled` per task.
"""

from __future__ import annotations

import hashlib
import json
import pickle
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from billing.pricing import (
    DEFAULT_CLASS,
    Capacity,
    GpuClass,
    Latency,
    PriceBook,
    Scenario,
    ScenarioError,
    Service,
    Task,
    UsageRuns,
    canonical_json,
    canonical_json_parts,
    format_interval,
    scenario_hash,
    scenario_to_dict,
)
from billing.pricing.model import _index_usage_rows, _index_usage_runs, _summed_capacity
from billing.pricing.money import scaled, scaled_each
from tests.pricing.test_engine_contract import book

STEP = 300
START = 1_790_000_000 - 1_790_000_000 % STEP
CLASSES = (DEFAULT_CLASS, "A100", "H100%s")  # a "%" in a name must not format anything
TASK_IDS = ("alpha", "beta", 'ga"mma', "délta", "eps")
ALLOCS = [Decimal(text) for text in ("0", "150", "300", "300.0", "137.142857", "1200", "2400")]


def _book() -> PriceBook:
    return book(
        gpu_classes=tuple(
            GpuClass(name, (f"model {name}",), Decimal("1.5"), Decimal("0.5"), Decimal("0.7"))
            for name in CLASSES[1:]
        )
    )


@st.composite
def usage_rows(draw) -> tuple[list[tuple], dict[str, dict[int, Decimal]]]:
    """Rows in runs of one interval and class (as the builder writes them), now and then
    broken up, shuffled, duplicated, misaligned or naming an unknown task or class."""
    intervals = [START + STEP * number for number in range(draw(st.integers(1, 4)))]
    capacity = {
        name: {
            interval: Decimal(draw(st.sampled_from([1200, 2400, 6000]))) for interval in intervals
        }
        for name in CLASSES
    }
    rows: list[tuple] = []
    for interval in intervals:
        for name in draw(st.lists(st.sampled_from(CLASSES), unique=True, max_size=3)):
            for task in draw(st.lists(st.sampled_from(TASK_IDS), unique=True, max_size=5)):
                alloc = draw(st.sampled_from(ALLOCS))
                if name == DEFAULT_CLASS and draw(st.booleans()):
                    rows.append((interval, task, alloc))
                else:
                    rows.append((interval, task, alloc, name))
    if rows and draw(st.booleans()):
        rows = draw(st.permutations(rows))
    if rows and draw(st.integers(0, 4)) == 0:
        spoiled = draw(st.sampled_from(rows))
        spoil = draw(st.sampled_from(["twice", "task", "class", "step", "negative", "float"]))
        interval, task, alloc, *rest = spoiled
        bad = {
            "twice": spoiled,
            "task": (interval, "ghost", alloc, *rest),
            "class": (interval, task, alloc, "B200"),
            "step": (interval + 1, task, alloc, *rest),
            "negative": (interval, task, Decimal(-1), *rest),
            "float": (interval, task, 1.5, *rest),
        }[spoil]
        rows.insert(draw(st.integers(0, len(rows))), bad)
    return rows, capacity


@settings(max_examples=300, deadline=None)
@given(usage_rows())
def test_it_indexes_usage_in_runs_as_it_does_row_by_row(drawn):
    rows, capacity = drawn
    tasks = {name: Task(name, "team", "training_batch") for name in TASK_IDS}
    known = tuple(sorted(CLASSES))
    try:
        expected = _index_usage_rows(tuple(rows), STEP, tasks, capacity, known)
    except (ScenarioError, TypeError):
        expected = None

    bulk = _index_usage_runs(tuple(rows), STEP, tasks, capacity, known)

    if expected is None:
        assert bulk is None
    elif bulk is not None:
        assert bulk == expected
        assert [list(by_interval) for by_interval in bulk.values()] == [
            list(by_interval) for by_interval in expected.values()
        ]
        assert list(bulk) == list(expected)
        for name in bulk:
            for interval in bulk[name]:
                assert list(bulk[name][interval].items()) == list(expected[name][interval].items())


def test_it_vouches_for_usage_written_in_runs():
    capacity = {name: {START: Decimal(3000), START + STEP: Decimal(3000)} for name in CLASSES}
    rows = (
        (START, "alpha", Decimal(300), "A100"),
        (START, "beta", Decimal(600), "A100"),
        (START, "alpha", Decimal(150)),
        (START + STEP, "beta", Decimal("137.142857"), "H100%s"),
        (START, "eps", Decimal(0), "A100"),  # the first interval again, after another
    )
    tasks = {name: Task(name, "team", "training_batch") for name in TASK_IDS}
    known = tuple(sorted(CLASSES))

    bulk = _index_usage_runs(rows, STEP, tasks, capacity, known)

    assert bulk is not None
    assert bulk == _index_usage_rows(rows, STEP, tasks, capacity, known)
    assert list(bulk["A100"][START]) == ["alpha", "beta", "eps"]


def test_it_leaves_the_metered_overshoot_to_the_rows():
    """A full interval may overshoot its capacity by the metered resolution per row: the
    runs do not decide that, the rows accept it."""
    interval = START
    capacity = {DEFAULT_CLASS: {interval: Decimal(3000)}}
    rows = ((interval, "alpha", Decimal("1285.714286")), (interval, "beta", Decimal("1714.285715")))
    tasks = {name: Task(name, "team", "training_batch") for name in TASK_IDS}
    assert _summed_capacity(capacity)[interval] == Decimal(3000)

    assert _index_usage_runs(rows, STEP, tasks, capacity, (DEFAULT_CLASS,)) is None
    assert _index_usage_rows(rows, STEP, tasks, capacity, (DEFAULT_CLASS,)) == {
        DEFAULT_CLASS: {interval: dict((task, alloc) for _, task, alloc in rows)}
    }


def _plain_text(scenario: Scenario) -> str:
    """canonical_json as json.dumps writes the whole scenario dict, records sorted."""
    data = scenario_to_dict(scenario)
    usage = []
    for row in scenario.usage:
        interval, task, alloc, *rest = row
        record = {
            "interval": format_interval(interval),
            "task": task,
            "alloc_gpu_seconds": str(alloc),
        }
        if rest and rest[0] != DEFAULT_CLASS:
            record["gpu_class"] = rest[0]
        usage.append(record)
    usage.sort(key=lambda record: (record["interval"], record["task"], record.get("gpu_class", "")))
    data["usage"] = usage
    return json.dumps(data, sort_keys=True, separators=(",", ":"))


@settings(max_examples=200, deadline=None)
@given(usage_rows())
def test_it_writes_the_canonical_text_in_pieces_as_json_dumps_writes_it(drawn):
    rows, capacity = drawn
    rows = list(dict.fromkeys(row for row in rows if row[1] != "ghost"))
    records = [
        Capacity(interval, seconds, name)
        for name, by_interval in capacity.items()
        for interval, seconds in by_interval.items()
    ]
    tasks = tuple(Task(name, "team", "training_batch") for name in TASK_IDS)
    try:
        scenario = Scenario(STEP, _book(), tasks, (), tuple(records), tuple(rows))
    except (ScenarioError, TypeError):
        return

    pieces = list(canonical_json_parts(scenario))

    assert "".join(pieces) == canonical_json(scenario) == _plain_text(scenario)
    text = "".join(pieces)
    assert scenario_hash(scenario) == hashlib.sha256(text.encode()).hexdigest()


@pytest.mark.parametrize(
    "penalty, allocs, held",
    [
        ("20.00", ["300", "600", "137.142857"], "1037.142857"),
        ("20.00", ["1"] * 7, "7"),
        ("13.37", ["0.000001", "2999.999999"], "3000"),
        ("20.00", [], "1"),
    ],
)
def test_it_splits_a_penalty_with_the_roundings_of_scaled(penalty, allocs, held):
    factors = [Decimal(alloc) for alloc in allocs]

    split = scaled_each(Decimal(penalty), factors, Decimal(held))

    expected = [scaled(Decimal(penalty), factor, Decimal(held)) for factor in factors]
    assert [str(amount) for amount in split] == [str(amount) for amount in expected]


@settings(max_examples=200, deadline=None)
@given(usage_rows())
def test_it_indexes_usage_runs_as_the_same_rows_given_plainly(drawn):
    rows, capacity = drawn
    runs = [
        (row[0], row[3] if len(row) == 4 else DEFAULT_CLASS, [row[1]], [row[2]]) for row in rows
    ]
    usage = UsageRuns(runs)
    tasks = {name: Task(name, "team", "training_batch") for name in TASK_IDS}
    known = tuple(sorted(CLASSES))
    plain = tuple(row if len(row) == 3 or row[3] != DEFAULT_CLASS else row[:3] for row in rows)

    assert tuple(usage) == plain
    bulk = _index_usage_runs(usage, STEP, tasks, capacity, known)
    expected = _index_usage_runs(plain, STEP, tasks, capacity, known)
    assert bulk == expected
    if bulk is not None:
        assert [list(by_interval) for by_interval in bulk.values()] == [
            list(by_interval) for by_interval in expected.values()
        ]


def test_it_keeps_usage_runs_whole():
    usage = UsageRuns([(START, "A100", ["alpha", "beta"], [Decimal(300), Decimal(150)])])

    assert usage == ((START, "alpha", Decimal(300), "A100"), (START, "beta", Decimal(150), "A100"))
    assert pickle.loads(pickle.dumps(usage)).runs == usage.runs
    with pytest.raises(TypeError, match="as many allocations as tasks"):
        UsageRuns([(START, DEFAULT_CLASS, ["alpha"], [])])


def test_it_writes_latency_records_as_json_dumps_writes_them():
    tasks = tuple(Task(name, "team", "inference") for name in TASK_IDS)
    services = (Service("api", "team", Decimal(300)), Service('ap"i', "team", Decimal("2.5")))
    inf, minus_inf = Decimal("Infinity"), Decimal("-Infinity")
    latency = (
        Latency("api", START + STEP, ((Decimal("0.1"), Decimal(5)), (inf, Decimal(9)))),
        Latency("api", START, ((inf, Decimal("7.0")),)),
        Latency(
            'ap"i',
            START,
            ((minus_inf, Decimal(0)), (Decimal("-0.5"), Decimal(1)), (inf, Decimal(2))),
        ),
        Latency(
            'ap"i',
            START + STEP,
            (*((Decimal(n), Decimal(n)) for n in range(9)), (inf, Decimal(9))),
        ),
    )
    capacity = (Capacity(START, Decimal(3000)), Capacity(START + STEP, Decimal(3000)))
    scenario = Scenario(STEP, _book(), tasks, services, capacity, (), latency)
    expected = [
        {
            "buckets": [
                ["+Inf" if le.is_infinite() else str(le), str(count)] for le, count in row.buckets
            ],
            "interval": format_interval(row.interval),
            "service": row.service,
        }
        for row in sorted(latency, key=lambda row: (row.service, row.interval))
    ]

    text = canonical_json(scenario)

    assert json.loads(text)["latency"] == expected
    written = json.dumps(expected, sort_keys=True, separators=(",", ":"))
    assert '"latency":' + written + ',"preemptions"' in text
