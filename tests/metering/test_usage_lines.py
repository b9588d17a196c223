"""The usage rows an interval's facts make (writer._usage_lines), against the rules written
out plainly: random pods of random tasks holding GPUs of one or two models, whole and split
(1/k) GPU-seconds, memory on some keys only, and I/O of pods with and without GPUs.

The writer groups the pods' keys by row first and takes a one-pod row's values as they are;
this says that shortcut makes the same COPY lines, byte for byte, as adding every pod up."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from decimal import ROUND_HALF_UP, Decimal, localcontext
from fractions import Fraction

from hypothesis import given, settings
from hypothesis import strategies as st

from metering.measure import IntervalFacts
from metering.models import IngestWindow
from metering.writer import IO_FIELDS, _copy_text, _usage_lines

START = dt.datetime(2026, 11, 3, 14, 5, tzinfo=dt.UTC)
MODELS = ["", "NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3", "odd\tname"]
PODS = [(namespace, f"pod-{index}") for namespace in ("ads", "search") for index in range(6)]


def gpu_seconds() -> st.SearchStrategy[Fraction]:
    """Whole seconds, or a tick split between k pods of a time-sliced GPU, or nothing."""
    return st.builds(Fraction, st.integers(0, 3_000), st.sampled_from([1, 1, 2, 3, 7, 21]))


@st.composite
def interval_facts(draw: st.DrawFn) -> tuple[IntervalFacts, dict[tuple[str, str], int]]:
    facts = IntervalFacts()
    pods = draw(st.lists(st.sampled_from(PODS), min_size=1, max_size=8, unique=True))
    # Several pods may be one task (a gang, a relabelled pod's row).
    tasks = {pod: draw(st.integers(1, 4)) for pod in pods}
    for pod in pods:
        for model in draw(st.lists(st.sampled_from(MODELS), max_size=2, unique=True)):
            key = (*pod, model)
            facts.alloc_by_model[key] = draw(gpu_seconds())
            if draw(st.booleans()):
                facts.busy_by_model[key] = draw(gpu_seconds())
            if draw(st.booleans()):
                facts.memory_avg_by_model[key] = draw(st.integers(0, 80 * 2**30))
            if draw(st.booleans()):
                facts.memory_peak_by_model[key] = draw(st.integers(0, 80 * 2**30))
        if draw(st.booleans()):
            meters = draw(st.lists(st.sampled_from(IO_FIELDS), unique=True))
            facts.io[pod] = {meter: draw(st.integers(0, 10**12)) for meter in meters}
    return facts, tasks


def six_places(value: Fraction) -> str:
    with localcontext() as context:
        context.prec = 80
        exact = Decimal(value.numerator) / Decimal(value.denominator)
        return str(exact.quantize(Decimal("0.000001"), rounding=ROUND_HALF_UP))


def lines_by_hand(facts: IntervalFacts, tasks: dict[tuple[str, str], int]) -> list[str]:
    """Every pod added to its task and model's row, as docs/telemetry.md states it."""
    rows: dict[tuple[int, str], dict] = defaultdict(
        lambda: {"alloc": Fraction(0), "busy": Fraction(0), "memory": [], "peak": 0, "io": {}}
    )
    for key, allocated in facts.alloc_by_model.items():
        row = rows[(tasks[key[:2]], key[2])]
        row["alloc"] += allocated
        row["busy"] += facts.busy_by_model.get(key, 0)
        if key in facts.memory_avg_by_model:
            row["memory"].append(facts.memory_avg_by_model[key])
        row["peak"] = max(row["peak"], facts.memory_peak_by_model.get(key, 0))
    for pod, counters in facts.io.items():
        models = sorted(key[2] for key in facts.alloc_by_model if key[:2] == pod)
        io = rows[(tasks[pod], models[0] if models else "")]["io"]
        for meter, value in counters.items():
            io[meter] = io.get(meter, 0) + value
    lines = []
    for (task, model), row in sorted(rows.items()):
        io = [row["io"].get(meter, 0) for meter in IO_FIELDS]
        if not (row["alloc"] or row["busy"] or row["peak"] or any(io)):
            continue
        memory = row["memory"] or [0]
        fields = [
            str(task),
            START.isoformat(),
            six_places(row["alloc"]),
            six_places(row["busy"]),
            str(round(sum(memory) / len(memory))),
            str(row["peak"]),
            *map(str, io),
            _copy_text(model),
        ]
        lines.append("\t".join(fields) + "\n")
    return lines


@settings(max_examples=300, deadline=None)
@given(interval_facts())
def test_it_builds_the_rows_that_adding_every_pod_up_builds(case) -> None:
    facts, tasks = case
    window = IngestWindow(start=START, end=START + dt.timedelta(minutes=5))

    assert _usage_lines(window, facts, tasks) == lines_by_hand(facts, tasks)


def test_it_puts_a_pods_io_on_its_first_model_by_name() -> None:
    facts = IntervalFacts()
    pod = ("ads", "trainer-0")
    # The model met last is not the first by name.
    facts.alloc_by_model[(*pod, "NVIDIA A100-SXM4-80GB")] = Fraction(150)
    facts.alloc_by_model[(*pod, "NVIDIA H100 80GB HBM3")] = Fraction(300)
    facts.io[pod] = {"read_bytes": 4096}
    window = IngestWindow(start=START, end=START + dt.timedelta(minutes=5))

    lines = [line.split("\t") for line in _usage_lines(window, facts, {pod: 7})]

    assert [(line[-1].strip(), line[8]) for line in lines] == [
        ("NVIDIA A100-SXM4-80GB", "4096"),
        ("NVIDIA H100 80GB HBM3", "0"),
    ]
