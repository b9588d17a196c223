"""Metering reads: sources, windows and the usage report operators and scripts ask for."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import connection
from django.db.models import (
    Aggregate,
    Count,
    DateTimeField,
    F,
    Func,
    Max,
    Min,
    Q,
    QuerySet,
    Sum,
    Value,
)
from django.db.models.lookups import GreaterThanOrEqual

from kernel.breach import enough_requests
from kernel.money import ROUNDING
from kernel.period import time_zone
from kernel.tasks import INFERENCE
from metering.models import (
    CapacityHour,
    CapacityInterval,
    IngestWindow,
    LatencyInterval,
    Service,
    Source,
    Task,
    Team,
    TeamHour,
    UsageHour,
    UsageInterval,
    sighting_month,
)

GROUP_BY = {
    "team": "tm.name",
    # Within its namespace: Job `trainer` of `alpha` and of `beta` are two tasks (rows metered
    # before tasks were keyed by namespace have none).
    "task": "concat_ws('/', NULLIF(t.namespace, ''), t.external_id)",
    "kind": "t.kind",
}
SIX_PLACES = Decimal("0.000001")


class UnknownSource(LookupError):
    pass


def source_get(*, name: str) -> Source:
    """The source called `name`; the error lists the known ones."""
    source = Source.objects.filter(name=name).first()
    if source is None:
        known = ", ".join(Source.objects.order_by("name").values_list("name", flat=True))
        raise UnknownSource(f"source {name!r} does not exist (known: {known or 'none'})")
    return source


def source_gpus_latest(*, source: Source) -> int | None:
    """How many GPUs the source's latest ingested window expected samples from (its
    `samples_expected` over the scrapes a window holds); None before its first such window."""
    expected = (
        IngestWindow.objects.filter(
            source=source, status=IngestWindow.Status.DONE, samples_expected__gt=0
        )
        .order_by("-start")
        .values_list("samples_expected", flat=True)
        .first()
    )
    if expected is None:
        return None
    ticks = settings.TANDEM_STEP_SECONDS // max(1, source.scrape_interval_seconds)
    return -(-expected // max(1, ticks))


def windows_not_done(*, start: datetime, end: datetime) -> list[IngestWindow]:
    return list(
        IngestWindow.objects.filter(start__gte=start, start__lt=end)
        .exclude(status=IngestWindow.Status.DONE)
        .select_related("source")
    )


@dataclass(frozen=True)
class MissingRange:
    """A stretch of time that no ingest window of the source covers: [start, end)."""

    source_id: int
    start: datetime
    end: datetime


# Gaps and islands: a window leaves a gap before it when it starts after the furthest end of
# every window before it (a running max, so overlapping or odd-length windows count as cover).
# The tail from the furthest end to `end` is a gap too. A NULL `start` means "from the
# source's first window": no gap before it, and a source without windows has none at all.
MISSING_RANGES_SQL = """
WITH windows AS (
    SELECT w.source_id, GREATEST(w.start, %(start)s::timestamptz) AS start,
           LEAST(w."end", %(end)s::timestamptz) AS "end"
    FROM metering_ingestwindow w
    WHERE w.source_id = ANY(%(sources)s::bigint[]) AND w.start < %(end)s::timestamptz
      AND (%(start)s::timestamptz IS NULL OR w."end" > %(start)s::timestamptz)
), covered AS (
    SELECT source_id, start, MAX("end") OVER (
        PARTITION BY source_id ORDER BY start, "end"
        ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING
    ) AS covered_until
    FROM windows
)
SELECT source_id, COALESCE(covered_until, %(start)s::timestamptz) AS gap_start, start AS gap_end
FROM covered WHERE start > COALESCE(covered_until, %(start)s::timestamptz, start)
UNION ALL
SELECT s.source_id, COALESCE(MAX(w."end"), %(start)s::timestamptz), %(end)s::timestamptz
FROM unnest(%(sources)s::bigint[]) AS s(source_id)
LEFT JOIN windows w ON w.source_id = s.source_id
GROUP BY s.source_id
HAVING COALESCE(MAX(w."end"), %(start)s::timestamptz) < %(end)s::timestamptz
ORDER BY 1, 2
"""


def windows_missing(
    *, source_ids: list[int], start: datetime | None, end: datetime
) -> list[MissingRange]:
    """Where no ingest window of each source covers [start, end), as maximal ranges, in one
    query however long the history (a month is ~8,900 windows per source). With `start`
    None, a source's history begins at its first window."""
    with connection.cursor() as cursor:
        cursor.execute(MISSING_RANGES_SQL, {"sources": source_ids, "start": start, "end": end})
        return [MissingRange(*row) for row in cursor.fetchall()]


@dataclass(frozen=True)
class OffStep:
    """A source's windows whose bounds are off the grid of the metering step: written while
    TANDEM_STEP_SECONDS was another, which does not divide the present one. The present step's
    windows cannot tile the time around them without overlapping them (their GPU-seconds
    billed twice) or leaving a gap, and the month's scenario would not align, so no new
    window of the source is created and the month does not close until the step is set back.
    (Windows of a coarser step lie on a finer one's grid: they stay, and the finer windows
    start where they end; `windows.windows_create`.)"""

    source: str
    seconds: int  # the windows' length
    windows: int
    first: datetime
    last: datetime  # the last one's end
    step: int  # TANDEM_STEP_SECONDS now

    @property
    def message(self) -> str:
        return (
            f"source {self.source} holds {self.windows} window(s) of {self.seconds} s between"
            f" {self.first:%Y-%m-%dT%H:%M:%SZ} and {self.last:%Y-%m-%dT%H:%M:%SZ} that are off"
            f" the grid of TANDEM_STEP_SECONDS {self.step}: they were written under another"
            " step, and this one cannot tile the time around them, so the source is metered no"
            f" more. Set TANDEM_STEP_SECONDS back to {self.seconds} (or to a step that divides"
            " it), or meter on with a new source (docs/telemetry.md, 'The metering step')"
        )


