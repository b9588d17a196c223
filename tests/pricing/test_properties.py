"""Properties of the engine over small random scenarios (hypothesis).

Conservation to the cent, order independence, SLA penalties cancelling credits, one hash per
scenario, and floats refused wherever money is required.
"""

from __future__ import annotations

import json
from decimal import ROUND_DOWN, Decimal, localcontext

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from billing.pricing import (
    CONTEXT,
    DECIMAL_BOOK_FIELDS,
    TASK_KINDS,
    ScenarioError,
    canonical_json,
    format_interval,
    price,
    result_to_dict,
    scenario_from_dict,
    scenario_hash,
)

SETTINGS = settings(max_examples=100, deadline=None)
ZONES = ["UTC", "Asia/Shanghai", "Asia/Kolkata", "America/New_York", "Australia/Lord_Howe"]
TEAMS = ["alpha", "beta", "gamma"]
BASE = 1_790_812_800  # 2026-10-01T00:00:00Z
LES = [0.05, 0.1, 0.25, 0.5, 1]


def amounts(high: int, places: int = 2) -> st.SearchStrategy[str]:
    return st.decimals(min_value=0, max_value=high, places=places).map(str)


@st.composite
def books(draw) -> dict:
    return {
        "currency": "CNY",
        "timezone": draw(st.sampled_from(ZONES)),
        "depreciation_per_gpu_hour": draw(amounts(30)),
        "facility_per_gpu_hour": draw(amounts(10)),
        "electricity_per_kwh": draw(amounts(2)),
        "gpu_average_power_kw": draw(amounts(1)),
        "reserved_inference_share": draw(st.sampled_from(["0", "0.30", "0.5", "1"])),
        "peak_hours": draw(st.lists(st.integers(0, 24), min_size=2, max_size=2)),
        "sla_penalty_per_interval": draw(amounts(50)),
        "sla_min_requests": draw(st.integers(0, 150)),
        "starvation_preemption_threshold": draw(st.integers(0, 3)),
        "starvation_lost_work_cap_seconds": draw(st.integers(0, 3600)),
    }


@st.composite
def scenarios(draw) -> dict:
    step = draw(st.sampled_from([300, 900, 3600]))
    offsets = draw(st.lists(st.integers(0, 100), min_size=1, max_size=5, unique=True))
    intervals = [BASE + offset * step for offset in offsets]
    tasks = [
        {"id": f"task-{n}", "team": draw(st.sampled_from(TEAMS)), "kind": kind}
        for n, kind in enumerate(
            draw(st.lists(st.sampled_from(TASK_KINDS), min_size=1, max_size=5))
        )
    ]
    capacity, usage = [], []
    for interval in intervals:
        gpus = Decimal(draw(st.integers(0, 16))) / 2
        seconds = gpus * step
        capacity.append(
            {"interval": format_interval(interval), "capacity_gpu_seconds": str(seconds)}
        )
        share = (seconds / len(tasks)).quantize(Decimal("0.001"), rounding=ROUND_DOWN)
        for task in tasks:
            if draw(st.booleans()):
                fraction = Decimal(draw(st.integers(0, 1000))) / 1000
                alloc = (share * fraction).quantize(Decimal("0.001"), rounding=ROUND_DOWN)
                usage.append(
                    {
                        "interval": format_interval(interval),
                        "task": task["id"],
                        "alloc_gpu_seconds": str(alloc),
                    }
                )
    services = [
        {"id": f"svc-{n}", "team": draw(st.sampled_from(TEAMS)), "slo_p99_ms": slo}
        for n, slo in enumerate(draw(st.lists(st.sampled_from([100, 300, 1000]), max_size=2)))
    ]
    latency = []
    for service in services:
        for interval in intervals:
            if draw(st.booleans()):
                counts = draw(st.lists(st.integers(0, 60), min_size=6, max_size=6))
                cumulative = [sum(counts[: n + 1]) for n in range(6)]
                buckets = [
                    [le, count] for le, count in zip([*LES, "+Inf"], cumulative, strict=True)
                ]
                latency.append(
                    {
                        "service": service["id"],
                        "interval": format_interval(interval),
                        "buckets": buckets,
                    }
                )
    moments = draw(st.lists(st.integers(0, max(offsets) * step + step), max_size=8, unique=True))
    preemptions = [
        {
            "task": draw(st.sampled_from(tasks))["id"],
            "at": format_interval(BASE + moment),
            "gpus": draw(st.integers(1, 4)),
            "seconds_since_start": draw(st.integers(0, 5000)),
            "lost_gpu_seconds": draw(st.one_of(st.none(), amounts(5000, 1))),
        }
        for moment in moments
    ]
    return {
        "step_seconds": step,
        "price_book": draw(books()),
        "tasks": tasks,
        "services": services,
        "capacity": capacity,
        "usage": usage,
        "latency": latency,
        "preemptions": preemptions,
    }


