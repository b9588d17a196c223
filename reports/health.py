"""The three health numbers and the sharing analytics, as pure computation.

Nothing here touches the database: `reports/selectors.py` reads metering rows and hands plain
values to these functions, so the API, the PDF report and the dashboards compute every number
the same way, and tests can check the arithmetic on hand-made inputs.

- Effective utilization = busy GPU-seconds / capacity GPU-seconds.
- P99 of a service over a period comes from the period's *merged* histogram buckets (bucket
  increments summed per `le`, `reports/selectors.py`), with Prometheus' `histogram_quantile`
  semantics (`kernel.histogram`, docs/pricing.md rule 4). Averaging per-interval P99s is wrong
  and never done.
- Mean wait = mean of per-pod waits (one per scheduling attempt) whose pod was scheduled in the
  period, plus, where Kueue admits the kind's workloads, the mean wait of those it admitted in
  the period; per task kind and overall (the kinds weighted by their attempts, not a mean of
  the kinds' means).

Everything is `Decimal`: latencies and ratios are not money, but the breach rule compares a P99
with an SLO exactly as the pricing engine does, and a float could land on the other side.
"""

from __future__ import annotations

import datetime as dt
import enum
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from zoneinfo import ZoneInfo

# A "real" change between two periods, below which a number counts as unchanged. Utilization is
# compared in absolute terms (share of the pool), latency and wait relative to the earlier value.
UTILIZATION_REAL_CHANGE = Decimal("0.02")  # two percentage points of the pool
LATENCY_REAL_CHANGE = Decimal("0.05")  # P99 moved by 5 % of its earlier value
WAIT_REAL_CHANGE = Decimal("0.10")  # mean wait moved by 10 % of its earlier value
# A mean wait of a few seconds is noise; relative changes are taken against at least this.
WAIT_FLOOR_SECONDS = Decimal("1")

# Below this share of GPU time in interruptible kinds, time slicing pays off little.
TIME_SLICING_PAYS_OFF_SHARE = Decimal("0.5")


@dataclass(frozen=True)
class ServiceLatency:
    service_id: int
    service: str
    team: str
    slo_p99_ms: int
    p99_ms: Decimal | None  # None: no requests in the period
    requests: Decimal
    intervals: int
    breached_intervals: int

    @property
    def meets_slo(self) -> bool | None:
        return None if self.p99_ms is None else self.p99_ms <= self.slo_p99_ms


# --- Utilization and waits --------------------------------------------------------------


def ratio(numerator: Decimal, denominator: Decimal) -> Decimal | None:
    return None if not denominator else Decimal(numerator) / Decimal(denominator)


@dataclass(frozen=True)
class Utilization:
    busy_gpu_seconds: Decimal
    capacity_gpu_seconds: Decimal

    @property
    def effective(self) -> Decimal | None:
        return ratio(self.busy_gpu_seconds, self.capacity_gpu_seconds)


@dataclass(frozen=True)
class MeanWait:
    """Waits that ended in a range (`PodWait`: scheduled, or gone never scheduled) and their
    seconds; `gave_up` of them ended with the pod gone while waiting (None: not counted, a
    month closed before such waits were stored)."""

    waits: int
    total_seconds: Decimal
    gave_up: int | None = 0

    @property
    def mean_seconds(self) -> Decimal | None:
        return ratio(self.total_seconds, Decimal(self.waits))


NO_WAIT = MeanWait(waits=0, total_seconds=Decimal(0))


@dataclass(frozen=True)
class KindWait(MeanWait):
    """A kind's wait before running: its pods' mean wait to be scheduled plus its workloads'
    mean wait for Kueue's admission (`Waits`). `waits` and `total_seconds` are the pods'
    attempts and those seconds with each attempt given the mean admission wait too (the
    admissions where no pod of the kind was scheduled): what `Waits.overall` adds up."""

    kind: str = ""
    scheduling: MeanWait = NO_WAIT
    admission: MeanWait = NO_WAIT

    @classmethod
    def of(cls, kind: str, scheduling: MeanWait, admission: MeanWait) -> KindWait:
        attempts = scheduling.waits or admission.waits
        queued = admission.mean_seconds or Decimal(0)
        return cls(
            waits=attempts,
            total_seconds=scheduling.total_seconds + attempts * queued,
            gave_up=scheduling.gave_up,
            kind=kind,
            scheduling=scheduling,
            admission=admission,
        )


