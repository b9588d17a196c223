"""The page pool of the dashboard, browser and rollup tests (fixture `closed_pool`).

`build_page_pool()` writes two days of a month, 8 GPUs, five-minute intervals: inference peaks in
the pool's daytime, training fills the nights, one batch job is preempted five times, one
service breaches its SLO in a few peak intervals. Deterministic (seeded), a few thousand rows,
built in well under a second, so every page has something real to draw. `build_closed_page_pool()`
meters September and October that way and closes both.
"""

from __future__ import annotations

import datetime as dt
import random
from dataclasses import dataclass
from decimal import Decimal
from zoneinfo import ZoneInfo

from django.conf import settings

from billing import services as billing_services
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
)
from metering.services import latency_p99
from tests.factories import windows_complete

GPUS = 8
STEP = 300
BUCKET_BOUNDS = ["0.1", "0.25", "0.5", "1", "2.5", "5", "+Inf"]


@dataclass
class PagePool:
    source: Source
    teams: dict[str, Team]
    tasks: dict[str, Task]
    services: dict[str, Service]
    start: dt.datetime
    end: dt.datetime
    month: str


# (external id, team, kind): GPUs held in local daytime (9-22 h) and at night.
TASKS = [
    ("search-ranker", "search", "inference", 3, 1),
    ("speech-asr", "speech", "inference", 1, 1),
    ("vision-resnet-train", "vision", "training_batch", 1, 4),
    ("search-notebook", "search", "training_interactive", 1, 0),
    ("vision-etl", "vision", "preprocessing", 0, 1),
    ("speech-finetune", "speech", "training_batch", 1, 1),
]
SERVICES = [
    ("search/ranker", "search", 1000, "search-ranker"),
    ("speech/asr", "speech", 1500, "speech-asr"),
]


def _buckets(rng: random.Random, requests: int, slow: bool) -> list[list]:
    """Cumulative latency buckets; a slow interval puts over 1 % of requests above 1 s."""
    shares = (
        [0.40, 0.35, 0.20, 0.046, 0.003, 0.001] if not slow else [0.2, 0.3, 0.2, 0.1, 0.15, 0.05]
    )
    cumulative, counts = 0, []
    for share in shares:
        cumulative += round(requests * share)
        counts.append(min(cumulative, requests))
    counts.append(requests)
    return [[bound, count] for bound, count in zip(BUCKET_BOUNDS, counts, strict=True)]


def build_page_pool(*, first_day: dt.date, days: int = 2, seed: int = 1) -> PagePool:
    rng = random.Random(seed)
    zone = ZoneInfo(settings.TANDEM_TIMEZONE)
    start = dt.datetime.combine(first_day, dt.time(), zone).astimezone(dt.UTC)
    end = start + dt.timedelta(days=days)
    source, _ = Source.objects.get_or_create(
        name="default", defaults={"url": "http://127.0.0.1:9090"}
    )
    teams = {
        name: Team.objects.get_or_create(name=name)[0] for name in ("search", "speech", "vision")
    }
    # get_or_create: building a second range (another month) reuses the same tasks.
    tasks = {
        external_id: Task.objects.get_or_create(
            source=source,
            external_id=external_id,
            defaults={
                "team": teams[team],
                "kind": kind,
                "first_seen": start,
                "created": start,
                "first_started": start + dt.timedelta(minutes=2),
            },
        )[0]
        for external_id, team, kind, _, _ in TASKS
    }
    services = {
        external_id: Service.objects.get_or_create(
            source=source,
            external_id=external_id,
            defaults={"team": teams[team], "slo_p99_ms": slo, "slo_stated": start},
        )[0]
        for external_id, team, slo, _ in SERVICES
    }
    usage, capacity, latency = [], [], []
    moment = start
    while moment < end:
        daytime = 9 <= moment.astimezone(zone).hour < 22
        capacity.append(
            CapacityInterval(
                source=source,
                interval_start=moment,
                gpus_present=Decimal(GPUS),
                capacity_gpu_seconds=Decimal(GPUS * STEP),
            )
        )
        for external_id, _, _, day_gpus, night_gpus in TASKS:
            gpus = day_gpus if daytime else night_gpus
            if not gpus:
                continue
            busy = Decimal(rng.randint(55, 95)) / 100
            usage.append(
                UsageInterval(
                    task=tasks[external_id],
                    interval_start=moment,
                    alloc_gpu_seconds=Decimal(gpus * STEP),
                    busy_gpu_seconds=gpus * STEP * busy,
                    memory_avg_bytes=gpus * rng.randint(20, 60) * 2**30,
                    memory_peak_bytes=gpus * 70 * 2**30,
                    read_operations=rng.randint(100, 5000),
                    write_operations=rng.randint(10, 500),
                    read_bytes=rng.randint(1, 900) * 2**20,
                    write_bytes=rng.randint(1, 90) * 2**20,
                )
            )
        for external_id, _, _, _ in SERVICES:
            requests = rng.randint(300, 600) if daytime else rng.randint(40, 90)
            # A handful of slow peak intervals for the ranker: the SLA page has breaches.
            slow = external_id == "search/ranker" and daytime and rng.random() < 0.04
            buckets = _buckets(rng, requests, slow)
            latency.append(
                LatencyInterval(
                    service=services[external_id],
                    interval_start=moment,
                    buckets=buckets,
                    request_count=requests,
                    p99_seconds=latency_p99(buckets),
                )
            )
        moment += dt.timedelta(seconds=STEP)
    CapacityInterval.objects.bulk_create(capacity)
    UsageInterval.objects.bulk_create(usage, batch_size=2000)
    LatencyInterval.objects.bulk_create(latency)
    _events(tasks, start, rng, label=f"{first_day:%m%d}")
    _windows(source, start, end)
    return PagePool(source, teams, tasks, services, start, end, f"{first_day:%Y-%m}")


