"""Each pricing rule alone, in a small scenario whose figures are worked out by hand.

Book: R = 14.3740, R_off = 12.0740, s = 0.30, X = 20.00, M = 100, N = 3, cap 1800 s, peak
09:00-22:00 Shanghai (UTC+8). One full interval: 3000 GPU-s, C = 11.978333 -> 11.98, reserve
900 GPU-s, B = 3.5935.
"""

from __future__ import annotations

import pytest

from tests.pricing.builders import (
    FULL,
    OFFPEAK,
    PEAK,
    TASKS,
    preemption,
    priced,
    scenario,
    slow_buckets,
)


def platform(total: str, **lines: str) -> dict:
    names = (
        "idle_capacity",
        "reserve_resold",
        "offpeak_discount",
        "starvation_compensation",
        "unassigned_reservation",
        "rounding",
    )
    return {"total": total, "lines": {name: lines.get(name, "0.00") for name in names}}


def billed(output: dict) -> dict:
    """Teams with at least one line (teams owning only idle tasks show no lines)."""
    return {team: body for team, body in output["teams"].items() if body["lines"]}


def team(total: str, lines: dict, hours: dict | None = None) -> dict:
    # A book without GPU classes prices everything in the `default` class (docs/pricing.md v2).
    return {
        "lines": lines,
        "quantities_gpu_hours": hours or {},
        "quantities_gpu_hours_by_class": {"default": hours} if hours else {},
        "total": total,
    }


BASELINE_CASES = [
    pytest.param(
        # I = 1200 > reserve 900: covered 675 / 225, billable 225 / 75 at R.
        [(PEAK, "search-api", 900), (PEAK, "chat-api", 300)],
        {
            "search": team(
                "3.60",
                {"baseline": "2.70", "standard": "0.90"},
                {"baseline": "0.19", "standard": "0.06"},
            ),
            "chat": team(
                "1.20",
                {"baseline": "0.90", "standard": "0.30"},
                {"baseline": "0.06", "standard": "0.02"},
            ),
        },
        # idle = 2100 shared - 300 billable = 1800 GPU-s = 7.187; 11.98 - 4.80 = 7.18.
        platform("7.18", idle_capacity="7.19", rounding="-0.01"),
        id="inference-above-the-reserve",
    ),
    pytest.param(
        # I = 900 = reserve: all covered; B split 1/3 : 2/3, nothing billable.
        [(PEAK, "search-api", 300), (PEAK, "chat-api", 600)],
        {
            "search": team("1.20", {"baseline": "1.20"}, {"baseline": "0.08"}),
            "chat": team("2.40", {"baseline": "2.40"}, {"baseline": "0.17"}),
        },
        # idle = 2100 shared GPU-s x 14.374 / 3600 = 8.384833; 11.98 - 3.60 = 8.38.
        platform("8.38", idle_capacity="8.38"),
        id="inference-within-the-reserve",
    ),
]


@pytest.mark.parametrize(("usage", "teams", "expected_platform"), BASELINE_CASES)
def test_it_splits_the_baseline_between_inference_teams(usage, teams, expected_platform):
    output = priced(scenario(usage=usage))

    assert output["pool_cost"] == "11.98"
    assert billed(output) == teams
    assert output["platform"] == expected_platform


PEAK_LINE = ({"standard": "11.98"}, {"standard": "0.83"})  # 3000 GPU-s at R
OFFPEAK_LINE = ({"offpeak": "10.06"}, {"offpeak": "0.83"})  # 3000 GPU-s at R_off