@dataclass(frozen=True)
class Waits:
    """Pods' waits to be scheduled (`PodWait`), and Kueue's admissions with the seconds they
    waited (`IngestWindow.kueue_admissions`), per kind. Under Kueue a Job waits suspended, with
    no pod, until admitted: its pods' waits start only then, so a kind's wait before running
    is the two means added (`KindWait`)."""

    per_kind: dict[str, MeanWait]
    admissions: dict[str, MeanWait] = field(default_factory=dict)
    # Some windows of the range were written before Kueue's admissions were read: where Kueue
    # runs, their queue is missing from the wait (`comparable_waits`).
    admissions_unread: bool = False

    @property
    def kinds(self) -> list[KindWait]:
        return [
            KindWait.of(kind, self.per_kind.get(kind, NO_WAIT), self.admissions.get(kind, NO_WAIT))
            for kind in sorted(self.per_kind.keys() | self.admissions.keys())
        ]

    @property
    def overall(self) -> MeanWait:
        """The kinds' waits weighted by their attempts (not a mean of the kinds' means)."""
        kinds = self.kinds
        gave_up = [w.gave_up for w in kinds]
        return MeanWait(
            waits=sum(w.waits for w in kinds),
            total_seconds=sum((w.total_seconds for w in kinds), Decimal(0)),
            gave_up=None if None in gave_up else sum(gave_up),
        )

    @property
    def pods_waited(self) -> int:
        """The pods whose wait to be scheduled ended in the range (Kueue's workloads apart)."""
        return sum(w.waits for w in self.per_kind.values())


@dataclass(frozen=True)
class HealthNumbers:
    utilization: Utilization
    services: list[ServiceLatency]
    waits: Waits


# --- Before / after ---------------------------------------------------------------------


class Direction(enum.StrEnum):
    BETTER = "better"
    WORSE = "worse"
    UNCHANGED = "unchanged"
    UNKNOWN = "unknown"  # no data in one of the periods


class VerdictCode(enum.StrEnum):
    SHARING_WORKS = "sharing_works"
    ISOLATION_INSUFFICIENT = "isolation_insufficient"
    NOT_COMPLEMENTARY = "not_complementary"
    MIXED = "mixed"
    INSUFFICIENT_DATA = "insufficient_data"


VERDICT_TEXT = {
    VerdictCode.SHARING_WORKS: "Sharing works: utilization, latency and waits all improved.",
    VerdictCode.ISOLATION_INSUFFICIENT: (
        "Isolation is insufficient: utilization rose but inference latency got worse."
    ),
    VerdictCode.NOT_COMPLEMENTARY: (
        "The loads are not complementary: none of the three numbers really changed."
    ),
    VerdictCode.MIXED: "Mixed: the numbers moved in different directions; read them one by one.",
    VerdictCode.INSUFFICIENT_DATA: "Not enough data in one of the periods to compare.",
}


@dataclass(frozen=True)
class Verdict:
    code: VerdictCode
    utilization: Direction
    latency: Direction
    wait: Direction

    @property
    def text(self) -> str:
        return VERDICT_TEXT[self.code]


def utilization_direction(before: Decimal | None, after: Decimal | None) -> Direction:
    if before is None or after is None:
        return Direction.UNKNOWN
    if after - before > UTILIZATION_REAL_CHANGE:
        return Direction.BETTER
    if before - after > UTILIZATION_REAL_CHANGE:
        return Direction.WORSE
    return Direction.UNCHANGED


