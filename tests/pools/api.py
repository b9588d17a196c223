"""The API pool of the API and security tests (fixture `api_pool`).

Three teams: alpha (led by `lead_a`), bravo and charlie. Twelve hours of 300-second intervals
that cross local midnight in Asia/Shanghai (18:00 to 06:00), a handful of rows outside that
range that every range query must leave out, usage in the current month for the quota export,
and one closed month (2026-10) with statements. The fixture also returns the raw records it
wrote, so tests compute expected numbers from them directly, not through the code under test.
"""

from __future__ import annotations

import datetime as dt
import random
from dataclasses import dataclass, field
from decimal import Decimal
from zoneinfo import ZoneInfo

from billing.models import PriceBook
from metering.models import (
    CapacityInterval,
    LatencyInterval,
    PodWait,
    Preemption,
    UsageInterval,
)
from metering.services import latency_p99
from tests import factories as f

STEP = dt.timedelta(seconds=300)
START = dt.datetime(2026, 10, 1, 10, 0, tzinfo=dt.UTC)  # 18:00 local, Asia/Shanghai
INTERVALS = [START + i * STEP for i in range(144)]  # twelve hours
END = INTERVALS[-1] + STEP
ZONE = ZoneInfo("Asia/Shanghai")
MICRO = Decimal("0.000001")
BOUNDS = ["0.05", "0.1", "0.25", "0.5", "1", "2.5", "+Inf"]

TASKS = {
    # external id: (team, kind)
    "alpha-search": ("alpha", "inference"),
    "alpha-notebook": ("alpha", "training_interactive"),
    "bravo-pretrain": ("bravo", "training_batch"),
    "bravo-prep": ("bravo", "preprocessing"),
    "charlie-chat": ("charlie", "inference"),
}
SERVICES = {
    # external id: (team, slo_p99_ms, is_key)
    "alpha/search": ("alpha", 300, True),
    "bravo/embed": ("bravo", 800, True),
    "charlie/chat": ("charlie", 2500, True),
    "charlie/offline": ("charlie", 5000, False),
}


@dataclass
class Usage:
    task: str
    interval: dt.datetime
    alloc: Decimal
    busy: Decimal
    memory_avg: int
    memory_peak: int
    reads: int
    writes: int
    read_bytes: int
    write_bytes: int


@dataclass
class ApiPool:
    teams: dict = field(default_factory=dict)
    tasks: dict = field(default_factory=dict)
    services: dict = field(default_factory=dict)
    usage: list[Usage] = field(default_factory=list)
    capacity: dict = field(default_factory=dict)  # interval -> gpu seconds
    latency: dict = field(default_factory=dict)  # service -> [(interval, buckets)]
    preemptions: list = field(default_factory=list)  # (task, at, gpus, since_start, lost)
    waits: list = field(default_factory=list)  # (task, scheduled, seconds)
    statements: dict = field(default_factory=dict)  # team -> Statement
    draft_book: PriceBook | None = None
    month_start: dt.datetime | None = None  # current month, for the quota export

    def team_of(self, task: str) -> str:
        return TASKS[task][0]

    def kind_of(self, task: str) -> str:
        return TASKS[task][1]


def _shape(kind: str, local_hour: int) -> tuple[int, int]:
    """Allocation bounds (GPU-seconds) per interval: inference by evening, training by night."""
    evening = local_hour >= 18
    if kind == "inference":
        return (200, 450) if evening else (20, 120)
    return (30, 150) if evening else (250, 420)


