"""JSON API for people's questions: teams, tasks, usage, the health numbers and sharing.

Reports is the read side: these endpoints read metering's rows and reports' health numbers.
One operation per class, input and output serializers nested in it. Every read goes through
`access.selectors.visible_teams`: a team lead's lists hold only their teams, another team's
object answers 404, and naming another team in a parameter answers 400 like an unknown team
(the shared fields and filters are in `access.api`).
"""

from __future__ import annotations

import django_filters
from django.conf import settings
from django.db.models import Q, QuerySet
from django_filters.rest_framework import DjangoFilterBackend
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    extend_schema,
    extend_schema_field,
    extend_schema_serializer,
)
from rest_framework import generics, serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from access.api import (
    GpuHoursField,
    MonthFilter,
    PoolDateTimeField,
    RangeInput,
    UsagePagination,
    VisibleTeamField,
    VisibleTeamFilter,
    amount_field,
    check_range,
    month_range,
    team_scope,
    validated_query,
)
from access.schema import ApiSchema
from access.selectors import visible_teams
from kernel.tasks import TASK_KIND_CHOICES
from metering.models import Task, Team
from reports import health, selectors

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
    gave_up = serializers.IntegerField(
        allow_null=True,
        help_text="Of the pods' waits, those that ended with the pod gone while never scheduled"
        " (counted to when it was last seen Pending); null for a month closed before they"
        " were counted.",
    )


class KindWaitOutput(MeanWaitOutput):
    kind = serializers.CharField()
    scheduling_mean_seconds = amount_field(
        3,
        allow_null=True,
        source="scheduling.mean_seconds",
        help_text="The pods' mean wait to be scheduled.",
    )
    admitted_workloads = serializers.IntegerField(
        source="admission.waits",
        help_text="Workloads Kueue admitted (0 where Kueue is not read, or for a team's view).",
    )
    admission_mean_seconds = amount_field(
        3,
        allow_null=True,
        source="admission.mean_seconds",
        help_text="Their mean wait in Kueue's queue; mean_seconds adds it to the pods'.",
    )


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
