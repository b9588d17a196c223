"""The filters every page reads from its URL: range, team, kind.

They live in the query string so a view can be shared by pasting its address. A range is a
pair of local dates in the pool's time zone (`start`, `end`, both inclusive) or a `month`
(YYYY-MM); it becomes a half-open `[start, end)` of aware UTC datetimes for the selectors.
Bad input never raises: it is reported by field name and the default is used instead, so a
mistyped address still shows a page (answered with status 400).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field
from zoneinfo import ZoneInfo

from django.conf import settings
from django.db.models import Max, QuerySet

from kernel.numbers import whole_number
from kernel.period import is_period_text, time_zone
from kernel.tasks import TASK_KINDS
from metering.models import Team, UsageInterval

# Longer ranges are refused: they would make a page aggregate years of intervals.
LONGEST_RANGE_DAYS = 366
# Dates outside these years are typing mistakes (and 0001-01-01 in UTC+8 is no datetime at all).
EARLIEST_YEAR, LATEST_YEAR = 1970, 2199


def pool_zone() -> ZoneInfo:
    return time_zone(settings.TANDEM_TIMEZONE)


def month_bounds(month: dt.date) -> tuple[dt.date, dt.date]:
    """First and last local day of the month containing `month`."""
    first = month.replace(day=1)
    following = (first + dt.timedelta(days=32)).replace(day=1)
    return first, following - dt.timedelta(days=1)


def previous_month(month: dt.date) -> dt.date:
    return (month.replace(day=1) - dt.timedelta(days=1)).replace(day=1)


def local_midnight_utc(day: dt.date) -> dt.datetime:
    return dt.datetime.combine(day, dt.time(), pool_zone()).astimezone(dt.UTC)


def latest_data_day() -> dt.date:
    """The local day of the newest usage interval, or today when nothing is metered yet.

    Pages default to the month holding the newest data rather than the calendar month, so a
    pool whose current month has just begun (or a demo of last month) opens on real numbers.
    """
    newest = UsageInterval.objects.aggregate(newest=Max("interval_start"))["newest"]
    moment = newest or dt.datetime.now(dt.UTC)
    return moment.astimezone(pool_zone()).date()


@dataclass(frozen=True)
class DateRange:
    first_day: dt.date
    last_day: dt.date  # inclusive

    @property
    def start(self) -> dt.datetime:
        return local_midnight_utc(self.first_day)

    @property
    def end(self) -> dt.datetime:
        return local_midnight_utc(self.last_day + dt.timedelta(days=1))

    @property
    def days(self) -> int:
        return (self.last_day - self.first_day).days + 1

    @property
    def is_whole_month(self) -> bool:
        return (self.first_day, self.last_day) == month_bounds(self.first_day)

    @property
    def label(self) -> str:
        if self.is_whole_month:
            return f"{self.first_day:%B %Y}"
        return f"{self.first_day:%d %b %Y} \u2013 {self.last_day:%d %b %Y}"

    @property
    def short_label(self) -> str:
        if self.is_whole_month:
            return f"{self.first_day:%b %Y}"
        return f"{self.first_day:%d %b} \u2013 {self.last_day:%d %b}"

    @classmethod
    def month_of(cls, day: dt.date) -> DateRange:
        return cls(*month_bounds(day))


@dataclass
class Filters:
    range: DateRange
    team: Team | None = None
    kind: str | None = None
    errors: list[str] = field(default_factory=list)

    def query(self, **changes: str | None) -> str:
        """This view's query string, with `changes` applied (None removes a key)."""
        values = {
            "start": self.range.first_day.isoformat(),
            "end": self.range.last_day.isoformat(),
            "team": str(self.team.pk) if self.team else None,
            "kind": self.kind,
        }
        values.update(changes)
        return "&".join(f"{key}={value}" for key, value in values.items() if value)


def _parse_day(raw: str, name: str, errors: list[str]) -> dt.date | None:
    try:
        day = dt.date.fromisoformat(raw)
    except ValueError:
        errors.append(f"Filter '{name}': {raw!r} is not a date (YYYY-MM-DD).")
        return None
    if not EARLIEST_YEAR <= day.year <= LATEST_YEAR:
        errors.append(f"Filter '{name}': {raw} is outside {EARLIEST_YEAR}-{LATEST_YEAR}.")
        return None
    return day


def parse_range(params: Mapping[str, str], errors: list[str]) -> DateRange:
    default = DateRange.month_of(latest_data_day())
    if month := params.get("month"):
        if not is_period_text(month):
            errors.append(f"Filter 'month': {month!r} is not a month (YYYY-MM).")
            return default
        first = _parse_day(f"{month}-01", "month", errors)
        return DateRange.month_of(first) if first else default
    raw_start, raw_end = params.get("start"), params.get("end")
    if not raw_start and not raw_end:
        return default
    first = _parse_day(raw_start, "start", errors) if raw_start else default.first_day
    last = _parse_day(raw_end, "end", errors) if raw_end else None
    if first is None:
        return default
    if last is None:
        last = month_bounds(first)[1] if not raw_end else first
    if last < first:
        errors.append(f"Filter 'end': {last} is before 'start' {first}.")
        return default
    if (last - first).days >= LONGEST_RANGE_DAYS:
        errors.append(f"Filter 'end': a range is at most {LONGEST_RANGE_DAYS} days long.")
        return default
    return DateRange(first, last)


def parse_filters(params: Mapping[str, str], *, teams: QuerySet[Team]) -> Filters:
    """Range, team and kind from a query string; `teams` are those the user may see."""
    errors: list[str] = []
    date_range = parse_range(params, errors)
    team = None
    if raw_team := params.get("team"):
        team_id = whole_number(raw_team)
        team = teams.filter(pk=team_id).first() if team_id is not None else None
        if team is None:
            # One message for "no such team" and "not yours": nothing to probe.
            errors.append(f"Filter 'team': no team {raw_team!r} that you can see.")
    kind = params.get("kind") or None
    if kind is not None and kind not in TASK_KINDS:
        errors.append(f"Filter 'kind': {kind!r} is not one of {', '.join(TASK_KINDS)}.")
        kind = None
    return Filters(range=date_range, team=team, kind=kind, errors=errors)
