"""JSON API over metering: teams, tasks, usage, the health numbers and sharing analytics.

One operation per class, input and output serializers nested in it. Every read goes through
`access.selectors.visible_teams`: a team lead's lists hold only their teams, another team's
object answers 404, and naming another team in a parameter answers 400 like an unknown team.
"""

from __future__ import annotations

import datetime as dt
import re
from decimal import Decimal

import django_filters
from django.conf import settings
from django.db.models import Q, QuerySet
from django.utils.dateparse import parse_date, parse_datetime
from django_filters.rest_framework import DjangoFilterBackend
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    extend_schema,
    extend_schema_field,
    extend_schema_serializer,
)
from rest_framework import generics, serializers
from rest_framework.pagination import PageNumberPagination
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from access.schema import ApiSchema
from access.selectors import sees_every_team, visible_teams
from kernel.money import ROUNDING
from kernel.period import PeriodError, period_utc_range
from kernel.tasks import TASK_KIND_CHOICES
from metering.models import Task, Team
from reports import health, selectors

# Longer ranges are refused: the API would aggregate years of intervals per request.
MAX_RANGE_DAYS = 400
# A '+' in an unencoded query string arrives as a space: "…T00:00:00 08:00" meant "+08:00".
SPACE_FOR_PLUS = re.compile(r"(\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?) (\d{2}:?\d{2})$")
DATE_ONLY = re.compile(r"^\d{4}-\d{2}-\d{2}$")


def pool_zone() -> dt.tzinfo:
    return selectors.pool_timezone()


# --- Shared fields ----------------------------------------------------------------------


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
    if raw.isdigit() and len(raw) < 19:  # longer digit strings are beyond any bigint id
        lookup |= Q(pk=int(raw))
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


# --- Teams ------------------------------------------------------------------------------


class TeamOutput(serializers.ModelSerializer):
    class Meta:
        model = Team
        fields = ["id", "name", "created"]


class TeamListApi(generics.ListAPIView):
    schema = ApiSchema()
    serializer_class = TeamOutput

    def get_queryset(self) -> QuerySet[Team]:
        return visible_teams(self.request.user).order_by("name")


class TeamDetailApi(generics.RetrieveAPIView):
    schema = ApiSchema()
    serializer_class = TeamOutput

    def get_queryset(self) -> QuerySet[Team]:
        return visible_teams(self.request.user)


# --- Tasks ------------------------------------------------------------------------------


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


class TaskFilter(django_filters.FilterSet):
    team = VisibleTeamFilter(help_text="Team id or exact name.")
    kind = django_filters.ChoiceFilter(choices=TASK_KIND_CHOICES)
    period = MonthFilter(
        method="filter_period",
        help_text="YYYY-MM in the pool's time zone: tasks alive during that month.",
    )

    class Meta:
        model = Task
        fields = ["team", "kind", "period"]

    def filter_period(self, queryset: QuerySet[Task], name: str, value: str) -> QuerySet[Task]:
        start, end = month_range(value)
        return queryset.filter(first_seen__lt=end).filter(
            Q(ended__isnull=True) | Q(ended__gte=start)
        )


class TaskOutput(serializers.ModelSerializer):
    team = serializers.CharField(source="team.name")
    source = serializers.CharField(source="source.name")

    class Meta:
        model = Task
        fields = [
            "id",
            "namespace",
            "external_id",
            "team",
            "kind",
            "source",
            "first_seen",
            "created",
            "first_started",
            "ended",
        ]


class TaskListApi(generics.ListAPIView):
    schema = ApiSchema()
    serializer_class = TaskOutput
    filter_backends = [DjangoFilterBackend]
    filterset_class = TaskFilter

    def get_queryset(self) -> QuerySet[Task]:
        return (
            Task.objects.filter(team__in=visible_teams(self.request.user))
            .select_related("team", "source")
            .order_by("external_id", "id")
        )


class TaskDetailApi(generics.RetrieveAPIView):
    schema = ApiSchema()
    serializer_class = TaskOutput

    def get_queryset(self) -> QuerySet[Task]:
        return Task.objects.filter(team__in=visible_teams(self.request.user)).select_related(
            "team", "source"
        )


# --- Usage ------------------------------------------------------------------------------


class UsagePagination(PageNumberPagination):
    page_size_query_param = "page_size"
    max_page_size = 1000


