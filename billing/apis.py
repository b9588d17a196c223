"""JSON API over billing: statements, price books, and the quota export schedulers poll.

Statements are those of the teams the caller sees (another team's statement answers 404).
Price books hold no team's data and are readable by every role. The quota export needs the
`quota:read` scope when called with a token; it answers with a weak ETag and honours
`If-None-Match` with 304, and `quotas/metrics` serves the same numbers as Prometheus text.

The export lists every team the caller sees with a quota or with usage this month. Its money
comes twice, labelled: `month_to_date_amount`, the month so far as the engine prices it (read
from the month-to-date draft that Celery refreshes after ingestion; never computed in the
request, so a poll stays cheap, with `month_to_date_as_of` and `month_to_date_stale`), and
`list_price_estimate`, the usage at the book's list rates.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from decimal import Decimal

import django_filters
from django.db.models import QuerySet
from django.http import HttpResponse
from django_filters.rest_framework import DjangoFilterBackend
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_serializer
from rest_framework import generics, renderers, serializers
from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from access.api import (
    GpuHoursField,
    MonthFilter,
    VisibleTeamField,
    VisibleTeamFilter,
    validated_query,
)
from access.models import SCOPE_QUOTA_READ
from access.schema import ApiSchema
from access.selectors import visible_teams
from billing.models import (
    PriceBook,
    PriceBookGpuClass,
    Quota,
    Statement,
    StatementLine,
)
from billing.selectors import (
    BASIS_LIST_PRICE,
    BASIS_MONTH_TO_DATE,
    QuotaStatus,
    price_books_with_classes,
    quota_metered_twice,
    quota_statuses,
)
from kernel.period import PERIOD_REGEX
from kernel.price_book_fields import GPU_CLASS_FIELDS, PRICE_BOOK_FIELDS
from metering.selectors import MeteredTwice

# --- Statements -------------------------------------------------------------------------


class StatementFilter(django_filters.FilterSet):
    period = MonthFilter(field_name="period", help_text="YYYY-MM")
    team = VisibleTeamFilter(help_text="Team id or exact name.")

    class Meta:
        model = Statement
        fields = ["period", "team"]


class ExactDecimalField(serializers.DecimalField):
    """A stored decimal without its padding zeros: "14.374", not "14.374000000000000"."""

    def __init__(self, **kwargs) -> None:
        super().__init__(max_digits=None, decimal_places=None, **kwargs)

    def to_representation(self, value: Decimal | None) -> str | None:
        if value is None:
            return None
        text = format(Decimal(value).normalize(), "f")
        return text if "." in text else f"{text}.0"


class StatementLineOutput(serializers.ModelSerializer):
    rate_per_gpu_hour = ExactDecimalField(allow_null=True)
    amount_unrounded = ExactDecimalField()

    class Meta:
        model = StatementLine
        fields = [
            "kind",
            "description",
            "quantity_gpu_hours",
            "rate_per_gpu_hour",
            "amount",
            "amount_unrounded",
            "is_correction",
            "corrects_period",
        ]


@extend_schema_serializer(component_name="Statement")
class StatementOutput(serializers.ModelSerializer):
    team = serializers.CharField(source="team.name")
    lines = StatementLineOutput(many=True)
    scenario_sha256 = serializers.CharField(source="period_close.scenario_sha256")
    price_book_version = serializers.IntegerField(source="period_close.price_book_version")
    engine_version = serializers.CharField(source="period_close.engine_version")
    closed_at = serializers.DateTimeField(source="period_close.closed_at")
    # Empty unless finance closed the month although its metering was incomplete: then why.
    incomplete_reason = serializers.CharField(source="period_close.incomplete_reason")

    class Meta:
        model = Statement
        fields = [
            "id",
            "period",
            "team",
            "currency",
            "total",
            "lines",
            "scenario_sha256",
            "price_book_version",
            "engine_version",
            "closed_at",
            "incomplete_reason",
        ]


def visible_statements(request: Request) -> QuerySet[Statement]:
    return (
        Statement.objects.filter(team__in=visible_teams(request.user))
        .select_related("team", "period_close")
        .prefetch_related("lines")
        .order_by("-period", "team__name", "id")
    )


class StatementListApi(generics.ListAPIView):
    schema = ApiSchema()
    serializer_class = StatementOutput
    filter_backends = [DjangoFilterBackend]
    filterset_class = StatementFilter

    def get_queryset(self) -> QuerySet[Statement]:
        return visible_statements(self.request)


class StatementDetailApi(generics.RetrieveAPIView):
    schema = ApiSchema()
    serializer_class = StatementOutput

    def get_queryset(self) -> QuerySet[Statement]:
        return visible_statements(self.request)


# --- Price books ------------------------------------------------------------------------


@extend_schema_serializer(component_name="PriceBookGpuClass")
class PriceBookGpuClassOutput(serializers.ModelSerializer):
    """A GPU class of the book (docs/pricing.md v2); a null share means the book's."""

    models = serializers.ListField(child=serializers.CharField())

    class Meta:
        model = PriceBookGpuClass
        fields = list(GPU_CLASS_FIELDS)


