"""Argument parsing shared by the metering commands."""

from __future__ import annotations

from datetime import UTC, datetime

from django.core.management.base import CommandError


def instant(text: str, *, option: str) -> datetime:
    """An ISO 8601 instant with a zone ("2026-10-01T00:00:00Z", "…+08:00"), as UTC."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise CommandError(f"{option} must be an ISO 8601 time, got {text!r}") from None
    if moment.tzinfo is None:
        raise CommandError(f"{option} must carry a time zone (Z or +08:00), got {text!r}")
    return moment.astimezone(UTC)


def period(start_text: str, end_text: str) -> tuple[datetime, datetime]:
    start = instant(start_text, option="--start")
    end = instant(end_text, option="--end")
    if end <= start:
        raise CommandError(f"--end {end_text} must be after --start {start_text}")
    return start, end
