"""Metering writes, sharded windows: a run of windows of a large source measured in shards by
node set, as separate Celery tasks on any number of workers, and combined exactly.

How it splits (docs/architecture.md "Sharded windows"):

- The GPU exporter's series carry their node (`Hostname`, or `hostname` in other builds), so
  each shard reads the device meters (presence, memory, busy time) of its node set only
  (`sources.NodeSet`: a partition of the pool, so every series is read by exactly one shard).
  Time-sliced GPUs and silent exporters' GPUs are narrowed queries of the shard's own GPUs.
- kube-state-metrics' pod series carry no node (only `kube_pod_info` does), and identity,
  preemptions and waits need every pod's view: every shard reads the identity meter and the
  scrape targets (`up`) for the whole pool. They are cheap next to the device meters
  (identity is read at interval ends only). I/O and latency, which nothing on the GPU side
  needs, are read by shard 0 alone.
- A shard stages what Prometheus answered (`measure.Observation`, before any derivation, as
  exact text: Decimals as written, Fractions as "num/den"), not facts: a task's row is the sum
  of its pods rounded once, a multi-node job's pods sit in several shards, and completeness,
  first-seen baselines and time-sliced splits all need the whole pool's view of an interval.
  The combiner merges the shards' observations (each device series comes from one shard; the
  pool-wide answers are the same in every shard) and derives them with the same code as an
  unsharded batch, so the facts, and the rows, are identical.

All or nothing: the shards write only their staging rows; the combiner writes the windows
(`writer._run_write`, as today) and deletes the batch in ONE transaction. A shard killed
half-way is redelivered and stages again (its row is replaced); a batch started again (a retry
of its windows, beat's catch-up of a lost one) deletes the older attempt first, and a shard
or combiner of a deleted attempt finds nothing to do.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Callable, Iterable, Iterator
from decimal import Decimal
from fractions import Fraction
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from metering import measure, querying, sources
from metering.identity import _services_upsert, _tasks_upsert
from metering.measure import GpuInfo, Observation, Observed, PodIdentity, SeriesTicks
from metering.models import IngestBatch, IngestShard, IngestWindow
from metering.writer import LossAcceptance, _run_write

logger = logging.getLogger(__name__)

# The staged form's version: a combiner refuses (and the batch starts again) any other.
OBSERVATION_VERSION = 1

# Queues each shard of a started batch (a Celery task per shard); None: run them here.
ShardDispatch = Callable[[list[int]], None]


class StagedFormatError(ValueError):
    """A staged observation of another version or shape."""


def shard_plans(patterns: list[str], plan: sources.QueryPlan) -> list[sources.QueryPlan]:
    """One plan per shard: shard 0 the nodes no pattern names (and the pod-level meters of
    the whole pool), then one per pattern."""
    patterns = sources.shard_patterns_validate(patterns)
    return [
        dataclasses.replace(plan, node_set=node_set, pod_meters=index == 0)
        for index, node_set in enumerate(sources.node_sets(patterns))
    ]


# --- Starting, staging and combining a batch ------------------------------------------------


def batch_start(
    run: list[IngestWindow], plan: sources.QueryPlan, accept_loss: LossAcceptance | None
) -> list[int]:
    """A new attempt at the run: older attempts whose windows overlap it are deleted (their
    staged shards with them), and one pending shard per node set of the source's patterns is
    created. Returns the shards' ids."""
    source = run[0].source
    patterns = list(source.shard_node_patterns)
    plans = shard_plans(patterns, plan)
    with transaction.atomic():
        IngestBatch.objects.filter(
            source=source, first_start__lte=run[-1].start, last_start__gte=run[0].start
        ).delete()
        batch = IngestBatch.objects.create(
            source=source,
            first_start=run[0].start,
            last_start=run[-1].start,
            window_ids=[window.pk for window in run],
            node_patterns=patterns,
            shards=len(plans),
            accept_loss=(
                {"operator": accept_loss.operator, "reason": accept_loss.reason}
                if accept_loss
                else None
            ),
        )
        shards = IngestShard.objects.bulk_create(
            IngestShard(batch=batch, index=index, nodes=plan.node_set.describe())
            for index, plan in enumerate(plans)
            if plan.node_set is not None
        )
    return [shard.pk for shard in shards]


