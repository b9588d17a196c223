"""The boundary pool of the billing tests (fixture `boundary_pool`).

`build_boundary_pool()` writes a day and a half of a 8-GPU pool at a 300 s step, across the
2026-09 / 2026-10 boundary in Asia/Shanghai: two inference services, three training tasks,
latency histograms with some breaches, preemptions beyond the threshold, a GPU that drops out,
and done ingest windows covering it all. A few thousand rows: quick to write and to price.
"""

from __future__ import annotations

import datetime as dt
import random
from dataclasses import dataclass
from decimal import Decimal

from django.db.models import Expression
from django.utils import timezone

from metering.models import (
    CapacityInterval,
    IngestWindow,
    LatencyInterval,
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

STEP = 300
BUCKET_BOUNDS = ["0.05", "0.1", "0.25", "0.5", "1", "2.5", "5", "+Inf"]


@dataclass
class BoundaryPool:
    source: Source
    teams: dict[str, Team]
    tasks: dict[str, Task]
    services: dict[str, Service]
    start: dt.datetime
    end: dt.datetime


def usage_changed_late(
    pool: BoundaryPool,
    task: str,
    start: dt.datetime,
    end: dt.datetime,
    alloc: Expression,
    **narrowed: object,
) -> None:
    """Windows of [start, end) ingested again after a close: `task`'s allocated GPU-seconds
    there (its rows `narrowed` to, where given) become `alloc`, and the windows flag
    themselves as changed after their first write, as metering does."""
    UsageInterval.objects.filter(
        task=pool.tasks[task], interval_start__gte=start, interval_start__lt=end, **narrowed
    ).update(alloc_gpu_seconds=alloc)
    IngestWindow.objects.filter(start__gte=start, start__lt=end).update(
        changed_after_first_write=timezone.now()
    )


def build_boundary_pool(
    *,
    start: dt.datetime = dt.datetime(2026, 9, 29, 16, tzinfo=dt.UTC),  # 2026-09-30 00:00 local
    hours: int = 36,
    seed: int = 7,
) -> BoundaryPool:
    """A deterministic 8-GPU pool for `hours` from `start` (see the module docstring)."""
    rng = random.Random(seed)
    source = SourceFactory(name="default")
    teams = {name: TeamFactory(name=name) for name in ("search", "chat", "vision", "nlp")}
    kinds = {
        "search-api": ("search", "inference"),
        "chat-api": ("chat", "inference"),
        "vit-pretrain": ("vision", "training_batch"),
        "llm-sft": ("nlp", "training_batch"),
        "nlp-notebook": ("nlp", "training_interactive"),
    }
    tasks = {
        name: TaskFactory(
            source=source, external_id=name, team=teams[team], kind=kind, first_seen=start
        )
        for name, (team, kind) in kinds.items()
    }
    services = {
        "search-api": ServiceFactory(
            source=source, external_id="search-api", team=teams["search"], slo_p99_ms=300
        ),
        "chat-api": ServiceFactory(
            source=source, external_id="chat-api", team=teams["chat"], slo_p99_ms=1500
        ),
    }
    intervals = [start + dt.timedelta(seconds=STEP * n) for n in range(hours * 3600 // STEP)]
    capacity, usage, latency = [], [], []
    for number, interval in enumerate(intervals):
        gpus = 7 if 40 <= number < 52 else 8  # a GPU drops out for an hour
        capacity.append(
            CapacityInterval(
                source=source,
                interval_start=interval,
                gpus_present=gpus,
                capacity_gpu_seconds=Decimal(gpus * STEP),
            )
        )
        for task, alloc in _allocations(rng, gpus * STEP).items():
            if alloc:
                usage.append(
                    UsageInterval(
                        task=tasks[task], interval_start=interval, alloc_gpu_seconds=alloc
                    )
                )
        for service in services.values():
            buckets = _histogram(rng)
            latency.append(
                LatencyInterval(
                    service=service,
                    interval_start=interval,
                    buckets=buckets,
                    request_count=buckets[-1][1],
                    p99_seconds=latency_p99(buckets),
                )
            )
    CapacityInterval.objects.bulk_create(capacity)
    UsageInterval.objects.bulk_create(usage)
    LatencyInterval.objects.bulk_create(latency)
    _preemptions(tasks, start)
    for hour in range(hours):
        IngestWindowFactory(source=source, start=start + dt.timedelta(hours=hour))
    end = start + dt.timedelta(hours=hours)
    return BoundaryPool(source, teams, tasks, services, start, end)


def _allocations(rng: random.Random, capacity: int) -> dict[str, Decimal]:
    """Allocations that fit the interval's capacity; fractional GPUs (75 s steps) included."""
    allocations = {
        "search-api": 75 * rng.randint(2, 8),
        "chat-api": 75 * rng.randint(2, 6),
        "vit-pretrain": 150 * rng.randint(0, 4),
        "llm-sft": 150 * rng.randint(0, 4),
        "nlp-notebook": 150 * rng.randint(0, 1),
    }
    for task in ("nlp-notebook", "llm-sft", "vit-pretrain"):
        excess = sum(allocations.values()) - capacity
        if excess > 0:
            allocations[task] = max(0, allocations[task] - excess)
    return {task: Decimal(alloc) for task, alloc in allocations.items()}


def _histogram(rng: random.Random) -> list[list]:
    """Cumulative bucket counts of one interval; one interval in eight is slow."""
    requests = rng.randint(40, 400)
    slow = rng.random() < 0.125
    weights = [4, 3, 2, 1, 1, 6, 4, 1] if slow else [70, 25, 5, 0, 0, 0, 0, 0]
    counts = [0] * len(weights)
    for bucket in rng.choices(range(len(weights)), weights, k=requests):
        counts[bucket] += 1
    cumulative, total = [], 0
    for bound, count in zip(BUCKET_BOUNDS, counts, strict=True):
        total += count
        cumulative.append([bound, total])
    return cumulative


def _preemptions(tasks: dict[str, Task], start: dt.datetime) -> None:
    """vit-pretrain is preempted five times in September (two beyond the threshold of 3)."""
    events = [
        ("vit-pretrain", 2, 7200, Decimal(1200)),
        ("vit-pretrain", 5, 3000, None),
        ("vit-pretrain", 9, 5400, None),
        ("vit-pretrain", 14, 900, None),  # 4th: earns compensation at the peak rate
        ("vit-pretrain", 22, 2400, Decimal("600.5")),  # 5th: off-peak, reported loss
        ("vit-pretrain", 30, 2400, None),  # October's first, the 6th ever: compensated
        ("llm-sft", 3, 4000, None),
        ("llm-sft", 20, 100, None),
    ]
    Preemption.objects.bulk_create(
        Preemption(
            task=tasks[task],
            pod=f"{task}-{hour}",
            at=start + dt.timedelta(hours=hour, minutes=2),
            gpus=Decimal(2),
            seconds_since_start=since,
            lost_gpu_seconds=lost,
        )
        for task, hour, since, lost in events
    )