@SETTINGS
@given(data=scenarios())
def test_it_conserves_the_pool_cost_to_the_cent(data):
    result = price(scenario_from_dict(data))

    with localcontext(CONTEXT):
        team_totals = sum(team.total for team in result.teams)
        assert result.pool_cost_rounded == team_totals + result.platform.total
        assert result.platform.total == sum(line.rounded for line in result.platform.lines)
        for team in result.teams:
            assert team.total == sum(line.rounded for line in team.lines)
        # Before rounding, the named platform lines explain the balance to 1e-20.
        named = [line for line in result.platform.lines if line.kind != "rounding"]
        unrounded = result.pool_cost - sum(
            line.amount for team in result.teams for line in team.lines
        )
        assert abs(unrounded - sum(line.amount for line in named)) < Decimal("1e-20")


def shuffled(data: dict, rng) -> dict:
    copy = json.loads(json.dumps(data))
    for name in ("tasks", "services", "capacity", "usage", "latency", "preemptions"):
        rng.shuffle(copy[name])
    for record in copy["latency"]:
        rng.shuffle(record["buckets"])
    return copy


@SETTINGS
@given(data=scenarios(), rng=st.randoms(use_true_random=False))
def test_it_gives_the_same_result_whatever_the_order_of_records(data, rng):
    original = price(scenario_from_dict(data))
    again = price(scenario_from_dict(shuffled(data, rng)))

    assert again == original  # every figure, description and contribution
    assert result_to_dict(again) == result_to_dict(original)
    assert scenario_hash(shuffled(data, rng)) == scenario_hash(data)


@SETTINGS
@given(data=scenarios())
def test_it_cancels_sla_penalties_against_credits(data):
    result = price(scenario_from_dict(data))
    lines = [
        line
        for team in result.teams
        for line in team.lines
        if line.kind in ("sla_penalty", "sla_credit")
    ]

    with localcontext(CONTEXT):
        assert sum(line.amount for line in lines) == 0  # exactly, before rounding
        # Rounded, each line moves by at most half a cent.
        assert abs(sum(line.rounded for line in lines)) <= Decimal("0.005") * len(lines)
    penalized = [breach for breach in result.sla_breaches if breach.penalized]
    credits = [line for line in lines if line.kind == "sla_credit"]
    if Decimal(data["price_book"]["sla_penalty_per_interval"]):  # X = 0 moves no money
        assert sum(line.breached_intervals for line in credits) == len(penalized)


@SETTINGS
@given(data=scenarios())
def test_it_reads_back_its_canonical_text(data):
    text = canonical_json(data)

    assert canonical_json(json.loads(text)) == text
    assert price(scenario_from_dict(json.loads(text))) == price(scenario_from_dict(data))


@SETTINGS
@given(data=scenarios(), field=st.sampled_from(DECIMAL_BOOK_FIELDS))
def test_it_refuses_a_float_in_any_money_field(data, field):
    data["price_book"][field] = float(Decimal(data["price_book"][field]) + Decimal("0.5"))

    with pytest.raises(ScenarioError, match=rf"^price_book: {field} must be a decimal string"):
        scenario_from_dict(data)
