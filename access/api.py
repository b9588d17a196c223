"""The API plumbing every JSON endpoint shares: who may be named, which dates, which month.

Visibility-aware team fields and filters (a team lead names only their own teams; another
team answers 400 like an unknown one), the pool-zone date-time and range input, the month
filter, `validated_query`, the amount fields and pagination. Used by `reports.apis` and
`billing.apis`; access sits above metering (teams) and below both.
"""

from __future__ import annotations

import datetime as dt
import re
from decimal import Decimal

import django_filters
from django.conf import settings
from django.db.models import Q, QuerySet
from django.utils.dateparse import parse_date, parse_datetime
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers
from rest_framework.pagination import PageNumberPagination
from rest_framework.request import Request

from access.selectors import sees_every_team, visible_teams
from kernel.money import ROUNDING
from kernel.numbers import whole_number
from kernel.period import PeriodError, period_utc_range, time_zone
from metering.models import Team

# Longer ranges are refused: the API would aggregate years of intervals per request.
MAX_RANGE_DAYS = 400
# A '+' in an unencoded query string arrives as a space: "…T00:00:00 08:00" meant "+08:00".
SPACE_FOR_PLUS = re.compile(r"(\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?) (\d{2}:?\d{2})$")
DATE_ONLY = re.compile(r"^\d{4}-\d{2}-\d{2}$")


def pool_zone() -> dt.tzinfo:
    return time_zone(settings.TANDEM_TIMEZONE)


# --- Fields -----------------------------------------------------------------------------


@extend_schema_field(OpenApiTypes.STR)
class PoolDateTimeField(serializers.Field):
    """A local date (YYYY-MM-DD, the pool's time zone) or an ISO 8601 date-time.

    A date-time without zone is read in the pool's zone. With `date_is_end`, a bare date means
    the end of that local day, so `start=2026-10-01&end=2026-10-31` covers all of October.
    """

    default_error_messages = {
        "invalid": "Not a date (YYYY-MM-DD) or an ISO 8601 date-time: {value!r}.",
        "range": "Must be between the years 1970 and 9998.",
    }

    def __init__(self, *, date_is_end: bool = False, **kwargs) -> None:
        self.date_is_end = date_is_end
        super().__init__(**kwargs)

    def to_internal_value(self, data: object) -> dt.datetime:
        text = SPACE_FOR_PLUS.sub(r"\1+\2", str(data).strip())
        try:
            # A bare date first: Python's fromisoformat (inside parse_datetime) takes it too.
            moment = None if DATE_ONLY.match(text) else parse_datetime(text)
            if moment is None:
                day = parse_date(text)
                if day is None:
                    self.fail("invalid", value=str(data)[:40])
                if not 1970 <= day.year <= 9998:
                    self.fail("range")
                if self.date_is_end:
                    day += dt.timedelta(days=1)
                moment = dt.datetime.combine(day, dt.time(), pool_zone())
            elif moment.tzinfo is None:
                moment = moment.replace(tzinfo=pool_zone())
            if not 1970 <= moment.year <= 9998:
                self.fail("range")
            return moment.astimezone(dt.UTC)
        except (ValueError, OverflowError):
            self.fail("invalid", value=str(data)[:40])

    def to_representation(self, value: dt.datetime) -> str:
        return serializers.DateTimeField().to_representation(value)


def check_range(start: dt.datetime, end: dt.datetime, *, end_name: str = "end") -> None:
    """`end` after `start`, at most MAX_RANGE_DAYS later; the error names `end_name`."""
    if end <= start:
        raise serializers.ValidationError({end_name: "Must be after the start of the range."})
    if end - start > dt.timedelta(days=MAX_RANGE_DAYS):
        raise serializers.ValidationError(
            {end_name: f"A range is at most {MAX_RANGE_DAYS} days long."}
        )


class RangeInput(serializers.Serializer):
    start = PoolDateTimeField(help_text="Local date or ISO 8601 date-time (inclusive).")
    end = PoolDateTimeField(
        date_is_end=True,
        help_text="Local date (inclusive: its whole day) or ISO 8601 date-time (exclusive).",
    )

    def validate(self, attrs: dict) -> dict:
        check_range(attrs["start"], attrs["end"])
        return attrs