@extend_schema_serializer(component_name="PriceBook")
class PriceBookOutput(serializers.ModelSerializer):
    # By name; the book's own figures above are the class `default`, not listed here.
    gpu_classes = PriceBookGpuClassOutput(many=True, read_only=True)

    class Meta:
        model = PriceBook
        fields = [
            "id",
            "version",
            "status",
            "effective_from",
            "published_at",
            *PRICE_BOOK_FIELDS,
            "gpu_classes",
            "notes",
        ]


class PriceBookListApi(generics.ListAPIView):
    schema = ApiSchema()
    serializer_class = PriceBookOutput

    def get_queryset(self) -> QuerySet[PriceBook]:
        return price_books_with_classes().order_by("-version")


class PriceBookDetailApi(generics.RetrieveAPIView):
    schema = ApiSchema()
    serializer_class = PriceBookOutput

    def get_queryset(self) -> QuerySet[PriceBook]:
        return price_books_with_classes()


# --- Quota export -----------------------------------------------------------------------


def decimal_output(places: int, **kwargs) -> serializers.DecimalField:
    return serializers.DecimalField(max_digits=None, decimal_places=places, **kwargs)


@extend_schema_serializer(component_name="QuotaStatus")
class QuotaStatusOutput(serializers.Serializer):
    team = serializers.CharField()
    period = serializers.RegexField(PERIOD_REGEX)
    allowance_gpu_hours = decimal_output(2, allow_null=True)
    used_gpu_hours = decimal_output(2)
    remaining_gpu_hours = decimal_output(2, allow_null=True)
    allowance_money = decimal_output(2, allow_null=True)
    month_to_date_amount = decimal_output(
        2,
        allow_null=True,
        help_text="The month so far as its statement will price it (baseline, usage, SLA "
        "penalties and credits, compensation), from the month-to-date draft priced up to "
        "`month_to_date_as_of`; null while there is no draft or it could not be priced.",
    )
    month_to_date_lines = serializers.DictField(
        child=decimal_output(2), help_text="The draft's statement lines by kind"
    )
    month_to_date_as_of = serializers.DateTimeField(
        allow_null=True, help_text="End of the metering data the draft priced"
    )
    month_to_date_stale = serializers.BooleanField(
        help_text="Metering or the book changed since the draft was priced (or there is no "
        "draft yet); a refresh is queued by ingestion and beat, never computed here."
    )
    month_to_date_error = serializers.CharField(
        allow_null=True, help_text="Why the month so far could not be priced"
    )
    list_price_estimate = decimal_output(
        2,
        allow_null=True,
        help_text="GPU time used at the book's list rates (standard, off-peak training), up "
        "to `as_of`: no baseline, penalties or credits, so below an inference team's bill.",
    )
    remaining_money = decimal_output(2, allow_null=True)
    remaining_money_basis = serializers.ChoiceField(
        choices=[BASIS_MONTH_TO_DATE, BASIS_LIST_PRICE],
        allow_null=True,
        help_text="The figure `remaining_money` subtracts: the draft's amount when there is "
        "one, else the list-price estimate",
    )
    currency = serializers.CharField(allow_null=True)
    over_quota = serializers.BooleanField()
    concurrent_gpu_cap = decimal_output(3, allow_null=True)
    io_caps = serializers.DictField(child=serializers.CharField(), help_text="ops/s per task kind")
    as_of = serializers.DateTimeField(allow_null=True, help_text="End of the newest ingested data")
    lag_seconds = serializers.IntegerField(allow_null=True, help_text="Seconds since `as_of`")
    price_book_version = serializers.IntegerField(allow_null=True)


class MeteredTwiceOutput(serializers.Serializer):
    sources = serializers.ListField(child=serializers.CharField())
    gpus = serializers.IntegerField(help_text="GPUs both sources count present")
    gpu_hours = GpuHoursField(source="gpu_seconds", help_text="Their capacity counted twice")
    first = serializers.DateTimeField()
    last = serializers.DateTimeField()
    message = serializers.CharField(help_text="What happened and how to end it")


