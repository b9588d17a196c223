"""The FOCUS 1.2 CSV of every charge in a closed period (FinOps Open Cost and Usage Spec).

Tandem targets FOCUS 1.2 (`FOCUS_VERSION`): every column that version makes Mandatory is
written (`FOCUS_MANDATORY_COLUMNS`, a test checks the header), plus the Recommended and
Conditional ones below that a GPU pool has something to say in.

Column by column, what the spec asks and what Tandem writes:

- BilledCost, EffectiveCost, ContractedCost: Decimal, never null, in BillingCurrency, plain
  numbers ("-64.35", no exponent, no '+'). One row per statement line and contributing task;
  a line priced in several GPU classes (docs/pricing.md "GPU classes") has one row per class
  and contributing task instead, naming the task (each contribution's parts per class are
  stored, billing migration 0008; a close made before has one row per class naming no task).
  A line's rounded amount is shared among its rows to the currency's minor unit, the cent
  (whole yen in JPY: a row of 311.91 JPY bills no real amount; rows.apportion): first among
  its classes, then each class's share among that class's tasks, so Σ BilledCost by SkuId is
  what each class was billed and Σ BilledCost = Σ statement totals exactly. Nothing is
  prepaid, so EffectiveCost = BilledCost, and the price book is the contract, so
  ContractedCost = BilledCost.
- ListCost: the same charge at list price. The list price is the standard rate R; off-peak
  training is billed at R_off, so its ListCost is GPU-hours * R (rounded to the minor unit) and the
  difference is the off-peak discount. Every other charge: ListCost = BilledCost.
- BillingPeriodStart/End, ChargePeriodStart/End: the month in the pool's time zone as UTC
  instants, 'YYYY-MM-DDTHH:mm:ssZ', end exclusive. A correction's charge period is the month
  it corrects.
- ChargeCategory (allowed values): Usage for the baseline, standard and off-peak lines; Credit
  for SLA credits and preemption compensation; Adjustment for SLA penalties.
- ChargeClass: null, or "Correction" for a line correcting an earlier, already billed month.
- ConsumedQuantity/ConsumedUnit, PricingQuantity/PricingUnit: GPU-hours ("GPU-Hours", a
  compound unit in UnitFormat) for Usage rows that are not corrections; null otherwise, as the
  spec requires for other categories.
- ResourceId/ResourceName/ResourceType: the task (or, for an SLA credit, the service); null
  for a line without contributions. ServiceName "Shared GPU pool", ServiceCategory
  "AI and Machine Learning". SubAccountId/SubAccountName: the team.
- SkuId: the GPU class that priced the charge (`default` in a month without classes);
  SkuPriceId: "v<price book version>/<class>/<line kind>", the price point; SkuMeter
  "GPU allocation"; SkuPriceDetails (KeyValueFormat): x_GpuClass, x_GpuModels (the
  dcgm-exporter model names the book puts in the class; none for `default`, which takes every
  model no class names), x_RatePerGpuHour (the class's book rate, exact, when the line has
  one), x_CapacityGpuHours (the class's capacity in the month, 2 places) and
  x_AverageGpuCount (that capacity over the month's hours: the GPUs it had on average).
  All null on latency lines and corrections, which no class priced.
- ServiceSubcategory (Recommended): "AI Platforms", a child of "AI and Machine Learning".
- Tags: KeyValueFormat, a JSON object of strings with the provider prefix `tandem/`.
- Custom columns carry the `x_` prefix: x_LineKind, x_StatementLineId (explain a charge).

Text cells are escaped against formula injection like every CSV Tandem writes
(render_csv.escape_text); numbers stay numbers.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from billing.models import LineKind, PeriodClose
from billing.pricing.money import hours
from reports.render_csv import Cell, csv_bytes, format_decimal
from reports.rows import (
    FocusCharge,
    Period,
    close_period_bounds,
    corrected_period_bounds,
    focus_charges,
    gpu_hours,
    period_bounds,
)

# Line kind -> FOCUS ChargeCategory. SLA penalties are neither usage nor a credit granted:
# FOCUS files charges "the provider applies that do not fall into other category values"
# under Adjustment.
CHARGE_CATEGORY = {
    LineKind.BASELINE: "Usage",
    LineKind.STANDARD: "Usage",
    LineKind.OFFPEAK: "Usage",
    LineKind.SLA_PENALTY: "Adjustment",
    LineKind.SLA_CREDIT: "Credit",
    LineKind.COMPENSATION: "Credit",
}
TAG_PREFIX = "tandem/"  # FOCUS: provider-defined tags carry a provider prefix
FOCUS_VERSION = "1.2"
# The columns FOCUS 1.2 makes Mandatory: a FOCUS 1.2 dataset must have every one of them.
FOCUS_MANDATORY_COLUMNS = (
    "BilledCost",
    "BillingAccountId",
    "BillingAccountName",
    "BillingCurrency",
    "BillingPeriodEnd",
    "BillingPeriodStart",
    "ChargeCategory",
    "ChargeClass",
    "ChargeDescription",
    "ChargePeriodEnd",
    "ChargePeriodStart",
    "ContractedCost",
    "EffectiveCost",
    "InvoiceIssuerName",
    "ListCost",
    "PricingQuantity",
    "PricingUnit",
    "ProviderName",
    "PublisherName",
    "ServiceCategory",
    "ServiceName",
)


FOCUS_COLUMNS = [
    "BilledCost",
    "EffectiveCost",
    "ListCost",
    "ContractedCost",
    "BillingCurrency",
    "BillingPeriodStart",
    "BillingPeriodEnd",
    "ChargePeriodStart",
    "ChargePeriodEnd",
    "ChargeCategory",
    "ChargeClass",
    "ChargeDescription",
    "ChargeFrequency",
    "ConsumedQuantity",
    "ConsumedUnit",
    "PricingQuantity",
    "PricingUnit",
    "ResourceId",
    "ResourceName",
    "ResourceType",
    "ServiceName",
    "ServiceCategory",
    "ServiceSubcategory",
    "SkuId",
    "SkuPriceId",
    "SkuMeter",
    "SkuPriceDetails",
    "SubAccountId",
    "SubAccountName",
    "BillingAccountId",
    "BillingAccountName",
    "InvoiceIssuerName",
    "ProviderName",
    "PublisherName",
    "Tags",
    "x_LineKind",
    "x_StatementLineId",
]


def pool_name() -> str:
    return "tandem-gpu-pool"


def focus_row(charge: FocusCharge, corrected: Mapping[str, Period]) -> list[Cell]:
    """One charge in FOCUS_COLUMNS order (values typed; render_csv formats and escapes); a
    correction's charge period is the corrected month as `corrected` holds it (as billed)."""
    line, statement, close = charge.line, charge.statement, charge.close
    category = CHARGE_CATEGORY[LineKind(line.kind)]
    is_usage = category == "Usage" and not line.is_correction
    charge_period = close_period_bounds(close)
    if line.is_correction:
        charge_period = corrected.get(line.corrects_period) or period_bounds(
            line.corrects_period, timezone=close.timezone
        )
    quantity = gpu_hours(charge.gpu_seconds) if is_usage else None
    tags = {f"{TAG_PREFIX}team": statement.team.name, f"{TAG_PREFIX}line": line.kind}
    if charge.task_kind:
        tags[f"{TAG_PREFIX}kind"] = charge.task_kind
    values: dict[str, Cell] = {
        "BilledCost": charge.billed_cost,
        "EffectiveCost": charge.billed_cost,  # nothing is prepaid: no amortization
        "ListCost": charge.list_cost,
        "ContractedCost": charge.billed_cost,  # the price book is the contract
        "BillingCurrency": close.currency,
        "BillingPeriodStart": close.period_start,
        "BillingPeriodEnd": close.period_end,
        "ChargePeriodStart": charge_period.start,
        "ChargePeriodEnd": charge_period.end,
        "ChargeCategory": category,
        "ChargeClass": "Correction" if line.is_correction else None,
        "ChargeDescription": line.description,
        "ChargeFrequency": "Usage-Based",
        "ConsumedQuantity": quantity,
        "ConsumedUnit": "GPU-Hours" if is_usage else None,
        "PricingQuantity": quantity,
        "PricingUnit": "GPU-Hours" if is_usage else None,
        "ResourceId": charge.resource_id,
        "ResourceName": charge.resource_id,
        "ResourceType": charge.resource_type,
        "ServiceName": "Shared GPU pool",
        "ServiceCategory": "AI and Machine Learning",
        "ServiceSubcategory": "AI Platforms",
        **_sku_values(charge),
        "SubAccountId": statement.team.name,
        "SubAccountName": statement.team.name,
        "BillingAccountId": pool_name(),
        "BillingAccountName": pool_name(),
        "InvoiceIssuerName": "Platform team",
        "ProviderName": "Tandem",
        "PublisherName": "Tandem",
        "Tags": json.dumps(tags, sort_keys=True, ensure_ascii=False),
        "x_LineKind": line.kind,
        "x_StatementLineId": line.pk,
    }
    return [values[column] for column in FOCUS_COLUMNS]