@extend_schema_serializer(component_name="UsageRow")
class UsageRowOutput(serializers.Serializer):
    key = serializers.CharField()
    team = serializers.CharField(allow_null=True)
    task_id = serializers.IntegerField(allow_null=True)
    task = serializers.CharField(allow_null=True)
    kind = serializers.CharField(allow_null=True)
    start = serializers.DateTimeField(allow_null=True, help_text="Day or hour groups only")
    allocated_gpu_hours = GpuHoursField(source="allocated_gpu_seconds")
    allocated_gpu_seconds = amount_field(6)
    busy_gpu_hours = GpuHoursField(source="busy_gpu_seconds")
    busy_gpu_seconds = amount_field(6)
    memory_peak_bytes = serializers.IntegerField()
    memory_avg_bytes = serializers.IntegerField()
    read_operations = serializers.IntegerField()
    write_operations = serializers.IntegerField()
    read_bytes = serializers.IntegerField()
    write_bytes = serializers.IntegerField()
    preemptions = serializers.IntegerField()
    lost_gpu_hours = GpuHoursField(source="lost_gpu_seconds")
    waits = serializers.IntegerField()
    mean_wait_seconds = amount_field(3, allow_null=True)


@extend_schema_serializer(component_name="UsageCompleteness")
class UsageCompletenessOutput(serializers.Serializer):
    ratio = amount_field(6, allow_null=True)
    windows = serializers.DictField(child=serializers.IntegerField())


class UsageApi(APIView):
    """Usage per team, task, kind, local day or local hour over `[start, end)`."""

    schema = ApiSchema()
    pagination_class = UsagePagination

    class Input(RangeInput):
        group_by = serializers.ChoiceField(choices=selectors.GROUP_BY_CHOICES, default="team")
        team = VisibleTeamField(required=False, help_text="Team id or exact name.")

    @extend_schema_serializer(component_name="Usage")
    class Output(serializers.Serializer):
        start = serializers.DateTimeField()
        end = serializers.DateTimeField()
        group_by = serializers.CharField()
        time_zone = serializers.CharField()
        completeness = UsageCompletenessOutput()
        count = serializers.IntegerField()
        next = serializers.URLField(allow_null=True)
        previous = serializers.URLField(allow_null=True)
        results = UsageRowOutput(many=True)

    @extend_schema(
        parameters=[Input, OpenApiParameter("page", OpenApiTypes.INT)],
        responses={200: Output},
    )
    def get(self, request: Request) -> Response:
        query = validated_query(self.Input, request)
        team = query.get("team")
        teams = Team.objects.filter(pk=team.pk) if team else team_scope(request)
        rows = selectors.usage_rows(
            start=query["start"], end=query["end"], group_by=query["group_by"], teams=teams
        )
        paginator = self.pagination_class()
        page = paginator.paginate_queryset(rows, request, view=self)
        body = {
            **query,
            "time_zone": settings.TANDEM_TIMEZONE,
            "completeness": selectors.data_completeness(start=query["start"], end=query["end"]),
            "count": len(rows),
            "next": paginator.get_next_link(),
            "previous": paginator.get_previous_link(),
            "results": page,
        }
        return Response(self.Output(body).data)


# --- Health -----------------------------------------------------------------------------


class UtilizationOutput(serializers.Serializer):
    effective = amount_field(6, allow_null=True)
    busy_gpu_hours = GpuHoursField(source="busy_gpu_seconds")
    capacity_gpu_hours = GpuHoursField(source="capacity_gpu_seconds")
    busy_gpu_seconds = amount_field(6)
    capacity_gpu_seconds = amount_field(6)


class ServiceLatencyOutput(serializers.Serializer):
    service = serializers.CharField()
    team = serializers.CharField()
    slo_p99_ms = serializers.IntegerField()
    p99_ms = amount_field(3, allow_null=True)
    meets_slo = serializers.BooleanField(allow_null=True)
    requests = amount_field(0)
    intervals = serializers.IntegerField()
    breached_intervals = serializers.IntegerField()


class MeanWaitOutput(serializers.Serializer):
    waits = serializers.IntegerField()
    mean_seconds = amount_field(3, allow_null=True)


class KindWaitOutput(MeanWaitOutput):
    kind = serializers.CharField()


class HealthNumbersOutput(serializers.Serializer):
    utilization = UtilizationOutput()
    services = ServiceLatencyOutput(many=True)
    wait_overall = MeanWaitOutput(source="waits.overall")
    wait_per_kind = KindWaitOutput(source="waits.kinds", many=True)