def _off_grid(table: str) -> str:
    return (
        f"(mod(extract(epoch FROM {table}.start)::bigint, %(step)s) <> 0"
        f' OR mod(extract(epoch FROM {table}."end")::bigint, %(step)s) <> 0)'
    )


# The sources that hold windows off the grid, read off few rows (the overview asks on every
# visit, beat on every tick): each source's newest window (of the sources named, else of the
# enabled ones), and, with a range, each source's windows starting in it or within the hour
# before (a window is at most an hour: the step divides one). A window lies on a grid only
# where the grid's step divides the window's, and no window is created for a source whose
# newest one is off the grid (windows._step_unchanged, this check): so a source whose newest
# window lies on the present grid holds none off it (docs/telemetry.md, "The metering step").
OFF_STEP_SOURCES_SQL = f"""
SELECT s.id FROM metering_source s
WHERE (CASE WHEN %(sources)s::bigint[] IS NULL THEN s.enabled ELSE s.id = ANY(%(sources)s) END
       AND EXISTS (SELECT 1 FROM (SELECT w.start, w."end" FROM metering_ingestwindow w
                                  WHERE w.source_id = s.id ORDER BY w.start DESC LIMIT 1) n
                   WHERE {_off_grid("n")}))
   OR (%(start)s::timestamptz IS NOT NULL
       AND EXISTS (SELECT 1 FROM metering_ingestwindow r WHERE r.source_id = s.id
                   AND r.start >= %(start)s::timestamptz - interval '1 hour'
                   AND r.start < %(end)s AND r."end" > %(start)s AND {_off_grid("r")}))
"""
# Those sources' windows off the grid, per source and length: of the range and of the enabled
# sources, where a range is given.
OFF_STEP_SQL = f"""
SELECT s.name, extract(epoch FROM w."end" - w.start)::bigint, count(*), min(w.start), max(w."end")
FROM metering_ingestwindow w JOIN metering_source s ON s.id = w.source_id
WHERE w.source_id = ANY(%(found)s) AND {_off_grid("w")}
  AND (%(start)s::timestamptz IS NULL
       OR (w."end" > %(start)s AND w.start < %(end)s) OR s.enabled)
GROUP BY 1, 2 ORDER BY 1, 4
"""


def windows_off_step(
    *,
    source_ids: list[int] | None = None,
    start: datetime | None = None,
    end: datetime | None = None,
) -> list[OffStep]:
    """The windows whose bounds are off the grid of TANDEM_STEP_SECONDS, per source and
    length: none, unless the setting changed under stored windows. Of these sources; with a
    range, those overlapping it and every enabled source's wherever they are (no new window
    is created for such a source: the range's missing ones need the reason). One query reads
    a few rows per source (OFF_STEP_SOURCES_SQL); a second counts where it found any."""
    step = settings.TANDEM_STEP_SECONDS
    arguments = {"step": step, "sources": source_ids, "start": start, "end": end}
    with connection.cursor() as cursor:
        cursor.execute(OFF_STEP_SOURCES_SQL, arguments)
        found = [row[0] for row in cursor.fetchall()]
        if not found:
            return []
        cursor.execute(OFF_STEP_SQL, {**arguments, "found": found})
        return [OffStep(*row, step) for row in cursor.fetchall()]


@dataclass(frozen=True)
class BlindSpots:
    """Done windows of a range whose rows cannot show all that pricing reads, though every GPU
    sample is there: kube-state-metrics wrote no preemption reason (rule 5's credits unseen),
    inference pods served without the latency histogram (no SLA breach of theirs is seen,
    rule 4), GPU-seconds of pods kube-state-metrics did not describe (their task, team and
    kind are guesses), and workloads Kueue preempted (no pod shows them, so rule 5 pays no
    credit for them), and GPU-seconds under priority classes the source does not map (their
    kind is the default, training_batch), and busy GPU-seconds of GPUs no pod held (work
    billed to no task); and, not of windows, the services rule 4 judged in the period (an
    interval with the book's minimum of requests) by an SLO nobody stated, the default."""

    preemptions_unseen_windows: int = 0
    latency_unseen_windows: int = 0
    identity_guessed_windows: int = 0
    identity_guessed_gpu_seconds: Decimal = Decimal(0)
    kueue_preemption_windows: int = 0
    kueue_preempted_workloads: int = 0
    kueue_counts_unplaced: int = 0
    kind_guessed_windows: int = 0
    kind_guessed_gpu_seconds: Decimal = Decimal(0)
    unheld_busy_windows: int = 0
    unheld_busy_gpu_seconds: Decimal = Decimal(0)
    slo_unstated_services: int = 0
    services_team_moved: int = 0

    def closed(self) -> dict[str, int | Decimal]:
        """What a month's close stores of them (billing's PeriodClose has a field of each):
        all but the windows without preemptions, which the close refuses (or, accepted,
        records among its incomplete ranges)."""
        found = asdict(self)
        del found["preemptions_unseen_windows"]
        return found


