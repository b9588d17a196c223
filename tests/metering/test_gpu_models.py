"""A mixed pool (H100, A100 and L40S nodes; MIG on the H100 and A100, time-slicing on all)
metered from a real Prometheus keeps each GPU's model, and a month closed with a price book
that has classes prices each class as docs/pricing.md "GPU classes" says.

Every expected figure is computed here from the simulator's truth.json and the book's own
figures, never from Tandem's code.
"""

from __future__ import annotations

import datetime as dt
import json
from collections import defaultdict
from collections.abc import Iterator
from datetime import date
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

import pytest

from billing.models import PriceBook
from billing.pricing import price
from billing.scenarios import scenario_build
from billing.selectors import period_verification
from billing.services import (
    period_close,
    price_book_create_draft,
    price_book_ensure_default,
    price_book_publish,
)
from metering.models import CapacityHour, CapacityInterval, Source, UsageHour, UsageInterval
from simulator.config import PoolConfig
from simulator.prometheus import PrometheusProcess
from tests.factories import windows_complete
from tests.metering.conftest import ingest_span, pool_span, prometheus_over, simulated
from tests.slow import starts

ISO = "%Y-%m-%dT%H:%M:%SZ"
H100, A100, L40S = "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB", "NVIDIA L40S"
# Three nodes of three GPUs, one per model, on 30 September (Asia/Shanghai): a day of the
# month the test closes.
MIXED = PoolConfig(
    gpus=9, days=1, start=date(2026, 9, 30), seed=5, scrape_interval_seconds=60, gpu_models="mixed"
)
CLASSES = [
    {
        "name": "H100",
        "models": [H100],
        "depreciation_per_gpu_hour": "38.00",
        "facility_per_gpu_hour": "4.10",
        "gpu_average_power_kw": "0.70",
    },
    {
        "name": "A100",
        "models": [A100],
        "depreciation_per_gpu_hour": "21.50",
        "facility_per_gpu_hour": "3.20",
        "gpu_average_power_kw": "0.40",
        "reserved_inference_share": "0.25",
    },
]
CLASS_OF_MODEL = {H100: "H100", A100: "A100", L40S: "default"}  # L40S: no class lists it


@pytest.fixture(scope="module")
def mixed_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("mixed")
    simulated(MIXED, out)
    return out


@pytest.fixture(scope="module")
def mixed_truth(mixed_dir: Path) -> dict:
    return json.loads((mixed_dir / "truth.json").read_text())


@pytest.fixture(scope="module")
@starts("Prometheus")
def mixed_prometheus(mixed_dir: Path) -> Iterator[PrometheusProcess]:
    running = prometheus_over(mixed_dir / "tsdb", MIXED.scrape_interval_seconds)
    yield running
    running.stop()


@pytest.fixture
def mixed_source(db, settings, mixed_prometheus, mixed_truth) -> Source:
    settings.TANDEM_TIMEZONE = "Asia/Shanghai"
    settings.TANDEM_STEP_SECONDS = 300
    source = Source.objects.create(
        name="mixed", url=mixed_prometheus.url, scrape_interval_seconds=60
    )
    ingest_span(source, *pool_span(mixed_truth))
    return source


def _truth_by_model(truth: dict) -> tuple[dict, dict]:
    """(model -> interval -> capacity, (task, model) -> interval -> alloc), as Decimals."""
    capacity = {
        model: {interval: Decimal(v) for interval, v in values.items()}
        for model, values in truth["capacity_by_model"].items()
    }
    usage = {
        (task_id, model): {interval: Decimal(v) for interval, v in values.items()}
        for task_id, task in truth["tasks"].items()
        for model, values in task["alloc_gpu_seconds_by_model"].items()
        if values
    }
    return capacity, usage


@pytest.mark.slow
def test_it_meters_capacity_and_usage_per_gpu_model_exactly(mixed_source, mixed_truth) -> None:
    modes = {
        (gpu["modelName"], gpu["mode"])
        for node in mixed_truth["meta"]["nodes"]
        for gpu in node["gpus"]
    }
    # MIG and time-sliced GPUs of the models that have them, so the split is not whole-only.
    assert {(H100, "mig"), (A100, "mig"), (H100, "timesliced"), (L40S, "timesliced")} <= modes
    capacity, usage = _truth_by_model(mixed_truth)
    assert set(capacity) == {H100, A100, L40S}

    found_capacity: dict[str, dict[str, Decimal]] = defaultdict(dict)
    for model, start, seconds in CapacityInterval.objects.values_list(
        "gpu_model", "interval_start", "capacity_gpu_seconds"
    ):
        found_capacity[model][start.strftime(ISO)] = seconds
    found_usage: dict[tuple[str, str], dict[str, Decimal]] = defaultdict(dict)
    for task, model, start, alloc in UsageInterval.objects.values_list(
        "task__external_id", "gpu_model", "interval_start", "alloc_gpu_seconds"
    ):
        if alloc:
            found_usage[(task, model)][start.strftime(ISO)] = alloc

    assert found_capacity == capacity
    assert found_usage == usage
    assert len({model for _, model in usage}) == 3
    # Replicas of one service on nodes of two models: one row per model in one interval.
    per_interval = defaultdict(set)
    for (task, model), values in found_usage.items():
        for interval in values:
            per_interval[(task, interval)].add(model)
    assert any(len(models) == 2 for models in per_interval.values())
    # The hourly rollup keeps the model: its sums per model equal the intervals'.
    for model, values in capacity.items():
        hours = CapacityHour.objects.filter(gpu_model=model).values_list(
            "capacity_gpu_seconds", flat=True
        )
        assert sum(hours) == sum(values.values()), model
    for model in capacity:
        in_hours = UsageHour.objects.filter(gpu_model=model).values_list(
            "alloc_gpu_seconds", flat=True
        )
        expected = sum(sum(v.values()) for (_, m), v in usage.items() if m == model)
        assert sum(in_hours) == expected, model