def shard_ingest(*, shard_id: int) -> int | None:
    """Measure one shard and stage what Prometheus answered; returns its batch's id when this
    was the last shard to be staged (the caller queues the combiner), else None.

    Raises `IngestShard.DoesNotExist` for a shard of an attempt that no longer exists
    (written already, or started again), and `sources.PrometheusUnavailable` (windows pending,
    the caller retries the shard); a refused query or an unusable source marks the windows
    failed and drops the attempt.
    """
    shard = IngestShard.objects.select_related("batch__source").get(pk=shard_id)
    batch, source = shard.batch, shard.batch.source
    IngestShard.objects.filter(pk=shard.pk).update(attempts=shard.attempts + 1)
    step = settings.TANDEM_STEP_SECONDS
    try:
        plan = sources.query_plan_for(source, step_seconds=step)
        plan = shard_plans(batch.node_patterns, plan)[shard.index]
        observation = querying.observe_batch(source, plan, batch.first_start, batch.last_start)
    except sources.SourceConfigurationError as error:
        _batch_fail(batch, f"source {source.name}: {error}")
        return None
    except sources.PrometheusUnavailable as error:
        _windows_touch(batch, IngestWindow.Status.PENDING, str(error))
        raise
    except sources.PrometheusQueryError as error:
        _batch_fail(batch, str(error))
        return None
    for query in observation.queries:
        query["shard"] = shard.index
    text = observation_dump(observation)
    with transaction.atomic():
        # The batch row first: shards finishing together queue the combiner exactly once.
        if not IngestBatch.objects.select_for_update().filter(pk=batch.pk).exists():
            return None
        IngestShard.objects.filter(pk=shard.pk).update(
            status=IngestShard.Status.STAGED, observation=text, updated=timezone.now()
        )
        _windows_touch(batch, IngestWindow.Status.RUNNING, "")
        staged = batch.shard_rows.filter(status=IngestShard.Status.STAGED).count()
    return batch.pk if staged == batch.shards else None


def shards_combine(*, batch_id: int) -> list[IngestWindow]:
    """Merge the staged shards of a batch, derive each interval's facts as one unsharded
    batch would, and write the windows and drop the batch in ONE transaction. Raises
    `IngestBatch.DoesNotExist` for a batch that no longer exists (written already, or
    started again)."""
    batch = IngestBatch.objects.select_related("source").get(pk=batch_id)
    # Their staged text is read one shard at a time, below.
    rows = list(batch.shard_rows.order_by("index").values_list("pk", "status"))
    if len(rows) != batch.shards or any(status != IngestShard.Status.STAGED for _, status in rows):
        logger.warning("ingest batch %s is not fully staged; not combined", batch_id)
        return []
    run = list(IngestWindow.objects.filter(pk__in=batch.window_ids).order_by("start"))
    if not run:  # its windows were deleted meanwhile: nothing to write
        IngestBatch.objects.filter(pk=batch.pk).delete()
        return []
    step = settings.TANDEM_STEP_SECONDS
    plan = sources.query_plan_for(batch.source, step_seconds=step)
    try:
        merged = observations_merge(_staged_observations([pk for pk, _ in rows]))
    except StagedFormatError as error:
        _batch_fail(batch, f"staged shards unreadable, ingest the windows again: {error}")
        return run
    first, last = int(batch.first_start.timestamp()), int(batch.last_start.timestamp())
    measured = measure.derive(merged, plan, first, last)
    del merged  # what Prometheus answered: the write needs the facts only
    accept_loss = LossAcceptance(**batch.accept_loss) if batch.accept_loss else None
    began = time.perf_counter()
    task_ids = _tasks_upsert(batch.source, plan, measured)
    service_ids = _services_upsert(batch.source, measured)
    with transaction.atomic():
        if not IngestBatch.objects.select_for_update().filter(pk=batch.pk).exists():
            return run  # started again meanwhile: the new attempt writes
        usage_rows, _ = _run_write(run, measured, task_ids, service_ids, accept_loss)
        IngestBatch.objects.filter(pk=batch.pk).delete()
    logger.info(
        "combined %s shards of %s windows of %s from %s: %s usage rows in %.3f s",
        len(rows),
        len(run),
        batch.source,
        batch.first_start,
        usage_rows,
        time.perf_counter() - began,
    )
    return list(IngestWindow.objects.filter(pk__in=batch.window_ids).order_by("start"))


