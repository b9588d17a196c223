"""Instants as the engine sees them: intervals are whole Unix seconds (UTC) of their start."""

from __future__ import annotations

import datetime as dt
import functools
from zoneinfo import ZoneInfo

from kernel.period import time_zone as zone

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_ONE_SECOND = dt.timedelta(seconds=1)


def parse_instant(text: object) -> dt.datetime:
    """An ISO 8601 time with an explicit UTC offset (`Z`), as an aware UTC datetime.

    Raises ValueError with a short reason when the text is not such a time.
    """
    if not isinstance(text, str):
        raise ValueError(f"expected an ISO 8601 time string, got {text!r}")
    try:
        moment = dt.datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"unparsable time {text!r}") from None
    if moment.tzinfo is None or "T" not in text:
        raise ValueError(f"time {text!r} must be ISO 8601 UTC with 'Z'")
    return moment.astimezone(dt.UTC)


def epoch_seconds(moment: dt.datetime) -> int:
    """Whole Unix seconds of an aware datetime, rounded down (floor)."""
    return (moment - _EPOCH) // _ONE_SECOND


@functools.lru_cache(maxsize=100_000)
def format_interval(epoch: int) -> str:
    """An interval start as docs/pricing.md writes it: `2026-10-01T01:00:00Z`.

    Cached: a month names the same few thousand intervals in every capacity, latency and
    usage record."""
    return dt.datetime.fromtimestamp(epoch, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def format_instant(moment: dt.datetime) -> str:
    """An instant in UTC with `Z`, with microseconds only when it has some."""
    moment = moment.astimezone(dt.UTC)
    if moment.microsecond:
        return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def local_hour(epoch: int, tz: ZoneInfo) -> int:
    """The hour (0-23) on the pool's wall clock at the instant `epoch`."""
    return dt.datetime.fromtimestamp(epoch, tz).hour


__all__ = [
    "epoch_seconds",
    "format_instant",
    "format_interval",
    "local_hour",
    "parse_instant",
    "zone",
]