# What makes a done window one of each kind of `BlindSpots`.
BLIND_SPOT_CONDITIONS = {
    "preemptions_unseen_windows": Q(preemptions_unreadable=True),
    "latency_unseen_windows": Q(latency_unseen_pods__gt=0),
    "identity_guessed_windows": Q(undescribed_gpu_seconds__gt=0),
    "kueue_preemption_windows": Q(kueue_preempted_workloads__gt=0) | Q(kueue_counts_unplaced__gt=0),
    "kind_guessed_windows": Q(unmapped_kind_gpu_seconds__gt=0),
    "unheld_busy_windows": Q(unheld_busy_gpu_seconds__gt=0),
}


def blind_spot_counts() -> dict[str, Count]:
    """The done windows of each kind of `BlindSpots`, as aggregates of a query over windows,
    so that a reader counting more of them (dashboards' window problems) asks once."""
    done = Q(status=IngestWindow.Status.DONE)
    return {name: Count("id", filter=done & kind) for name, kind in BLIND_SPOT_CONDITIONS.items()}


# The figures `BlindSpots` adds up beside its window counts, each from a window column.
BLIND_SPOT_SUMS = {
    "identity_guessed_gpu_seconds": "undescribed_gpu_seconds",
    "kueue_preempted_workloads": "kueue_preempted_workloads",
    "kueue_counts_unplaced": "kueue_counts_unplaced",
    "kind_guessed_gpu_seconds": "unmapped_kind_gpu_seconds",
    "unheld_busy_gpu_seconds": "unheld_busy_gpu_seconds",
}


def window_blind_spots(*, start: datetime, end: datetime, min_requests: int = 1) -> BlindSpots:
    """`BlindSpots` of the done windows in [start, end), in one query (a sum over no window
    is its field's 0); and the services judged under an SLO nobody stated, where an interval
    with `min_requests` requests is judged (the price book's `sla_min_requests`)."""
    found = IngestWindow.objects.filter(
        start__lt=end, end__gt=start, status=IngestWindow.Status.DONE
    ).aggregate(
        **blind_spot_counts(),
        **{name: Sum(column) for name, column in BLIND_SPOT_SUMS.items()},
    )
    unstated = services_slo_unstated(start=start, end=end, min_requests=min_requests)
    found["slo_unstated_services"] = len(unstated)
    moved = services_team_moved(start=start, end=end, min_requests=min_requests)
    found["services_team_moved"] = len(moved)
    return BlindSpots(**{name: value for name, value in found.items() if value is not None})


def services_slo_unstated(*, start: datetime, end: datetime, min_requests: int) -> list[str]:
    """The services (their external ids, one per service: two sources may name one alike) of
    which some interval in [start, end) was judged by rule 4 (`kernel.breach.enough_requests`:
    at least the book's `min_requests`) under the default SLO, which nobody stated
    (`Service.slo_stated`)."""
    # Nearly always none is unstated: then the month's latency is not read (the overview asks
    # on every visit).
    unstated = dict(
        Service.objects.filter(slo_stated__isnull=True).values_list("pk", "external_id")
    )
    if not unstated:
        return []
    served = _services_judged(unstated, start=start, end=end, min_requests=min_requests)
    return [name for name, _ in sorted((unstated[pk], pk) for pk in served)]


def _services_judged(
    services: Iterable[int], *, start: datetime, end: datetime, min_requests: int
) -> set[int]:
    """Of these services, those of which rule 4 judged an interval in [start, end)."""
    return set(
        LatencyInterval.objects.filter(
            enough_requests_condition(min_requests),
            service_id__in=list(services),
            interval_start__gte=start,
            interval_start__lt=end,
        )
        .values_list("service_id", flat=True)
        .distinct()
    )


@dataclass(frozen=True)
class ServiceTeamMoved:
    """A service rule 4 judged in a range whose namespace's inference pods ran as another team
    than the service's for an hour or more (that team's GPU-seconds in the namespace at least
    the service's own team's): the credits of its SLA breaches go to the service's team all
    the same (a service keeps the team it was first met with, docs/telemetry.md "Known gaps")."""

    service: str  # its external id, `namespace/model`
    team: str  # the service's team, to which its credits go
    ran_as: str  # the other team: of the hours below, the one with the most GPU-seconds
    since: datetime  # the first such hour (UTC)
    hours: int  # how many hours of the range