def _usage_rows(rng: random.Random, intervals: list[dt.datetime]) -> list[Usage]:
    rows = []
    for interval in intervals:
        hour = interval.astimezone(ZONE).hour
        for task, (_, kind) in TASKS.items():
            if rng.random() < 0.1:
                continue  # not every task runs in every interval
            low, high = _shape(kind, hour)
            alloc = Decimal(rng.randint(low * 10**6, high * 10**6)) * MICRO
            busy = (alloc * Decimal(rng.randint(30, 95)) / 100).quantize(MICRO)
            memory_avg = rng.randint(10**9, 4 * 10**10)
            rows.append(
                Usage(
                    task=task,
                    interval=interval,
                    alloc=alloc,
                    busy=busy,
                    memory_avg=memory_avg,
                    memory_peak=memory_avg + rng.randint(0, 10**9),
                    reads=rng.randint(0, 10**6),
                    writes=rng.randint(0, 10**6),
                    read_bytes=rng.randint(0, 10**10),
                    write_bytes=rng.randint(0, 10**10),
                )
            )
    return rows


def _buckets(rng: random.Random) -> list[list]:
    """One interval's cumulative histogram; some intervals below the 100-request minimum."""
    total = rng.choice([rng.randint(20, 90), rng.randint(150, 600)])
    weights = [rng.randint(1, 40) for _ in BOUNDS[:-1]]
    weights[-1] = rng.randint(0, 6)  # a thin slow tail, sometimes above the SLO
    counts, running = [], 0
    for weight in weights:
        running += total * weight // sum(weights)
        counts.append(running)
    counts.append(running)  # nothing slower than 2.5 s, so P99 interpolates
    return [[le, count] for le, count in zip(BOUNDS, counts, strict=True)]


def _store(pool: ApiPool) -> None:
    tasks, services = pool.tasks, pool.services
    UsageInterval.objects.bulk_create(
        UsageInterval(
            task=tasks[u.task],
            interval_start=u.interval,
            alloc_gpu_seconds=u.alloc,
            busy_gpu_seconds=u.busy,
            memory_avg_bytes=u.memory_avg,
            memory_peak_bytes=u.memory_peak,
            read_operations=u.reads,
            write_operations=u.writes,
            read_bytes=u.read_bytes,
            write_bytes=u.write_bytes,
        )
        for u in pool.usage
    )
    source = f.SourceFactory(url="http://127.0.0.1:9090")
    CapacityInterval.objects.bulk_create(
        CapacityInterval(
            source=source,
            interval_start=interval,
            gpus_present=gpus / 300,
            capacity_gpu_seconds=gpus,
        )
        for interval, gpus in pool.capacity.items()
    )
    LatencyInterval.objects.bulk_create(
        LatencyInterval(
            service=services[name],
            interval_start=i,
            buckets=b,
            request_count=b[-1][1],
            p99_seconds=latency_p99(b),
        )
        for name, rows in pool.latency.items()
        for i, b in rows
    )
    Preemption.objects.bulk_create(
        Preemption(
            task=tasks[t], pod=f"{t}-{n}", at=at, gpus=g, seconds_since_start=s, lost_gpu_seconds=x
        )
        for n, (t, at, g, s, x) in enumerate(pool.preemptions)
    )
    PodWait.objects.bulk_create(
        PodWait(
            task=tasks[t],
            pod=f"{t}-{n}",
            created=at - dt.timedelta(seconds=s),
            scheduled=at,
            ended=at,
            seconds=s,
        )
        for n, (t, at, s) in enumerate(pool.waits)
    )


def _current_month_start(now: dt.datetime) -> dt.datetime:
    local = now.astimezone(ZONE)
    return dt.datetime(local.year, local.month, 1, tzinfo=ZONE).astimezone(dt.UTC)