class QuotaQuery(serializers.Serializer):
    """What both quota endpoints accept; a bad value answers 400 naming the parameter."""

    team = VisibleTeamField(required=False, help_text="Only this team (id or exact name).")
    quota_only = serializers.BooleanField(
        required=False,
        default=False,
        help_text="Only teams with a quota (default: also every team with usage this month).",
    )


def visible_quota_statuses(request: Request) -> list[QuotaStatus]:
    """The month-to-date status of every team the caller sees that has a quota or usage this
    month (or of the one `team` asked for, or only those with a quota)."""
    query = validated_query(QuotaQuery, request)
    teams = visible_teams(request.user).order_by("name")
    if query.get("team") is not None:
        teams = teams.filter(pk=query["team"].pk)
    if query["quota_only"]:
        teams = teams.filter(pk__in=Quota.objects.values("team"))
    return quota_statuses(teams=list(teams), active_only=True)


def quota_etag(body: dict) -> str:
    """A weak validator over everything but `lag_seconds`, which grows every second by itself.

    Weak (W/): a 304 means "the same quota numbers", not byte-identical bodies, since a fresh
    body would carry a larger lag.
    """
    teams = [{k: v for k, v in s.items() if k != "lag_seconds"} for s in body["teams"]]
    stable = {**body, "teams": teams}
    digest = hashlib.sha256(json.dumps(stable, sort_keys=True, default=str).encode()).hexdigest()
    return f'W/"{digest[:40]}"'


def if_none_match(request: Request, etag: str) -> bool:
    """RFC 9110 weak comparison of `If-None-Match` against our validator."""
    header = request.headers.get("If-None-Match", "")
    if header.strip() == "*":
        return True
    tags = [tag.strip().removeprefix("W/") for tag in header.split(",")]
    return etag.removeprefix("W/") in tags


class QuotaExportApi(APIView):
    """What a scheduler polls: per team allowance, used and remaining, with freshness."""

    schema = ApiSchema()
    required_scope = SCOPE_QUOTA_READ

    @extend_schema_serializer(component_name="QuotaExport")
    class Output(serializers.Serializer):
        teams = QuotaStatusOutput(many=True)
        metered_twice = MeteredTwiceOutput(
            many=True,
            help_text="Pairs of sources that meter the same GPUs this month: every `used` "
            "figure counts those GPUs' pods twice until one source is narrowed. Empty when "
            "the numbers can be enforced as they are.",
        )

    @extend_schema(
        parameters=[QuotaQuery],
        responses={200: Output, 304: OpenApiResponse(description="Unchanged since the ETag")},
    )
    def get(self, request: Request) -> Response:
        found = {"teams": visible_quota_statuses(request), "metered_twice": quota_metered_twice()}
        body = self.Output(found).data
        etag = quota_etag(body)
        headers = {"ETag": etag, "Cache-Control": "private, no-cache"}
        if if_none_match(request, etag):
            return Response(status=304, headers=headers)
        return Response(body, headers=headers)


# --- The same numbers for Prometheus ----------------------------------------------------


class PrometheusTextRenderer(renderers.BaseRenderer):
    media_type = "text/plain"
    format = "prometheus"
    charset = "utf-8"

    def render(self, data: object, accepted_media_type=None, renderer_context=None) -> bytes:
        if isinstance(data, str):
            return data.encode()
        # Errors (401, 403, 429) are dicts: say them plainly, as a comment line.
        return f"# error: {json.dumps(data)}\n".encode()


def escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def metric_value(value: Decimal | int | bool | dt.datetime) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, dt.datetime):
        return f"{value.timestamp():.0f}"
    return format(Decimal(value), "f")


MONEY_ATTRIBUTES = {
    "allowance_money",
    "month_to_date_amount",
    "list_price_estimate",
    "remaining_money",
}