def _events(tasks: dict[str, Task], start: dt.datetime, rng: random.Random, *, label: str) -> None:
    train = tasks["vision-resnet-train"]
    for number in range(5):
        # One an hour from 17:07 local: the fourth and fifth are beyond the free three.
        at = start + dt.timedelta(hours=17 + number, minutes=7)
        Preemption.objects.create(
            task=train,
            pod=f"vision-resnet-train-{label}-{number}",
            at=at,
            gpus=Decimal(2),
            seconds_since_start=900 + 600 * number,
            lost_gpu_seconds=Decimal(1200) if number == 4 else None,
        )
    for external_id, task in tasks.items():
        for attempt in range(3):
            created = start + dt.timedelta(hours=6 * attempt + 1)
            seconds = rng.randint(5, 90) if task.kind == "inference" else rng.randint(60, 1800)
            PodWait.objects.create(
                task=task,
                pod=f"{external_id}-{label}-{attempt}",
                created=created,
                scheduled=created + dt.timedelta(seconds=seconds),
                ended=created + dt.timedelta(seconds=seconds),
                seconds=seconds,
            )


def _windows(source: Source, start: dt.datetime, end: dt.datetime) -> None:
    moment = start
    windows = []
    while moment < end:
        windows.append(
            IngestWindow(
                source=source,
                start=moment,
                end=moment + dt.timedelta(hours=1),
                status=IngestWindow.Status.DONE,
                completeness=Decimal(1),
                samples_seen=1000,
                samples_expected=1000,
            )
        )
        moment += dt.timedelta(hours=1)
    IngestWindow.objects.bulk_create(windows)


MONTH = "2026-10"
PREVIOUS_MONTH = "2026-09"
# Closing a month needs it to be over; tests pass this instant instead of the clock.
AFTER_BOTH_MONTHS = dt.datetime(2026, 11, 15, tzinfo=dt.UTC)


def build_closed_page_pool() -> PagePool:
    """September (3 days) and October (2 days) metered, both closed; a draft book for what-if.

    A flush (transactional tests) removes the default book the migration wrote: make sure of it.
    """
    billing_services.price_book_ensure_default()
    build_page_pool(first_day=dt.date(2026, 9, 1), days=3, seed=2)
    pool = build_page_pool(first_day=dt.date(2026, 10, 1), days=2, seed=1)
    windows_complete(periods=(PREVIOUS_MONTH, MONTH))
    for period in (PREVIOUS_MONTH, MONTH):
        billing_services.period_close(period=period, now=AFTER_BOTH_MONTHS)
    billing_services.price_book_create_draft(
        effective_from=dt.date(2027, 1, 1),
        notes="cheaper hardware",
        depreciation_per_gpu_hour=Decimal("9.50"),
    )
    return pool