def services_team_moved(
    *, start: datetime, end: datetime, min_requests: int
) -> list[ServiceTeamMoved]:
    """The services rule 4 judged in [start, end) (an interval with the book's `min_requests`)
    whose team nobody stated (`Service.team_stated`) and whose namespace's inference pods ran
    as another team for an hour or more of it, by their hourly usage (`UsageHour`).

    A namespace usually holds one team's pods: the services' namespaces are read through the
    task table first (a task row is a key under one team, with the span it was seen in), so
    the month's usage and latency are read only where another team's inference task ran."""
    # Each service with its namespace, the external id up to its "/".
    services = [
        (service, (service.source_id, service.external_id.partition("/")[0]))
        for service in Service.objects.filter(team_stated__isnull=True).select_related("team")
    ]
    if not services:
        return []
    # A row's last_seen is its last interval's start (none on rows metered before it was kept).
    seen_since = Q(last_seen__gte=start - timedelta(hours=1)) | Q(last_seen__isnull=True)
    tasks = Task.objects.filter(seen_since, kind=INFERENCE, first_seen__lt=end).filter(
        # The (source, namespace) pairs: few, as there are few services.
        Q.create(
            [Q(source_id=source, namespace=namespace) for _, (source, namespace) in services],
            connector=Q.OR,
        )
    )
    teams_seen: dict[tuple[int, str], set[int]] = defaultdict(set)
    for source, namespace, team in tasks.values_list("source_id", "namespace", "team_id"):
        teams_seen[(source, namespace)].add(team)
    candidates = [
        (service, namespace)
        for service, namespace in services
        if teams_seen[namespace] - {service.team_id}
    ]
    if not candidates:
        return []
    judged = _services_judged(
        [service.pk for service, _ in candidates], start=start, end=end, min_requests=min_requests
    )
    candidates = [(service, namespace) for service, namespace in candidates if service.pk in judged]
    if not candidates:
        return []
    hourly: dict[tuple[int, str], dict[datetime, dict[int, Decimal]]] = defaultdict(
        lambda: defaultdict(dict)
    )
    rows = (
        UsageHour.objects.filter(
            hour_start__gte=start,
            hour_start__lt=end,
            task__kind=INFERENCE,
            task__source_id__in={source for _, (source, _) in candidates},
            task__namespace__in={namespace for _, (_, namespace) in candidates},
        )
        .values_list("task__source_id", "task__namespace", "hour_start", "task__team_id")
        .annotate(gpu_seconds=Sum("alloc_gpu_seconds"))
    )
    for source, namespace, hour, team, gpu_seconds in rows:
        hourly[(source, namespace)][hour][team] = gpu_seconds
    found = []  # (service, the team it ran as, the hours it did)
    for service, namespace in candidates:
        hours = hourly[namespace]
        others: dict[int, Decimal] = defaultdict(Decimal)
        moved_hours = []
        for hour in sorted(hours):
            by_team = hours[hour]
            own = by_team.get(service.team_id, Decimal(0))
            other = {t: v for t, v in by_team.items() if t != service.team_id and v and v >= own}
            if other:
                moved_hours.append(hour)
                for team, gpu_seconds in other.items():
                    others[team] += gpu_seconds
        if moved_hours:
            found.append((service, max(others, key=lambda t: (others[t], -t)), moved_hours))
    names = dict(Team.objects.filter(pk__in={t for _, t, _ in found}).values_list("pk", "name"))
    moved = [
        ServiceTeamMoved(
            service=service.external_id,
            team=service.team.name,
            ran_as=names[ran_as],
            since=hours[0],
            hours=len(hours),
        )
        for service, ran_as, hours in found
    ]
    return sorted(moved, key=lambda found: (found.service, found.since))


@dataclass(frozen=True)
class MeteredTwice:
    """GPUs that two sources both count present over the same time (`GpuSighting`): their
    capacity and their pods' usage are in the pool twice."""

    sources: tuple[str, str]
    gpus: int
    gpu_seconds: Decimal  # the GPUs' presence that both count, whole windows
    first: datetime
    last: datetime
    example: str  # one GPU of them, and its node

    @property
    def message(self) -> str:
        hours = (self.gpu_seconds / 3600).quantize(Decimal("0.01"), ROUNDING)
        return (
            f"sources {self.sources[0]} and {self.sources[1]} both meter {self.gpus} GPU(s)"
            f" ({self.example}) between {self.first:%Y-%m-%dT%H:%M:%SZ} and"
            f" {self.last:%Y-%m-%dT%H:%M:%SZ}: {hours} GPU-hours of capacity, and their pods'"
            " usage, count twice. Give one source a matcher that leaves these GPUs out and"
            " ingest its windows of that span again, with --accept-loss where it then reads no"
            " GPU at all (docs/telemetry.md, 'One GPU, two sources')"
        )


def gpus_metered_twice(*, start: datetime, end: datetime) -> list[MeteredTwice]:
    """Each pair of sources whose stored windows count one GPU (by its UUID) present over the
    same time in [start, end) (`GpuSighting`, per window: a GPU moved between two sources'
    clusters within one window counts in both), with how many GPUs and for how long.

    The overview asks on every visit: the UUIDs that more than one source sighted in the
    months are found first (nearly always none), and only their rows are intersected."""
    months = [sighting_month(start), sighting_month(end - timedelta(microseconds=1))]
    with connection.cursor() as cursor:
        cursor.execute(
            "WITH span AS (SELECT tstzmultirange(tstzrange(%(start)s, %(end)s)) AS m),"
            " shared AS MATERIALIZED (SELECT month, uuid FROM metering_gpusighting"
            " WHERE month BETWEEN %(first)s AND %(last)s GROUP BY month, uuid"
            " HAVING count(*) > 1),"
            " pairs AS MATERIALIZED (SELECT a.source_id AS a, b.source_id AS b, a.uuid,"
            " coalesce(nullif(a.node, ''), b.node) AS node, (a.seen * span.m) * b.seen AS seen"
            " FROM shared s"
            " JOIN metering_gpusighting a ON a.month = s.month AND a.uuid = s.uuid"
            " JOIN metering_gpusighting b ON b.month = s.month AND b.uuid = s.uuid"
            " AND b.source_id > a.source_id CROSS JOIN span)"
            " SELECT sa.name, sb.name, count(DISTINCT p.uuid),"
            " sum((SELECT sum(extract(epoch FROM upper(r) - lower(r))) FROM unnest(p.seen) r)),"
            " min(lower(p.seen)), max(upper(p.seen)),"
            " (array_agg(p.uuid || ' on ' || coalesce(nullif(p.node, ''), 'an unnamed node')"
            " ORDER BY p.uuid))[1]"
            " FROM pairs p JOIN metering_source sa ON sa.id = p.a"
            " JOIN metering_source sb ON sb.id = p.b"
            " WHERE NOT isempty(p.seen) GROUP BY sa.name, sb.name ORDER BY sa.name, sb.name",
            {"start": start, "end": end, "first": months[0], "last": months[1]},
        )
        return [
            MeteredTwice((a, b), gpus, Decimal(seconds), first, last, example)
            for a, b, gpus, seconds, first, last, example in cursor.fetchall()
        ]


