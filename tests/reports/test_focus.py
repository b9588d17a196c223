"""The FOCUS 1.x file: spec columns, types and allowed values; BilledCost adds up."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import re
from decimal import Decimal

from billing.models import Statement
from billing.services import period_close
from metering.models import CapacityInterval, UsageInterval
from reports import services
from reports.models import ReportFile
from reports.rows import report_page
from tests.factories import windows_complete
from tests.pools import reports as pools

DECIMAL = re.compile(r"^-?[0-9]+(\.[0-9]+)?$")  # FOCUS NumericFormat: no '+', exponent, comma
INSTANT = re.compile(r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z$")
MANDATORY = [
    "BilledCost", "EffectiveCost", "ListCost", "ContractedCost", "BillingCurrency",
    "BillingPeriodStart", "BillingPeriodEnd", "ChargePeriodStart", "ChargePeriodEnd",
    "ChargeCategory", "ChargeClass", "ChargeDescription", "ConsumedQuantity", "ConsumedUnit",
    "PricingQuantity", "PricingUnit", "ResourceId", "ServiceName", "ServiceCategory",
    "SubAccountId", "BillingAccountId", "InvoiceIssuerName", "ProviderName", "PublisherName",
    "Tags",
]  # fmt: skip


def focus_rows(report_pool) -> tuple[list[str], list[dict[str, str]]]:
    run = services.report_run_create(period=pools.PERIOD, parameters={"pdf": False}, enqueue=False)
    run = services.report_run_execute(run_id=run.pk)
    text = run.files.get(kind=ReportFile.Kind.FOCUS_CSV).path.read_text(encoding="utf-8")
    reader = csv.DictReader(io.StringIO(text))
    return list(reader.fieldnames or []), list(reader)


def test_it_sums_billed_cost_to_the_statements_exactly(report_pool) -> None:
    _, rows = focus_rows(report_pool)
    statements = Statement.objects.filter(period=pools.PERIOD)
    assert sum(Decimal(row["BilledCost"]) for row in rows) == sum(s.total for s in statements)
    for statement in statements:
        team = "'" + statement.team.name if statement.team.name[0] == "=" else statement.team.name
        billed = sum(Decimal(r["BilledCost"]) for r in rows if r["SubAccountId"] == team)
        assert billed == statement.total, statement.team.name


def test_it_has_the_spec_columns_with_their_types(report_pool) -> None:
    columns, rows = focus_rows(report_pool)
    assert set(MANDATORY) <= set(columns)
    assert rows
    for row in rows:
        for column in ("BilledCost", "EffectiveCost", "ListCost", "ContractedCost"):
            assert DECIMAL.match(row[column]), (column, row[column])
        for column in (
            "BillingPeriodStart",
            "BillingPeriodEnd",
            "ChargePeriodStart",
            "ChargePeriodEnd",
        ):
            assert INSTANT.match(row[column]), (column, row[column])
        assert row["BillingPeriodStart"] == "2026-09-30T16:00:00Z"
        assert row["BillingPeriodEnd"] == "2026-10-31T16:00:00Z"
        assert row["BillingCurrency"] == "CNY"
        assert row["ChargeCategory"] in {"Usage", "Purchase", "Tax", "Credit", "Adjustment"}
        assert row["ChargeClass"] in {"", "Correction"}
        tags = json.loads(row["Tags"])
        assert isinstance(tags, dict)
        assert all(isinstance(v, str | int | float | bool) or v is None for v in tags.values())
        assert all(key.startswith("tandem/") for key in tags)


def test_it_gives_usage_a_quantity_in_gpu_hours_and_credits_none(report_pool) -> None:
    _, rows = focus_rows(report_pool)
    categories = {row["ChargeCategory"] for row in rows}
    assert {"Usage", "Credit", "Adjustment"} <= categories
    for row in rows:
        if row["ChargeCategory"] == "Usage" and row["ChargeClass"] != "Correction":
            assert Decimal(row["ConsumedQuantity"]) > 0
            assert row["ConsumedUnit"] == row["PricingUnit"] == "GPU-Hours"
            assert row["ConsumedQuantity"] == row["PricingQuantity"]
        else:
            assert row["ConsumedQuantity"] == row["ConsumedUnit"] == ""
        if row["ChargeCategory"] == "Credit":
            assert Decimal(row["BilledCost"]) <= 0
            assert row["ListCost"] == row["BilledCost"]


def test_it_shows_the_offpeak_discount_as_list_cost_above_billed_cost(report_pool) -> None:
    _, rows = focus_rows(report_pool)
    offpeak = [row for row in rows if row["x_LineKind"] == "offpeak"]
    assert offpeak
    for row in offpeak:
        assert Decimal(row["ListCost"]) >= Decimal(row["BilledCost"])
    assert sum(Decimal(r["ListCost"]) for r in offpeak) > sum(
        Decimal(r["BilledCost"]) for r in offpeak
    )


def test_it_escapes_formula_cells_in_focus_too(report_pool) -> None:
    _, rows = focus_rows(report_pool)
    evil = [row for row in rows if row["SubAccountId"] == "'" + pools.EVIL_TEAM]
    assert evil
    assert {row["ResourceId"] for row in evil} <= {"'" + pools.EVIL_TASK, "'" + pools.DASH_TASK, ""}
    assert json.loads(evil[0]["Tags"])["tandem/team"] == pools.EVIL_TEAM  # inside JSON: inert
    for row in rows:
        for value in row.values():
            assert not value or value[0] not in "=+@\t\r" or value.startswith("'")


def test_it_marks_corrections_of_an_earlier_month(report_pool) -> None:
    """Late October usage, billed when November closes: ChargeClass Correction, October's
    charge period, November's billing period."""
    late = pools.OCTOBER_START + dt.timedelta(days=3)
    CapacityInterval.objects.create(
        source=report_pool.source,
        interval_start=late,
        gpus_present=Decimal(pools.GPUS),
        capacity_gpu_seconds=Decimal(pools.GPUS * 300),
    )
    UsageInterval.objects.create(
        task=report_pool.tasks["vit-pretrain"], interval_start=late, alloc_gpu_seconds=Decimal(900)
    )
    november = [pools.NOVEMBER_START + i * pools.STEP for i in range(12)]
    pools.add_intervals(report_pool, november)
    windows_complete(periods=["2026-11"])
    period_close(period="2026-11", recheck={"2026-10"}, now=dt.datetime(2026, 12, 2, tzinfo=dt.UTC))

    run = services.report_run_create(period="2026-11", parameters={"pdf": False}, enqueue=False)
    run = services.report_run_execute(run_id=run.pk)
    text = run.files.get(kind=ReportFile.Kind.FOCUS_CSV).path.read_text(encoding="utf-8")
    rows = list(csv.DictReader(io.StringIO(text)))

    corrections = [row for row in rows if row["ChargeClass"] == "Correction"]
    assert corrections
    for row in corrections:
        assert (row["ChargePeriodStart"], row["ChargePeriodEnd"]) == (
            "2026-09-30T16:00:00Z",
            "2026-10-31T16:00:00Z",
        )
        assert row["BillingPeriodStart"] == "2026-10-31T16:00:00Z"
        assert row["ConsumedQuantity"] == ""
    regular = [row for row in rows if row["ChargeClass"] == ""]
    assert all(row["ChargePeriodStart"] == "2026-10-31T16:00:00Z" for row in regular)
    totals = Statement.objects.filter(period="2026-11")
    assert sum(Decimal(row["BilledCost"]) for row in rows) == sum(s.total for s in totals)
    assert report_page("2026-11").reconciles  # the page adds up with corrections too
