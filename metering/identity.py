"""Metering writes, who is who: pods -> tasks, teams and kinds, and services, upserted once
per run of windows (kube-state-metrics' view of each pod, docs/telemetry.md "Who is who"),
and the latency objectives operators set on services."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from audit.services import audit_record, object_snapshot
from kernel.collector import collector_paused
from metering import sources
from metering.measure import IntervalFacts, Measured, PodIdentity, PodKey
from metering.models import (
    Service,
    Source,
    Task,
    Team,
)
from metering.windows import WindowError


@dataclass(frozen=True)
class TaskIdentity:
    namespace: str
    external_id: str
    team: str
    kind: str
    fault_domain: str
    from_kube: bool


# A task row: (namespace, name, team). A key moved to another team gets a row of that team.
TaskRowKey = tuple[str, str, str]
# A pod in an interval: its task, the key of the task's row by the team its view names (the
# team of a pod kube-state-metrics never described may still change, `_teams_without_kube`),
# and kube-state-metrics' view of it.
SeenPod = tuple[PodKey, TaskIdentity, TaskRowKey, PodIdentity]


def _pod_identity(measured: Measured, start: int, pod: PodKey) -> PodIdentity:
    """This interval's kube-state-metrics view of the pod, else the nearest one in the run."""
    return measured.pod_identity(start, pod)


def _task_identity(plan: sources.QueryPlan, pod: PodKey, identity: PodIdentity) -> TaskIdentity:
    namespace, pod_name = pod
    kind = plan.kind_of(identity.priority_class)
    return TaskIdentity(
        namespace=namespace,
        external_id=identity.task_name(pod_name),
        team=identity.team_label or namespace,
        kind=kind,
        fault_domain=identity.node,
        from_kube=identity.from_kube,
    )


def _active_pods(facts: IntervalFacts) -> set[PodKey]:
    return (
        set(facts.alloc)
        | set(facts.busy)
        | set(facts.memory_peak)
        | set(facts.io)
        | set(facts.waits)
        | set(facts.gave_up)
        | {pod for pod, event in facts.preemptions.items() if "at" in event}
    )


# Each interval's task row (its pk) of every pod active in it: interval -> pod -> pk.
TaskIds = dict[int, dict[PodKey, int]]


@collector_paused
def _tasks_upsert(source: Source, plan: sources.QueryPlan, measured: Measured) -> TaskIds:
    """Create or update every task active in the run; returns each interval's pod -> task pk.

    Each interval goes to the row of the team its pod had in that interval, so a relabel
    moves only the intervals from the relabel on (see `Task`).

    One visit per interval and pod, its work kept to a few dictionary lookups (a day holds
    hundreds of pods in each of its 288 intervals): the intervals in ascending order, their
    pods sorted, so a row's first view wins, its first_seen is the interval that made it and
    its last_seen the latest one, as in every run; its kind is its latest interval's."""
    step = plan.step_seconds
    seen: list[tuple[int, list[SeenPod]]] = []
    # A pod is the same task interval after interval: its identity is derived once per view,
    # and so is the key of its row (of the team the view names).
    derived: dict[tuple, tuple[TaskIdentity, TaskRowKey]] = {}
    guessed = False
    for start in sorted(measured.intervals):
        facts = measured.intervals[start]
        known = facts.identity
        pods: list[SeenPod] = []
        for pod in sorted(_active_pods(facts)):
            identity = known.get(pod)
            if identity is None and pod in facts.gave_up:
                identity = _gone_pending_identity(measured, start, pod)
            elif identity is None or not identity.informed:  # its kind from the nearest view
                identity = measured.pod_identity(start, pod)
            view = (
                pod,
                identity.task_label,
                identity.owner_name,
                identity.team_label,
                identity.priority_class,
                identity.node,
                identity.from_kube,
            )
            found = derived.get(view)
            if found is None:
                task = _task_identity(plan, pod, identity)
                found = derived[view] = (task, (task.namespace, task.external_id, task.team))
                guessed = guessed or not task.from_kube
            task, key = found
            pods.append((pod, task, key, identity))
        seen.append((start, pods))
    if not any(pods for _, pods in seen):
        return {}
    teams = _teams_without_kube(source, seen) if guessed else {}
    merged: dict[TaskRowKey, dict[str, Any]] = {}
    keys: list[tuple[int, list[tuple[PodKey, TaskRowKey]]]] = []
    for start, pods in seen:
        interval_keys = []
        for pod, task, key, identity in pods:
            if teams and (start, pod) in teams:
                key = (task.namespace, task.external_id, teams[(start, pod)])
            interval_keys.append((pod, key))
            row = merged.get(key)
            if row is None or (task.from_kube and not row["from_kube"]):
                row = merged[key] = {
                    **task.__dict__,
                    "team": key[2],
                    "first_seen": start,
                    "created": None,
                    "first_started": None,
                    "ended": None,
                }
            elif task.from_kube:
                # The kind of the row's latest interval, as `_task_rows_upsert` keeps it: a Job
                # submitted again under its name in another priority class is priced as its
                # latest run, however its windows were batched.
                row["kind"] = task.kind
            row["last_seen"] = start
            # Times only widen (the least creation and start, the latest end), inline: this
            # runs for every interval and pod.
            created, scheduled = identity.created, identity.scheduled
            if created is not None and (row["created"] is None or created < row["created"]):
                row["created"] = created
            if scheduled is not None and (
                row["first_started"] is None or scheduled < row["first_started"]
            ):
                row["first_started"] = scheduled
            if identity.ended:
                row["ended"] = max(row["ended"] or 0, start + step)
        keys.append((start, interval_keys))
    team_ids = _teams_upsert({row["team"] for row in merged.values()}, source=source)
    _legacy_tasks_adopt(source, merged, team_ids)
    pks, inserted = _task_rows_upsert(source, merged, team_ids)
    _relabels_audit(source, inserted)
    return {start: {pod: pks[key] for pod, key in interval_keys} for start, interval_keys in keys}


