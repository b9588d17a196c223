"""A period: a calendar month "YYYY-MM" on the pool's clock, and the UTC instants bounding it.

docs/pricing.md "Periods": a statement covers one calendar month in the pool's time zone
(the price book's `timezone`, `TANDEM_TIMEZONE` for the pool), as the half-open UTC range
`[first local midnight of the month, first local midnight of the next)`. Callers pass the zone
by name; this module reads no settings.
"""

from __future__ import annotations

import datetime as dt
import re
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

# Anchored for the database's check constraints (PostgreSQL `~`); Python code matches with
# `fullmatch`, so a trailing newline is refused here as it is there.
PERIOD_REGEX = r"^[0-9]{4}-(0[1-9]|1[0-2])$"
_PERIOD = re.compile(PERIOD_REGEX)
# What a URL routes to a period's page: anything shaped like one, so that "2026-13" reaches
# the view and is answered with the error naming it rather than a bare 404.
PERIOD_URL_PATTERN = r"[0-9]{4}-[0-9]{2}"
# The years a period may name: its bounds, the months either side (the report compares with
# the previous one) and their UTC instants in any zone must fit Python's datetime (years 1 to
# 9999); metering began long after 1970.
PERIOD_FIRST_YEAR, PERIOD_LAST_YEAR = 1970, 9998


class PeriodError(ValueError):
    """Not a period: the message names the value and says what a period looks like."""


def time_zone(name: str) -> ZoneInfo:
    """The IANA time zone `name`; ValueError when it is unknown."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"unknown time zone {name!r}") from None


def is_period_text(text: object) -> bool:
    """True when `text` has the shape YYYY-MM (month 01 to 12), whatever the year."""
    return isinstance(text, str) and _PERIOD.fullmatch(text) is not None


def period_year_error(period: str, year: int) -> str | None:
    """Why the period's year is out of range, or None when it is in range."""
    if PERIOD_FIRST_YEAR <= year <= PERIOD_LAST_YEAR:
        return None
    return f"period {period!r}: the year must be between {PERIOD_FIRST_YEAR} and {PERIOD_LAST_YEAR}"


def parse_period(period: object) -> tuple[int, int]:
    """(year, month) of `period`; PeriodError naming the value when it is no period."""
    if not is_period_text(period):
        raise PeriodError(f"period must be YYYY-MM (e.g. 2026-10), got {period!r}")
    year, month = int(period[:4]), int(period[5:])
    if error := period_year_error(period, year):
        raise PeriodError(error)
    return year, month


def month_utc_range(year: int, month: int, tz: dt.tzinfo) -> tuple[dt.datetime, dt.datetime]:
    """The month's first local midnight and the next month's, in `tz`, as UTC instants."""
    following = (year + 1, 1) if month == 12 else (year, month + 1)
    start = dt.datetime(year, month, 1, tzinfo=tz).astimezone(dt.UTC)
    end = dt.datetime(*following, 1, tzinfo=tz).astimezone(dt.UTC)
    return start, end


def period_utc_range(period: str, timezone: str) -> tuple[dt.datetime, dt.datetime]:
    """`[start, end)` in UTC of `period` on the clock of `timezone`; PeriodError if no period."""
    year, month = parse_period(period)
    return month_utc_range(year, month, time_zone(timezone))


def period_of_day(day: dt.date) -> str:
    """The period ("YYYY-MM") of a local day (or of a datetime already on the pool's clock)."""
    return f"{day:%Y-%m}"


def period_of(moment: dt.datetime, timezone: str) -> str:
    """The period ("YYYY-MM") that holds the aware instant `moment` on the clock of `timezone`."""
    return period_of_day(moment.astimezone(time_zone(timezone)))


def previous_period(period: str) -> str:
    """The month before `period` ("2026-01" -> "2025-12"); PeriodError if no period."""
    year, month = parse_period(period)
    year, month = (year - 1, 12) if month == 1 else (year, month - 1)
    return f"{year:04d}-{month:02d}"


def next_period(period: str) -> str:
    """The month after `period` ("2026-12" -> "2027-01"); PeriodError if no period."""
    year, month = parse_period(period)
    year, month = (year + 1, 1) if month == 12 else (year, month + 1)
    return f"{year:04d}-{month:02d}"


def first_day(period: str) -> dt.date:
    """The period's first local day; PeriodError if no period."""
    return dt.date(*parse_period(period), 1)