def _sku_values(charge: FocusCharge) -> dict[str, Cell]:
    """The SKU columns: the GPU class that priced the charge (null when none did)."""
    sku = charge.sku
    if sku is None:
        return dict.fromkeys(("SkuId", "SkuPriceId", "SkuMeter", "SkuPriceDetails"))
    details: dict[str, object] = {"x_GpuClass": sku.gpu_class, "x_GpuModels": list(sku.gpu_models)}
    if sku.rate_per_gpu_hour is not None:
        details["x_RatePerGpuHour"] = format_decimal(sku.rate_per_gpu_hour.normalize())
    if sku.capacity_gpu_seconds is not None:
        details["x_CapacityGpuHours"] = format_decimal(hours(sku.capacity_gpu_seconds))
        details["x_AverageGpuCount"] = format_decimal(sku.average_gpus)
    return {
        "SkuId": sku.gpu_class,
        "SkuPriceId": f"v{sku.price_book_version}/{sku.gpu_class}/{charge.line.kind}",
        "SkuMeter": "GPU allocation",
        "SkuPriceDetails": json.dumps(details, sort_keys=True, ensure_ascii=False),
    }


def focus_csv(close: PeriodClose) -> bytes:
    """The whole FOCUS file of a closed period."""
    corrected = corrected_period_bounds(close)
    return csv_bytes(
        FOCUS_COLUMNS, [focus_row(charge, corrected) for charge in focus_charges(close)]
    )
