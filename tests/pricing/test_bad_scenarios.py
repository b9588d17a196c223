"""A bad scenario is refused with a ScenarioError naming the offending record and field."""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest

from billing.pricing import ScenarioError, scenario_from_dict
from tests.pricing.builders import FULL, OFFPEAK, PEAK, preemption, scenario

TIME = "2026-10-01T02:00:00Z"
GOOD = scenario(
    usage=[(PEAK, "search-api", 600), (PEAK, "vit", 1200)],
    latency=[("search-api", PEAK, [[0.1, 10], ["+Inf", 20]])],
    preemptions=[preemption(PEAK, lost=600)],
)


def edit(change: Callable[[dict], object]) -> dict:
    data = copy.deepcopy(GOOD)
    change(data)
    return data


def usage(*rows: tuple[str, str, object]) -> Callable[[dict], object]:
    def change(data: dict) -> None:
        data["usage"] = [
            {"interval": interval, "task": task, "alloc_gpu_seconds": alloc}
            for interval, task, alloc in rows
        ]

    return change


def book(**fields: object) -> Callable[[dict], object]:
    return lambda data: data["price_book"].update(fields)


CASES = [
    (usage((PEAK, "vit", 1), (PEAK, "ghost", 5)), "usage[1]: unknown task 'ghost'"),
    (usage((PEAK, "vit", "-5")), "usage[0]: negative or invalid allocation '-5'"),
    (
        usage((PEAK, "vit", FULL + 1)),
        f"usage[0]: allocations of {TIME} reach 3001 GPU-seconds with task 'vit', above the "
        "interval's capacity of 3000",
    ),
    (
        usage((PEAK, "vit", 2000), (PEAK, "llm", "1000.5")),
        f"usage[1]: allocations of {TIME} reach 3000.5 GPU-seconds with task 'llm', above the "
        "interval's capacity of 3000",
    ),
    (
        usage((OFFPEAK, "vit", 1)),
        f"usage[0]: task 'vit' has an allocation in {OFFPEAK}, an interval with no capacity record",
    ),
    (
        usage((PEAK, "vit", 1), (PEAK, "vit", 2)),
        f"usage[1]: duplicate usage of task 'vit' in {TIME}",
    ),
    (usage(("yesterday", "vit", 1)), "usage[0]: interval: unparsable time 'yesterday'"),
    (
        usage(("2026-10-01T02:00:00", "vit", 1)),
        "usage[0]: interval: time '2026-10-01T02:00:00' must be ISO 8601 UTC with 'Z'",
    ),
    (
        usage(("2026-10-01T02:01:00Z", "vit", 1)),
        "usage[0]: interval 2026-10-01T02:01:00Z is not aligned to the 300-second step",
    ),
    (usage((PEAK, "vit", "abc")), "usage[0]: alloc_gpu_seconds is not a decimal number: 'abc'"),
    (usage((PEAK, "vit", "NaN")), "usage[0]: alloc_gpu_seconds must be a finite number, got 'NaN'"),
    (lambda data: data["usage"][1].pop("task"), "usage[1]: missing field 'task'"),
    (lambda data: data["usage"][0].update(gpus=1), "usage[0]: unknown field 'gpus'"),
    (
        lambda data: data["price_book"].pop("facility_per_gpu_hour"),
        "price_book: missing field 'facility_per_gpu_hour'",
    ),
    (
        book(depreciation_per_gpu_hour=11.5),
        'price_book: depreciation_per_gpu_hour must be a decimal string such as "11.5", not '
        "the JSON float 11.5",
    ),
    (
        book(sla_penalty_per_interval=20.0),
        'price_book: sla_penalty_per_interval must be a decimal string such as "20.0", not '
        "the JSON float 20.0",
    ),
    (book(timezone="Mars/Olympus"), "price_book: timezone: unknown time zone 'Mars/Olympus'"),
    (book(currency="cny"), "price_book: currency must be an ISO 4217 code, got 'cny'"),
    (
        book(reserved_inference_share="1.5"),
        "price_book: reserved_inference_share must be at most 1, got '1.5'",
    ),
    (book(peak_hours=[9, 25]), "price_book: peak_hours must be between 0 and 24, got 25"),
    (
        book(sla_min_requests="100"),
        "price_book: sla_min_requests must be a whole number, got '100'",
    ),
    (
        book(electricity_per_kwh="-0.82"),
        "price_book: electricity_per_kwh must not be negative, got '-0.82'",
    ),
    (lambda data: data["price_book"].update(version=2), "price_book: unknown field 'version'"),
    (
        lambda data: data["tasks"][2].update(kind="gaming"),
        "tasks[2]: unknown kind 'gaming' (expected one of inference, training_interactive, "
        "training_batch, preprocessing)",
    ),
    (lambda data: data["tasks"].append(dict(data["tasks"][2])), "tasks[5]: duplicate id 'vit'"),
    (
        lambda data: data["capacity"].append(dict(data["capacity"][0])),
        f"capacity[1]: duplicate interval {TIME}",
    ),
    (
        lambda data: data["capacity"][0].update(capacity_gpu_seconds="-1"),
        "capacity[0]: capacity_gpu_seconds must not be negative, got '-1'",
    ),
    (
        lambda data: data["latency"][0].update(service="ghost-api"),
        "latency[0]: unknown service 'ghost-api'",
    ),
    (
        lambda data: data["latency"][0].update(buckets=[[0.1, 10], [0.5, 20]]),
        "latency[0]: buckets: the last bucket must be le=+Inf",
    ),
    (
        lambda data: data["latency"].append(copy.deepcopy(data["latency"][0])),
        f"latency[1]: duplicate 'search-api' in {TIME}",
    ),
    (
        lambda data: data["preemptions"][0].update(task="ghost"),
        "preemptions[0]: unknown task 'ghost'",
    ),
    (
        lambda data: data["preemptions"].append(dict(data["preemptions"][0])),
        f"preemptions[1]: duplicate preemption of 'llm' at {TIME}",
    ),
    (
        lambda data: data["preemptions"][0].update(at="02:00"),
        "preemptions[0]: at: unparsable time '02:00'",
    ),
    (lambda data: data.update(step_seconds=7), "scenario: step_seconds must divide 3600, got 7"),
    (
        lambda data: data.update(step_seconds=300.0),
        "scenario: step_seconds must be a whole number, got 300.0",
    ),
    (lambda data: data.pop("capacity"), "scenario: missing field 'capacity'"),
]