def _gone_pending_identity(measured: Measured, start: int, pod: PodKey) -> PodIdentity:
    """A pod that gave up waiting is gone from its wait's interval: its view is the interval
    before's (`GaveUp.identity`), else (or for its info) the nearest one in the run; with its
    creation time, which the task's row takes (a view at an interval's end lacks it)."""
    gone = measured.intervals[start].gave_up[pod]
    view = gone.identity
    if view is None or not view.informed:
        nearest = measured.pod_identity(start, pod)
        view = nearest if view is None or nearest.from_kube else view
    return replace(view, created=gone.created)


def _teams_without_kube(
    source: Source, seen: list[tuple[int, list[SeenPod]]]
) -> dict[tuple[int, PodKey], str]:
    """The team of pods that kube-state-metrics never described in the run (their team would
    only be a guess from the namespace): the team the same task had in this run's nearest
    interval, else its most recently metered row's, else none (the namespace applies)."""
    guessed = [
        (start, pod, task) for start, pods in seen for pod, task, *_ in pods if not task.from_kube
    ]
    if not guessed:
        return {}
    known: dict[tuple[str, str], list[tuple[int, str]]] = defaultdict(list)
    for start, pods in seen:
        for _, task, *_ in pods:
            if task.from_kube:
                known[(task.namespace, task.external_id)].append((start, task.team))
    stored: dict[tuple[str, str], str] = {}
    names = {(task.namespace, task.external_id) for _, _, task in guessed} - set(known)
    if names:
        rows = (
            Task.objects.filter(source=source, external_id__in={name for _, name in names})
            .order_by("namespace", "external_id", "-last_seen", "-first_seen")
            .values_list("namespace", "external_id", "team__name")
        )
        for namespace, name, team in rows:
            stored.setdefault((namespace, name), team)
    teams = {}
    for start, pod, task in guessed:
        name = (task.namespace, task.external_id)
        if known.get(name):
            teams[(start, pod)] = min(known[name], key=lambda seen: abs(seen[0] - start))[1]
        elif name in stored:
            teams[(start, pod)] = stored[name]
    return teams


def _teams_upsert(names: set[str], *, source: Source) -> dict[str, int]:
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO metering_team (name, created) SELECT unnest(%s::text[]), now()"
            " ON CONFLICT (name) DO NOTHING RETURNING id",
            [sorted(names)],
        )
        _audit_created(Team, [pk for (pk,) in cursor.fetchall()], source=source)
    return dict(Team.objects.filter(name__in=names).values_list("name", "pk"))


def _audit_created(model: type[Team | Service], pks: list[int], *, source: Source) -> None:
    """One audit entry per team or service that ingestion created: a new team starts being
    billed, a new service starts being judged against an SLO. `RETURNING` names only the rows
    this worker inserted, so a team two workers meet at once is recorded once."""
    for obj in model.objects.filter(pk__in=pks).order_by("pk"):
        audit_record(
            action="create",
            obj=obj,
            changes={**object_snapshot(obj), "created_by": f"ingest of source {source.name}"},
        )


def _moment(epoch: int | None) -> datetime | None:
    return None if epoch is None else datetime.fromtimestamp(epoch, UTC)