HOUR = Decimal(3600)
QUOTA_METRICS = [
    # name, help, QuotaStatus attribute, factor. GPU time in GPU-seconds: Prometheus wants
    # base units (promtool flags "hours"); the export's GPU-hours times 3600.
    ("tandem_quota_allowance_gpu_seconds", "Monthly GPU allowance.", "allowance_gpu_hours", HOUR),
    ("tandem_quota_used_gpu_seconds", "GPU time used this month.", "used_gpu_hours", HOUR),
    (
        "tandem_quota_remaining_gpu_seconds",
        "GPU time left this month.",
        "remaining_gpu_hours",
        HOUR,
    ),
    ("tandem_quota_allowance_money", "Monthly money allowance.", "allowance_money", 1),
    (
        "tandem_quota_month_to_date_money",
        "The month so far as its statement will price it (the month-to-date draft).",
        "month_to_date_amount",
        1,
    ),
    (
        "tandem_quota_month_to_date_as_of_timestamp_seconds",
        "End of the data the month-to-date draft priced.",
        "month_to_date_as_of",
        1,
    ),
    (
        "tandem_quota_month_to_date_stale",
        "1 when metering or the book changed since the month-to-date draft was priced.",
        "month_to_date_stale",
        1,
    ),
    (
        "tandem_quota_list_price_estimate_money",
        "GPU time used this month at list rates: no baseline, penalties or credits.",
        "list_price_estimate",
        1,
    ),
    (
        "tandem_quota_remaining_money",
        "Money left this month (allowance less the month-to-date amount, else the estimate).",
        "remaining_money",
        1,
    ),
    ("tandem_quota_over", "1 when the team is over a quota.", "over_quota", 1),
    ("tandem_quota_concurrent_gpus", "GPUs the team may hold at once.", "concurrent_gpu_cap", 1),
    ("tandem_quota_data_lag_seconds", "Seconds since the newest ingested data.", "lag_seconds", 1),
    (
        "tandem_quota_price_book_version",
        "Price book version of the money.",
        "price_book_version",
        1,
    ),
]


def quota_metrics_text(statuses: list[QuotaStatus], metered_twice: list[MeteredTwice]) -> str:
    """Prometheus text exposition format 0.0.4: one gauge family per number, a sample per team;
    and the GPUs two sources both meter this month, a sample per pair (none: 0)."""
    name = "tandem_quota_gpus_metered_twice"
    lines: list[str] = [
        f"# HELP {name} GPUs two sources both meter this month: the teams' used GPU time"
        " counts their pods twice.",
        f"# TYPE {name} gauge",
    ]
    for twice in metered_twice:
        first, second = (escape_label(source) for source in twice.sources)
        lines.append(f'{name}{{source="{first}",other_source="{second}"}} {twice.gpus}')
    if not metered_twice:
        lines.append(f"{name} 0")
    for name, help_text, attribute, factor in QUOTA_METRICS:
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge"]
        for status in statuses:
            value = getattr(status, attribute)
            if value is None:
                continue  # no allowance (or no price book): no sample, rather than a fake 0
            labels = f'team="{escape_label(status.team)}",period="{status.period}"'
            if attribute in MONEY_ATTRIBUTES and status.currency:
                labels += f',currency="{escape_label(status.currency)}"'
            if factor != 1:
                value = Decimal(value) * factor
            lines.append(f"{name}{{{labels}}} {metric_value(value)}")
    name = "tandem_quota_month_to_date_line_money"
    lines += [
        f"# HELP {name} The month-to-date draft's statement lines, by kind.",
        f"# TYPE {name} gauge",
    ]
    for status in statuses:
        for kind, amount in sorted(status.month_to_date_lines.items()):
            labels = f'team="{escape_label(status.team)}",period="{status.period}"'
            labels += f',kind="{escape_label(kind)}"'
            if status.currency:
                labels += f',currency="{escape_label(status.currency)}"'
            lines.append(f"{name}{{{labels}}} {metric_value(amount)}")
    name = "tandem_quota_io_cap_operations_per_second"
    lines += [
        f"# HELP {name} I/O operations per second a task kind may use.",
        f"# TYPE {name} gauge",
    ]
    for status in statuses:
        for kind, cap in sorted(status.io_caps.items()):
            labels = f'team="{escape_label(status.team)}",kind="{escape_label(kind)}"'
            lines.append(f"{name}{{{labels}}} {metric_value(Decimal(str(cap)))}")
    return "\n".join(lines) + "\n"


class TextOnlyNegotiation(BaseContentNegotiation):
    """Always the text format: a scraper's Accept header must not turn the answer into a 406."""

    def select_parser(self, request: Request, parsers: list) -> object:
        return parsers[0] if parsers else None

    def select_renderer(self, request: Request, renderers: list, format_suffix=None) -> tuple:
        return renderers[0], renderers[0].media_type


class QuotaMetricsApi(APIView):
    """The quota export as Prometheus gauges, for Alertmanager rules or a scheduler."""

    schema = ApiSchema()

    required_scope = SCOPE_QUOTA_READ
    renderer_classes = [PrometheusTextRenderer]
    content_negotiation_class = TextOnlyNegotiation

    @extend_schema(parameters=[QuotaQuery], responses={(200, "text/plain"): OpenApiTypes.STR})
    def get(self, request: Request) -> HttpResponse:
        text = quota_metrics_text(visible_quota_statuses(request), quota_metered_twice())
        return HttpResponse(text, content_type="text/plain; version=0.0.4; charset=utf-8")