@pytest.mark.parametrize(
    ("timezone", "interval", "expected"),
    [
        pytest.param("Asia/Shanghai", "2026-10-01T13:55:00Z", PEAK_LINE, id="shanghai-21:55"),
        pytest.param("Asia/Shanghai", "2026-10-01T14:00:00Z", OFFPEAK_LINE, id="shanghai-22:00"),
        pytest.param("Asia/Shanghai", "2026-10-01T00:55:00Z", OFFPEAK_LINE, id="shanghai-08:55"),
        pytest.param("Asia/Shanghai", "2026-10-01T01:00:00Z", PEAK_LINE, id="shanghai-09:00"),
        pytest.param("Asia/Kolkata", "2026-10-01T16:25:00Z", PEAK_LINE, id="kolkata-21:55"),
        pytest.param("Asia/Kolkata", "2026-10-01T16:30:00Z", OFFPEAK_LINE, id="kolkata-22:00"),
        pytest.param("Asia/Kolkata", "2026-10-01T03:25:00Z", OFFPEAK_LINE, id="kolkata-08:55"),
        pytest.param("Asia/Kolkata", "2026-10-01T03:30:00Z", PEAK_LINE, id="kolkata-09:00"),
        pytest.param("UTC", "2026-10-01T13:55:00Z", PEAK_LINE, id="utc-13:55"),
    ],
)
def test_it_prices_training_by_the_local_hour_of_the_interval(timezone, interval, expected):
    data = scenario(
        capacity={interval: FULL},
        usage=[(interval, "vit", FULL)],
        book={"timezone": timezone},
    )

    lines, hours = expected
    assert billed(priced(data)) == {"vision": team(next(iter(lines.values())), lines, hours)}


def test_it_gives_the_offpeak_discount_to_the_platform_balance():
    data = scenario(capacity={OFFPEAK: FULL}, usage=[(OFFPEAK, "vit", FULL)])

    # 11.98 - 10.06 = 1.92: reserve resold 900 GPU-s (-3.5935), discount 3000 x 2.30 / 3600
    # (1.916667), and no inference ran, so the baseline 3.5935 is unassigned.
    assert priced(data)["platform"] == platform(
        "1.92", reserve_resold="-3.59", offpeak_discount="1.92", unassigned_reservation="3.59"
    )


SEARCH_BASELINE = team("3.59", {"baseline": "3.59"}, {"baseline": "0.17"})
SHARED_USAGE = [(PEAK, "search-api", 600), (PEAK, "vit", 1200), (PEAK, "llm", 600)]
PENALIZED = {
    # T = 1800: vision 20 x 1200/1800 = 13.33, nlp 20 x 600/1800 = 6.67; search credited 20.
    "search": team("-16.41", {"baseline": "3.59", "sla_credit": "-20.00"}, {"baseline": "0.17"}),
    "vision": team("18.12", {"sla_penalty": "13.33", "standard": "4.79"}, {"standard": "0.33"}),
    "nlp": team("9.07", {"sla_penalty": "6.67", "standard": "2.40"}, {"standard": "0.17"}),
}
UNPENALIZED = {
    "search": SEARCH_BASELINE,
    "vision": team("4.79", {"standard": "4.79"}, {"standard": "0.33"}),
    "nlp": team("2.40", {"standard": "2.40"}, {"standard": "0.17"}),
}
OFFPEAK_TRAINING = {
    "search": SEARCH_BASELINE,
    "vision": team("4.02", {"offpeak": "4.02"}, {"offpeak": "0.33"}),
    "nlp": team("2.01", {"offpeak": "2.01"}, {"offpeak": "0.17"}),
}


@pytest.mark.parametrize(
    ("interval", "usage", "requests", "teams", "breaches"),
    [
        pytest.param(PEAK, SHARED_USAGE, 200, PENALIZED, [PEAK], id="peak-with-training"),
        pytest.param(
            PEAK,
            [(PEAK, "search-api", 600)],
            200,
            {"search": SEARCH_BASELINE},
            [PEAK],
            id="peak-without-training",
        ),
        pytest.param(PEAK, SHARED_USAGE, 99, UNPENALIZED, [], id="below-minimum-requests"),
        pytest.param(PEAK, SHARED_USAGE, 100, PENALIZED, [PEAK], id="at-minimum-requests"),
        pytest.param(
            OFFPEAK,
            [(OFFPEAK, task, alloc) for _, task, alloc in SHARED_USAGE],
            200,
            OFFPEAK_TRAINING,
            [OFFPEAK],
            id="offpeak-listed-no-money",
        ),
    ],
)
def test_it_charges_latency_breaches_to_training(interval, usage, requests, teams, breaches):
    data = scenario(
        capacity={interval: FULL},
        usage=usage,
        latency=[("search-api", interval, slow_buckets(requests))],
    )

    output = priced(data)

    assert billed(output) == teams
    assert output["sla_breaches"] == [
        {"service": "search-api", "interval": breach} for breach in breaches
    ]


