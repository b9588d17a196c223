"""Late data for a closed month becomes correction lines in a later close, never an edit."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal

import pytest
from django.db.models import F, Sum
from django.utils import timezone

from billing.models import PeriodClose, PeriodScenario, PlatformLine, StatementLine
from billing.pricing import price, result_to_dict, scenario_from_dict
from billing.selectors import period_scenario_text, period_verification
from billing.services import period_close
from metering.models import CapacityInterval, IngestWindow, UsageInterval
from tests.factories import IngestWindowFactory, windows_complete
from tests.helpers import billing_rows
from tests.pools.boundary import usage_changed_late

pytestmark = pytest.mark.django_db
SEPTEMBER, OCTOBER, NOVEMBER = "2026-09", "2026-10", "2026-11"


def late_data_for_september(boundary_pool, *, hours: tuple[int, int]) -> None:
    """Re-ingested September windows halve vit-pretrain's usage in peak hours (local 10-12)
    and flag themselves as changed after their first write, as metering does."""
    start = dt.datetime(2026, 9, 30, hours[0], tzinfo=dt.UTC)
    end = dt.datetime(2026, 9, 30, hours[1], tzinfo=dt.UTC)
    usage_changed_late(boundary_pool, "vit-pretrain", start, end, F("alloc_gpu_seconds") / 2)


def repriced(period: str, revision: int) -> dict:
    return result_to_dict(
        price(scenario_from_dict(json.loads(period_scenario_text(period, revision))))
    )


def stored_lines(period: str) -> dict[tuple[str, str], Decimal]:
    """What has been billed for `period`: its own lines plus every correction of it."""
    lines = StatementLine.objects.filter(
        statement__period=period, is_correction=False
    ) | StatementLine.objects.filter(corrects_period=period)
    billed: dict[tuple[str, str], Decimal] = {}
    for team, kind, amount in lines.values_list("statement__team__name", "kind", "amount"):
        billed[(team, kind)] = billed.get((team, kind), Decimal(0)) + amount
    return {key: amount for key, amount in billed.items() if amount}


def engine_lines(result: dict) -> dict[tuple[str, str], Decimal]:
    return {
        (team, kind): Decimal(amount)
        for team, figures in result["teams"].items()
        for kind, amount in figures["lines"].items()
        if Decimal(amount)
    }


def test_it_adds_corrections_of_september_to_octobers_statements(boundary_pool):
    period_close(period=SEPTEMBER)
    september_rows = billing_rows()
    original = engine_lines(repriced(SEPTEMBER, 0))
    late_data_for_september(boundary_pool, hours=(2, 4))

    outcome = period_close(period=OCTOBER)

    assert outcome.corrected_periods == (SEPTEMBER,)
    october = outcome.period_close
    corrections = StatementLine.objects.filter(statement__period_close=october, is_correction=True)
    assert set(corrections.values_list("corrects_period", flat=True)) == {SEPTEMBER}
    assert corrections.filter(statement__team__name="vision", kind="standard").get().amount < 0
    corrected = engine_lines(repriced(SEPTEMBER, 1))
    assert corrected != original
    assert stored_lines(SEPTEMBER) == corrected  # original + corrections = re-priced month
    # The September close and its rows are untouched.
    after = billing_rows()
    for model, rows in september_rows.items():
        assert set(rows) <= set(after[model])
    assert PeriodScenario.objects.get(period=SEPTEMBER, revision=1).priced_in == october


def test_it_keeps_the_pool_cost_identity_with_corrections(boundary_pool):
    period_close(period=SEPTEMBER)
    late_data_for_september(boundary_pool, hours=(2, 4))
    CapacityInterval.objects.filter(
        interval_start=dt.datetime(2026, 9, 30, 5, tzinfo=dt.UTC)
    ).update(
        capacity_gpu_seconds=F("capacity_gpu_seconds") + 300, gpus_present=F("gpus_present") + 1
    )

    october = period_close(period=OCTOBER).period_close

    september = PeriodClose.objects.get(period=SEPTEMBER)
    corrected_cost = Decimal(repriced(SEPTEMBER, 1)["pool_cost"])
    assert october.pool_cost_corrections == corrected_cost - september.pool_cost
    # one more GPU for 300 s at 14.374 per GPU-hour: 1.1978..., give or take the rounding
    assert abs(october.pool_cost_corrections - Decimal("1.1978")) < Decimal("0.01")
    teams_total = StatementLine.objects.filter(statement__period_close=october).aggregate(
        total=Sum("amount")
    )["total"]
    platform_total = PlatformLine.objects.filter(period_close=october).aggregate(
        total=Sum("amount")
    )["total"]
    assert teams_total == october.teams_total
    assert teams_total + platform_total == october.pool_cost + october.pool_cost_corrections
    idle = PlatformLine.objects.get(
        period_close=october, name="idle_capacity", corrects_period=SEPTEMBER
    )
    assert idle.amount > 0 and "Correction of September 2026" in idle.description


def test_it_corrects_a_month_twice_from_what_was_billed_so_far(boundary_pool):
    period_close(period=SEPTEMBER)
    late_data_for_september(boundary_pool, hours=(2, 3))
    period_close(period=OCTOBER)
    late_data_for_september(boundary_pool, hours=(3, 4))
    november_interval = dt.datetime(2026, 11, 10, tzinfo=dt.UTC)
    CapacityInterval.objects.create(
        source=boundary_pool.source,
        interval_start=november_interval,
        gpus_present=8,
        capacity_gpu_seconds=2400,
    )
    IngestWindowFactory(source=boundary_pool.source, start=november_interval)
    windows_complete(periods=[NOVEMBER])

    november = period_close(period=NOVEMBER, now=dt.datetime(2026, 12, 1, tzinfo=dt.UTC))

    assert november.corrected_periods == (SEPTEMBER,)
    assert stored_lines(SEPTEMBER) == engine_lines(repriced(SEPTEMBER, 2))
    assert period_verification(SEPTEMBER).ok


def test_it_verifies_a_corrected_month_against_its_latest_revision(boundary_pool):
    period_close(period=SEPTEMBER)
    late_data_for_september(boundary_pool, hours=(2, 4))
    assert not period_verification(SEPTEMBER).ok  # late data not yet carried by any close

    period_close(period=OCTOBER)

    verification = period_verification(SEPTEMBER)
    assert verification.ok, verification.differences
    assert "revision 1, carried by the close of 2026-10" in verification.notes[0]


def test_it_finds_unflagged_changes_only_when_asked_to_recheck(boundary_pool):
    period_close(period=SEPTEMBER)
    UsageInterval.objects.filter(
        task=boundary_pool.tasks["search-api"],
        interval_start=dt.datetime(2026, 9, 30, 1, tzinfo=dt.UTC),
    ).update(alloc_gpu_seconds=F("alloc_gpu_seconds") - 75)

    with_recheck = period_close(period=OCTOBER, recheck=[SEPTEMBER])

    assert with_recheck.corrected_periods == (SEPTEMBER,)
    assert stored_lines(SEPTEMBER) == engine_lines(repriced(SEPTEMBER, 1))


def test_it_adds_no_corrections_when_nothing_changed(boundary_pool):
    period_close(period=SEPTEMBER)
    IngestWindow.objects.update(changed_after_first_write=timezone.now())  # re-ingested, same data

    october = period_close(period=OCTOBER)

    assert october.corrected_periods == ()
    assert not StatementLine.objects.filter(is_correction=True).exists()
    assert PeriodClose.objects.get(period=OCTOBER).pool_cost_corrections == 0
