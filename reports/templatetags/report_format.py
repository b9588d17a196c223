"""Number formatting for report pages: exact Decimal text, never via float."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

from django import template

from kernel.money import ROUNDING

register = template.Library()
EMPTY = "\u2013"  # an en dash: shown where there is no value


@register.filter
def money(value: Decimal | None) -> str:
    """1234.5 -> "1,234.50"; None -> an en dash."""
    if value is None:
        return EMPTY
    return f"{Decimal(value).quantize(Decimal('0.01'), ROUNDING):,}"


@register.filter
def number(value: Decimal | None, places: int = 2) -> str:
    if value is None:
        return EMPTY
    return f"{Decimal(value).quantize(Decimal(1).scaleb(-int(places)), ROUNDING):,}"


@register.filter
def percent(value: Decimal | None, places: int = 1) -> str:
    if value is None:
        return EMPTY
    return f"{(Decimal(value) * 100).quantize(Decimal(1).scaleb(-int(places)), ROUNDING)} %"


@register.filter
def arrow(direction: str) -> str:
    """The trend arrow of a health card: better ▲, worse ▼, unchanged/unknown ▬/?."""
    return {"better": "▲", "worse": "▼", "unchanged": "▬"}.get(direction, "?")


@register.filter
def gpu_hours(gpu_seconds: Decimal | None) -> str:
    """GPU-seconds shown as GPU-hours to two places."""
    if gpu_seconds is None:
        return EMPTY
    return number(Decimal(gpu_seconds) / 3600, 2)


@register.filter
def instant(value: dt.datetime | None) -> str:
    """An aware datetime as ISO 8601 UTC with a Z, the way PromQL tools take it."""
    if value is None:
        return EMPTY
    return value.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
