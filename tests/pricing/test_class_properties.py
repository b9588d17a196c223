"""Properties of pricing version 2 over small random scenarios (hypothesis).

Random GPU classes (each with its own D, F, W and maybe s) split each interval's capacity and
usage, preemptions name a class, and tasks carry earlier preemptions. Conservation to the cent
holds, a book without classes prices as in version 1, and earlier preemptions shift
compensation exactly as if they had happened in the period.
"""

from __future__ import annotations

import copy
from decimal import Decimal, localcontext

from hypothesis import given
from hypothesis import strategies as st

from billing.pricing import (
    CONTEXT,
    ROUNDING,
    TRAINING_KINDS,
    format_interval,
    parse_instant,
    price,
    result_to_dict,
    scenario_from_dict,
    scenario_hash,
)
from tests.pricing.test_properties import BASE, SETTINGS, amounts, scenarios, shuffled

CLASS_NAMES = ["A100", "H100", "L40S"]
CENT = Decimal("0.01")


@st.composite
def gpu_classes(draw) -> list[dict]:
    names = draw(st.lists(st.sampled_from(CLASS_NAMES), max_size=3, unique=True))
    classes = []
    for name in names:
        item = {
            "name": name,
            "models": [f"NVIDIA {name}", f"NVIDIA {name} PCIe"],
            "depreciation_per_gpu_hour": draw(amounts(40)),
            "facility_per_gpu_hour": draw(amounts(10)),
            "gpu_average_power_kw": draw(amounts(1)),
        }
        if draw(st.booleans()):
            item["reserved_inference_share"] = draw(st.sampled_from(["0", "0.25", "0.5", "1"]))
        classes.append(item)
    return classes


@st.composite
def classed_scenarios(draw) -> dict:
    """A version-1 random scenario whose capacity and usage are spread over random classes.

    Each interval's capacity is split between the classes present in it; a usage row goes to
    one of them, or is split in two rows of two classes. The interval's total never moves, so
    the scenario stays valid (a class may be overbooked within its interval, as in the worked
    example).
    """
    data = draw(scenarios())
    classes = draw(gpu_classes())
    data["price_book"]["gpu_classes"] = classes
    names = ["default", *(item["name"] for item in classes)]
    present: dict[str, list[str]] = {}
    capacity = []
    for row in data["capacity"]:
        here = draw(st.lists(st.sampled_from(names), min_size=1, unique=True))
        present[row["interval"]] = here
        total = Decimal(row["capacity_gpu_seconds"])
        for position, name in enumerate(here):
            last = position == len(here) - 1
            part = total if last else (total * draw(st.integers(0, 4)) / 4).quantize(Decimal(1))
            part = min(part, total)
            total -= part
            capacity.append({**row, "capacity_gpu_seconds": str(part), "gpu_class": name})
    data["capacity"] = capacity
    usage = []
    for row in data["usage"]:
        here = present[row["interval"]]
        first = draw(st.sampled_from(here))
        alloc = Decimal(row["alloc_gpu_seconds"])
        others = [name for name in here if name != first]
        if others and draw(st.booleans()):
            part = (alloc / 3).quantize(Decimal("0.001"))
            usage.append({**row, "alloc_gpu_seconds": str(part), "gpu_class": first})
            second = draw(st.sampled_from(others))
            usage.append({**row, "alloc_gpu_seconds": str(alloc - part), "gpu_class": second})
        else:
            usage.append({**row, "gpu_class": first})
    data["usage"] = usage
    for event in data["preemptions"]:
        event["gpu_class"] = draw(st.sampled_from(names))
    for task in data["tasks"]:
        task["preemptions_before"] = draw(st.integers(0, 5))
    return data