@dataclass(frozen=True)
class UnsightedWindows:
    source_id: int
    source: str
    windows: int
    first: datetime
    last: datetime


def windows_unsighted(*, start: datetime, end: datetime) -> list[UnsightedWindows]:
    """Where [start, end) is metered by two sources or more: each source's done windows whose
    GPUs were never recorded (`IngestWindow.gpus_sighted`: written before metering migration
    0026), beside which two sources metering one GPU cannot be seen."""
    done = IngestWindow.objects.filter(
        start__lt=end, end__gt=start, status=IngestWindow.Status.DONE
    )
    if done.values("source_id").distinct().count() < 2:
        return []
    return [
        UnsightedWindows(row["source_id"], row["source__name"], row["n"], row["a"], row["z"])
        for row in done.filter(gpus_sighted=False)
        .values("source_id", "source__name")
        .annotate(n=Count("id"), a=Min("start"), z=Max("end"))
        .order_by("source__name")
    ]


@dataclass(frozen=True)
class KindAdmissions:
    kind: str
    workloads: int
    seconds: Decimal


@dataclass(frozen=True)
class KueueAdmissions:
    per_kind: list[KindAdmissions]
    # Done windows of the range written before Kueue's admissions were read (metering 0028).
    windows_unread: int


def kueue_admissions(*, start: datetime, end: datetime) -> KueueAdmissions:
    """Workloads Kueue admitted in windows starting in the range, and the seconds they had
    waited for it, per task kind (`IngestWindow.kueue_admissions`); and how many of the
    range's done windows predate the reading. Two sources reading one Kueue count its
    admissions twice, and their waits: a mean of them does not move."""
    found: dict[str, list] = {}
    unread = 0
    # One read: the windows with admissions, and those written before they were read (null).
    stored = IngestWindow.objects.filter(
        status=IngestWindow.Status.DONE, start__gte=start, start__lt=end
    ).exclude(kueue_admissions={})
    for admissions in stored.values_list("kueue_admissions", flat=True).iterator():
        if admissions is None:
            unread += 1
            continue
        for kind, admitted in admissions.items():
            entry = found.setdefault(kind, [0, Decimal(0)])
            entry[0] += admitted["workloads"]
            entry[1] += Decimal(admitted["seconds"])
    return KueueAdmissions(
        per_kind=[
            KindAdmissions(kind, workloads, seconds)
            for kind, (workloads, seconds) in sorted(found.items())
        ],
        windows_unread=unread,
    )


def enough_requests_condition(min_requests: int) -> GreaterThanOrEqual:
    """`kernel.breach.enough_requests` over a LatencyInterval's request count, as SQL: the
    intervals rule 4 judges."""
    return enough_requests(F("request_count"), min_requests, at_least=GreaterThanOrEqual)