@pytest.mark.slow
def test_it_closes_a_mixed_month_with_each_class_priced_from_its_own_figures(
    mixed_source, mixed_truth
) -> None:
    price_book_ensure_default()
    book = price_book_publish(
        price_book_id=price_book_create_draft(
            effective_from=dt.date(2026, 9, 1), gpu_classes=CLASSES
        ).pk
    )
    windows_complete(periods=["2026-09"])

    close = period_close(period="2026-09").period_close

    assert close.price_book == book
    # The close priced what the scenario builder writes today: reprice it to read the classes.
    built = scenario_build(start=close.period_start, end=close.period_end, price_book=book)
    result = price(built.scenario)
    assert result.pool_cost_rounded == close.pool_cost
    assert period_verification("2026-09").ok

    # R_c = D_c + F_c + E x W_c; `default` is the book's own D, F, W.
    electricity = book.electricity_per_kwh
    figures = {
        item["name"]: (
            Decimal(item["depreciation_per_gpu_hour"]),
            Decimal(item["facility_per_gpu_hour"]),
            Decimal(item["gpu_average_power_kw"]),
        )
        for item in CLASSES
    }
    figures["default"] = (
        book.depreciation_per_gpu_hour,
        book.facility_per_gpu_hour,
        book.gpu_average_power_kw,
    )
    rates = {r.gpu_class: r.standard_per_gpu_hour for r in result.rates_by_class}
    assert rates == {
        name: depreciation + facility + electricity * power
        for name, (depreciation, facility, power) in figures.items()
    }

    capacity, usage = _truth_by_model(mixed_truth)
    by_class: dict[str, Decimal] = defaultdict(Decimal)
    for model, values in capacity.items():
        by_class[CLASS_OF_MODEL[model]] += sum(values.values())
    assert dict(result.capacity_gpu_seconds_by_class) == by_class
    # C = sum over classes of R_c x capacity_c / 3600, unrounded (to far below a cent: the
    # engine divides at a higher precision than the default context's 28 digits).
    pool_cost = sum(rates[name] * seconds / 3600 for name, seconds in by_class.items())
    assert abs(result.pool_cost - pool_cost) < Decimal("1e-20")
    assert close.pool_cost == pool_cost.quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)

    # Each team's GPU-time per class: covered (baseline) plus beyond coverage (standard and
    # off-peak) is all it held of the class.
    teams = {task_id: task["team"] for task_id, task in mixed_truth["tasks"].items()}
    expected: dict[str, dict[str, Decimal]] = defaultdict(lambda: defaultdict(Decimal))
    for (task_id, model), values in usage.items():
        expected[teams[task_id]][CLASS_OF_MODEL[model]] += sum(values.values())
    found: dict[str, dict[str, Decimal]] = defaultdict(lambda: defaultdict(Decimal))
    for team in result.teams:
        for line in team.lines:
            if line.kind in ("baseline", "standard", "offpeak"):
                for part in line.by_class:
                    found[team.team][part.gpu_class] += part.gpu_seconds
    assert {team: dict(v) for team, v in found.items()} == {
        team: dict(v) for team, v in expected.items()
    }
    assert any(set(v) == {"H100", "A100", "default"} for v in expected.values())


@pytest.mark.slow
def test_it_writes_default_rows_without_a_class_in_the_scenario(mixed_source) -> None:
    """A book without classes: every model is `default`, written without `gpu_class`, and
    capacity is one record per interval, as version 1 wrote it."""
    book: PriceBook = price_book_ensure_default() or PriceBook.objects.get(version=1)
    start, end = (
        dt.datetime(2026, 9, 29, 16, tzinfo=dt.UTC),
        dt.datetime(2026, 9, 30, 16, tzinfo=dt.UTC),
    )

    built = scenario_build(start=start, end=end, price_book=book)

    assert len(built.scenario.capacity) == 288
    assert all(record.gpu_class == "default" for record in built.scenario.capacity)
    assert all(len(row) == 3 for row in built.scenario.usage)