def visible_team(user: object, raw: str) -> Team | None:
    """A team by id or exact name among those `user` may see; None if there is none."""
    raw = raw.strip()
    # PostgreSQL text cannot hold NUL: such a value names no team, and must not reach SQL.
    if not raw or "\x00" in raw:
        return None
    lookup = Q(name=raw)
    if (team_id := whole_number(raw)) is not None:
        lookup |= Q(pk=team_id)
    return visible_teams(user).filter(lookup).order_by("pk").first()


UNKNOWN_TEAM = "No team {value!r} that you can see."


@extend_schema_field(OpenApiTypes.STR)
class VisibleTeamField(serializers.Field):
    """A team by id or exact name, among the teams the caller may see."""

    default_error_messages = {"unknown": UNKNOWN_TEAM}

    def to_internal_value(self, data: object) -> Team:
        team = visible_team(self.context["request"].user, str(data))
        if team is None:
            # The same answer for "no such team" and "not yours": nothing to probe.
            self.fail("unknown", value=str(data)[:100])
        return team

    def to_representation(self, value: Team) -> str:
        return value.name


class VisibleTeamFilter(django_filters.CharFilter):
    """`team=<id or name>` on a queryset with a `team` foreign key; 400 if not visible."""

    def filter(self, queryset: QuerySet, value: str) -> QuerySet:
        if value in ([], (), {}, "", None):
            return queryset
        team = visible_team(self.parent.request.user, value)
        if team is None:
            raise serializers.ValidationError({"team": [UNKNOWN_TEAM.format(value=value[:100])]})
        return queryset.filter(team=team)


def validated_query(serializer_class: type[serializers.Serializer], request: Request) -> dict:
    """Query parameters through an input serializer; a ValidationError answers 400."""
    serializer = serializer_class(data=request.query_params, context={"request": request})
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


def month_range(text: str) -> tuple[dt.datetime, dt.datetime] | None:
    """A calendar month in the pool's time zone as UTC `[start, end)` (`kernel.period`); None
    if not YYYY-MM or outside the years a period may name."""
    try:
        return period_utc_range(text, settings.TANDEM_TIMEZONE)
    except PeriodError:
        return None


def amount_field(places: int, **kwargs) -> serializers.DecimalField:
    return serializers.DecimalField(
        max_digits=None, decimal_places=places, rounding=ROUNDING, read_only=True, **kwargs
    )


class GpuHoursField(serializers.DecimalField):
    """GPU-seconds shown as GPU-hours, rounded half up to 2 places (docs/pricing.md "Rounding")."""

    def __init__(self, **kwargs) -> None:
        super().__init__(
            max_digits=None, decimal_places=2, rounding=ROUNDING, read_only=True, **kwargs
        )

    def to_representation(self, value: Decimal) -> str:
        return super().to_representation(Decimal(value) / 3600)


def team_scope(request: Request) -> QuerySet[Team] | None:
    """None (every team, no filter) for finance and platform; else the caller's teams."""
    return None if sees_every_team(request.user) else visible_teams(request.user)


# --- Month filter -----------------------------------------------------------------------


class MonthFormField(django_filters.fields.forms.CharField):
    """A calendar month, YYYY-MM; the filter turns it into the month's bounds as needed."""

    def clean(self, value: str | None) -> str | None:
        value = (super().clean(value) or "").strip()
        if not value:
            return None
        if month_range(value) is None:
            # The value goes in as a parameter: django-filter %-formats the message later.
            raise django_filters.fields.forms.ValidationError(
                "Not a month (YYYY-MM): %(value)r.", params={"value": value[:20]}
            )
        return value


class MonthFilter(django_filters.Filter):
    field_class = MonthFormField


# --- Pagination -------------------------------------------------------------------------


class UsagePagination(PageNumberPagination):
    page_size_query_param = "page_size"
    max_page_size = 1000
