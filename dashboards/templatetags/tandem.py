"""How numbers read on the pages: amounts to the cent, GPU-hours to two places, waits in minutes.

The same functions format the tables behind the charts (dashboards.views imports them), so a
number reads the same in a card, a table and a CSV.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

from django import template
from django.utils.html import format_html

from dashboards.filters import pool_zone
from kernel.money import ROUNDING
from kernel.tasks import TASK_KIND_LABELS as KIND_LABELS

register = template.Library()

CENT = Decimal("0.01")
DASH = "\u2013"  # an en dash: "no value"


def _decimal(value: object) -> Decimal | None:
    if value is None or value == "":
        return None
    return value if isinstance(value, Decimal) else Decimal(str(value))


@register.filter
def money(value: object) -> str:
    """1234.5 -> "1,234.50" (ROUND_HALF_UP, the pricing rule)."""
    number = _decimal(value)
    if number is None:
        return DASH
    return f"{number.quantize(CENT, ROUNDING):,}"


@register.filter
def number(value: object, places: int = 2) -> str:
    number = _decimal(value)
    if number is None:
        return DASH
    return f"{number.quantize(Decimal(1).scaleb(-int(places)), ROUNDING):,}"


@register.filter
def gpu_hours(gpu_seconds: object) -> str:
    """GPU-seconds shown as GPU-hours, two places (docs/pricing.md: quantities to 2 places)."""
    seconds = _decimal(gpu_seconds)
    return DASH if seconds is None else number(seconds / 3600, 2)


@register.filter
def percent(ratio: object, places: int = 1) -> str:
    value = _decimal(ratio)
    return DASH if value is None else f"{number(value * 100, places)} %"


@register.filter
def milliseconds(value: object) -> str:
    ms = _decimal(value)
    return DASH if ms is None else f"{number(ms, 0)} ms"


@register.filter
def duration(seconds: object) -> str:
    """Seconds as "42 s", "3.5 min" or "2.1 h"."""
    value = _decimal(seconds)
    if value is None:
        return DASH
    if value < 120:
        return f"{number(value, 0)} s"
    if value < 7200:
        return f"{number(value / 60, 1)} min"
    return f"{number(value / 3600, 1)} h"


@register.filter
def kind_label(kind: str | None) -> str:
    return KIND_LABELS.get(kind or "", kind or DASH)


@register.filter
def local(moment: dt.datetime | None, fmt: str = "%Y-%m-%d %H:%M") -> str:
    """An instant as wall-clock time in the pool's zone (the zone is named in the page footer)."""
    if not isinstance(moment, dt.datetime):
        return DASH
    return moment.astimezone(pool_zone()).strftime(fmt)


ARROWS = {"up": "▲", "down": "▼", "flat": "▶"}


@register.simple_tag
def trend(before: object, after: object, direction: str) -> str:
    """An arrow for how a number moved, coloured by whether that is better or worse.

    The glyph follows the number (up or down); the colour follows `direction`, the health
    module's reading (for latency and waits, down is better).
    """
    first, second = _decimal(before), _decimal(after)
    if first is None or second is None:
        return ""
    if direction == "unchanged" or second == first:
        glyph, label = ARROWS["flat"], "unchanged"
    else:
        glyph = ARROWS["up"] if second > first else ARROWS["down"]
        label = direction
    return format_html('<span class="arrow {}" title="{}">{}</span>', direction, label, glyph)
