"""What other code relies on: no Django, Decimal only, one canonical text and hash."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest

from billing.pricing import (
    ENGINE_VERSION,
    ROUNDING,
    Capacity,
    Preemption,
    PriceBook,
    Scenario,
    Service,
    Task,
    canonical_json,
    price,
    scenario_from_dict,
    scenario_hash,
    scenario_to_dict,
)
from tests.pricing.builders import BOOK, PEAK, scenario

REPO = Path(__file__).resolve().parents[2]


def test_it_imports_no_django():
    check = (
        "import billing.pricing, sys; "
        "assert not any(m == 'django' or m.startswith('django.') for m in sys.modules), "
        "sorted(m for m in sys.modules if m.startswith('django'))"
    )

    completed = subprocess.run(
        [sys.executable, "-c", check], cwd=REPO, capture_output=True, text=True, check=False
    )

    assert completed.returncode == 0, completed.stderr


def test_it_pins_its_version_and_rounding():
    assert ENGINE_VERSION == "2.0.0"
    assert ROUNDING == "ROUND_HALF_UP"


def book(**changes: object) -> PriceBook:
    fields = {
        name: Decimal(value) if isinstance(value, str) and value[0].isdigit() else value
        for name, value in BOOK.items()
    }
    fields["peak_hours"] = tuple(BOOK["peak_hours"])
    fields["starvation_lost_work_cap_seconds"] = Decimal(1800)
    return PriceBook(**{**fields, **changes})


@pytest.mark.parametrize(
    "build",
    [
        pytest.param(lambda: book(depreciation_per_gpu_hour=11.5), id="price-book"),
        pytest.param(lambda: Capacity(1790820000, 3000.0), id="capacity"),
        pytest.param(lambda: Service("s", "t", 300.0), id="service"),
        pytest.param(
            lambda: Preemption("t", dt.datetime(2026, 10, 1, tzinfo=dt.UTC), 1.0, Decimal(1), None),
            id="preemption",
        ),
        pytest.param(
            lambda: Scenario(
                300,
                book(),
                [Task("t", "team", "training_batch")],
                [],
                [Capacity(1790820000, Decimal(3000))],
                [(1790820000, "t", 1.5)],
            ),
            id="usage-row",
        ),
    ],
)
def test_it_refuses_floats_with_a_type_error(build):
    with pytest.raises(TypeError, match="must be a Decimal"):
        build()


def test_it_prices_dataclasses_built_directly():
    interval = 1790820000  # 2026-10-01T02:00:00Z, 10:00 in Shanghai
    direct = Scenario(
        300,
        book(),
        [Task("vit", "vision", "training_batch")],
        [],
        [Capacity(interval, Decimal(3000))],
        [(interval, "vit", Decimal(1200))],
    )

    assert price(direct) == price(
        scenario_from_dict(
            scenario(
                usage=[(PEAK, "vit", 1200)],
                tasks=[{"id": "vit", "team": "vision", "kind": "training_batch"}],
            )
            | {"services": []}
        )
    )


def test_it_writes_one_canonical_text_whatever_the_input_order():
    data = scenario(usage=[(PEAK, "vit", "1200.0"), (PEAK, "search-api", 300)])
    reordered = {**data, "usage": data["usage"][::-1], "tasks": data["tasks"][::-1]}

    text = canonical_json(data)

    assert canonical_json(reordered) == text
    assert (
        scenario_hash(reordered) == scenario_hash(data) == scenario_hash(scenario_from_dict(data))
    )
    assert text == json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"))
    assert json.loads(text) == scenario_to_dict(scenario_from_dict(data))
    assert json.loads(text)["usage"] == [
        {"alloc_gpu_seconds": "300", "interval": PEAK, "task": "search-api"},
        {"alloc_gpu_seconds": "1200.0", "interval": PEAK, "task": "vit"},
    ]
    assert canonical_json(json.loads(text)) == text


def test_it_hashes_a_changed_scenario_differently():
    data = scenario(usage=[(PEAK, "vit", 1200)])
    changed = scenario(usage=[(PEAK, "vit", 1201)])

    assert len(scenario_hash(data)) == 64
    assert scenario_hash(changed) != scenario_hash(data)
