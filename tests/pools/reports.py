"""The report pool of the report tests (fixture `report_pool`), closed by billing.

`build_report_pool()` writes twelve hours of a 4-GPU pool at a 300 s step in October 2026
(03:00 to 15:00 in Asia/Shanghai, so it crosses into the 09:00 peak), and two hours in
September for the month-on-month trend. One team carries a formula as its name, and its tasks
too, so every CSV cell that reaches a spreadsheet can be checked for escaping. Latency
histograms breach the search SLO in some peak intervals while training runs (penalty and
credit lines); the training task is preempted five times (compensation beyond the third).
Then billing closes the month with its own `period_close`.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from decimal import Decimal

from metering.models import (
    CapacityInterval,
    IngestQueries,
    LatencyInterval,
    PodWait,
    Preemption,
    Service,
    Source,
    Task,
    Team,
    UsageInterval,
)
from metering.services import latency_p99
from tests.factories import (
    IngestWindowFactory,
    ServiceFactory,
    SourceFactory,
    TaskFactory,
    TeamFactory,
)

STEP = dt.timedelta(seconds=300)
PERIOD = "2026-10"
PREVIOUS_PERIOD = "2026-09"
OCTOBER_START = dt.datetime(2026, 9, 30, 19, 0, tzinfo=dt.UTC)  # 03:00 local
OCTOBER_INTERVALS = [OCTOBER_START + i * STEP for i in range(144)]
SEPTEMBER_START = dt.datetime(2026, 9, 15, 2, 0, tzinfo=dt.UTC)  # 10:00 local
SEPTEMBER_INTERVALS = [SEPTEMBER_START + i * STEP for i in range(24)]
NOVEMBER_START = dt.datetime(2026, 11, 2, 2, 0, tzinfo=dt.UTC)  # 10:00 local
GPUS = 4
EVIL_TEAM = '=HYPERLINK("http://evil.example/","click me")'
EVIL_TASK = "@SUM(1+1)*cmd|' /C calc'!A0"
DASH_TASK = "-2+3"
BOUNDS = ["0.05", "0.1", "0.25", "0.5", "1", "2.5", "+Inf"]
# 200 requests each. FAST: P99 about 101 ms, within a 300 ms objective; SLOW: 30 requests
# above 0.5 s, P99 about 2.4 s, far above it.
FAST = [[le, c] for le, c in zip(BOUNDS, [150, 197, 199, 200, 200, 200, 200], strict=True)]
SLOW = [[le, c] for le, c in zip(BOUNDS, [20, 60, 120, 170, 185, 198, 200], strict=True)]


# The windows' runs record the PromQL they ran, for the report's "how was this measured" page.
QUERIES = [
    {"meter": "devices", "promql": "sum by (namespace, pod) (recorded_allocation)"},
    {"meter": "latency", "promql": "sum by (le) (recorded_latency)"},
]


def _window(pool: ReportPool, start: dt.datetime) -> None:
    """A done window, measured by a run of its own that recorded QUERIES."""
    run = IngestQueries.objects.create(
        source=pool.source, first_start=start, last_start=start, queries=QUERIES, recorded=start
    )
    IngestWindowFactory(source=pool.source, start=start, measured_with=run)


@dataclass
class ReportPool:
    source: Source
    teams: dict[str, Team] = field(default_factory=dict)
    tasks: dict[str, Task] = field(default_factory=dict)
    services: dict[str, Service] = field(default_factory=dict)


def is_peak(interval: dt.datetime) -> bool:
    local_hour = (interval + dt.timedelta(hours=8)).hour  # Asia/Shanghai has no DST
    return 9 <= local_hour < 22


def _usage(pool: ReportPool, intervals: list[dt.datetime]) -> None:
    rows = []
    for n, interval in enumerate(intervals):
        held = {"search-api": Decimal(300), "vit-pretrain": Decimal(600)}
        if not is_peak(interval):
            held[EVIL_TASK] = Decimal("150.5")
        if n % 3 == 0:
            held[DASH_TASK] = Decimal("75.25")
        rows += [
            UsageInterval(
                task=pool.tasks[task],
                interval_start=interval,
                alloc_gpu_seconds=alloc,
                busy_gpu_seconds=(alloc * Decimal("0.6")).quantize(Decimal("0.000001")),
            )
            for task, alloc in held.items()
        ]
    UsageInterval.objects.bulk_create(rows)
    CapacityInterval.objects.bulk_create(
        CapacityInterval(
            source=pool.source,
            interval_start=interval,
            gpus_present=Decimal(GPUS),
            capacity_gpu_seconds=Decimal(GPUS * 300),
        )
        for interval in intervals
    )


def _latency(pool: ReportPool, intervals: list[dt.datetime], slow_every: int) -> None:
    LatencyInterval.objects.bulk_create(
        LatencyInterval(
            service=pool.services["search/api"],
            interval_start=interval,
            buckets=buckets,
            request_count=200,
            p99_seconds=latency_p99(buckets),
        )
        for n, interval in enumerate(intervals)
        for buckets in [SLOW if is_peak(interval) and n % slow_every == 0 else FAST]
    )


def _events(pool: ReportPool) -> None:
    pretrain = pool.tasks["vit-pretrain"]
    Preemption.objects.bulk_create(
        Preemption(
            task=pretrain,
            pod=f"vit-pretrain-{n}",
            at=OCTOBER_START + dt.timedelta(hours=2 * n + 1, minutes=3),
            gpus=Decimal(2),
            seconds_since_start=600 + 100 * n,
            lost_gpu_seconds=Decimal(900) if n == 4 else None,
        )
        for n in range(5)
    )
    waits = [
        ("vit-pretrain", OCTOBER_START + dt.timedelta(hours=1), 120),
        ("vit-pretrain", OCTOBER_START + dt.timedelta(hours=5), 300),
        ("search-api", OCTOBER_START + dt.timedelta(hours=2), 10),
        (EVIL_TASK, OCTOBER_START + dt.timedelta(hours=3), 60),
        ("vit-pretrain", SEPTEMBER_START + dt.timedelta(minutes=30), 900),
        ("search-api", SEPTEMBER_START + dt.timedelta(minutes=40), 30),
    ]
    PodWait.objects.bulk_create(
        PodWait(
            task=pool.tasks[task],
            pod=f"pod-{n}",
            created=at - dt.timedelta(seconds=seconds),
            scheduled=at,
            ended=at,
            seconds=seconds,
        )
        for n, (task, at, seconds) in enumerate(waits)
    )


def add_intervals(pool: ReportPool, intervals: list[dt.datetime]) -> None:
    """More metered intervals of the same pool (usage, capacity, latency, done windows)."""
    _usage(pool, intervals)
    _latency(pool, intervals, slow_every=6)
    hours = sorted({i.replace(minute=0) for i in intervals})
    for hour in hours:
        _window(pool, hour)


def build_report_pool() -> ReportPool:
    """The metering rows of the pool (nothing closed yet)."""
    pool = ReportPool(source=SourceFactory(scrape_interval_seconds=60))
    for name in ("search", "vision", EVIL_TEAM):
        pool.teams[name] = TeamFactory(name=name)
    tasks = {
        "search-api": ("search", "inference"),
        "vit-pretrain": ("vision", "training_batch"),
        EVIL_TASK: (EVIL_TEAM, "training_interactive"),
        DASH_TASK: (EVIL_TEAM, "preprocessing"),
    }
    for external_id, (team, kind) in tasks.items():
        pool.tasks[external_id] = TaskFactory(
            source=pool.source,
            external_id=external_id,
            team=pool.teams[team],
            kind=kind,
            first_seen=SEPTEMBER_START,
        )
    pool.services["search/api"] = ServiceFactory(
        source=pool.source, external_id="search/api", team=pool.teams["search"], slo_p99_ms=300
    )
    _usage(pool, OCTOBER_INTERVALS)
    _usage(pool, SEPTEMBER_INTERVALS)
    _latency(pool, OCTOBER_INTERVALS, slow_every=4)
    _latency(pool, SEPTEMBER_INTERVALS, slow_every=12)
    _events(pool)
    for hour in range(12):
        _window(pool, OCTOBER_START + dt.timedelta(hours=hour))
    for hour in range(2):
        _window(pool, SEPTEMBER_START + dt.timedelta(hours=hour))
    return pool
