"""A month billed in a currency without cents (JPY, KRW: ISO 4217 minor unit 0).

The engine rounds every line to the currency's minor unit (docs/pricing.md "Rounding"), so a
JPY statement holds whole yen. Every figure derived from it must too: the FOCUS file's rows,
which share a line among its tasks, and the quota export's list estimate.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest

from billing import services
from billing.models import PeriodClose, Statement
from billing.selectors import quota_status
from reports.render_focus import focus_csv
from reports.rows import apportion, focus_charges
from tests.factories import (
    IngestWindowFactory,
    SourceFactory,
    TaskFactory,
    TeamFactory,
    UsageIntervalFactory,
)

pytestmark = pytest.mark.django_db
UTC = dt.UTC
YEN = Decimal(1)

# Version 1's example book at yen prices (about 20 JPY to the CNY).
JPY_PRICES = {
    "currency": "JPY",
    "depreciation_per_gpu_hour": Decimal("230"),
    "facility_per_gpu_hour": Decimal("46"),
    "electricity_per_kwh": Decimal("17"),
    "sla_penalty_per_interval": Decimal("400"),
}


def _jpy_book_in_force_from(day: dt.date) -> None:
    book = services.price_book_create_draft(effective_from=day, **JPY_PRICES)
    services.price_book_publish(price_book_id=book.pk)


@pytest.fixture
def jpy_close(worked_example) -> PeriodClose:
    """The worked example's October 2026, priced with a JPY book."""
    _jpy_book_in_force_from(dt.date(2026, 10, 1))
    return services.period_close(period="2026-10", corrections=False).period_close


def _whole(amount: Decimal) -> bool:
    return amount == amount.to_integral_value()


def test_it_bills_whole_yen_on_every_statement_line(jpy_close) -> None:
    # The premise: the engine rounds each line to the yen, so the statements hold whole yen.
    assert jpy_close.currency == "JPY"
    for statement in Statement.objects.filter(period_close=jpy_close):
        assert _whole(statement.total), statement.team.name
        for line in statement.lines.all():
            assert _whole(line.amount), (statement.team.name, line.kind, line.amount)


def test_it_shares_a_line_among_its_tasks_in_whole_yen_in_the_focus_file(jpy_close) -> None:
    charges = focus_charges(jpy_close)
    shared = [c for c in charges if c.line.tasks.count() > 1]
    assert shared, "the worked example has lines with several tasks (nlp's two)"
    fractional = [
        (c.statement.team.name, c.line.kind, c.resource_id, c.billed_cost)
        for c in charges
        if not _whole(c.billed_cost) or not _whole(c.list_cost)
    ]
    assert fractional == []
    total = sum((s.total for s in Statement.objects.filter(period_close=jpy_close)), Decimal(0))
    assert sum((c.billed_cost for c in charges), Decimal(0)) == total
    for statement in Statement.objects.filter(period_close=jpy_close):
        rows = [c for c in charges if c.statement.pk == statement.pk]
        for line in statement.lines.all():
            on_line = [c.billed_cost for c in rows if c.line.pk == line.pk]
            assert sum(on_line, Decimal(0)) == line.amount, (statement.team.name, line.kind)
    assert b"BilledCost" in focus_csv(jpy_close)


def test_it_apportions_to_the_quantum_it_is_given() -> None:
    assert apportion(Decimal("100"), [Decimal(1)] * 3, quantum=YEN) == [
        Decimal(34),
        Decimal(33),
        Decimal(33),
    ]
    assert apportion(Decimal("-7"), [Decimal(-1), Decimal(-1)], quantum=YEN) == [
        Decimal(-4),
        Decimal(-3),
    ]
    with pytest.raises(ValueError, match="whole number"):
        apportion(Decimal("1.50"), [Decimal(1)], quantum=YEN)


def test_it_gives_the_quota_list_estimate_in_whole_yen(default_book) -> None:
    _jpy_book_in_force_from(dt.date(2026, 10, 1))
    source = SourceFactory(name="default")
    team = TeamFactory(name="tiny")
    task = TaskFactory(source=source, team=team, kind="inference", external_id="tiny-infer")
    # 1 GPU-hour and a bit at R = 230 + 46 + 17 * 0.70 = 287.9 JPY per GPU-hour:
    # 3,700 s * 287.9 / 3600 = 295.897… JPY, which is 296 yen (never 295.90).
    start = dt.datetime(2026, 10, 1, 2, tzinfo=UTC)
    for step, seconds in enumerate((300,) * 12 + (100,)):
        UsageIntervalFactory(
            task=task,
            interval_start=start + dt.timedelta(seconds=300 * step),
            alloc_gpu_seconds=seconds,
        )
    IngestWindowFactory(source=source, start=start, end=start + dt.timedelta(hours=2))

    status = quota_status(team, start + dt.timedelta(hours=3))

    assert status.currency == "JPY"
    assert status.list_price_estimate == Decimal("296")