def _staged_observations(shard_ids: list[int]) -> Iterator[Observation]:
    """The shards' staged observations, read and parsed one at a time, each let go once the
    caller has merged it: a combiner holds the merged batch, not every shard's text and
    parsed copy at once."""
    for pk in shard_ids:
        text = IngestShard.objects.filter(pk=pk).values_list("observation", flat=True).get()
        observation = observation_load(text)
        del text
        yield observation
        del observation


def run_sharded(
    run: list[IngestWindow],
    plan: sources.QueryPlan,
    accept_loss: LossAcceptance | None,
    dispatch: ShardDispatch | None,
) -> None:
    """Start a batch for the run; queue its shards through `dispatch`, or (None) measure them
    one after the other here and combine."""
    shard_ids = batch_start(run, plan, accept_loss)
    if dispatch is not None:
        dispatch(shard_ids)
        return
    for shard_id in shard_ids:
        try:
            batch_id = shard_ingest(shard_id=shard_id)
        except IngestShard.DoesNotExist:
            return  # a failed shard dropped the attempt
        if batch_id is not None:
            shards_combine(batch_id=batch_id)


def _windows_touch(batch: IngestBatch, status: str, error: str) -> None:
    # `updated` by hand (update() skips auto_now): beat tells a live attempt from a lost one
    IngestWindow.objects.filter(pk__in=batch.window_ids).update(
        status=status, error=error[:2000], updated=timezone.now()
    )


def _batch_fail(batch: IngestBatch, error: str) -> None:
    with transaction.atomic():
        _windows_touch(batch, IngestWindow.Status.FAILED, error)
        IngestBatch.objects.filter(pk=batch.pk).delete()


# --- Merging shards ---------------------------------------------------------------------


def observations_merge(shards: Iterable[Observation]) -> Observation:
    """One observation of the whole pool from its shards' (see the module docstring).

    Device series, GPUs, per-tick presence and silent GPUs come from one shard each (node
    sets partition the pool); I/O and latency from shard 0 alone; identity, preemptions and
    scrape targets are the same pool-wide answers in every shard, except what each shard's
    narrowed follow-ups filled in (its pods' history, its pods' creation times), which the
    merge unites. Warnings: shard 0's, then the others' not already among them."""
    # Shard by shard (each is parsed only when the merge reaches it), which adds the parts of
    # every interval in shard order, as the docstring says.
    merged: dict[int, Observed] = {}
    shared: set[str] = set()
    queries: list[dict[str, Any]] = []
    evaluation_seconds = 0.0
    for shard in shards:
        for start, part in shard.observed.items():
            _observed_add(merged.setdefault(start, Observed()), part)
        shared |= shard.shared
        queries.extend(shard.queries)
        evaluation_seconds += shard.evaluation_seconds
    merged = {start: merged[start] for start in sorted(merged)}
    _details_trim(merged)
    return Observation(
        observed=merged, shared=shared, queries=queries, evaluation_seconds=evaluation_seconds
    )


def _observed_add(into: Observed, part: Observed) -> None:
    for key, series in part.series.items():
        if key in into.series:
            into.warnings.append(f"shards: device series {key} read by two shards")
        into.series[key] = series
    for pod, counters in part.io_last.items():
        into.io_last[pod].update(counters)
    for replica, buckets in part.latency_last.items():
        into.latency_last[replica].update(buckets)
    for pod, identity in part.identity.items():
        known = into.identity.get(pod)
        into.identity[pod] = identity if known is None else _identity_united(known, identity)
    into.preempted |= part.preempted
    into.preempted_at.update(part.preempted_at)
    into.present.update(part.present)
    into.targets.update(part.targets)
    into.silent_gpus.update(part.silent_gpus)
    into.gpus.update(part.gpus)
    seen = set(into.warnings)
    into.warnings.extend(warning for warning in part.warnings if warning not in seen)