@pytest.mark.parametrize(("change", "message"), CASES)
def test_it_refuses_a_bad_scenario_naming_the_record(change, message):
    with pytest.raises(ScenarioError) as caught:
        scenario_from_dict(edit(change))

    assert str(caught.value) == message


def test_it_accepts_the_unedited_scenario():
    assert len(scenario_from_dict(GOOD).usage) == 2


def test_it_accepts_measured_quantities_as_json_floats():
    data = edit(usage((PEAK, "vit", 150.0), (PEAK, "llm", "75.25")))

    assert [row[2] for row in scenario_from_dict(data).usage] == [
        scenario_from_dict(edit(usage((PEAK, "vit", "150.0")))).usage[0][2],
        scenario_from_dict(edit(usage((PEAK, "llm", "75.25")))).usage[0][2],
    ]


def test_it_accepts_the_rounding_of_metered_slices_at_full_capacity() -> None:
    # Three MIG-like slices of 3/7, 3/7 and 1/7 of the pool, each metered to the micro-GPU-second
    # (rounded half up), overshoot a full interval by 0.000001: that is rounding, not bad data.
    data = scenario(usage=[(PEAK, "vit", "1285.714286"), (PEAK, "llm", "1285.714286"),
                           (PEAK, "search-api", "428.571429")])  # fmt: skip
    assert scenario_from_dict(data)
    over = scenario(usage=[(PEAK, "vit", "1285.714290"), (PEAK, "llm", "1714.285714")])
    with pytest.raises(ScenarioError, match="above the interval's capacity of 3000"):
        scenario_from_dict(over)