def _relative_direction(
    before: Decimal, after: Decimal, threshold: Decimal, floor: Decimal = Decimal(0)
) -> Direction:
    """Lower is better (latency, wait)."""
    base = max(before, floor)
    if base == 0:
        return Direction.UNCHANGED if after == 0 else Direction.WORSE
    change = (after - before) / base
    if change > threshold:
        return Direction.WORSE
    if change < -threshold:
        return Direction.BETTER
    return Direction.UNCHANGED


def latency_direction(before: list[ServiceLatency], after: list[ServiceLatency]) -> Direction:
    """Worse if any key service's P99 really got worse; better if some improved and none did."""
    earlier = {s.service_id: s.p99_ms for s in before if s.p99_ms is not None}
    pairs = [(earlier[s.service_id], s.p99_ms) for s in after if s.service_id in earlier]
    pairs = [(b, a) for b, a in pairs if a is not None]
    if not pairs:
        return Direction.UNKNOWN
    moves = {_relative_direction(b, a, LATENCY_REAL_CHANGE) for b, a in pairs}
    if Direction.WORSE in moves:
        return Direction.WORSE
    return Direction.BETTER if Direction.BETTER in moves else Direction.UNCHANGED


def wait_direction(before: MeanWait, after: MeanWait) -> Direction:
    if before.mean_seconds is None or after.mean_seconds is None:
        return Direction.UNKNOWN
    return _relative_direction(
        before.mean_seconds, after.mean_seconds, WAIT_REAL_CHANGE, WAIT_FLOOR_SECONDS
    )


def comparable_waits(before: Waits, after: Waits) -> bool:
    """Whether two periods' waits can be compared: Kueue's queue is in both or in neither. A
    period whose windows predate its reading shows no queue where Kueue ran, and the other
    period's queue would read as the wait getting worse (or better) when nothing changed.
    Likewise a month closed before waits of pods that gave up were stored (`gave_up` None)
    against a period where some gave up: its mean leaves them out."""
    if not gave_up_comparable(before, after):
        return False
    if not (before.admissions or after.admissions):
        return True
    return not (before.admissions_unread or after.admissions_unread)


def gave_up_comparable(before: Waits, after: Waits) -> bool:
    """Whether both periods count the waits of pods that gave up, or neither has any."""
    counted = [before.overall.gave_up, after.overall.gave_up]
    return None not in counted or not any(counted)


def verdict(before: HealthNumbers, after: HealthNumbers) -> Verdict:
    """The before/after reading management asks for (ARCHITECTURE.md, the three numbers)."""
    u = utilization_direction(before.utilization.effective, after.utilization.effective)
    lat = latency_direction(before.services, after.services)
    w = (
        wait_direction(before.waits.overall, after.waits.overall)
        if comparable_waits(before.waits, after.waits)
        else Direction.UNKNOWN
    )
    if u is Direction.UNKNOWN:
        code = VerdictCode.INSUFFICIENT_DATA
    elif u is lat is w is Direction.BETTER:
        code = VerdictCode.SHARING_WORKS
    elif u is Direction.BETTER and lat is Direction.WORSE:
        code = VerdictCode.ISOLATION_INSUFFICIENT
    elif {u, lat, w} <= {Direction.UNCHANGED, Direction.UNKNOWN}:
        code = VerdictCode.NOT_COMPLEMENTARY
    else:
        code = VerdictCode.MIXED
    return Verdict(code=code, utilization=u, latency=lat, wait=w)


# --- Sharing analytics ------------------------------------------------------------------


def correlation(xs: Sequence[Decimal], ys: Sequence[Decimal]) -> Decimal | None:
    """Pearson's r; None with fewer than two points or a flat series (r is undefined)."""
    if len(xs) != len(ys) or len(xs) < 2:
        return None
    n = Decimal(len(xs))
    mean_x = sum(xs, Decimal(0)) / n
    mean_y = sum(ys, Decimal(0)) / n
    cov = sum(((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)), Decimal(0))
    var_x = sum(((x - mean_x) ** 2 for x in xs), Decimal(0))
    var_y = sum(((y - mean_y) ** 2 for y in ys), Decimal(0))
    if var_x == 0 or var_y == 0:
        return None
    return cov / (var_x * var_y).sqrt()