def _identity_united(one: PodIdentity, other: PodIdentity) -> PodIdentity:
    """Two shards' views of one pod in one interval: the same answers, each with what its own
    follow-ups added (whether the pod ended, its creation time and GPU request)."""
    return PodIdentity(
        task_label=one.task_label,
        team_label=one.team_label,
        owner_name=one.owner_name,
        priority_class=one.priority_class,
        node=one.node,
        created=one.created if one.created is not None else other.created,
        scheduled=one.scheduled if one.scheduled is not None else other.scheduled,
        ended=one.ended or other.ended,
        gpus=one.gpus or other.gpus,
        from_kube=one.from_kube,
        from_history=one.from_history,
    )


def _details_trim(observed: dict[int, Observed]) -> None:
    """Creation times and GPU requests only of the pods an unsharded batch would have asked
    about (preempted or newly scheduled in the whole pool's view): a shard that lacked another
    shard's history of a pod may have taken it for newly scheduled and asked."""
    asked = measure._newly_preempted(observed) | measure._newly_scheduled(observed)
    for interval in observed.values():
        for (_, pod), identity in interval.identity.items():
            if pod not in asked:
                identity.created, identity.gpus = None, Fraction(0)


# --- The staged form: exact text, versioned -------------------------------------------------


def _number(value: Decimal | Fraction | int | None) -> Any:
    """Decimals as Prometheus wrote them ("d:1.50"), Fractions as "f:num/den", ints as they
    are: a round trip gives back the same type and value."""
    kind = type(value)
    if kind is Decimal:
        return f"d:{value}"
    if kind is Fraction:
        return f"f:{value.numerator}/{value.denominator}"  # type: ignore[union-attr]
    if value is None or kind is int:
        return value
    raise TypeError(f"not an exact number: {value!r}")


def _exact(text: Any) -> Any:
    if text is None or type(text) is int:
        return text
    if type(text) is str and text[:2] == "d:":
        return Decimal(text[2:])
    if type(text) is str and text[:2] == "f:":
        numerator, _, denominator = text[2:].partition("/")
        return Fraction(int(numerator), int(denominator))
    raise StagedFormatError(f"not an exact number: {text!r}")


def _gpu_dump(gpu: GpuInfo) -> list:
    return [gpu.ticks, *gpu.target, gpu.node, gpu.fault_domain, gpu.model]


def _gpu_load(row: list) -> GpuInfo:
    ticks, job, instance, node, fault_domain, model = row
    return GpuInfo(ticks, (job, instance), node, fault_domain, model)


def _series_dump(key: tuple, series: SeriesTicks) -> list:
    # One flat list per series (there are a few per GPU and interval): the key, then the
    # fields in SeriesTicks' order.
    return [
        *key,
        series.ticks,
        series.fault_domain,
        *series.target,
        series.node,
        series.model,
        _number(series.memory_peak),
        _number(series.memory_avg),
        _number(series.busy),
        _number(series.shared_alloc),
        _number(series.shared_busy),
        series.bad,
    ]


def _series_load(row: list) -> tuple[tuple, SeriesTicks]:
    uuid, instance_id, profile, namespace, pod, ticks, domain, job, instance, node, model = row[:11]
    peak, average, busy, shared_alloc, shared_busy, bad = row[11:]
    series = SeriesTicks(
        ticks=ticks,
        fault_domain=domain,
        target=(job, instance),
        node=node,
        model=model,
        memory_peak=_exact(peak),
        memory_avg=_exact(average),
        busy=_exact(busy),
        shared_alloc=_exact(shared_alloc),
        shared_busy=_exact(shared_busy),
        bad=bad,
    )
    return (uuid, instance_id, profile, namespace, pod), series


