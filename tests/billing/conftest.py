"""Fixtures for billing tests: the pool's time zone, the default book, the boundary pool
(tests/pools), the worked example written into the metering tables."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from pathlib import Path

import pytest

from billing import services
from billing.models import PeriodClose, PriceBook
from billing.pricing import scenario_from_dict
from billing.scenarios import BuiltScenario, PricedScenario, scenario_price
from billing.services import price_book_ensure_default
from metering.models import CapacityInterval, LatencyInterval, Preemption, UsageInterval
from metering.services import latency_p99
from tests.factories import (
    IngestWindowFactory,
    ServiceFactory,
    SourceFactory,
    TaskFactory,
    TeamFactory,
    windows_complete,
)


@pytest.fixture(autouse=True)
def pool_timezone(settings) -> str:
    """The tests' months and peak hours are in Asia/Shanghai, whatever the environment says."""
    settings.TANDEM_TIMEZONE = "Asia/Shanghai"
    settings.TANDEM_STEP_SECONDS = 300
    return settings.TANDEM_TIMEZONE


@pytest.fixture
def default_book(db) -> PriceBook:
    """The published default book v1 (the migration's; re-created after a flush)."""
    price_book_ensure_default()
    return PriceBook.objects.get(version=1)


@pytest.fixture
def worked_example(default_book, fixtures_dir: Path) -> dict:
    """The worked example's scenario, written into the metering tables (2026-10 local)."""
    scenario = json.loads((fixtures_dir / "worked-example/scenario.json").read_text())
    source = SourceFactory(name="default")
    teams = {
        name: TeamFactory(name=name)
        for name in {row["team"] for row in scenario["tasks"] + scenario["services"]}
    }
    tasks = {
        row["id"]: TaskFactory(
            source=source, external_id=row["id"], team=teams[row["team"]], kind=row["kind"]
        )
        for row in scenario["tasks"]
    }
    services = {
        row["id"]: ServiceFactory(
            source=source,
            external_id=row["id"],
            team=teams[row["team"]],
            slo_p99_ms=row["slo_p99_ms"],
        )
        for row in scenario["services"]
    }
    CapacityInterval.objects.bulk_create(
        CapacityInterval(
            source=source,
            interval_start=_instant(row["interval"]),
            gpus_present=_decimal(row["capacity_gpu_seconds"]) / 300,
            capacity_gpu_seconds=_decimal(row["capacity_gpu_seconds"]),
        )
        for row in scenario["capacity"]
    )
    UsageInterval.objects.bulk_create(
        UsageInterval(
            task=tasks[row["task"]],
            interval_start=_instant(row["interval"]),
            alloc_gpu_seconds=_decimal(row["alloc_gpu_seconds"]),
        )
        for row in scenario["usage"]
    )
    LatencyInterval.objects.bulk_create(
        LatencyInterval(
            service=services[row["service"]],
            interval_start=_instant(row["interval"]),
            buckets=row["buckets"],
            p99_seconds=latency_p99(row["buckets"]),
        )
        for row in scenario["latency"]
    )
    Preemption.objects.bulk_create(
        Preemption(
            task=tasks[row["task"]],
            pod=row.get("pod", ""),
            at=_instant(row["at"]),
            gpus=_decimal(row["gpus"]),
            seconds_since_start=row["seconds_since_start"],
            lost_gpu_seconds=None
            if row["lost_gpu_seconds"] is None
            else _decimal(row["lost_gpu_seconds"]),
        )
        for row in scenario["preemptions"]
    )
    first = _instant(scenario["capacity"][0]["interval"])
    for hour in range(24):
        IngestWindowFactory(source=source, start=first + dt.timedelta(hours=hour))
    windows_complete(periods=["2026-10"])
    return scenario


def _instant(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text)


def _decimal(value: object) -> Decimal:
    return Decimal(repr(value)) if isinstance(value, float) else Decimal(value)


@pytest.fixture
def classes_close(worked_example, fixtures_dir: Path, monkeypatch) -> PeriodClose:
    """October 2026 closed from the classes worked example (H100, L40S and `default`).

    Metering records no GPU models yet, so the close reads the worked example's tasks and
    services from the metering tables (the same ids) and prices the classes scenario in
    their place: everything after pricing (storing, reports, pages) runs as in production.
    """
    scenario = json.loads((fixtures_dir / "worked-example/classes-scenario.json").read_text())
    # The book in force for October: v1's prices with the example's classes, published.
    book = services.price_book_create_draft(
        effective_from=dt.date(2026, 10, 1), gpu_classes=scenario["price_book"]["gpu_classes"]
    )
    services.price_book_publish(price_book_id=book.pk)
    real_price = services.close._price_metering

    def price_classes(bounds, book) -> PricedScenario:
        built = real_price(bounds, book).built
        classes = BuiltScenario(
            scenario=scenario_from_dict(scenario),
            task_pks=built.task_pks,
            service_pks=built.service_pks,
        )
        return scenario_price(classes)

    monkeypatch.setattr(services.close, "_price_metering", price_classes)
    return services.period_close(period="2026-10", corrections=False).period_close