def completeness(*, start: datetime, end: datetime) -> Decimal:
    """Mean window completeness over [start, end) for every enabled source; a window that was
    never ingested (or does not exist) counts as 0, so a gap is visible, not averaged away.
    Each window counts as the steps it is long: one of a coarser step, kept where the step
    became finer (docs/telemetry.md, "The metering step"), is that many steps."""
    step = settings.TANDEM_STEP_SECONDS
    expected_per_source = max(0, int((end - start).total_seconds()) // step)
    sources = Source.objects.filter(enabled=True).count()
    if not expected_per_source or not sources:
        return Decimal(0)
    with connection.cursor() as cursor:
        cursor.execute(
            'SELECT COALESCE(sum(w.completeness * extract(epoch FROM w."end" - w.start)), 0) / %s'
            " FROM metering_ingestwindow w JOIN metering_source s ON s.id = w.source_id"
            " WHERE s.enabled AND w.status = 'done' AND w.start >= %s AND w.start < %s",
            [step, start, end],
        )
        total = cursor.fetchone()[0]
    return (Decimal(total) / (expected_per_source * sources)).quantize(
        SIX_PLACES, rounding=ROUNDING
    )


def _gpu_hours(seconds: Decimal | None) -> str:
    return str(((seconds or Decimal(0)) / 3600).quantize(SIX_PLACES, rounding=ROUNDING))


def usage_report(
    *, start: datetime, end: datetime, group_by: str, min_requests: int = 1
) -> dict[str, Any]:
    """Usage in [start, end) per team, task or kind (see the `usage_report` command); its
    services judged under an SLO nobody stated where an interval with `min_requests` requests
    is judged (the price book's `sla_min_requests`).

    Waits and preemptions count in the period of their event: a wait where it ended (its pod
    scheduled, or gone never scheduled), a preemption where it happened.
    """
    if group_by not in GROUP_BY:
        raise ValueError(f"group_by must be one of {', '.join(GROUP_BY)}, got {group_by!r}")
    key = GROUP_BY[group_by]
    tasks_of = "FROM metering_task t JOIN metering_team tm ON tm.id = t.team_id"
    groups: dict[str, dict[str, Any]] = defaultdict(
        lambda: {
            "tasks": set(),
            "alloc": Decimal(0),
            "busy": Decimal(0),
            "peak": 0,
            "io": 0,
            "preemptions": 0,
            "waits": [],
        }
    )
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {key}, t.id, sum(u.alloc_gpu_seconds), sum(u.busy_gpu_seconds),"
            " max(u.memory_peak_bytes), sum(u.read_operations + u.write_operations)"
            f" {tasks_of} JOIN metering_usageinterval u ON u.task_id = t.id"
            " WHERE u.interval_start >= %s AND u.interval_start < %s GROUP BY 1, 2",
            [start, end],
        )
        for group, task, alloc, busy, peak, operations in cursor.fetchall():
            row = groups[group]
            row["tasks"].add(task)
            row["alloc"] += alloc
            row["busy"] += busy
            row["peak"] = max(row["peak"], peak)
            row["io"] += int(operations)
        cursor.execute(
            f"SELECT {key}, t.id, count(*) {tasks_of}"
            " JOIN metering_preemption p ON p.task_id = t.id"
            " WHERE p.at >= %s AND p.at < %s GROUP BY 1, 2",
            [start, end],
        )
        for group, task, count in cursor.fetchall():
            groups[group]["tasks"].add(task)
            groups[group]["preemptions"] += count
        cursor.execute(
            f"SELECT {key}, t.id, w.seconds {tasks_of} JOIN metering_podwait w ON w.task_id = t.id"
            " WHERE w.ended >= %s AND w.ended < %s",
            [start, end],
        )
        for group, task, seconds in cursor.fetchall():
            groups[group]["tasks"].add(task)
            groups[group]["waits"].append(seconds)
        cursor.execute(
            "SELECT sum(capacity_gpu_seconds) FROM metering_capacityinterval"
            " WHERE interval_start >= %s AND interval_start < %s",
            [start, end],
        )
        capacity = cursor.fetchone()[0]
    # Windows whose preemptions (the counts below miss any; Kueue's are counted apart),
    # inference latency or pods' identity (their groups are guesses) could not be seen.
    blind = window_blind_spots(start=start, end=end, min_requests=min_requests)
    return {
        "start": start.isoformat().replace("+00:00", "Z"),
        "end": end.isoformat().replace("+00:00", "Z"),
        "capacity_gpu_hours": _gpu_hours(capacity),
        "completeness": str(completeness(start=start, end=end)),
        "windows_without_preemptions": blind.preemptions_unseen_windows,
        "windows_without_latency": blind.latency_unseen_windows,
        "windows_with_guessed_identity": blind.identity_guessed_windows,
        "guessed_identity_gpu_hours": _gpu_hours(blind.identity_guessed_gpu_seconds),
        "windows_with_kueue_preemptions": blind.kueue_preemption_windows,
        "kueue_preempted_workloads": blind.kueue_preempted_workloads,
        "kueue_counts_unplaced": blind.kueue_counts_unplaced,
        "windows_with_unmapped_kinds": blind.kind_guessed_windows,
        "unmapped_kind_gpu_hours": _gpu_hours(blind.kind_guessed_gpu_seconds),
        "windows_with_unrequested_work": blind.unheld_busy_windows,
        "unrequested_busy_gpu_hours": _gpu_hours(blind.unheld_busy_gpu_seconds),
        "services_with_default_slo": blind.slo_unstated_services,
        # Pairs of sources that both meter some GPU in the range: capacity and usage count twice.
        "sources_metering_the_same_gpus": [
            {
                "sources": list(twice.sources),
                "gpus": twice.gpus,
                "gpu_hours": _gpu_hours(twice.gpu_seconds),
                "first": twice.first.isoformat().replace("+00:00", "Z"),
                "last": twice.last.isoformat().replace("+00:00", "Z"),
            }
            for twice in gpus_metered_twice(start=start, end=end)
        ],
        "groups": [
            {
                "group": group,
                "tasks": len(row["tasks"]),
                "alloc_gpu_hours": _gpu_hours(row["alloc"]),
                "busy_gpu_hours": _gpu_hours(row["busy"]),
                "peak_memory_bytes": row["peak"],
                "io_operations": row["io"],
                "preemptions": row["preemptions"],
                "mean_wait_seconds": (
                    round(sum(row["waits"]) / len(row["waits"]), 3) if row["waits"] else None
                ),
            }
            for group, row in sorted(groups.items())
        ],
    }


# --- Hourly rollup ----------------------------------------------------------------------

HOUR = timedelta(hours=1)


def hour_start(moment: datetime) -> datetime:
    """The start of the UTC hour holding `moment` (the rollup's hours)."""
    return moment - timedelta(seconds=moment.timestamp() % 3600)


def hourly_rollup_serves(*, start: datetime, end: datetime, zone: str | None = None) -> bool:
    """Whether sums over `[start, end)` may be read from the hourly rollup.

    They may when both ends fall on a whole UTC hour (the rollup's hours) and the zone the
    caller groups by (`zone`, the pool's by default) is a whole number of hours from UTC for
    the whole range: a local hour or day is then made of whole UTC hours, and an hour's sum is
    exactly the sum of the intervals starting in it. Otherwise (a zone at +05:30, a range
    ending at 10:30) the caller sums the intervals.
    """
    if not settings.TANDEM_READ_HOURLY_ROLLUP:
        return False
    if end <= start:
        return True
    if hour_start(start) != start or hour_start(end) != end:
        return False
    local = time_zone(zone or settings.TANDEM_TIMEZONE)
    moment = start
    while moment < end:  # every hour: an offset can change at any of them (DST, politics)
        offset = moment.astimezone(local).utcoffset()
        if offset is None or offset.total_seconds() % 3600:
            return False
        moment += HOUR
    return True