def _legacy_tasks_adopt(
    source: Source, merged: dict[TaskRowKey, dict[str, Any]], team_ids: dict[str, int]
) -> None:
    """Rows metered before tasks were keyed by namespace (namespace empty) become the row of
    the first namespace that runs the same name under the same team, so a running task keeps
    its history on one row. A name under another team is another task and stays apart."""
    keys = sorted((ns, name, team_ids[team]) for ns, name, team in merged if ns)
    if not keys:
        return
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE metering_task t SET namespace = k.ns"
            " FROM (SELECT DISTINCT ON (name, team) ns, name, team"
            "       FROM unnest(%s::text[], %s::text[], %s::bigint[]) AS u(ns, name, team)"
            "       ORDER BY name, team, ns) AS k"
            " WHERE t.source_id = %s AND t.namespace = '' AND t.external_id = k.name"
            " AND t.team_id = k.team AND NOT EXISTS (SELECT 1 FROM metering_task o"
            "   WHERE o.source_id = t.source_id AND o.namespace = k.ns"
            "   AND o.external_id = k.name AND o.team_id = k.team)",
            [[k[0] for k in keys], [k[1] for k in keys], [k[2] for k in keys], source.pk],
        )


def _task_rows_upsert(
    source: Source, merged: dict[TaskRowKey, dict[str, Any]], team_ids: dict[str, int]
) -> tuple[dict[TaskRowKey, int], list[int]]:
    """INSERT ... ON CONFLICT: times only widen; kind follows kube-state-metrics in the row's
    latest interval (a run that ends before the row's last_seen leaves it). Returns the
    rows' pks by key, and the pks this statement inserted.

    Rows go in sorted order so that concurrent workers cannot deadlock on them.
    """
    pks: dict[TaskRowKey, int] = {}
    inserted: list[int] = []
    names = {team_id: name for name, team_id in team_ids.items()}
    for from_kube in (True, False):
        rows = [
            (
                source.pk,
                row["namespace"],
                row["external_id"],
                team_ids[row["team"]],
                row["kind"],
                row["fault_domain"],
                _moment(row["first_seen"]),
                _moment(row["last_seen"]),
                _moment(row["created"]),
                _moment(row["first_started"]),
                _moment(row["ended"]),
            )
            for _, row in sorted(merged.items())
            if row["from_kube"] == from_kube
        ]
        # Kind follows the latest interval metered, not the latest ingest: windows ingested
        # again (late samples, a class mapped) or in another order leave it as it was.
        identity_update = (
            "kind = CASE WHEN t.last_seen IS NULL OR EXCLUDED.last_seen >= t.last_seen"
            " THEN EXCLUDED.kind ELSE t.kind END,"
            " fault_domain = COALESCE(NULLIF(EXCLUDED.fault_domain, ''), t.fault_domain),"
            if from_kube
            else ""
        )
        for chunk in _chunked(rows, size=5000):
            # One array per column: a statement of constant text, whatever the rows.
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute(
                    "INSERT INTO metering_task AS t (source_id, namespace, external_id, team_id,"
                    " kind, fault_domain, first_seen, last_seen, created, first_started, ended)"
                    " SELECT * FROM unnest(%s::bigint[], %s::text[], %s::text[], %s::bigint[],"
                    " %s::text[], %s::text[], %s::timestamptz[], %s::timestamptz[],"
                    " %s::timestamptz[], %s::timestamptz[], %s::timestamptz[])"
                    " ON CONFLICT (source_id, namespace, external_id, team_id) DO UPDATE SET"
                    f" {identity_update}"
                    " first_seen = LEAST(t.first_seen, EXCLUDED.first_seen),"
                    " last_seen = GREATEST(t.last_seen, EXCLUDED.last_seen),"
                    " created = LEAST(t.created, EXCLUDED.created),"
                    " first_started = LEAST(t.first_started, EXCLUDED.first_started),"
                    " ended = GREATEST(t.ended, EXCLUDED.ended)"
                    " RETURNING namespace, external_id, team_id, id, xmax = 0",
                    [list(column) for column in zip(*chunk, strict=True)],
                )
                for namespace, name, team_id, pk, is_new in cursor.fetchall():
                    pks[(namespace, name, names[team_id])] = pk
                    if is_new:
                        inserted.append(pk)
    return pks, inserted


