"""The factory_boy factories of every test area, and `windows_complete`.

One factory per model, with one set of defaults: a pool builder (tests/pools.py) or a test
that needs other values says so at the call. Synthetic pools live in tests/pools.py.

A month closes only when each of its sources' ingest windows covers it, done and complete.
Test pools meter a day or two of a month; `windows_complete` declares the rest of the month
ingested and empty, as a real source that saw nothing there would have left it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from decimal import Decimal

import factory
from django.contrib.auth import get_user_model
from django.db import connection
from factory.django import DjangoModelFactory

from access.models import Role
from billing.models import PeriodClose, PriceBook, Quota, Statement, StatementLine
from billing.selectors import period_bounds
from metering.models import (
    CapacityInterval,
    IngestWindow,
    LatencyInterval,
    PodWait,
    Preemption,
    Service,
    Source,
    Task,
    Team,
    UsageInterval,
    sighting_month,
)
from metering.selectors import windows_missing
from metering.services import latency_p99

HOUR = dt.timedelta(hours=1)
STEP_SECONDS = 300
# 18:00 on 2026-10-01 in Asia/Shanghai: the default instant of a metered row.
T0 = dt.datetime(2026, 10, 1, 10, 0, tzinfo=dt.UTC)


# --- People ------------------------------------------------------------------------------


class UserFactory(DjangoModelFactory):
    class Meta:
        model = get_user_model()
        django_get_or_create = ("username",)

    username = factory.Sequence(lambda n: f"user{n}")


class RoleFactory(DjangoModelFactory):
    class Meta:
        model = Role
        skip_postgeneration_save = True

    user = factory.SubFactory(UserFactory)
    name = Role.Name.FINANCE

    @factory.post_generation
    def teams(self, create: bool, extracted: list[Team] | None, **kwargs) -> None:
        if create and extracted:
            self.teams.set(extracted)


# --- Metering ----------------------------------------------------------------------------


class SourceFactory(DjangoModelFactory):
    class Meta:
        model = Source
        django_get_or_create = ("name",)

    name = "default"
    # Never reached: no test that uses a factory's source queries Prometheus.
    url = "http://prometheus.invalid:9090"


class TeamFactory(DjangoModelFactory):
    class Meta:
        model = Team
        django_get_or_create = ("name",)

    name = factory.Sequence(lambda n: f"team-{n}")


class TaskFactory(DjangoModelFactory):
    class Meta:
        model = Task

    source = factory.SubFactory(SourceFactory)
    external_id = factory.Sequence(lambda n: f"task-{n}")
    team = factory.SubFactory(TeamFactory)
    kind = "training_batch"
    first_seen = T0


class ServiceFactory(DjangoModelFactory):
    class Meta:
        model = Service

    source = factory.SubFactory(SourceFactory)
    external_id = factory.Sequence(lambda n: f"service-{n}")
    team = factory.SubFactory(TeamFactory)
    slo_p99_ms = 300
    # Stated by an operator, as a contract's SLO is (an ingest's new service has none).
    slo_stated = dt.datetime(2026, 1, 5, tzinfo=dt.UTC)


class UsageIntervalFactory(DjangoModelFactory):
    class Meta:
        model = UsageInterval

    task = factory.SubFactory(TaskFactory)
    interval_start = T0
    alloc_gpu_seconds = Decimal("300")


class CapacityIntervalFactory(DjangoModelFactory):
    class Meta:
        model = CapacityInterval

    source = factory.SubFactory(SourceFactory)
    interval_start = T0
    gpus_present = Decimal(8)
    capacity_gpu_seconds = factory.LazyAttribute(lambda row: row.gpus_present * STEP_SECONDS)


class LatencyIntervalFactory(DjangoModelFactory):
    class Meta:
        model = LatencyInterval

    service = factory.SubFactory(ServiceFactory)
    interval_start = T0
    buckets = [["0.1", 10], ["+Inf", 10]]
    # As ingest writes them: the +Inf count (whole requests) and the interval's own P99.
    request_count = factory.LazyAttribute(
        lambda row: next((int(Decimal(str(c))) for le, c in row.buckets if le == "+Inf"), 0)
    )
    p99_seconds = factory.LazyAttribute(lambda row: latency_p99(row.buckets))


class PreemptionFactory(DjangoModelFactory):
    class Meta:
        model = Preemption

    task = factory.SubFactory(TaskFactory)
    pod = factory.Sequence(lambda n: f"pod{n}")
    at = T0
    gpus = Decimal(1)
    seconds_since_start = 600


class PodWaitFactory(DjangoModelFactory):
    class Meta:
        model = PodWait

    task = factory.SubFactory(TaskFactory)
    pod = factory.Sequence(lambda n: f"pod{n}")
    created = T0
    scheduled = factory.LazyAttribute(lambda o: o.created + dt.timedelta(seconds=o.seconds))
    ended = factory.SelfAttribute("scheduled")
    seconds = 60


class IngestWindowFactory(DjangoModelFactory):
    """A done, complete hour, first written when it ended."""

    class Meta:
        model = IngestWindow

    source = factory.SubFactory(SourceFactory)
    start = T0
    end = factory.LazyAttribute(lambda window: window.start + HOUR)
    status = IngestWindow.Status.DONE
    completeness = Decimal(1)
    first_written = factory.LazyAttribute(lambda window: window.end)
    gpus_sighted = True  # as ingest writes it
    kueue_admissions = factory.LazyFunction(dict)  # read, and Kueue admitted nothing


def gpu_sighting(
    source: Source, uuid: str, *spans: tuple[dt.datetime, dt.datetime], node: str = "gpu-node-01"
) -> None:
    """The source's windows counted the GPU present over `spans` ([start, end) each), as
    ingest records it (`GpuSighting`: a row per UTC month; its multirange is SQL only)."""
    by_month: dict[dt.date, list[str]] = {}
    for start, end in spans:
        while start < end:
            month = sighting_month(start)
            following = (month + dt.timedelta(days=32)).replace(day=1)
            until = min(end, dt.datetime(following.year, following.month, 1, tzinfo=dt.UTC))
            by_month.setdefault(month, []).append(f"[{start.isoformat()},{until.isoformat()})")
            start = until
    with connection.cursor() as cursor:
        for month, ranges in by_month.items():
            cursor.execute(
                "INSERT INTO metering_gpusighting (source_id, month, uuid, node, seen)"
                " VALUES (%s, %s, %s, %s, %s::tstzmultirange)",
                [source.pk, month, uuid, node, "{" + ",".join(ranges) + "}"],
            )


# --- Billing -----------------------------------------------------------------------------


class QuotaFactory(DjangoModelFactory):
    class Meta:
        model = Quota

    team = factory.SubFactory(TeamFactory)
    allowance_gpu_hours = Decimal("100.00")
    allowance_money = None
    concurrent_gpu_cap = Decimal("4")
    io_caps = factory.LazyFunction(lambda: {"training_batch": 2000})


class PriceBookFactory(DjangoModelFactory):
    class Meta:
        model = PriceBook

    version = factory.Sequence(lambda n: 100 + n)
    effective_from = dt.date(2027, 1, 1)
    currency = "CNY"
    timezone = "Asia/Shanghai"
    depreciation_per_gpu_hour = Decimal("12.00")
    facility_per_gpu_hour = Decimal("2.30")
    electricity_per_kwh = Decimal("0.82")
    gpu_average_power_kw = Decimal("0.70")
    reserved_inference_share = Decimal("0.30")
    peak_hours = [9, 22]
    sla_penalty_per_interval = Decimal("20.00")
    sla_min_requests = 100
    starvation_preemption_threshold = 3
    starvation_lost_work_cap_seconds = 1800


class PeriodCloseFactory(DjangoModelFactory):
    class Meta:
        model = PeriodClose

    period = "2026-10"
    timezone = "Asia/Shanghai"
    period_start = dt.datetime(2026, 9, 30, 16, tzinfo=dt.UTC)
    period_end = dt.datetime(2026, 10, 31, 16, tzinfo=dt.UTC)
    price_book = factory.LazyFunction(lambda: PriceBook.objects.get(version=1))
    price_book_version = 1
    engine_version = "1.0.0"
    scenario_sha256 = "ab" * 32
    currency = "CNY"
    standard_rate = Decimal("14.374")
    offpeak_rate = Decimal("12.074")
    pool_cost_unrounded = Decimal("100")
    pool_cost = Decimal("100.00")
    teams_total = Decimal("80.00")
    platform_total = Decimal("20.00")
    closed_at = dt.datetime(2026, 11, 1, 2, tzinfo=dt.UTC)


class StatementFactory(DjangoModelFactory):
    class Meta:
        model = Statement

    period_close = factory.SubFactory(PeriodCloseFactory)
    period = factory.LazyAttribute(lambda o: o.period_close.period)
    team = factory.SubFactory(TeamFactory)
    currency = "CNY"
    total = Decimal("0.00")


class StatementLineFactory(DjangoModelFactory):
    class Meta:
        model = StatementLine

    statement = factory.SubFactory(StatementFactory)
    kind = "standard"
    quantity_gpu_seconds = Decimal("3600")
    quantity_gpu_hours = Decimal("1.00")
    rate_per_gpu_hour = Decimal("14.374")
    amount_unrounded = Decimal("14.374")
    amount = Decimal("14.37")
    description = "Usage at the standard rate"


# --- Ingest windows over whole months --------------------------------------------------


def windows_complete(*, periods: Iterable[str], sources: Iterable[Source] = ()) -> int:
    """Done, complete windows (an hour at most each) wherever no window of a source covers
    the months `periods` (YYYY-MM, pool time zone); every source when none is named.
    Returns how many windows it wrote."""
    source_ids = [source.pk for source in sources] or list(
        Source.objects.values_list("pk", flat=True)
    )
    windows = []
    for period in periods:
        bounds = period_bounds(period)
        for gap in windows_missing(source_ids=source_ids, start=bounds.start, end=bounds.end):
            start = gap.start
            while start < gap.end:
                end = min(gap.end, start.replace(minute=0, second=0, microsecond=0) + HOUR)
                windows.append(
                    IngestWindow(
                        source_id=gap.source_id,
                        start=start,
                        end=end,
                        status=IngestWindow.Status.DONE,
                        completeness=Decimal(1),
                        first_written=end,
                        gpus_sighted=True,
                    )
                )
                start = end
    IngestWindow.objects.bulk_create(windows, batch_size=2000)
    return len(windows)


def window_split(window: IngestWindow, seconds: int) -> list[IngestWindow]:
    """The window replaced by done, complete windows of `seconds` covering its span, as a
    metering step of that length writes them."""
    IngestWindow.objects.filter(pk=window.pk).delete()
    length = dt.timedelta(seconds=seconds)
    count = int((window.end - window.start) / length)
    return IngestWindowFactory.create_batch(
        count,
        source=window.source,
        start=factory.Iterator([window.start + length * index for index in range(count)]),
        end=factory.LazyAttribute(lambda made: made.start + length),
    )