@SETTINGS
@given(data=classed_scenarios())
def test_it_conserves_the_pool_cost_to_the_cent_over_classes(data):
    result = price(scenario_from_dict(data))

    with localcontext(CONTEXT):
        team_totals = sum(team.total for team in result.teams)
        assert result.pool_cost_rounded == team_totals + result.platform.total
        assert result.platform.total == sum(line.rounded for line in result.platform.lines)
        for team in result.teams:
            assert team.total == sum(line.rounded for line in team.lines)
            for line in team.lines:
                # A team line is its classes' unrounded parts, summed, rounded once.
                if line.by_class:
                    assert line.amount == sum(part.amount for part in line.by_class)
                    assert line.gpu_seconds == sum(part.gpu_seconds for part in line.by_class)
        named = [line for line in result.platform.lines if line.kind != "rounding"]
        unrounded = result.pool_cost - sum(
            line.amount for team in result.teams for line in team.lines
        )
        assert abs(unrounded - sum(line.amount for line in named)) < Decimal("1e-20")
        assert result.capacity_gpu_seconds == sum(
            seconds for _, seconds in result.capacity_gpu_seconds_by_class
        )
    for team in result.teams:
        for line in team.lines:
            assert line.rounded == line.amount.quantize(CENT, rounding=ROUNDING)


@SETTINGS
@given(data=classed_scenarios(), rng=st.randoms(use_true_random=False))
def test_it_prices_classes_whatever_the_order_of_records(data, rng):
    original = price(scenario_from_dict(data))
    reordered = shuffled(data, rng)
    rng.shuffle(reordered["price_book"]["gpu_classes"])

    assert price(scenario_from_dict(reordered)) == original
    assert scenario_hash(reordered) == scenario_hash(data)


@SETTINGS
@given(data=scenarios(), spell_out=st.booleans())
def test_it_prices_a_version_1_scenario_the_same_with_an_empty_class_list(data, spell_out):
    with_classes = copy.deepcopy(data)
    with_classes["price_book"]["gpu_classes"] = []
    if spell_out:  # every record names `default`, every task 0 earlier preemptions
        for row in with_classes["capacity"] + with_classes["usage"] + with_classes["preemptions"]:
            row["gpu_class"] = "default"
        for task in with_classes["tasks"]:
            task["preemptions_before"] = 0

    assert price(scenario_from_dict(with_classes)) == price(scenario_from_dict(data))
    assert result_to_dict(price(scenario_from_dict(with_classes))) == result_to_dict(
        price(scenario_from_dict(data))
    )
    assert scenario_hash(with_classes) == scenario_hash(data)


@SETTINGS
@given(data=classed_scenarios(), earlier=st.lists(st.integers(0, 6), min_size=6, max_size=6))
def test_it_counts_earlier_preemptions_as_if_they_had_happened_in_the_period(data, earlier):
    """Pricing with `preemptions_before = k` credits the period's events exactly as pricing
    with `preemptions_before = 0` and k more events of the task before all of them does; the
    only other credits are those k events' own."""
    with_count = copy.deepcopy(data)
    with_events = copy.deepcopy(data)
    for number, task in enumerate(with_count["tasks"]):
        task["preemptions_before"] = earlier[number % len(earlier)]
    for number, task in enumerate(with_events["tasks"]):
        task["preemptions_before"] = 0
        for position in range(earlier[number % len(earlier)]):
            with_events["preemptions"].append(
                {
                    "task": task["id"],
                    # Before every event of the period (which start at BASE), one a minute.
                    "at": format_interval(BASE - 60 * (position + 1)),
                    "gpus": 1,
                    "seconds_since_start": 600,
                    "lost_gpu_seconds": "60",
                    "gpu_class": "default",
                }
            )

    by_count = price(scenario_from_dict(with_count)).compensated_preemptions
    by_events = price(scenario_from_dict(with_events)).compensated_preemptions

    start = parse_instant(format_interval(BASE))
    assert [credit for credit in by_events if credit.at >= start] == list(by_count)
    # The k events themselves: those of training tasks beyond the threshold N earn credits.
    threshold = data["price_book"]["starvation_preemption_threshold"]
    assert len([credit for credit in by_events if credit.at < start]) == sum(
        max(0, earlier[number % len(earlier)] - threshold)
        for number, task in enumerate(data["tasks"])
        if task["kind"] in TRAINING_KINDS
    )