class VerdictOutput(serializers.Serializer):
    code = serializers.CharField()
    text = serializers.CharField()
    utilization = serializers.CharField()
    latency = serializers.CharField()
    wait = serializers.CharField()


class HealthApi(APIView):
    """The three health numbers; with `before_start`/`before_end`, the before/after verdict.

    Utilization is the pool's; services and waits are those of the teams the caller sees.
    """

    schema = ApiSchema()

    class Input(RangeInput):
        before_start = PoolDateTimeField(required=False, help_text="Earlier period to compare.")
        before_end = PoolDateTimeField(required=False, date_is_end=True)

        def validate(self, attrs: dict) -> dict:
            attrs = super().validate(attrs)
            given = [name for name in ("before_start", "before_end") if name in attrs]
            if len(given) == 1:
                missing = {"before_start", "before_end"} - set(given)
                raise serializers.ValidationError({missing.pop(): "Give both or neither."})
            if given:
                check_range(attrs["before_start"], attrs["before_end"], end_name="before_end")
            return attrs

    @extend_schema_serializer(component_name="Health")
    class Output(serializers.Serializer):
        start = serializers.DateTimeField()
        end = serializers.DateTimeField()
        scope = serializers.CharField(help_text="'all' teams, or 'own' teams of a team lead")
        utilization = UtilizationOutput(source="numbers.utilization")
        services = ServiceLatencyOutput(source="numbers.services", many=True)
        wait_overall = MeanWaitOutput(source="numbers.waits.overall")
        wait_per_kind = KindWaitOutput(source="numbers.waits.kinds", many=True)
        before = HealthNumbersOutput(allow_null=True)
        verdict = VerdictOutput(allow_null=True)

    @extend_schema(parameters=[Input], responses={200: Output})
    def get(self, request: Request) -> Response:
        query = validated_query(self.Input, request)
        teams = team_scope(request)
        after = selectors.health_numbers(start=query["start"], end=query["end"], teams=teams)
        before = verdict = None
        if "before_start" in query:
            before = selectors.health_numbers(
                start=query["before_start"], end=query["before_end"], teams=teams
            )
            verdict = health.verdict(before, after)
        body = self.Output(
            {
                **query,
                "numbers": after,
                "scope": "all" if teams is None else "own",
                "before": before,
                "verdict": verdict,
            }
        )
        return Response(body.data)


# --- Sharing analytics ------------------------------------------------------------------


@extend_schema_serializer(component_name="SharingHour")
class SharingHourOutput(serializers.Serializer):
    hour = serializers.IntegerField()
    capacity_gpu_hours = GpuHoursField(source="capacity_gpu_seconds")
    training_gpu_hours = GpuHoursField(source="training_gpu_seconds")
    inference_gpu_hours = GpuHoursField(source="inference_gpu_seconds")
    training_share = amount_field(6, allow_null=True)
    inference_share = amount_field(6, allow_null=True)


class SharingApi(APIView):
    """Training vs inference over the local day, interruptible share, preemption cost."""

    schema = ApiSchema()

    Input = RangeInput

    @extend_schema_serializer(component_name="Sharing")
    class Output(serializers.Serializer):
        start = serializers.DateTimeField()
        end = serializers.DateTimeField()
        time_zone = serializers.CharField()
        profile = SharingHourOutput(source="analytics.profile", many=True)
        correlation = amount_field(6, allow_null=True, source="analytics.correlation")
        interruptible_share = amount_field(
            6, allow_null=True, source="analytics.interruptible_share"
        )
        time_slicing_pays_off = serializers.BooleanField(
            allow_null=True, source="analytics.time_slicing_pays_off"
        )
        lost_gpu_hours_per_team = serializers.SerializerMethodField()

        @extend_schema_field({"type": "object", "additionalProperties": {"type": "string"}})
        def get_lost_gpu_hours_per_team(self, body: dict) -> dict[str, str]:
            hours = GpuHoursField()
            lost = body["analytics"].lost_gpu_seconds_per_team
            return {team: hours.to_representation(seconds) for team, seconds in lost.items()}

    @extend_schema(parameters=[Input], responses={200: Output})
    def get(self, request: Request) -> Response:
        query = validated_query(self.Input, request)
        analytics = selectors.sharing_analytics(
            start=query["start"], end=query["end"], teams=team_scope(request)
        )
        body = {**query, "time_zone": settings.TANDEM_TIMEZONE, "analytics": analytics}
        return Response(self.Output(body).data)
