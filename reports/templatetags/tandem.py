"""The one template library of Tandem's pages (`{% load tandem %}`): dashboards and reports.

The number filters are `reports.formatting`'s functions, so a number reads the same in a
card, a chart's table, the monthly report and its PDF.
"""

from __future__ import annotations

import datetime as dt

from django import template
from django.utils.html import format_html

from reports import formatting
from reports.selectors import pool_timezone

register = template.Library()


@register.filter
def money(value: object) -> str:
    return formatting.money(value)


@register.filter
def number(value: object, places: int = 2) -> str:
    return formatting.number(value, places)


@register.filter
def percent(ratio: object, places: int = 1) -> str:
    return formatting.percent(ratio, places)


@register.filter
def gpu_hours(gpu_seconds: object) -> str:
    return formatting.gpu_hours_text(gpu_seconds)


@register.filter
def milliseconds(value: object) -> str:
    return formatting.milliseconds(value)


@register.filter
def duration(seconds: object) -> str:
    return formatting.duration(seconds)


@register.filter
def instant(value: dt.datetime | None) -> str:
    return formatting.instant(value)


@register.filter
def local(moment: dt.datetime | None, fmt: str = "%Y-%m-%d %H:%M") -> str:
    return formatting.local(moment, pool_timezone(), fmt)


@register.filter
def kind_label(kind: str | None) -> str:
    return formatting.kind_label(kind)


@register.filter
def arrow(direction: str) -> str:
    """The monthly report's trend arrow: better ▲, worse ▼, unchanged ▬, unknown ?."""
    return {"better": "▲", "worse": "▼", "unchanged": "▬"}.get(direction, "?")


ARROWS = {"up": "▲", "down": "▼", "flat": "▶"}


@register.simple_tag
def trend(before: object, after: object, direction: str) -> str:
    """The dashboards' arrow: the glyph follows the number (up or down), the colour follows
    `direction`, the health module's reading (for latency and waits, down is better)."""
    first, second = formatting.as_decimal(before), formatting.as_decimal(after)
    if first is None or second is None:
        return ""
    if direction == "unchanged" or second == first:
        glyph, label = ARROWS["flat"], "unchanged"
    else:
        glyph = ARROWS["up"] if second > first else ARROWS["down"]
        label = direction
    return format_html('<span class="arrow {}" title="{}">{}</span>', direction, label, glyph)
