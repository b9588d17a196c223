"""The monthly report's health numbers, frozen with the month's statements.

The statements of a closed month never change; late metering data becomes corrections in a
later close. The report's health numbers (the three cards, the SLA record's P99s, the sharing
analytics, the top preempted tasks, the waits) are read from metering, so re-reading them
after late data would change a closed month's report but not its statements. Instead they are
read once, while the month is closed, and stored beside the close (`HealthSnapshot`).

Billing sits below reports and never imports it: reports registers a `PeriodCloseHook`
(billing/close_hooks.py) from `ReportsConfig.ready()`. `period_close` calls its `read` while
it reads metering (the committed state the statements are priced from) and its `store` in the
transaction that stores the close, so a close is stored with its numbers or not at all.

Closes stored before snapshots existed have none: their report reads the numbers live, and
says so. They are not back-filled: numbers read today are not the month as it was closed, and
a stored copy would pretend they were.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from decimal import Decimal

from django.db.models import Count, Max, Sum

from billing.close_hooks import PeriodCloseHook
from billing.models import PeriodClose, PriceBook
from billing.selectors import PeriodBounds, period_bounds_billed, period_previous
from kernel.money import ROUNDING
from metering.models import PodWait, Preemption
from reports import health
from reports import selectors as health_selectors
from reports.formatting import CENT, gpu_hours
from reports.models import HealthSnapshot

TOP_PREEMPTED_TASKS = 10
RECORD_VERSION = 1
Range = tuple[dt.datetime, dt.datetime]


@dataclass(frozen=True)
class PreemptedTask:
    task_id: int
    task: str
    team: str
    kind: str
    preemptions: int
    lost_gpu_hours: Decimal


@dataclass(frozen=True)
class PeriodHealth:
    """What the report shows of metering for a month, and the month before it."""

    before: health.HealthNumbers
    after: health.HealthNumbers
    sharing: health.SharingAnalytics
    top_preempted: list[PreemptedTask]
    wait_rows: list[dict]
    read_live: bool = False  # True: no snapshot stored with the close, read from metering now

    @property
    def verdict(self) -> health.Verdict:
        return health.verdict(self.before, self.after)


# --- Reading metering -------------------------------------------------------------------


def top_preempted_tasks(
    *, start: dt.datetime, end: dt.datetime, cap_seconds: int, limit: int = TOP_PREEMPTED_TASKS
) -> list[PreemptedTask]:
    """Tasks preempted most in the range, with the GPU-hours lost (reported, else estimated)."""
    lost = health_selectors.lost_gpu_seconds_expression(cap_seconds)
    rows = (
        Preemption.objects.filter(at__gte=start, at__lt=end)
        .values("task_id", "task__external_id", "task__team__name", "task__kind")
        .annotate(n=Count("id"), lost=Sum(lost))
        .order_by("-n", "-lost", "task__external_id")[:limit]
    )
    return [
        PreemptedTask(
            task_id=row["task_id"],
            task=row["task__external_id"],
            team=row["task__team__name"],
            kind=row["task__kind"],
            preemptions=row["n"],
            lost_gpu_hours=gpu_hours(row["lost"]).quantize(CENT, ROUNDING),
        )
        for row in rows
    ]


def wait_rows(waits: health.Waits, *, start: dt.datetime, end: dt.datetime) -> list[dict]:
    """Per kind of the range's `waits` (the health numbers'): the pods' scheduling attempts, the
    average wait before running (with Kueue's admission wait where it admitted the kind's
    workloads), the average admission wait (None without any) and the longest pod's wait
    (Kueue's histogram holds no longest), the one thing read here."""
    longest = dict(
        PodWait.objects.filter(ended__gte=start, ended__lt=end)
        .values("task__kind")
        .annotate(longest=Max("seconds"))
        .values_list("task__kind", "longest")
    )
    return [
        {
            "kind": wait.kind,
            "attempts": wait.scheduling.waits,
            "gave_up": wait.scheduling.gave_up,
            "average_seconds": wait.mean_seconds,
            "admission_seconds": wait.admission.mean_seconds,
            "admitted": wait.admission.waits,
            "longest_seconds": Decimal(longest.get(wait.kind, 0)),
        }
        for wait in waits.kinds
    ]


def period_health_read(*, period: Range, previous: Range, cap_seconds: int) -> PeriodHealth:
    """The whole pool's numbers for `period`, compared with `previous`, read from metering."""
    before, after, _ = health_selectors.health_comparison(before=previous, after=period)
    return PeriodHealth(
        before=before,
        after=after,
        sharing=health_selectors.sharing_analytics(start=period[0], end=period[1]),
        top_preempted=top_preempted_tasks(start=period[0], end=period[1], cap_seconds=cap_seconds),
        wait_rows=wait_rows(after.waits, start=period[0], end=period[1]),
    )


def period_health(close: PeriodClose, *, previous: Range) -> PeriodHealth:
    """The numbers stored with `close`, else (a close older than snapshots) read live."""
    snapshot = HealthSnapshot.objects.filter(period_close=close).first()
    if snapshot is not None:
        return period_health_from_record(snapshot.numbers)
    live = period_health_read(
        period=(close.period_start, close.period_end),
        previous=previous,
        cap_seconds=close.price_book.starvation_lost_work_cap_seconds,
    )
    return PeriodHealth(
        before=live.before,
        after=live.after,
        sharing=live.sharing,
        top_preempted=live.top_preempted,
        wait_rows=live.wait_rows,
        read_live=True,
    )


# --- The close's hook -------------------------------------------------------------------


def health_snapshot_read(bounds: PeriodBounds, book: PriceBook) -> dict:
    try:
        # The month before as it was closed: its bounds stay when the pool's zone changes.
        before = period_bounds_billed(period_previous(bounds.period))
        previous = (before.start, before.end)
    except ValueError:  # the first month Tandem can close has no month before it
        previous = (bounds.start, bounds.start)
    numbers = period_health_read(
        period=(bounds.start, bounds.end),
        previous=previous,
        cap_seconds=book.starvation_lost_work_cap_seconds,
    )
    return period_health_record(numbers)


def health_snapshot_store(close: PeriodClose, record: object) -> None:
    HealthSnapshot.objects.create(period_close=close, numbers=record)


HEALTH_SNAPSHOT_HOOK = PeriodCloseHook(
    name="reports.health_snapshot", read=health_snapshot_read, store=health_snapshot_store
)


# --- As stored (JSON: Decimals as exact text, dicts as ordered pairs) --------------------


def _text(value: Decimal | None) -> str | None:
    return None if value is None else str(value)


def _decimal(value: str | None) -> Decimal | None:
    return None if value is None else Decimal(value)


def _numbers_record(numbers: health.HealthNumbers) -> dict:
    return {
        "utilization": [
            str(numbers.utilization.busy_gpu_seconds),
            str(numbers.utilization.capacity_gpu_seconds),
        ],
        "services": [
            {
                "service_id": s.service_id,
                "service": s.service,
                "team": s.team,
                "slo_p99_ms": s.slo_p99_ms,
                "p99_ms": _text(s.p99_ms),
                "requests": str(s.requests),
                "intervals": s.intervals,
                "breached_intervals": s.breached_intervals,
            }
            for s in numbers.services
        ],
        "waits": [
            [kind, wait.waits, str(wait.total_seconds), wait.gave_up]
            for kind, wait in numbers.waits.per_kind.items()
        ],
        "admissions": [
            [kind, admitted.waits, str(admitted.total_seconds)]
            for kind, admitted in numbers.waits.admissions.items()
        ],
        "admissions_unread": numbers.waits.admissions_unread,
    }


def _numbers_from_record(record: dict) -> health.HealthNumbers:
    busy, capacity = record["utilization"]
    return health.HealthNumbers(
        utilization=health.Utilization(
            busy_gpu_seconds=Decimal(busy), capacity_gpu_seconds=Decimal(capacity)
        ),
        services=[
            health.ServiceLatency(
                **{**s, "p99_ms": _decimal(s["p99_ms"]), "requests": Decimal(s["requests"])}
            )
            for s in record["services"]
        ],
        waits=health.Waits(
            # Snapshots stored before waits of pods that gave up were stored hold three
            # items: their months counted scheduled pods only, and say so (`gave_up` None).
            per_kind={
                kind: health.MeanWait(
                    waits=waits,
                    total_seconds=Decimal(total),
                    gave_up=gave_up[0] if gave_up else None,
                )
                for kind, waits, total, *gave_up in record["waits"]
            },
            # Snapshots stored before Kueue's admissions were read hold none: their months'
            # windows did not read them either.
            admissions={
                kind: health.MeanWait(waits=workloads, total_seconds=Decimal(total))
                for kind, workloads, total in record.get("admissions", [])
            },
            admissions_unread=record.get("admissions_unread", True),
        ),
    )


def _sharing_record(sharing: health.SharingAnalytics) -> dict:
    return {
        "profile": [
            [
                hour.hour,
                str(hour.capacity_gpu_seconds),
                str(hour.training_gpu_seconds),
                str(hour.inference_gpu_seconds),
            ]
            for hour in sharing.profile
        ],
        "interruptible_gpu_seconds": str(sharing.interruptible_gpu_seconds),
        "allocated_gpu_seconds": str(sharing.allocated_gpu_seconds),
        "lost_gpu_seconds_per_team": [
            [team, _text(lost)] for team, lost in sharing.lost_gpu_seconds_per_team.items()
        ],
    }


def _sharing_from_record(record: dict) -> health.SharingAnalytics:
    return health.SharingAnalytics(
        profile=[
            health.HourProfile(
                hour=hour,
                capacity_gpu_seconds=Decimal(capacity),
                training_gpu_seconds=Decimal(training),
                inference_gpu_seconds=Decimal(inference),
            )
            for hour, capacity, training, inference in record["profile"]
        ],
        interruptible_gpu_seconds=Decimal(record["interruptible_gpu_seconds"]),
        allocated_gpu_seconds=Decimal(record["allocated_gpu_seconds"]),
        lost_gpu_seconds_per_team={
            team: _decimal(lost) for team, lost in record["lost_gpu_seconds_per_team"]
        },
    )


def period_health_record(numbers: PeriodHealth) -> dict:
    """`numbers` as JSON that reads back exactly (see `period_health_from_record`)."""
    return {
        "version": RECORD_VERSION,
        "before": _numbers_record(numbers.before),
        "after": _numbers_record(numbers.after),
        "sharing": _sharing_record(numbers.sharing),
        "top_preempted": [
            {**task.__dict__, "lost_gpu_hours": str(task.lost_gpu_hours)}
            for task in numbers.top_preempted
        ],
        "wait_rows": [
            {
                "kind": row["kind"],
                "attempts": row["attempts"],
                "gave_up": row["gave_up"],
                "average_seconds": str(row["average_seconds"]),
                "admission_seconds": _text(row["admission_seconds"]),
                "admitted": row["admitted"],
                "longest_seconds": str(row["longest_seconds"]),
            }
            for row in numbers.wait_rows
        ],
    }


def period_health_from_record(record: dict) -> PeriodHealth:
    if record.get("version") != RECORD_VERSION:
        raise ValueError(f"health snapshot version {record.get('version')!r} is not readable")
    return PeriodHealth(
        before=_numbers_from_record(record["before"]),
        after=_numbers_from_record(record["after"]),
        sharing=_sharing_from_record(record["sharing"]),
        top_preempted=[
            PreemptedTask(**{**task, "lost_gpu_hours": Decimal(task["lost_gpu_hours"])})
            for task in record["top_preempted"]
        ],
        wait_rows=[
            {
                "kind": row["kind"],
                "attempts": row["attempts"],
                "gave_up": row.get("gave_up"),  # None: a snapshot from before they were stored
                "average_seconds": Decimal(row["average_seconds"]),
                # Snapshots stored before Kueue's admissions were read hold none.
                "admission_seconds": _decimal(row.get("admission_seconds")),
                "admitted": row.get("admitted", 0),
                "longest_seconds": Decimal(row["longest_seconds"]),
            }
            for row in record["wait_rows"]
        ],
    )