class LocalHourStart(Func):
    """The UTC instant at which the local hour (of `zone`) holding `field` began.

    Used to group by local hour instead of `TruncHour(field, tzinfo=zone)`, which truncates
    the local wall-clock time and so adds up the two hours a zone repeats when it falls back
    (02:00 CEST and 02:00 CET in Europe/Berlin), charting a pool of 8 GPUs at 16 for one
    hour. Taking the local time's seconds into its hour off the instant keeps each hour its
    own, on whole-hour and half-hour zones alike (Asia/Kolkata's hours start at :30 UTC)."""

    output_field = DateTimeField()

    def __init__(self, field: str, zone: str) -> None:
        super().__init__(F(field), Value(zone))

    def as_sql(self, compiler: Any, connection: Any, **extra: Any) -> tuple[str, tuple]:
        moment, moment_params = compiler.compile(self.source_expressions[0])
        zone, zone_params = compiler.compile(self.source_expressions[1])
        into_hour = f"mod(extract(epoch FROM ({moment} AT TIME ZONE {zone}))::numeric, 3600)"
        sql = f"({moment} - make_interval(secs => {into_hour}::double precision))"
        return sql, (*moment_params, *zone_params, *moment_params)


@dataclass(frozen=True)
class RangeSplit:
    """[start, end) cut where the hourly rollup serves: the whole hours in the middle from the
    rollup, the edges (before the first whole hour, after the last) from the intervals.

    10:05 to 17:40 reads 11:00-17:00 from the rollup and 10:05-11:00 and 17:00-17:40 from the
    intervals; the intervals starting in the three pieces are exactly those of the range.
    """

    hours: tuple[datetime, datetime] | None  # read from the rollup; None: nothing is
    edges: tuple[tuple[datetime, datetime], ...]  # read from the intervals

    def interval_filter(self, field: str = "interval_start") -> Q:
        """Interval rows starting in one of the edges (none when there are none)."""
        where = Q(pk__in=[])
        for first, last in self.edges:
            where |= Q(**{f"{field}__gte": first, f"{field}__lt": last})
        return where


def range_split(*, start: datetime, end: datetime, zone: str | None = None) -> RangeSplit:
    """Where to read sums over `[start, end)`: see `RangeSplit` and `hourly_rollup_serves`
    (the middle's hours must also be whole hours of `zone` for callers grouping by it)."""
    first_hour = hour_start(start)
    if first_hour < start:
        first_hour += HOUR
    last_hour = hour_start(end)
    if first_hour >= last_hour or not hourly_rollup_serves(
        start=first_hour, end=last_hour, zone=zone
    ):
        return RangeSplit(hours=None, edges=((start, end),))
    edges = tuple(
        (first, last) for first, last in ((start, first_hour), (last_hour, end)) if first < last
    )
    return RangeSplit(hours=(first_hour, last_hour), edges=edges)


@dataclass(frozen=True)
class UsageSums:
    """One part of a range's usage, and how to sum it.

    `rows` (already limited to the part) have the interval's column names for the GPU-seconds,
    the peak and the I/O, so `Sum("alloc_gpu_seconds")` or `Max("memory_peak_bytes")` read
    either table; `time_field` is the column to group by time, and `intervals` and
    `memory_avg_bytes_sum` are the aggregates that differ between the two.
    """

    rows: QuerySet
    time_field: str
    intervals: Aggregate
    memory_avg_bytes_sum: Aggregate
    hourly: bool


def usage_parts(*, start: datetime, end: datetime, zone: str | None = None) -> list[UsageSums]:
    """The range's usage in at most two parts, rollup hours and interval edges (see
    `range_split`): callers sum each part and add the parts up (the peak is their maximum)."""
    split = range_split(start=start, end=end, zone=zone)
    parts = []
    if split.hours:
        parts.append(
            UsageSums(
                rows=UsageHour.objects.filter(
                    hour_start__gte=split.hours[0], hour_start__lt=split.hours[1]
                ),
                time_field="hour_start",
                intervals=Sum("intervals"),
                memory_avg_bytes_sum=Sum("memory_avg_bytes_sum"),
                hourly=True,
            )
        )
    if split.edges:
        parts.append(
            UsageSums(
                rows=UsageInterval.objects.filter(split.interval_filter()),
                time_field="interval_start",
                intervals=Count("id"),
                memory_avg_bytes_sum=Sum("memory_avg_bytes"),
                hourly=False,
            )
        )
    return parts


def team_usage_parts(
    *, start: datetime, end: datetime, zone: str | None = None
) -> list[tuple[QuerySet, str]]:
    """Rows holding `alloc_gpu_seconds` and `busy_gpu_seconds`, to filter and group by
    `team_id` and `kind` (no per-task detail), with their time column, in at most two parts:
    the team-hour rollup for the whole hours, the intervals (with their task's team and kind)
    for the edges. Callers sum each part and add the parts up."""
    split = range_split(start=start, end=end, zone=zone)
    parts = []
    if split.hours:
        hours = TeamHour.objects.filter(
            hour_start__gte=split.hours[0], hour_start__lt=split.hours[1]
        )
        parts.append((hours, "hour_start"))
    if split.edges:
        rows = UsageInterval.objects.filter(split.interval_filter()).annotate(
            team_id=F("task__team_id"), kind=F("task__kind")
        )
        parts.append((rows, "interval_start"))
    return parts


def capacity_parts(
    *, start: datetime, end: datetime, zone: str | None = None
) -> list[tuple[QuerySet, str]]:
    """Rows holding `capacity_gpu_seconds`, and their time column, in at most two parts (as
    `team_usage_parts`)."""
    split = range_split(start=start, end=end, zone=zone)
    parts = []
    if split.hours:
        hours = CapacityHour.objects.filter(
            hour_start__gte=split.hours[0], hour_start__lt=split.hours[1]
        )
        parts.append((hours, "hour_start"))
    if split.edges:
        parts.append((CapacityInterval.objects.filter(split.interval_filter()), "interval_start"))
    return parts