@dataclass(frozen=True)
class HourProfile:
    hour: int  # local hour of day in the pool's time zone, 0..23
    capacity_gpu_seconds: Decimal
    training_gpu_seconds: Decimal
    inference_gpu_seconds: Decimal

    @property
    def training_share(self) -> Decimal | None:
        return ratio(self.training_gpu_seconds, self.capacity_gpu_seconds)

    @property
    def inference_share(self) -> Decimal | None:
        return ratio(self.inference_gpu_seconds, self.capacity_gpu_seconds)


def hour_of_day_seconds(
    start: dt.datetime, end: dt.datetime, zone: ZoneInfo, step_seconds: int
) -> list[int]:
    """The seconds of [start, end) in each local hour of day (index 0 to 23), counted as the
    profile counts GPU-seconds: each interval (`step_seconds` long, on the step's grid) by the
    local hour it starts in. The average GPUs of an hour of day are its GPU-seconds over these,
    not over the range's days times 3,600: a month holds an hour of day as often as the clock
    showed it, so Berlin's October holds 02:00 32 times and its March 30, and a month whose
    close moved it by a change of the pool's zone holds some hours once more than others.

    The zone's offset is read twice per UTC hour, and per interval only in an hour in which it
    changes (a zone that moves its clocks on the half hour)."""
    counts = [0] * 24
    first = -(-int(start.timestamp()) // step_seconds) * step_seconds
    last = int(end.timestamp())
    for hour_start in range(first - first % 3600, last, 3600):
        starts = range(max(first, hour_start), min(last, hour_start + 3600), step_seconds)
        if not starts:
            continue
        offset = _offset(hour_start, zone)
        if offset != _offset(hour_start + 3599, zone):
            for moment in starts:
                counts[(moment + _offset(moment, zone)) // 3600 % 24] += step_seconds
            continue
        # One offset all hour: the local clock turns an hour once in it at most (on the half
        # hour in Asia/Kolkata), so the starts before and after the turn are counted.
        turn = hour_start + -offset % 3600
        before = len(range(starts.start, min(turn, starts.stop), step_seconds))
        counts[(hour_start + offset) // 3600 % 24] += before * step_seconds
        counts[(turn + offset) // 3600 % 24] += (len(starts) - before) * step_seconds
    return counts


def _offset(moment: int, zone: ZoneInfo) -> int:
    """The zone's offset from UTC at `moment` (Unix seconds), in seconds."""
    offset = dt.datetime.fromtimestamp(moment, zone).utcoffset()
    return int(offset.total_seconds()) if offset is not None else 0


def average_gpus(gpu_seconds: Decimal, seconds: int) -> Decimal:
    """GPUs held on average over `seconds` (0 where the range never showed that hour)."""
    return gpu_seconds / seconds if seconds else Decimal(0)


def profile_correlation(profile: Sequence[HourProfile]) -> Decimal | None:
    """How training's and inference's daily curves move together; negative = complementary."""
    hours = [h for h in profile if h.capacity_gpu_seconds]
    return correlation(
        [h.training_share for h in hours],  # type: ignore[misc]
        [h.inference_share for h in hours],  # type: ignore[misc]
    )


@dataclass(frozen=True)
class SharingAnalytics:
    profile: list[HourProfile]
    interruptible_gpu_seconds: Decimal
    allocated_gpu_seconds: Decimal
    lost_gpu_seconds_per_team: dict[str, Decimal]

    @property
    def correlation(self) -> Decimal | None:
        return profile_correlation(self.profile)

    @property
    def interruptible_share(self) -> Decimal | None:
        return ratio(self.interruptible_gpu_seconds, self.allocated_gpu_seconds)

    @property
    def time_slicing_pays_off(self) -> bool | None:
        share = self.interruptible_share
        return None if share is None else share >= TIME_SLICING_PAYS_OFF_SHARE