FIRST_THREE = [
    preemption("2026-10-01T01:00:00Z", lost=600),
    preemption("2026-10-01T01:10:00Z", lost=None),
    preemption("2026-10-01T01:20:00Z", lost=600),
]


@pytest.mark.parametrize(
    ("fourth", "expected"),
    [
        pytest.param(None, None, id="third-absorbed"),
        # 600 GPU-s x 14.374 / 3600 = 2.395667
        pytest.param(preemption("2026-10-01T02:03:00Z", lost=600), "-2.40", id="reported-peak"),
        # min(1800, 2400) x 2 GPUs = 3600 GPU-s at R = 14.374
        pytest.param(
            preemption("2026-10-01T02:03:00Z", seconds=2400, gpus=2), "-14.37", id="null-capped"
        ),
        # min(1800, 900) x 2 GPUs = 1800 GPU-s at R = 7.187
        pytest.param(
            preemption("2026-10-01T02:03:00Z", seconds=900, gpus=2), "-7.19", id="null-uncapped"
        ),
        # 3600 GPU-s at R_off = 12.074 (23:03 in Shanghai)
        pytest.param(
            preemption("2026-10-01T15:03:00Z", seconds=2400, gpus=2), "-12.07", id="null-offpeak"
        ),
    ],
)
def test_it_compensates_preemptions_beyond_the_threshold(fourth, expected):
    # The fourth comes first in the file: numbering follows time, not file order.
    events = ([fourth] if fourth else []) + FIRST_THREE

    output = priced(scenario(preemptions=events))

    if expected is None:
        assert billed(output) == {}
        assert output["platform"]["lines"]["starvation_compensation"] == "0.00"
    else:
        assert billed(output) == {"nlp": team(expected, {"compensation": expected})}
        assert output["platform"]["lines"]["starvation_compensation"] == expected[1:]


def test_it_does_not_compensate_preempted_inference():
    events = [
        {**preemption(f"2026-10-01T02:0{minute}:00Z", lost=600), "task": "search-api"}
        for minute in range(5)
    ]

    assert billed(priced(scenario(preemptions=events))) == {}


def test_it_leaves_the_reservation_unassigned_without_inference():
    output = priced(scenario(usage=[(PEAK, "vit", 1200)]))

    assert billed(output) == {"vision": team("4.79", {"standard": "4.79"}, {"standard": "0.33"})}
    # 11.98 - 4.79 = 7.19: idle 900 GPU-s = 3.5935, B = 3.5935 unassigned.
    assert output["platform"] == platform(
        "7.19", idle_capacity="3.59", unassigned_reservation="3.59", rounding="0.01"
    )


def test_it_prices_the_capacity_actually_present_when_a_gpu_drops_out():
    after = "2026-10-01T02:05:00Z"
    data = scenario(capacity={PEAK: FULL, after: 2700}, usage=[(after, "vit", 2700)])

    output = priced(data)

    # C = 5700 x 14.374 / 3600 = 22.759167; B = 6.82775.
    assert output["pool_cost"] == "22.76"
    assert billed(output) == {"vision": team("10.78", {"standard": "10.78"}, {"standard": "0.75"})}
    # Before: 2100 shared GPU-s idle (8.384833). After: the reserve is 810 and training
    # resold all of it (-3.23415). 8.38 - 3.23 + 6.83 = 11.98 = 22.76 - 10.78.
    assert output["platform"] == platform(
        "11.98", idle_capacity="8.38", reserve_resold="-3.23", unassigned_reservation="6.83"
    )


def test_it_lists_every_team_that_owns_a_task():
    output = priced(scenario(usage=[(PEAK, "vit", 1200)]))

    assert sorted(output["teams"]) == sorted({task["team"] for task in TASKS})
    assert output["teams"]["nlp"] == team("0.00", {})