def build_api_pool() -> ApiPool:
    """The pool's rows, and the raw records they were written from."""
    rng = random.Random(20261001)
    pool = ApiPool()
    for name in ("alpha", "bravo", "charlie"):
        pool.teams[name] = f.TeamFactory(name=name)
    for task, (team, kind) in TASKS.items():
        pool.tasks[task] = f.TaskFactory(
            external_id=task,
            team=pool.teams[team],
            kind=kind,
            first_seen=START - dt.timedelta(hours=2),
            ended=END if task == "bravo-prep" else None,
        )
    for name, (team, slo, key) in SERVICES.items():
        pool.services[name] = f.ServiceFactory(
            external_id=name, team=pool.teams[team], slo_p99_ms=slo, is_key=key
        )
    outside = [START - STEP, END]  # just before and just after the range
    pool.usage = _usage_rows(rng, INTERVALS + outside)
    pool.capacity = {i: Decimal(2400) for i in [*INTERVALS, *outside]}
    pool.latency = {name: [(i, _buckets(rng)) for i in INTERVALS + outside] for name in SERVICES}
    pool.preemptions = [
        # task, at, gpus, seconds since start, reported lost GPU-seconds
        ("bravo-pretrain", START + dt.timedelta(minutes=40), Decimal(2), 5000, None),  # capped
        ("bravo-pretrain", START + dt.timedelta(hours=3), Decimal(2), 900, Decimal("1200.5")),
        ("bravo-pretrain", START + dt.timedelta(hours=9), Decimal(2), 900, None),
        ("bravo-prep", START + dt.timedelta(hours=6, minutes=7), Decimal("0.5"), 100, None),
        ("alpha-notebook", START + dt.timedelta(hours=1), Decimal(1), 3000, Decimal(500)),
        ("alpha-notebook", START - dt.timedelta(hours=1), Decimal(1), 3000, None),  # outside
    ]
    pool.waits = [
        (task, START + dt.timedelta(minutes=rng.randint(0, 719)), rng.randint(1, 900))
        for task in TASKS
        for _ in range(3)
    ] + [("bravo-pretrain", END + dt.timedelta(minutes=1), 7777)]  # outside
    _store(pool)
    for hour in range(12):
        f.IngestWindowFactory(
            start=START + dt.timedelta(hours=hour),
            first_written=None,
            completeness=Decimal("0.5") if hour == 5 else Decimal(1),
        )
    _current_month(pool, rng)
    _closed_month(pool)
    pool.draft_book = f.PriceBookFactory()
    return pool


def _current_month(pool: ApiPool, rng: random.Random) -> None:
    """An hour of usage at the start of this month, and quotas, for the quota export."""
    now = dt.datetime.now(dt.UTC)
    pool.month_start = _current_month_start(now)
    intervals = [pool.month_start + i * STEP for i in range(12)]
    rows = [u for u in _usage_rows(rng, intervals) if u.task in ("alpha-search", "bravo-pretrain")]
    pool.usage += rows
    UsageInterval.objects.bulk_create(
        UsageInterval(task=pool.tasks[u.task], interval_start=u.interval, alloc_gpu_seconds=u.alloc)
        for u in rows
    )
    # Capacity too, so that the month-to-date draft can price the month so far.
    CapacityInterval.objects.bulk_create(
        CapacityInterval(
            source=f.SourceFactory(url="http://127.0.0.1:9090"),
            interval_start=interval,
            gpus_present=8,
            capacity_gpu_seconds=Decimal(2400),
        )
        for interval in intervals
    )
    f.IngestWindowFactory(start=pool.month_start, first_written=None)
    f.QuotaFactory(
        team=pool.teams["alpha"],
        allowance_gpu_hours=Decimal("100.00"),
        allowance_money=Decimal("1000.00"),
        concurrent_gpu_cap=None,
        io_caps={},
    )
    f.QuotaFactory(
        team=pool.teams["bravo"],
        allowance_gpu_hours=Decimal("0.50"),
        concurrent_gpu_cap=Decimal("16"),
        io_caps={"training_batch": 5000, "preprocessing": "250.5"},
    )


def _closed_month(pool: ApiPool) -> None:
    close = f.PeriodCloseFactory()
    alpha = f.StatementFactory(period_close=close, team=pool.teams["alpha"], total="30.00")
    f.StatementLineFactory(statement=alpha, kind="standard", amount="25.00")
    f.StatementLineFactory(statement=alpha, kind="baseline", amount="5.00")
    bravo = f.StatementFactory(period_close=close, team=pool.teams["bravo"], total="50.00")
    f.StatementLineFactory(statement=bravo, kind="offpeak", amount="50.00")
    pool.statements = {"alpha": alpha, "bravo": bravo}