IDENTITY_FIELDS = (
    "task_label",
    "team_label",
    "owner_name",
    "priority_class",
    "node",
    "created",
    "scheduled",
    "ended",
    "from_kube",
    "from_history",
)


def _interval_dump(interval: Observed) -> dict[str, Any]:
    return {
        "series": [_series_dump(key, series) for key, series in interval.series.items()],
        "io_last": [
            [*pod, {meter: _number(value) for meter, value in counters.items()}]
            for pod, counters in interval.io_last.items()
        ],
        "latency_last": [
            [*replica, {le: _number(value) for le, value in buckets.items()}]
            for replica, buckets in interval.latency_last.items()
        ],
        "identity": [
            [*pod, *(getattr(identity, name) for name in IDENTITY_FIELDS), _number(identity.gpus)]
            for pod, identity in interval.identity.items()
        ],
        "preempted": sorted(list(pod) for pod in interval.preempted),
        "preempted_at": [[*pod, at] for pod, at in interval.preempted_at.items()],
        "present": [[*device, ticks] for device, ticks in interval.present.items()],
        "targets": [[*target, *counts] for target, counts in interval.targets.items()],
        "silent_gpus": {uuid: _gpu_dump(gpu) for uuid, gpu in interval.silent_gpus.items()},
        "gpus": {uuid: _gpu_dump(gpu) for uuid, gpu in interval.gpus.items()},
        "warnings": interval.warnings,
    }


def _interval_load(data: dict[str, Any]) -> Observed:
    interval = Observed()
    interval.series = dict(_series_load(row) for row in data["series"])
    for namespace, pod, counters in data["io_last"]:
        interval.io_last[(namespace, pod)] = {m: _exact(v) for m, v in counters.items()}
    for namespace, service, pod, buckets in data["latency_last"]:
        interval.latency_last[(namespace, service, pod)] = {
            le: _exact(v) for le, v in buckets.items()
        }
    for namespace, pod, *fields, gpus in data["identity"]:
        identity = PodIdentity(**dict(zip(IDENTITY_FIELDS, fields, strict=True)))
        identity.gpus = _exact(gpus)
        interval.identity[(namespace, pod)] = identity
    interval.preempted = {(namespace, pod) for namespace, pod in data["preempted"]}
    interval.preempted_at = {(namespace, pod): at for namespace, pod, at in data["preempted_at"]}
    interval.present = {(uuid, gi): ticks for uuid, gi, ticks in data["present"]}
    interval.targets = {(job, instance): [a, b] for job, instance, a, b in data["targets"]}
    interval.silent_gpus = {uuid: _gpu_load(row) for uuid, row in data["silent_gpus"].items()}
    interval.gpus = {uuid: _gpu_load(row) for uuid, row in data["gpus"].items()}
    interval.warnings = list(data["warnings"])
    return interval


def observation_dump(observation: Observation) -> str:
    """A shard's observation as exact, versioned JSON text (see `_number`)."""
    return json.dumps(
        {
            "version": OBSERVATION_VERSION,
            "intervals": [
                [start, _interval_dump(interval)]
                for start, interval in sorted(observation.observed.items())
            ],
            "shared": sorted(observation.shared),
            "queries": observation.queries,
            "evaluation_seconds": observation.evaluation_seconds,
        },
        separators=(",", ":"),
    )


def observation_load(text: str) -> Observation:
    try:
        data = json.loads(text)
    except ValueError as error:
        raise StagedFormatError(f"not JSON: {error}") from None
    if not isinstance(data, dict) or data.get("version") != OBSERVATION_VERSION:
        version = data.get("version") if isinstance(data, dict) else None
        raise StagedFormatError(f"version {version!r}, expected {OBSERVATION_VERSION}")
    try:
        return Observation(
            observed={start: _interval_load(interval) for start, interval in data["intervals"]},
            shared=set(data["shared"]),
            queries=data["queries"],
            evaluation_seconds=data["evaluation_seconds"],
        )
    except (KeyError, TypeError, ValueError, ArithmeticError) as error:
        raise StagedFormatError(f"malformed: {error}") from None
