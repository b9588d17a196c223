"""How numbers read on every page and in the PDF: the one set of number formatters.

Pure Python (no Django): the template filters in `reports/templatetags/tandem.py`, the
dashboards' chart tables and the health cards all call these, so a number reads the same in a
card, a table, a report page and its PDF. Decimal all the way, never via float; display
rounding is ROUND_HALF_UP, the pricing rule (docs/pricing.md, "Rounding"), applied once.

`empty` is what a missing value reads as: an en dash on the dashboards; the monthly report
says "n/a" in its health cards (a medium's convention, chosen by the caller).
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from zoneinfo import ZoneInfo

from kernel.money import ROUNDING
from kernel.tasks import TASK_KIND_LABELS

DASH = "\u2013"  # an en dash: "no value"
CENT = Decimal("0.01")
SECONDS_PER_HOUR = Decimal(3600)
GPU_HOURS_PLACES = Decimal("0.000001")
KIND_LABELS = TASK_KIND_LABELS


def as_decimal(value: object) -> Decimal | None:
    """None and "" are no value; a float goes through its shortest text, never its binary."""
    if value is None or value == "":
        return None
    return value if isinstance(value, Decimal) else Decimal(str(value))


def gpu_hours(gpu_seconds: Decimal | None) -> Decimal | None:
    """GPU-seconds as GPU-hours to six places (a second is 0.000278 GPU-hours): a quantity."""
    if gpu_seconds is None:
        return None
    return (Decimal(gpu_seconds) / SECONDS_PER_HOUR).quantize(GPU_HOURS_PLACES, ROUNDING)


def number(value: object, places: int = 2, *, empty: str = DASH) -> str:
    """1234.567 -> "1,234.57" (thousands separated, `places` decimals)."""
    exact = as_decimal(value)
    if exact is None:
        return empty
    return f"{exact.quantize(Decimal(1).scaleb(-int(places)), ROUNDING):,}"


def money(value: object, *, empty: str = DASH) -> str:
    """1234.5 -> "1,234.50": to the cent."""
    return number(value, 2, empty=empty)


def percent(ratio: object, places: int = 1, *, empty: str = DASH) -> str:
    """0.4236 -> "42.4 %"."""
    exact = as_decimal(ratio)
    return empty if exact is None else f"{number(exact * 100, places)} %"


def gpu_hours_text(gpu_seconds: object, *, empty: str = DASH) -> str:
    """GPU-seconds shown as GPU-hours, two places (docs/pricing.md: quantities to 2 places)."""
    seconds = as_decimal(gpu_seconds)
    return empty if seconds is None else number(seconds / SECONDS_PER_HOUR, 2)


def milliseconds(value: object, *, empty: str = DASH) -> str:
    """412.37 -> "412 ms"."""
    exact = as_decimal(value)
    return empty if exact is None else f"{number(exact, 0)} ms"


def duration(seconds: object, *, empty: str = DASH) -> str:
    """Seconds as "42 s", "3.5 min" or "2.1 h"."""
    value = as_decimal(seconds)
    if value is None:
        return empty
    if value < 120:
        return f"{number(value, 0)} s"
    if value < 7200:
        return f"{number(value / 60, 1)} min"
    return f"{number(value / SECONDS_PER_HOUR, 1)} h"


def minutes(seconds: object, *, empty: str = DASH) -> str:
    """Seconds as minutes to one place, "0.5 min" for 30 s: the health cards' mean wait,
    one unit whatever its size, so this month's reads against last month's at a glance."""
    value = as_decimal(seconds)
    return empty if value is None else f"{number(value / 60, 1)} min"


def instant(value: dt.datetime | None, *, empty: str = DASH) -> str:
    """An aware datetime as ISO 8601 UTC with a Z, the way PromQL tools take it."""
    if value is None:
        return empty
    return value.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def local(moment: object, zone: ZoneInfo, fmt: str = "%Y-%m-%d %H:%M", *, empty: str = DASH) -> str:
    """An instant as wall-clock time in `zone` (the pool's, named in the page footer)."""
    if not isinstance(moment, dt.datetime):
        return empty
    return moment.astimezone(zone).strftime(fmt)


def kind_label(kind: str | None) -> str:
    """A task kind as the pages name it: "training_batch" -> "Training (batch)"."""
    return KIND_LABELS.get(kind or "", kind or DASH)