def _relabels_audit(source: Source, inserted: list[int]) -> None:
    """A new row for a key that has rows under another team is a relabel: record which team
    the key leaves (its row metered last before this one), which it joins, and from which
    interval on."""
    if not inserted:
        return
    # Only new rows whose key has other rows: most inserted rows are new tasks, not relabels.
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT n.id FROM metering_task n WHERE n.id = ANY(%s) AND n.namespace <> ''"
            " AND EXISTS (SELECT 1 FROM metering_task o WHERE o.source_id = n.source_id"
            " AND o.namespace = n.namespace AND o.external_id = n.external_id AND o.id <> n.id)",
            [inserted],
        )
        relabelled = [pk for (pk,) in cursor.fetchall()]
    if not relabelled:
        return
    new = Task.objects.filter(pk__in=relabelled).select_related("team").order_by("pk")
    rows: dict[tuple[str, str], list[Task]] = defaultdict(list)
    for task in (
        Task.objects.filter(source=source, external_id__in={t.external_id for t in new})
        .exclude(namespace="")
        .select_related("team")
        .order_by("first_seen", "pk")
    ):
        rows[(task.namespace, task.external_id)].append(task)
    for task in new:
        others = [t for t in rows[(task.namespace, task.external_id)] if t.pk != task.pk]
        if not others:
            continue
        before = [t for t in others if t.first_seen < task.first_seen] or others
        audit_record(
            action="change",
            obj=task,
            changes={
                "team": [before[-1].team.name, task.team.name],
                "namespace": task.namespace,
                "task": task.external_id,
                "from_interval": task.first_seen,
                "other_task_rows": [t.pk for t in others],
                "changed_by": f"ingest of source {source.name} (a relabel in kube-state-metrics)",
            },
        )


def _chunked(rows: list[tuple], size: int = 5000) -> Iterator[list[tuple]]:
    """Slices small enough for PostgreSQL's 65,535 bind parameters per statement."""
    for index in range(0, len(rows), size):
        yield rows[index : index + size]


def _services_upsert(source: Source, measured: Measured) -> dict[tuple[str, str], int]:
    """Services seen in the run: `namespace/model`, owned by the team of its namespace."""
    keys = {key for facts in measured.intervals.values() for key in facts.latency}
    if not keys:
        return {}
    external = {key: f"{key[0]}/{key[1]}" for key in keys}
    stored = _service_pks(source, external.values())
    # A stored service keeps its team (DO NOTHING below): only new ones need their team,
    # which takes a pass over every pod of every interval.
    new = sorted(key for key in keys if external[key] not in stored)
    if new:
        _services_insert(source, measured, new, external)
        stored = _service_pks(source, external.values())
    return {key: stored[external[key]] for key in keys}


def _service_pks(source: Source, names: Iterable[str]) -> dict[str, int]:
    return dict(
        Service.objects.filter(source=source, external_id__in=names).values_list(
            "external_id", "pk"
        )
    )


def _services_insert(
    source: Source,
    measured: Measured,
    new: list[tuple[str, str]],
    external: dict[tuple[str, str], str],
) -> None:
    """The services not stored yet, each owned by the team most of its namespace's pods name
    (the namespace where none does)."""
    namespaces = {namespace for namespace, _ in new}
    namespace_teams: dict[str, Counter] = defaultdict(Counter)
    for facts in measured.intervals.values():
        for (namespace, _), identity in facts.identity.items():
            if identity.team_label and namespace in namespaces:
                namespace_teams[namespace][identity.team_label] += 1
    teams = {key: (namespace_teams[key[0]].most_common(1) or [(key[0], 0)])[0][0] for key in new}
    team_ids = _teams_upsert(set(teams.values()), source=source)
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO metering_service (source_id, external_id, team_id, slo_p99_ms, is_key)"
            " SELECT %s, e, t, %s, %s FROM unnest(%s::text[], %s::bigint[]) AS n(e, t)"
            " ON CONFLICT (source_id, external_id) DO NOTHING RETURNING id",
            [
                source.pk,
                Service._meta.get_field("slo_p99_ms").default,
                Service._meta.get_field("is_key").default,
                [external[key] for key in new],
                [team_ids[teams[key]] for key in new],
            ],
        )
        _audit_created(Service, [pk for (pk,) in cursor.fetchall()], source=source)


def service_slo_set(*, external_id: str, slo_p99_ms: int) -> int:
    """Set the latency objective of every service named `external_id` (one per source).

    SLOs are not in the telemetry: an operator states them (here, or in the admin). Returns how
    many services changed; an unknown name is an error, not a silent no-op."""
    if slo_p99_ms <= 0:
        raise WindowError(f"slo_p99_ms must be a positive number of milliseconds, got {slo_p99_ms}")
    services = list(Service.objects.filter(external_id=external_id).order_by("pk"))
    if not services:
        raise WindowError(f"no service named {external_id!r}")
    stated = timezone.now()
    with transaction.atomic():
        for service in services:  # each audited: an SLO decides which breaches move money
            changes = {"slo_p99_ms": [service.slo_p99_ms, slo_p99_ms]}
            changes["slo_stated"] = [service.slo_stated, stated]
            service.slo_p99_ms, service.slo_stated = slo_p99_ms, stated
            service.save(update_fields=["slo_p99_ms", "slo_stated"])
            audit_record(action="change", obj=service, changes=changes)
    return len(services)