# --- Reads for billing's scenario builder (billing/scenarios.py) --------------------------
# Raw SQL: a month holds millions of usage rows, and these read them packed or as text so that
# the driver's per-row cost stays out of the close (docs/architecture.md "Data flow").

# A month's usage is read a day at a time: a day's groups fit PostgreSQL's default work_mem
# (a month at once spilled its hash aggregate to disk: 260 MB of temporary files at 1,000
# GPUs), and a day is a range scan of the month's partition, whose rows ingest wrote in time
# order.
USAGE_READ_SPAN = timedelta(days=1)


def usage_packed_per_interval_and_model(
    *, start: datetime, end: datetime
) -> Iterator[tuple[int, str, str]]:
    """(interval start in Unix seconds, GPU model, "task_pk alloc task_pk alloc ...") for the
    intervals starting in [start, end), by interval and model. A task has one row per interval
    and model (`usage_unique`), so nothing is summed here; the caller maps models to classes."""
    with connection.cursor() as cursor:
        first = start
        while first < end:
            last = min(first + USAGE_READ_SPAN, end)
            cursor.execute(
                # trim_scale: "150.000000" -> "150", the same value in shorter canonical text.
                # Grouped by the column, not its epoch: extract() (numeric since PostgreSQL
                # 14) then runs once per group, not once per row (half the query's time).
                "SELECT extract(epoch FROM interval_start)::bigint, gpu_model,"
                " string_agg(task_id::text || ' ' || trim_scale(alloc_gpu_seconds)::text, ' ')"
                " FROM metering_usageinterval WHERE interval_start >= %s AND interval_start < %s"
                " GROUP BY interval_start, gpu_model ORDER BY interval_start, gpu_model",
                [first, last],
            )
            yield from cursor.fetchall()
            first = last


def capacity_per_interval_and_model(
    *, start: datetime, end: datetime
) -> list[tuple[int, str, str]]:
    """(interval start in Unix seconds, GPU model, capacity GPU-seconds as text), summed over
    sources and fault domains, for the intervals starting in [start, end), by interval; the
    caller maps models to classes (a few models: a few rows per interval)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT extract(epoch FROM interval_start)::bigint, gpu_model,"
            " trim_scale(sum(capacity_gpu_seconds))::text FROM metering_capacityinterval"
            " WHERE interval_start >= %s AND interval_start < %s"
            " GROUP BY interval_start, gpu_model ORDER BY interval_start, gpu_model",
            [start, end],
        )
        return cursor.fetchall()


def latency_histograms(*, start: datetime, end: datetime) -> list[tuple[int, str]]:
    """(service pk, JSON text `[[interval start in Unix seconds, buckets], ...]`) per service
    with stored intervals starting in [start, end), in interval order: one text per service,
    so a month's histograms (about 9,000 per service) are read and parsed in one piece each."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT service_id, '[' || string_agg('[' || extract(epoch FROM interval_start)"
            "::bigint::text || ',' || buckets::text || ']', ',' ORDER BY interval_start) || ']'"
            " FROM metering_latencyinterval WHERE interval_start >= %s AND interval_start < %s"
            " GROUP BY service_id ORDER BY service_id",
            [start, end],
        )
        return cursor.fetchall()


def preemptions_in(*, start: datetime, end: datetime) -> list[tuple]:
    """(task pk, pod, at, GPUs as text, seconds since start, lost GPU-seconds as text, the
    GPU model that held most of the preempted GPUs, "" when unknown)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT task_id, pod, at, trim_scale(gpus)::text, seconds_since_start,"
            " trim_scale(lost_gpu_seconds)::text, gpu_model FROM metering_preemption"
            " WHERE at >= %s AND at < %s",
            [start, end],
        )
        return cursor.fetchall()


def preemption_counts_before(*, start: datetime, task_pks: list[int]) -> dict[int, int]:
    """Task pk -> its preemption events before `start`: intervals with a preemption (rows
    stored one per pod, before ingest recorded one per task, still count once per interval)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT task_id, count(DISTINCT floor(extract(epoch FROM at) / %s))"
            " FROM metering_preemption WHERE at < %s AND task_id = ANY(%s) GROUP BY task_id",
            [settings.TANDEM_STEP_SECONDS, start, task_pks],
        )
        return dict(cursor.fetchall())


# The distinct tasks of a range's usage, one index probe per task ("loose index scan") rather
# than a scan of the range's rows: a month of 500 tasks is 500 probes, not 4 million rows.
DISTINCT_USAGE_TASKS_SQL = """
WITH RECURSIVE tasks(task_id) AS (
    (SELECT task_id FROM metering_usageinterval
     WHERE interval_start >= %(start)s AND interval_start < %(end)s ORDER BY task_id LIMIT 1)
    UNION ALL
    SELECT (SELECT u.task_id FROM metering_usageinterval u
            WHERE u.task_id > tasks.task_id
              AND u.interval_start >= %(start)s AND u.interval_start < %(end)s
            ORDER BY u.task_id LIMIT 1)
    FROM tasks WHERE tasks.task_id IS NOT NULL
)
SELECT task_id FROM tasks WHERE task_id IS NOT NULL
UNION SELECT task_id FROM metering_preemption WHERE at >= %(start)s AND at < %(end)s
"""


def task_pks_metered_in(*, start: datetime, end: datetime) -> list[int]:
    """Tasks with usage or a preemption in [start, end)."""
    with connection.cursor() as cursor:
        cursor.execute(DISTINCT_USAGE_TASKS_SQL, {"start": start, "end": end})
        return [pk for (pk,) in cursor.fetchall()]
