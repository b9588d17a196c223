"""Pricing version 2: GPU classes and preemptions counted across periods, by hand.

The book is builders.BOOK (default R = 14.3740, R_off = 12.0740, s = 0.30) plus the class
H100: D = 38.00, F = 4.10, W = 0.70, so R = 42.6740 and R_off = 38.5740 (E = 0.82); and L40S:
D = 9.25, F = 1.90, W = 0.35, s = 0.50, so R = 11.4370, R_off = 9.5370.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from decimal import Decimal

import pytest

from billing.pricing import (
    ScenarioError,
    canonical_json,
    price,
    scenario_from_dict,
    scenario_hash,
)
from tests.pricing.builders import (
    FULL,
    H100,
    L40S,
    OFFPEAK,
    PEAK,
    preemption,
    priced,
    scenario,
)

CLASSES = {"gpu_classes": [H100, L40S]}


def classed(
    capacity: dict[str, int],
    usage: list[tuple[str, str, object, str]] = (),
    **changes: object,
) -> dict:
    """A one-interval (PEAK) scenario with capacity per class and classed usage rows."""
    data = scenario(book=CLASSES, **changes)
    data["capacity"] = [
        {"interval": PEAK, "capacity_gpu_seconds": seconds, "gpu_class": name}
        for name, seconds in capacity.items()
    ]
    data["usage"] = [
        {"interval": interval, "task": task, "alloc_gpu_seconds": alloc, "gpu_class": name}
        for interval, task, alloc, name in usage
    ]
    return data


def test_it_derives_the_rates_of_every_class():
    output = priced(classed({"H100": FULL}))

    assert output["rates_by_class"] == {
        "H100": {"standard_per_gpu_hour": "42.6740", "offpeak_training_per_gpu_hour": "38.5740"},
        "L40S": {"standard_per_gpu_hour": "11.4370", "offpeak_training_per_gpu_hour": "9.5370"},
        "default": {
            "standard_per_gpu_hour": "14.3740",
            "offpeak_training_per_gpu_hour": "12.0740",
        },
    }
    assert output["rates"] == output["rates_by_class"]["default"]
    assert output["capacity_gpu_hours_by_class"] == {
        "H100": "0.83",
        "L40S": "0.00",
        "default": "0.00",
    }


def test_it_prices_a_class_as_its_own_sub_pool():
    # H100: 3000 GPU-s, C = 35.561667 -> 35.56. vit holds 1200 at R: 14.224667 -> 14.22.
    # No inference: B = 0.3 x C = 10.6685 unassigned; idle = 2100 - 1200 = 900 at R = 10.6685.
    output = priced(classed({"H100": FULL}, [(PEAK, "vit", 1200, "H100")]))

    assert output["pool_cost"] == "35.56"
    assert output["teams"]["vision"] == {
        "lines": {"standard": "14.22"},
        "quantities_gpu_hours": {"standard": "0.33"},
        "quantities_gpu_hours_by_class": {"H100": {"standard": "0.33"}},
        "total": "14.22",
    }
    assert output["platform"]["lines"]["idle_capacity"] == "10.67"
    assert output["platform"]["lines"]["unassigned_reservation"] == "10.67"
    assert output["platform"]["total"] == "21.34"


def test_it_reserves_each_class_with_its_own_share():
    # L40S: 3000 GPU-s, s = 0.50: reserve 1500, C = 9.530833, B = 4.765417 (all to search).
    # search-api holds 1800: 1500 covered, 300 at 11.4370 = 0.953083.
    # H100: 3000 GPU-s, s = 0.30, no inference: B = 10.6685 unassigned.
    output = priced(classed({"H100": FULL, "L40S": FULL}, [(PEAK, "search-api", 1800, "L40S")]))

    assert output["teams"]["search"]["lines"] == {"baseline": "4.77", "standard": "0.95"}
    assert output["teams"]["search"]["quantities_gpu_hours_by_class"] == {
        "L40S": {"baseline": "0.42", "standard": "0.08"}
    }
    assert output["platform"]["lines"]["unassigned_reservation"] == "10.67"
    # Pool 35.561667 + 9.530833 = 45.0925 -> 45.09; platform = 45.09 - 5.72.
    assert output["pool_cost"] == "45.09"
    assert output["platform"]["total"] == "39.37"


def test_it_sums_a_team_line_over_classes_before_rounding():
    # llm: 1 GPU-s on each class at peak: 42.674/3600 + 11.437/3600 + 14.374/3600
    # = 0.011854 + 0.003177 + 0.003993 = 0.019024 -> 0.02 (each part alone rounds to 0.01,
    # 0.00 and 0.00).
    data = classed(
        {"H100": FULL, "L40S": FULL, "default": FULL},
        [(PEAK, "llm", 1, "H100"), (PEAK, "llm", 1, "L40S"), (PEAK, "llm", 1, "default")],
    )

    result = price(scenario_from_dict(data))

    line = result.team("nlp").line("standard")
    assert str(line.rounded) == "0.02"
    assert [str(round(part.amount, 2)) for part in line.by_class] == ["0.01", "0.00", "0.00"]
    assert line.gpu_seconds == 3
    assert "By GPU class (CNY per GPU-hour): H100 0.00 GPU-hours at 42.6740" in line.description


def test_it_charges_latency_penalties_on_training_over_all_classes():
    # A breached peak interval: T = 600 (H100) + 200 (default) for vit and 200 (L40S) for llm.
    # X = 20 splits 800 : 200 over all classes: 16.00 and 4.00.
    data = classed(
        {"H100": FULL, "L40S": FULL, "default": FULL},
        [
            (PEAK, "vit", 600, "H100"),
            (PEAK, "vit", 200, "default"),
            (PEAK, "llm", 200, "L40S"),
            (PEAK, "search-api", 100, "L40S"),
        ],
        latency=[("search-api", PEAK, [[0.1, 75], [0.5, 75], ["+Inf", 100]])],
    )

    output = priced(data)

    assert output["teams"]["vision"]["lines"]["sla_penalty"] == "16.00"
    assert output["teams"]["nlp"]["lines"]["sla_penalty"] == "4.00"
    assert output["teams"]["search"]["lines"]["sla_credit"] == "-20.00"


@pytest.mark.parametrize(
    ("before", "compensated"),
    [
        pytest.param(0, [], id="first-two-ever"),
        pytest.param(2, [4], id="third-and-fourth-ever"),
        pytest.param(5, [6, 7], id="sixth-and-seventh-ever"),
    ],
)
def test_it_numbers_preemptions_from_the_first_ever(before, compensated):
    tasks = copy.deepcopy(scenario()["tasks"])
    tasks[3]["preemptions_before"] = before  # llm
    data = scenario(
        tasks=tasks,
        preemptions=[preemption(PEAK, lost=600), preemption("2026-10-01T02:01:00Z", lost=600)],
    )

    result = price(scenario_from_dict(data))

    assert [credit.number for credit in result.compensated_preemptions] == compensated


def test_it_credits_a_preemption_at_the_rates_of_its_class():
    # The 4th preemption lost 3600 GPU-s of H100: at R 42.6740 at peak, R_off 38.5740 off-peak.
    tasks = copy.deepcopy(scenario()["tasks"])
    tasks[3]["preemptions_before"] = 3
    for at, credit in ((PEAK, "-42.67"), (OFFPEAK, "-38.57")):
        event = preemption(at, lost=3600) | {"gpu_class": "H100"}
        data = classed({"H100": FULL}, tasks=tasks, preemptions=[event])

        output = priced(data)

        assert output["teams"]["nlp"]["lines"] == {"compensation": credit}
        assert output["platform"]["lines"]["starvation_compensation"] == credit[1:]


def test_it_prices_a_version_1_scenario_the_same_with_an_empty_class_list():
    data = scenario(usage=[(PEAK, "vit", 1200), (PEAK, "search-api", 600)])
    with_classes = copy.deepcopy(data)
    with_classes["price_book"]["gpu_classes"] = []
    for row in with_classes["usage"] + with_classes["capacity"]:
        row["gpu_class"] = "default"

    assert price(scenario_from_dict(with_classes)) == price(scenario_from_dict(data))
    assert canonical_json(with_classes) == canonical_json(data)
    assert scenario_hash(with_classes) == scenario_hash(data)


def test_it_writes_classes_into_its_canonical_text_and_reads_them_back():
    tasks = copy.deepcopy(scenario()["tasks"])
    tasks[3]["preemptions_before"] = 2
    event = preemption(PEAK, lost=600) | {"gpu_class": "L40S"}
    data = classed(
        {"H100": FULL, "default": FULL},
        [(PEAK, "vit", 1200, "H100"), (PEAK, "vit", 300, "default")],
        tasks=tasks,
        preemptions=[event],
    )

    text = canonical_json(data)

    assert '"gpu_classes":[{"depreciation_per_gpu_hour":"38.00"' in text
    assert '"preemptions_before":2' in text
    # Rows by interval, task and class, `default` (written without its class) first.
    assert text.endswith(
        f'"usage":[{{"alloc_gpu_seconds":"300","interval":"{PEAK}","task":"vit"}},'
        f'{{"alloc_gpu_seconds":"1200","gpu_class":"H100","interval":"{PEAK}","task":"vit"}}]}}'
    )
    assert canonical_json(scenario_from_dict(data)) == text
    assert price(scenario_from_dict(data)) == price(scenario_from_dict(json.loads(text)))


def test_it_lets_a_class_overbook_its_own_gpus_within_the_interval():
    # The worked example does: the pool's capacity bounds the interval's usage, a class's
    # capacity only prices its sub-pool (the overflow is reserve resold).
    data = classed({"H100": FULL, "default": 600}, [(PEAK, "vit", 1000, "default")])

    output = priced(data)

    assert output["teams"]["vision"]["lines"] == {"standard": "3.99"}  # 1000 x 14.374 / 3600


def edit(change: Callable[[dict], object]) -> dict:
    data = classed(
        {"H100": FULL, "default": FULL},
        [(PEAK, "vit", 1200, "H100")],
        preemptions=[preemption(PEAK, lost=600) | {"gpu_class": "H100"}],
    )
    data = copy.deepcopy(data)  # the builders share their task list
    change(data)
    return data


def classes(*items: dict) -> Callable[[dict], object]:
    return lambda data: data["price_book"].update(gpu_classes=list(items))


REFUSALS = [
    (
        classes(H100, L40S | {"models": ["NVIDIA L40S", "NVIDIA H100 80GB HBM3"]}),
        "price_book: gpu_classes[1]: model 'NVIDIA H100 80GB HBM3' of class 'L40S' is already "
        "in class 'H100'; a model belongs to one class",
    ),
    (
        classes(H100 | {"name": "default"}),
        "price_book: gpu_classes[0]: name: 'default' is the class of the book's own figures; "
        "a listed class takes another name",
    ),
    (
        classes(H100, L40S | {"name": "H100", "models": ["NVIDIA L40S"]}),
        "price_book: gpu_classes[1]: duplicate class name 'H100'",
    ),
    (
        classes(H100 | {"depreciation_per_gpu_hour": 38.0}),
        "price_book: gpu_classes[0]: depreciation_per_gpu_hour must be a decimal string such as "
        '"38.0", not the JSON float 38.0',
    ),
    (
        classes(H100 | {"reserved_inference_share": 0.5}),
        "price_book: gpu_classes[0]: reserved_inference_share must be a decimal string such as "
        '"0.5", not the JSON float 0.5',
    ),
    (
        classes(H100 | {"reserved_inference_share": "1.2"}),
        "price_book: gpu_classes[0]: reserved_inference_share must be at most 1, got '1.2'",
    ),
    (
        classes({key: value for key, value in H100.items() if key != "gpu_average_power_kw"}),
        "price_book: gpu_classes[0]: missing field 'gpu_average_power_kw'",
    ),
    (
        classes(H100 | {"electricity_per_kwh": "0.9"}),
        "price_book: gpu_classes[0]: unknown field 'electricity_per_kwh'",
    ),
    (
        classes(H100 | {"models": "NVIDIA H100 80GB HBM3"}),
        "price_book: gpu_classes[0]: models must be a list of GPU model names, got "
        "'NVIDIA H100 80GB HBM3'",
    ),
    (
        lambda data: data["price_book"].update(gpu_classes={"H100": H100}),
        "price_book: gpu_classes: expected a list, got dict",
    ),
    (
        lambda data: data["capacity"][0].update(gpu_class="A100"),
        "capacity[0]: unknown gpu_class 'A100' (the price book's classes: H100, L40S, default)",
    ),
    (
        lambda data: data["usage"][0].update(gpu_class="A100"),
        "usage[0]: unknown gpu_class 'A100' (the price book's classes: H100, L40S, default)",
    ),
    (
        lambda data: data["preemptions"][0].update(gpu_class="A100"),
        "preemptions[0]: unknown gpu_class 'A100' (the price book's classes: H100, L40S, default)",
    ),
    (
        lambda data: data["usage"][0].update(gpu_class=""),
        "usage[0]: gpu_class must be a non-empty string, got ''",
    ),
    (
        lambda data: data["usage"].append(dict(data["usage"][0])),
        f"usage[1]: duplicate usage of task 'vit' on 'H100' in {PEAK}",
    ),
    (
        lambda data: data["usage"][0].update(gpu_class="L40S"),
        f"usage[0]: task 'vit' has an allocation on 'L40S' in {PEAK}, an interval with no "
        "capacity record of class 'L40S'",
    ),
    (
        lambda data: data["capacity"].append(dict(data["capacity"][0])),
        f"capacity[2]: duplicate interval {PEAK} of 'H100'",
    ),
    (
        lambda data: data["tasks"][3].update(preemptions_before=-1),
        "tasks[3]: preemptions_before must be at least 0, got -1",
    ),
    (
        lambda data: data["tasks"][3].update(preemptions_before=2.0),
        "tasks[3]: preemptions_before must be a whole number, got 2.0",
    ),
]


@pytest.mark.parametrize(("change", "message"), REFUSALS)
def test_it_refuses_a_bad_class_naming_the_field(change, message):
    with pytest.raises(ScenarioError) as caught:
        scenario_from_dict(edit(change))

    assert str(caught.value) == message


def test_it_accepts_the_unedited_classed_scenario():
    assert price(scenario_from_dict(edit(lambda data: None))).pool_cost == Decimal(
        "35.561666666666666666666666666667"
    ) + Decimal("11.978333333333333333333333333333")
