"""Prometheus answers -> the facts of each interval of a batch (pure Python, no database).

`measure` runs the meters of `sources.METERS` as range queries over a batch of consecutive
intervals plus the interval before it (the baseline for counters and for "first seen"), then
the narrowed per-tick queries the answers call for, and derives per interval: each pod's
allocated and busy GPU-seconds, memory, I/O increments, capacity, completeness, latency bucket
increments, waits and preemptions. Anything unusable (a NaN, a negative value, a missing
label) is skipped and described in that interval's warnings.

Completeness is counted per GPU and per scrape target (see `_derive_completeness`): a GPU seen
in an interval or the one before is expected at each of its ticks, and so is every GPU of an
exporter that failed scrapes, so a silent node lowers it by its share and is named.
"""

from __future__ import annotations

import decimal
import math
import re
import threading
from bisect import bisect_left
from collections import defaultdict
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from decimal import Decimal
from fractions import Fraction
from functools import cache
from itertools import pairwise
from typing import Any

from kernel.collector import collector_paused
from kernel.gpu_models import gpu_model_key
from kernel.histogram import is_infinity
from kernel.money import half_up_rational_text
from kernel.numbers import exact_sum, whole_number
from metering import sample_texts, shared_split, sources

PodKey = tuple[str, str]  # (namespace, pod)
# (UUID, GPU_I_ID, GPU_I_PROFILE, namespace, pod); namespace and pod are "" for the bare
# (unattributed) series of a device.
SeriesKey = tuple[str, str, str, str, str]
Device = tuple[str, str]  # (UUID, GPU_I_ID)
Target = tuple[str, str]  # a scrape target: (job, instance)
NO_OWNER = "<none>"  # what kube-state-metrics writes for a pod without owner
# Float sums of small-denominator shares (1/3 of a tick) are recovered exactly from their
# rounding; real-valued data is off by less than 1e-12 after this.
MAX_DENOMINATOR = 1_000_000
# Narrowed queries name their series in a regex of literal alternatives. Each request has a
# fixed cost (a round trip, a pass over the metric's index, Python reading the answer), so
# fewer, wider ones cost less: a 10,000-GPU batch asked 42 queries of 100 pods for the pods
# it saw scheduled. A few hundred names keep a request a sensible size.
NARROWED_BATCH = 250
# The raw samples a request of the time-sliced GPUs' split asks for, about (per metric; see
# `_shared_gpus_per_request`), and the series a metric has per such GPU: a GPU shared three
# ways with dcgm-exporter's --kubernetes-virtual-gpus has its bare series and three pods'.
SHARED_SAMPLES_PER_REQUEST = 100_000
SHARED_SERIES_PER_GPU = 4
# The meters whose scrape targets' missed scrapes a window names (`_gap_targets_warn`), with
# what the interval misses for them. Counters (I/O, latency buckets) are right over a gap but
# what the pods counted in it lands on the interval of the next answer; kube-state-metrics
# says what a pod is and whether it was preempted only while it is scraped.
GAP_EFFECTS = {
    "io": "what their pods counted meanwhile lands on the interval of their next answer, so"
    " this interval's I/O miss it",
    "latency": "what their pods counted meanwhile lands on the interval of their next answer,"
    " so this interval's requests, P99 and SLA test miss it",
    "identity": "a pod preempted meanwhile may go unseen (no preemption, no starvation"
    " credit), and pods are described as in the nearest interval",
}
# Meters whose other targets of the same job count too: a replica or shard silent through
# the whole batch answered nothing in it (a kubelet's job also scrapes nodes without GPUs).
GAP_JOBS_METERS = frozenset({"latency", "identity"})


@dataclass
class PodIdentity:
    task_label: str = ""
    team_label: str = ""
    owner_name: str = ""
    priority_class: str = ""
    node: str = ""
    created: int | None = None
    scheduled: int | None = None
    ended: bool = False
    gpus: Fraction = Fraction(0)
    from_kube: bool = False  # seen in kube-state-metrics, not a fallback
    # Its labels, its owner and its info were read (kube-state-metrics writes the three series
    # for every pod, `<none>` for a pod without owner): with them, its task, team and kind are
    # known, not guessed (`_described`).
    labelled: bool = False
    owned: bool = False
    informed: bool = False
    from_history: bool = False  # read over the interval: the pod was gone by its end
    owner_kind: str = ""
    pod_ip: str = ""
    host_ip: str = ""  # its node's address (the pod's own on the host's network)
    # At the interval's end: the GPUs its containers request (MIG instances and time-sliced
    # replicas as kube-state-metrics counts them), and whether its phase is Running.
    gpus_requested: Fraction = Fraction(0)
    running: bool = False

    def task_name(self, pod_name: str) -> str:
        """The task the pod counts under within its namespace: its task label, else its
        owner, else the pod itself (metering.identity names tasks so)."""
        return self.task_label or self.owner_name or pod_name


@dataclass
class SeriesTicks:
    """One dcgm-exporter series in one interval."""

    ticks: int = 0
    fault_domain: str = ""
    target: Target = ("", "")  # the first by name, where several answered
    # A second target that answered for the series in the interval: the exporter scraped
    # twice (two jobs), or replaced (a new pod, a new address). Its ticks may overlap, so the
    # per-tick query counts it (`_time_sliced_devices`).
    also_target: Target | None = None
    node: str = ""
    model: str = ""  # dcgm-exporter's `modelName`: a MIG instance's is its physical GPU's
    cluster: str = ""  # the source's cluster label on the series (`_clusters_check`)
    memory_peak: Decimal | None = None  # MiB, as exporters write it
    memory_avg: Decimal | None = None
    busy: Decimal | Fraction | None = None
    shared_alloc: Fraction | None = None  # time-sliced devices: ticks split 1/k per tick
    shared_busy: Fraction | None = None
    bad: bool = False


@dataclass
class PendingView:
    """What kube-state-metrics showed over one interval of a pod that was Pending in it or
    in the interval before, and not at the next interval's end (sources.pending_pods_parts):
    whether it showed the pod at all, and if so how."""

    created: int | None = None  # `kube_pod_created`'s value, Unix seconds
    scheduled: bool = False  # a `kube_pod_status_scheduled_time` sample in the interval
    last_pending_tick: int | None = None  # the point of the last tick slot it was Pending at
    requests_gpus: bool = False  # a GPU request (of any GPU resource) in the interval


@dataclass
class Observed:
    """What Prometheus answered for one interval, before any derivation."""

    series: dict[SeriesKey, SeriesTicks] = field(default_factory=dict)
    io_last: dict[PodKey, dict[str, Decimal]] = field(default_factory=lambda: defaultdict(dict))
    # (namespace, service label value, replica pod) -> le -> last cumulative count
    latency_last: dict[tuple[str, str, str], dict[str, Decimal]] = field(
        default_factory=lambda: defaultdict(dict)
    )
    identity: dict[PodKey, PodIdentity] = field(default_factory=dict)
    preempted: set[PodKey] = field(default_factory=set)  # reason was 1 at some tick
    preempted_at: dict[PodKey, int] = field(default_factory=dict)
    # Pods kube-state-metrics showed Pending at some tick of the interval (identity's
    # `pending` part), and, of those that may have given up waiting, what a narrowed
    # follow-up read of them over the interval (`_gave_up`).
    pending: set[PodKey] = field(default_factory=set)
    pending_views: dict[PodKey, PendingView] = field(default_factory=dict)
    # Pods with a series of the preemption reason in the interval, 0 or 1 (identity's
    # `preempted` part); and whether kube-state-metrics writes the other reasons at 0 but no
    # series of that one, as its releases before v2.19 do (sources.reasons_at_zero_query).
    preemption_reason_series: int = 0
    preemptions_unreadable: bool = False
    # Kueue's count of the workloads it evicted to preempt them: each series' (its labels,
    # sorted) last reading. On the interval before the batch only: each series' last reading
    # in the look-back before it, and the `instance`s of Kueue's scrape targets that answered
    # a scrape in that look-back.
    kueue_evicted: dict[tuple[tuple[str, str], ...], Decimal] = field(default_factory=dict)
    kueue_looked_back: dict[tuple[tuple[str, str], ...], Decimal] = field(default_factory=dict)
    kueue_answered_before: set[str] = field(default_factory=set)
    # The same of Kueue's admissions (its admission-wait histogram's count) and of the seconds
    # those workloads waited (its sum): KUEUE_READINGS.
    kueue_admitted: dict[tuple[tuple[str, str], ...], Decimal] = field(default_factory=dict)
    kueue_admitted_looked_back: dict[tuple[tuple[str, str], ...], Decimal] = field(
        default_factory=dict
    )
    kueue_waited: dict[tuple[tuple[str, str], ...], Decimal] = field(default_factory=dict)
    kueue_waited_looked_back: dict[tuple[tuple[str, str], ...], Decimal] = field(
        default_factory=dict
    )
    # GPUs counted per tick (time-sliced, or re-laid): ticks at which any series of any of
    # their devices was there, keyed by the GPU's whole device (UUID, "").
    present: dict[Device, int] = field(default_factory=dict)
    # Scrape target -> [scrapes attempted, scrapes answered] (Prometheus' `up`).
    targets: dict[Target, list[int]] = field(default_factory=dict)
    # Scrape target -> the pod it is, where its `up` names one: Kubernetes service discovery's
    # target labels (a ServiceMonitor's `namespace` and `pod`), which Prometheus writes on
    # every series of the scrape, `up` included (`_exporters_own_series_freed`).
    target_pods: dict[Target, set[PodKey]] = field(default_factory=dict)
    # The values of the source's cluster label (`_clusters_check`): kube-state-metrics' GPU
    # nodes under each; and whether a GPU series carried two in the interval (a relabel).
    gpu_node_clusters: dict[str, set[str]] = field(default_factory=dict)
    cluster_relabelled: bool = False
    # GPUs reported by targets silent for the whole batch, from a look-back.
    silent_gpus: dict[str, GpuInfo] = field(default_factory=dict)
    # kube-state-metrics' nodes at the interval's end: those with GPUs (none where it lists no
    # nodes), when each was created, and those being taken out (sources.LEAVING_TAINTS).
    gpu_nodes: set[str] = field(default_factory=set)
    node_created: dict[str, int] = field(default_factory=dict)
    nodes_leaving: set[str] = field(default_factory=set)
    # On the interval before the batch: GPUs of listed nodes whose exporter left no trace,
    # from the look-back of sources.node_devices_query (since each node was created).
    node_gpus: dict[str, GpuInfo] = field(default_factory=dict)
    gpus: dict[str, GpuInfo] = field(default_factory=dict)  # set by _gpu_presence
    warnings: list[str] = field(default_factory=list)


@dataclass
class GpuInfo:
    """A physical GPU in one interval: ticks at which it was present (any of its devices,
    any series), who reports it and where."""

    ticks: int = 0
    target: Target = ("", "")
    node: str = ""
    fault_domain: str = ""
    model: str = ""


ModelKey = tuple[str, str, str]  # (namespace, pod, GPU model)


@dataclass
class IntervalFacts:
    alloc: dict[PodKey, Fraction] = field(default_factory=lambda: defaultdict(Fraction))
    busy: dict[PodKey, Fraction] = field(default_factory=lambda: defaultdict(Fraction))
    memory_peak: dict[PodKey, int] = field(default_factory=dict)
    memory_avg: dict[PodKey, int] = field(default_factory=dict)
    io: dict[PodKey, dict[str, int]] = field(default_factory=lambda: defaultdict(dict))
    capacity: dict[str, Fraction] = field(default_factory=lambda: defaultdict(Fraction))
    # The same GPU-seconds by GPU model (pricing by GPU class): allocation and busy time per
    # (namespace, pod, model), memory per (namespace, pod, model) over that model's devices,
    # capacity per (fault domain, model). The per-pod and per-domain sums above stay.
    alloc_by_model: dict[ModelKey, Fraction] = field(default_factory=lambda: defaultdict(Fraction))
    busy_by_model: dict[ModelKey, Fraction] = field(default_factory=lambda: defaultdict(Fraction))
    memory_peak_by_model: dict[ModelKey, int] = field(default_factory=dict)
    memory_avg_by_model: dict[ModelKey, int] = field(default_factory=dict)
    capacity_by_model: dict[tuple[str, str], Fraction] = field(
        default_factory=lambda: defaultdict(Fraction)
    )
    samples_seen: int = 0
    samples_expected: int = 0
    completeness: Fraction = Fraction(0)
    identity: dict[PodKey, PodIdentity] = field(default_factory=dict)
    waits: dict[PodKey, int] = field(default_factory=dict)  # scheduled, Unix seconds
    # Pods that gave up waiting: gone, never scheduled, since the interval before (`_gave_up`).
    gave_up: dict[PodKey, GaveUp] = field(default_factory=dict)
    preemptions: dict[PodKey, dict[str, Any]] = field(default_factory=dict)
    preemptions_unreadable: bool = False  # see PREEMPTIONS_UNREADABLE
    # Workloads Kueue evicted to preempt them, by cluster queue; and Kueue's counts first read
    # here that could not be placed in time (`_kueue_preemptions`).
    kueue_preemptions: dict[str, int] = field(default_factory=dict)
    kueue_unplaced: int = 0
    # Workloads Kueue admitted, and the seconds they had waited for it, by task kind
    # (`_kueue_admissions`).
    kueue_admissions: dict[str, KueueAdmissions] = field(default_factory=dict)
    # GPU-seconds of pods whose kind the source's priority classes do not say, by priority
    # class ("" = none; `_kinds_unmapped`).
    unmapped_kinds: dict[str, Fraction] = field(default_factory=dict)
    # Busy GPU-seconds of GPUs no pod held, by GPU UUID (`_unheld_busy`).
    unheld_busy: dict[str, Fraction] = field(default_factory=dict)
    # The GPUs counted in the capacity, by UUID, and the node of each (`GpuSighting`).
    gpus_present: dict[str, str] = field(default_factory=dict)
    # GPU-seconds of pods kube-state-metrics described somewhere in the batch, and of those it
    # described nowhere (`_identity_coverage`).
    described_gpu_seconds: Fraction = Fraction(0)
    undescribed_gpu_seconds: Fraction = Fraction(0)
    # Inference pods that served metrics without the latency histogram (`_latency_unseen`).
    latency_unseen: list[PodKey] = field(default_factory=list)
    # (namespace, service label value) -> [(le, cumulative increment), ...] in `le` order
    latency: dict[tuple[str, str], list[tuple[str, int]]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class GaveUp:
    """A pod's wait that ended with the pod gone while never scheduled (`_gave_up`): when it
    was created and when it was last seen Pending (the end of its last Pending tick), Unix
    seconds, and kube-state-metrics' last view of it (None: none was read)."""

    created: int
    ended: int
    identity: PodIdentity | None


@dataclass
class Measured:
    intervals: dict[int, IntervalFacts]  # by interval start (Unix seconds), the batch only
    queries: list[dict[str, Any]]
    evaluation_seconds: float
    plan: sources.QueryPlan
    _seen_at: dict[PodKey, list[int]] | None = field(default=None, repr=False)
    _informed_at: dict[PodKey, list[int]] = field(default_factory=dict, repr=False)

    def pod_identity(self, start: int, pod: PodKey) -> PodIdentity:
        """The interval's kube-state-metrics view of the pod, else the nearest one in the
        batch (the earlier of two as near), else an empty one. A view without the pod's
        `kube_pod_info` (kube-state-metrics' info missed in that interval: its priority
        class, so its kind, unknown) takes what the info says (class, node, addresses) from
        the nearest view with it, and keeps its own labels, owner and creation time (a
        relabel moves only the intervals from then on; a pod recreated under its name is
        the new one)."""
        identity = self.intervals[start].identity.get(pod)
        if identity is not None and identity.informed:
            return identity
        if self._seen_at is None:
            self._seen_at, self._informed_at = defaultdict(list), defaultdict(list)
            for at in sorted(self.intervals):
                for known, view in self.intervals[at].identity.items():
                    self._seen_at[known].append(at)
                    if view.informed:
                        self._informed_at[known].append(at)
        if identity is None:
            nearest = self._nearest(self._seen_at.get(pod), start)
            if nearest is None:
                return PodIdentity()
            identity = self.intervals[nearest].identity[pod]
            if identity.informed:
                return identity
        informed = self._nearest(self._informed_at.get(pod), start)
        if informed is None:
            return identity
        info = self.intervals[informed].identity[pod]
        return replace(
            identity,
            informed=True,
            priority_class=info.priority_class,
            node=info.node,
            pod_ip=info.pod_ip,
            host_ip=info.host_ip,
        )

    @staticmethod
    def _nearest(starts: list[int] | None, start: int) -> int | None:
        if not starts:
            return None
        index = bisect_left(starts, start)
        nearby = starts[max(0, index - 1) : index + 1]
        return min(nearby, key=lambda at: (abs(at - start), at))


@collector_paused
def measure(
    client: sources.PrometheusClient,
    plan: sources.QueryPlan,
    first: int,
    last: int,
    *,
    parallel: int = 1,
) -> Measured:
    """Facts of the intervals starting at first, first + step, ..., last (Unix seconds).

    Up to `parallel` of the meters' queries run at once (Prometheus evaluates them on
    several cores while Python reads the answers).
    """
    return derive(observe(client, plan, first, last, parallel=parallel), plan, first, last)


@dataclass
class Observation:
    """What Prometheus answered for a batch and the interval before it, before derivation:
    what a shard of a sharded window stages (metering.shards), and what its combiner merges
    and derives exactly as one unsharded batch would be."""

    observed: dict[int, Observed]
    shared: set[str]  # time-sliced GPUs (see _time_sliced_devices)
    queries: list[dict[str, Any]]
    evaluation_seconds: float
    # The scrape targets that answered the series of a meter in GAP_EFFECTS in the batch, with
    # the meters they answered (see _gap_targets_warn).
    gap_targets: dict[Target, set[str]] = field(default_factory=dict)


@collector_paused
def observe(
    client: sources.PrometheusClient,
    plan: sources.QueryPlan,
    first: int,
    last: int,
    *,
    parallel: int = 1,
    follow_ups: bool = True,
) -> Observation:
    """Run the meters and (unless `follow_ups` is false: a shard of a sharded window, whose
    combiner asks them of the whole pool's merged view, see `follow_up`) the narrowed queries
    their answers call for (see `measure`)."""
    step = plan.step_seconds
    observed = {start: Observed() for start in range(first - step, last + 1, step)}
    runner = _Runner(client, plan, first - step, last)
    gap_targets = _observe_meters(runner, observed, plan, first, parallel)
    shared = _follow_ups(runner, observed, plan) if follow_ups else set()
    return Observation(observed, shared, runner.queries, runner.evaluation_seconds, gap_targets)


@collector_paused
def follow_up(
    client: sources.PrometheusClient,
    observation: Observation,
    plan: sources.QueryPlan,
    first: int,
    last: int,
) -> Observation:
    """The narrowed queries that the meters' answers of the whole pool call for, asked of the
    merged observation of a sharded window's shards (observed without them): what `observe`
    would have asked of one unsharded batch, since the meters' answers are the same."""
    runner = _Runner(client, plan, first - plan.step_seconds, last)
    shared = _follow_ups(runner, observation.observed, plan)
    return Observation(
        observation.observed,
        shared,
        [*observation.queries, *runner.queries],
        observation.evaluation_seconds + runner.evaluation_seconds,
        observation.gap_targets,
    )


def _observe_meters(
    runner: _Runner,
    observed: dict[int, Observed],
    plan: sources.QueryPlan,
    first: int,
    parallel: int,
) -> dict[Target, set[str]]:
    """Every meter of the plan, parsed into `observed`; returns the scrape targets that
    answered the series of a meter in GAP_EFFECTS, with the meters they answered."""
    step = plan.step_seconds
    gap_targets: dict[Target, set[str]] = defaultdict(set)
    grouped: dict[str, dict[str, sources.QueryRun]] = defaultdict(dict)
    # One request per range query, and one per raw-sample selector however many parts take a
    # function of it, in the meters' order; each with the parts that read it.
    readers: dict[_Request, list[tuple[str, str, sources.Part, dict]]] = defaultdict(list)
    meter_of: dict[_Request, str] = {}
    for name, build in sources.METER_PARTS.items():
        if plan.meters is not None and name not in plan.meters:
            continue  # a shard's or a combiner's plan: the other reads them
        parts = build(plan)
        for part_name, part in parts.items():
            for key in _requests_of(part):
                meter_of.setdefault(key, name)
                readers[key].append((name, part_name, part, parts))
    order = list(readers)
    ahead = max(1, parallel)
    with ThreadPoolExecutor(max_workers=ahead) as pool:

        def ask(key: _Request) -> Future:
            samples, text = key
            if samples:
                return pool.submit(runner.samples, meter_of[key], text)
            return pool.submit(runner.run, meter_of[key], text, record=False)

        # An answer is the batch's largest object (up to ~1 M points at 10,000 GPUs x 12
        # windows). They are read in order while the next `ahead` are fetched, and each is let
        # go once the last part reading it is grouped: a worker holds a few answers at a time,
        # not every answer fetched ahead of a slower parse (which set its peak memory).
        answers = {key: ask(key) for key in order[:ahead]}
        left = {key: len(parts) for key, parts in readers.items()}
        costed: set[_Request] = set()
        finished: set[tuple[str, str]] = set()
        # Per raw-sample request, the functions its parts take, all in one pass over it.
        taken: dict[_Request, dict[str, sources.QueryRun]] = {}
        for at, key in enumerate(order):
            if at + ahead < len(order):
                answers[order[at + ahead]] = ask(order[at + ahead])
            if key not in answers:
                continue  # its parts were grouped with an answer read before it
            answers[key].result()  # a failed request raises here
            for name, part_name, part, parts in readers[key]:
                keys = _requests_of(part)
                if (name, part_name) in finished or not all(
                    k in answers and answers[k].done() for k in keys
                ):
                    continue  # grouped already, or a request of it still out
                finished.add((name, part_name))
                runs = []
                for k in keys:
                    run = answers[k].result()
                    if name in GAP_EFFECTS:  # the targets, before grouping drops them
                        for series in run.series:
                            gap_targets[_target(series.labels)].add(name)
                    if part.samples:
                        if k not in taken:
                            functions = {p.function for _, _, p, _ in readers[k]}
                            taken[k] = _over_time(run, functions, first - step, step)
                        run = taken[k][part.function]
                    # A request shared by several parts counts its cost once.
                    runs.append(run if k not in costed else _costless(run))
                    costed.add(k)
                grouped[name][part_name] = _grouped(_concatenated(runs), part_name, part)
                for k in keys:
                    left[k] -= 1
                    if not left[k]:
                        del answers[k]
                        taken.pop(k, None)
                if len(grouped[name]) == len(parts):  # every part of the meter is in
                    joined = _joined(name, grouped.pop(name))
                    runner.record(name, sources.tagged_parts(parts), joined)
                    PARSERS[name](joined, observed, plan)
                    _repeated_warn(joined, observed, plan)
    return dict(gap_targets)


def _follow_ups(
    runner: _Runner, observed: dict[int, Observed], plan: sources.QueryPlan
) -> set[str]:
    """The narrowed queries the meters' answers call for, parsed into `observed`; returns the
    time-sliced GPUs."""
    gone = _pending_gone(observed)
    # Those gone before the end of the interval they were last Pending in (a Prometheus
    # with staleness markers shows no pod deleted since its last tick) are described by
    # their history, as pods that ran and were gone by an interval's end are.
    described_late = {
        pod[1]
        for start, pods in gone.items()
        for pod in pods
        if pod not in observed[start].identity
    }
    history = _without_identity(observed) | _disappeared(observed) | described_late
    for pods in _batches(history):
        result = runner.run_parts("pod_history", sources.pod_history_parts(plan, pods))
        _parse_pod_history(result, observed, plan)
    for pods in _batches({pod for gone_in in gone.values() for _, pod in gone_in}):
        result = runner.run_parts("pending_pods", sources.pending_pods_parts(plan, pods))
        _parse_pending_pods(result, observed, plan)
    exporters = _exporters_own_series_freed(observed)
    shared, repeated, beside = _time_sliced_devices(observed, plan)
    size = NARROWED_BATCH
    if plan.shared_from_samples:
        size = _shared_gpus_per_request(plan, runner.first, runner.last)
    for uuids in _batches(shared, size):
        seen = not repeated.isdisjoint(uuids)
        query = sources.shared_devices_query(plan, uuids, seen=seen, exporters=exporters)
        if plan.shared_from_samples:
            result = _shared_from_samples(runner, query, uuids, seen, exporters)
        else:
            result = runner.run("shared", query)
        _parse_shared(result, observed, plan)
    for start, interval in observed.items():
        _gpu_presence(interval, plan, shared, beside.get(start, set()))
    known = _known_gpus(observed)
    for instances in _batches(_silent_unknown_targets(observed, known)):
        result = runner.run("silent", sources.silent_devices_query(plan, instances))
        _parse_looked_up(result, observed, plan)
    unseen = {node for _, node, gpus in _unreported_gpu_nodes(observed, plan) if gpus is None}
    for seconds, nodes in sorted(_lookback_spans(observed, plan, unseen).items()):
        for named in _batches(nodes):
            query = sources.node_devices_query(plan, named, seconds)
            result = runner.run("vanished", query, at_start=True)
            _parse_looked_up(result, observed, plan, into="node_gpus")
    if _reason_unwritten(observed):
        result = runner.run("reasons_at_zero", sources.reasons_at_zero_query(plan))
        for interval, _, _, value, _ in _points(result, observed, plan, needs_pod=False):
            interval.preemptions_unreadable = value > 0 and not interval.preemption_reason_series
    preempted = _newly_preempted(observed)
    for pods in _batches(preempted):
        result = runner.run("preemption_ticks", sources.preemption_ticks_query(plan, pods))
        _parse_preemption_ticks(result, observed, plan)
    for pods in _batches(preempted | _newly_scheduled(observed)):
        result = runner.run_parts("pod_details", sources.pod_details_parts(plan, pods))
        _parse_pod_details(result, observed, plan)
        _repeated_warn(result, observed, plan)
    for meter, parts_of in (
        ("io", sources.io_before_batch_parts),
        ("latency", sources.latency_before_batch_parts),
    ):
        resumed = _counters_looked_back(observed, meter)
        for pods in _batches({pod for _, pod in resumed}):
            result = runner.run_parts(meter, parts_of(plan, pods), at_start=True)
            PARSERS[meter](result, observed, plan)
            _repeated_warn(result, observed, plan)
        _counters_unfound_warn(observed, meter, resumed)
    _observe_kueue(runner, observed, plan)
    return shared


def _shared_from_samples(
    runner: _Runner, query: str, uuids: list[str], seen: bool, exporters: list[str]
) -> sources.QueryRun:
    """`query`'s answer (sources.shared_devices_query) from the GPUs' raw samples, split per
    tick in Python (metering.shared_split), recorded under the expression it stands for."""
    runs = {
        metric: runner.samples("shared", selected)
        for metric, selected in shared_split.selectors(runner.plan, uuids).items()
    }
    samples = {metric: run.series for metric, run in runs.items()}
    result = replace(
        _concatenated(list(runs.values())),  # the three requests' costs, summed
        promql=query,
        series=shared_split.split(samples, runner.plan, seen=seen, exporters=exporters),
    )
    runner.record("shared", query, result)
    return result


# Each of Kueue's counts (sources.KUEUE_COUNTERS): where an interval holds its readings, and
# where the interval before the batch holds those of the look-back.
KUEUE_READINGS = {
    "evicted": ("kueue_evicted", "kueue_looked_back"),
    "admitted": ("kueue_admitted", "kueue_admitted_looked_back"),
    "waited": ("kueue_waited", "kueue_waited_looked_back"),
}


def _observe_kueue(runner: _Runner, observed: dict[int, Observed], plan: sources.QueryPlan) -> None:
    """Kueue's counts per interval (its preemptions, its admissions and their waits); where it
    counted any, each series' last reading before the batch, and which of its targets answered
    before it. Where Kueue is not scraped, each count's query answers nothing."""
    instances: set[str] = set()
    counted: list[str] = []
    for counter, (readings, _) in KUEUE_READINGS.items():
        result = runner.run(f"kueue_{counter}", sources.kueue_counter_query(plan, counter))
        for interval, labels, _, value, _ in _points(result, observed, plan, needs_pod=False):
            getattr(interval, readings)[tuple(sorted(labels.items()))] = value
            instances.add(labels.get("instance", ""))
            if counter not in counted:
                counted.append(counter)
    if not instances:
        return
    before = observed[min(observed)]
    for counter in counted:
        query = sources.kueue_before_batch_query(plan, counter)
        result = runner.run(f"kueue_{counter}_before_batch", query, at_start=True)
        looked_back = getattr(before, KUEUE_READINGS[counter][1])
        for _, labels, _, value, _ in _points(result, observed, plan, needs_pod=False):
            looked_back[tuple(sorted(labels.items()))] = value
    query = sources.kueue_targets_before_batch_query(plan, sorted(instances))
    result = runner.run("kueue_targets_before_batch", query, at_start=True)
    for series in result.series:
        before.kueue_answered_before.add(series.labels.get("instance", ""))


def _counters_unfound_warn(
    observed: dict[int, Observed], meter: str, resumed: dict[PodKey, tuple[int, int | None]]
) -> None:
    """One warning in each interval where pods scheduled over COUNTER_LOOKBACK_SECONDS
    before the batch resumed with no reading found (`resumed`, after the look-up): they
    count from zero, so all they counted, during the gap and before it, lands there."""
    first = min(observed)
    found = _counter_pods(observed[first], meter)
    limit = first - sources.COUNTER_LOOKBACK_SECONDS
    unfound: dict[int, list[PodKey]] = defaultdict(list)
    for pod, (start, scheduled) in sorted(resumed.items()):
        if pod not in found and scheduled is not None and scheduled < limit:
            unfound[start].append(pod)
    hours = sources.COUNTER_LOOKBACK_SECONDS // 3600
    for start, pods in sorted(unfound.items()):
        observed[start].warnings.append(
            f"{meter}: {len(pods)} pod(s) resumed after over {hours} h without a"
            f" reading, counted from zero, e.g. {pods[0][0]}/{pods[0][1]}"
        )


def _counter_pods(interval: Observed, meter: str) -> set[PodKey]:
    if meter == "io":
        return set(interval.io_last)
    return {(namespace, pod) for namespace, _, pod in interval.latency_last}


def _counters_looked_back(
    observed: dict[int, Observed], meter: str
) -> dict[PodKey, tuple[int, int | None]]:
    """The pods whose I/O counters (or latency buckets) show in the batch with no reading in
    the interval before it, though kube-state-metrics does not say they were scheduled
    since: their readings resume after a gap (a scrape that failed, an exporter restarted),
    and the increment is from their last reading before the batch (within `sources.
    COUNTER_LOOKBACK_SECONDS`), which the look-up puts on the interval before it. Counted
    from zero, their whole count so far would land on one interval. Inside the batch,
    `derive` carries each pod's last reading over a gap.

    Each with the interval it first shows in and when it was scheduled (None: unknown)."""
    first = min(observed)  # the interval before the batch
    seen: set[PodKey] = set()
    resumed: dict[PodKey, tuple[int, int | None]] = {}
    for start in sorted(observed):
        interval = observed[start]
        for pod in _counter_pods(interval, meter) - seen:
            seen.add(pod)
            identity = interval.identity.get(pod)
            scheduled = identity.scheduled if identity is not None else None
            if start > first and (scheduled is None or scheduled < first):
                resumed[pod] = (start, scheduled)
    return resumed


@collector_paused
def derive(observation: Observation, plan: sources.QueryPlan, first: int, last: int) -> Measured:
    """Each interval's facts from what was observed (no Prometheus, no database)."""
    step = plan.step_seconds
    observed, shared = observation.observed, observation.shared
    _clusters_check(observed, plan, first)
    _scrape_interval_check(observed, plan, first)
    known = _known_gpus(observed)
    vanished = _vanished_gpus(observed, plan)
    # Each pod's (replica's) last reading so far: a reading missing from the interval before
    # (a failed scrape) does not make the next one count from zero.
    io_earlier = {pod: dict(counters) for pod, counters in observed[first - step].io_last.items()}
    latency_earlier = dict(observed[first - step].latency_last)
    gap_targets = _gap_targets(observation.gap_targets, observed)
    histogram_targets = {t for t, meters in observation.gap_targets.items() if "latency" in meters}
    scheduled = _scheduled_since(observed)
    gave_up = _gave_up(observed, plan, first, last, gap_targets)
    no_gpu = _asking_no_gpu(observed)
    intervals = {}
    for start in range(first, last + 1, step):
        now = observed[start]
        intervals[start] = _derive(
            now,
            observed[start - step],
            plan,
            shared,
            known,
            io_earlier,
            latency_earlier,
            scheduled[start],
            vanished.get(start, {}),
        )
        intervals[start].gave_up = gave_up[start]
        _pool_pods_only(intervals[start], no_gpu)
        _gap_targets_warn(intervals[start], now, gap_targets)
        _latency_unseen(intervals[start], now, observed[start - step], plan, histogram_targets)
        _mapping_labels_dropped(intervals[start], now, observed[start - step], plan)
        for pod, counters in now.io_last.items():
            io_earlier.setdefault(pod, {}).update(counters)
        latency_earlier.update(now.latency_last)
    _identity_coverage(intervals)
    _unheld_busy(intervals, observed, plan)
    _kueue_preemptions(intervals, observed, plan, first)
    _kueue_admissions(intervals, observed, plan, first)
    measured = Measured(intervals, observation.queries, observation.evaluation_seconds, plan)
    _kinds_unmapped(measured, observed)
    return measured


# What tells Kueue's counts apart: the labels Kueue writes on its counter (pkg/metrics; its
# custom labels are a cluster queue's own, so one value per queue), and the target's
# `instance`. The labels a scrape job adds (`job`, a ServiceMonitor's `service`, `endpoint`,
# `pod`, a relabelling's) are left out: the same counter scraped by two jobs, or relabelled,
# is one count.
KUEUE_COUNT_LABELS = (
    "instance",
    "cluster_queue",
    "reason",
    "underlying_cause",
    "priority_class",
    "replica_role",
)
KueueCount = tuple[str, ...]  # the KUEUE_COUNT_LABELS' values


def _kueue_preemptions(
    intervals: dict[int, IntervalFacts],
    observed: dict[int, Observed],
    plan: sources.QueryPlan,
    first: int,
) -> None:
    """The workloads Kueue evicted to preempt them in each interval, by cluster queue, and a
    warning where it did: Kueue stops a workload itself, not through kube-scheduler, so none
    of these shows as a pod's preemption, and rule 5 cannot credit them. Counted, not
    attributed: Kueue's count says which cluster queue, not which task. Read as
    `_kueue_increments` says; a count that cannot be placed in time is not counted, and the
    window says so (`IntervalFacts.kueue_unplaced`), a blind spot of its own."""
    increments = _kueue_increments(observed, plan, first, sorted(intervals), ("evicted",))
    for start, (counted_by_count, unplaced) in increments.items():
        facts = intervals[start]
        counted: dict[str, int] = defaultdict(int)
        for count, (evicted,) in counted_by_count.items():
            counted[count[1]] += int(evicted)
        facts.kueue_preemptions = dict(sorted(counted.items()))
        facts.kueue_unplaced = len(unplaced)
        if counted:
            queues = ", ".join(f"{queue or '(none)'}: {n}" for queue, n in sorted(counted.items()))
            facts.warnings.append(
                KUEUE_PREEMPTIONS.format(
                    workloads=sum(counted.values()), queues=queues, reason=plan.preemption_reason
                )
            )
        for count, (value,) in unplaced:
            facts.warnings.append(
                f"preemptions: Kueue's count {_kueue_text(count)} is first read here, at"
                f" {value}, from a target Prometheus holds no earlier scrape of (Kueue"
                " restarted at a new address, or Prometheus holds nothing older): when those"
                " preemptions happened cannot be told, so they are not counted"
            )


@dataclass(frozen=True)
class KueueAdmissions:
    """Workloads Kueue admitted in an interval, and the seconds they had waited for it."""

    workloads: int
    seconds: Decimal


def _kueue_admissions(
    intervals: dict[int, IntervalFacts],
    observed: dict[int, Observed],
    plan: sources.QueryPlan,
    first: int,
) -> None:
    """The workloads Kueue admitted in each interval and the seconds they had waited, by task
    kind (the priority class Kueue labels them with, as a pod's: `QueryPlan.kind_of`). Under
    Kueue a Job waits suspended, with no pod, until admitted: its pods' waits start after, and
    the average wait leaves the queue out unless these are added (reports' `waits`).

    Read as Kueue's other counts (`_kueue_increments`), the histogram's count and sum of one
    series together: a reset of either is one of both. A series first read with no place
    in time is not counted, and the interval says so."""
    increments = _kueue_increments(observed, plan, first, sorted(intervals), ("admitted", "waited"))
    for start, (counted, unplaced) in increments.items():
        facts = intervals[start]
        now = observed[start]
        for count in sorted(
            _kueue_counts(now.kueue_admitted).keys() - _kueue_counts(now.kueue_waited).keys()
        ):
            # Read only with its sum: a relabelling or a recording rule that keeps the count
            # alone would otherwise leave every admission out, silently.
            facts.warnings.append(
                f"waits: Kueue's count of admissions {_kueue_text(count)} has no"
                f" {sources.KUEUE_ADMISSION_WAIT}_sum beside it here: its admissions are not"
                " counted until both are read"
            )
        by_kind: dict[str, list] = {}
        unmapped: dict[str, int] = defaultdict(int)
        for count, (admitted, waited) in counted.items():
            priority_class = count[KUEUE_COUNT_LABELS.index("priority_class")]
            kind = plan.kind_of(priority_class)
            entry = by_kind.setdefault(kind, [0, Decimal(0)])
            entry[0] += int(admitted)
            entry[1] += waited
            if priority_class not in plan.priority_class_kinds and admitted:
                unmapped[priority_class] += int(admitted)
        for priority_class, workloads in sorted(unmapped.items()):
            # Kueue releases before its priority_class label, and workloads under a
            # WorkloadPriorityClass named otherwise than the pods' classes, land here.
            named = f'priority class "{priority_class}"' if priority_class else "no priority class"
            facts.warnings.append(
                f"waits: Kueue admitted {workloads} workload(s) under {named}, which the"
                f" source's priority_class_kinds does not map: their wait counts as"
                f" {sources.DEFAULT_KIND}'s"
            )
        facts.kueue_admissions = {
            kind: KueueAdmissions(workloads, seconds)
            for kind, (workloads, seconds) in sorted(by_kind.items())
            if workloads
        }
        for count, (admitted, waited) in unplaced:
            facts.warnings.append(
                f"waits: Kueue's count of admissions {_kueue_text(count)} is first read here,"
                f" at {admitted} workload(s) and {waited} s of waiting, from a target"
                " Prometheus holds no earlier scrape of (Kueue restarted at a new address, or"
                " Prometheus holds nothing older): when they were admitted cannot be told, so"
                " their waits are not counted"
            )


# An interval's increments of some of Kueue's counts, by count (KUEUE_COUNT_LABELS), each a
# tuple of one value per counter; and the counts first read with no place in time, with their
# readings.
KueueIncrements = dict[
    int,
    tuple[
        dict[KueueCount, tuple[Decimal, ...]],
        list[tuple[KueueCount, tuple[Decimal, ...]]],
    ],
]


def _kueue_increments(
    observed: dict[int, Observed],
    plan: sources.QueryPlan,
    first: int,
    starts: list[int],
    counters: tuple[str, ...],
) -> KueueIncrements:
    """Each interval's increments of `counters` (KUEUE_READINGS), read together: the count a
    series' labels name is read where every counter has a reading of it.

    - A count is a series' KUEUE_COUNT_LABELS: Kueue scraped by two jobs, or relabelled,
      is one count.
    - Each counts from its last earlier reading (in the batch, else the look-back before it);
      one any of whose counters went down counts from zero (Kueue restarted in place: its
      count may have climbed back past the old one before the next reading, its sum not).
    - A count with no earlier reading whose target (`instance`) answered a scrape before
      (in the batch or its look-back) was created by its first event (a client_golang
      CounterVec or HistogramVec writes no 0 before), and counts its value.
    - Any other (Kueue at an address Prometheus never scraped before: a restart or a new
      leader; a Prometheus that holds nothing older) may hold events from before this
      window, or before Prometheus' oldest sample: it is not counted, and is returned apart."""
    before = observed[first - plan.step_seconds]

    def readings(interval: Observed, which: int) -> dict[KueueCount, tuple[Decimal, ...]]:
        each = [
            _kueue_counts(getattr(interval, KUEUE_READINGS[counter][which])) for counter in counters
        ]
        return {
            count: tuple(read[count] for read in each)
            for count in each[0]
            if all(count in read for read in each)
        }

    earlier = readings(before, 1)
    earlier.update(readings(before, 0))
    answered = set(before.kueue_answered_before) | _answered_instances(before)
    found: KueueIncrements = {}
    for start in starts:
        now = observed[start]
        counted: dict[KueueCount, tuple[Decimal, ...]] = {}
        unplaced: list[tuple[KueueCount, tuple[Decimal, ...]]] = []
        for count, values in sorted(readings(now, 0).items()):
            last = earlier.get(count)
            earlier[count] = values
            if last is None and count[0] not in answered:
                unplaced.append((count, values))
                continue
            if last is not None and all(v >= was for v, was in zip(values, last, strict=True)):
                values = tuple(value - was for value, was in zip(values, last, strict=True))
            if any(values):
                counted[count] = values
        answered |= _answered_instances(now)
        found[start] = (counted, unplaced)
    return found


def _kueue_counts(series: dict[tuple[tuple[str, str], ...], Decimal]) -> dict[KueueCount, Decimal]:
    """Readings by count (KUEUE_COUNT_LABELS): copies under two scrape jobs are one count,
    the larger reading kept."""
    counts: dict[KueueCount, Decimal] = {}
    for labels, value in series.items():
        found = dict(labels)
        count = tuple(found.get(name, "") for name in KUEUE_COUNT_LABELS)
        counts[count] = max(value, counts.get(count, value))
    return counts


def _kueue_text(count: KueueCount) -> str:
    named = zip(KUEUE_COUNT_LABELS, count, strict=True)
    return describe({name: value for name, value in named if value})


def _answered_instances(interval: Observed) -> set[str]:
    return {instance for (_, instance), (_, answered) in interval.targets.items() if answered}


# The words of a window in which Kueue preempted workloads (`_kueue_preemptions`).
KUEUE_PREEMPTIONS = (
    "preemptions: Kueue evicted {workloads} workload(s) to preempt them"
    ' (kueue_evicted_workloads_total, reason "Preempted"; by cluster queue {queues}): Kueue'
    ' stops a workload itself, so its pods show no "{reason}" reason, and rule 5 (starvation'
    " credits) counts none of these preemptions toward any task"
)


def _identity_coverage(intervals: dict[int, IntervalFacts]) -> None:
    """GPU-seconds of pods that kube-state-metrics described (`_described`) in some interval
    of the batch, and of those it described in none: their task,
    team and kind are guesses (the pod's name, its namespace or the team its name last had,
    `training_batch`), which move money between teams and rates. kube-state-metrics not
    scraped or one of its shards gone (no `up`, so no gap is seen), or its series missing from
    the Prometheus read: each such interval says so. A window that stored more GPU-seconds
    described is not replaced by guesses unless an operator accepts the loss
    (writer._loses_samples).

    Most pods are described in the interval itself; the batch's other intervals are searched
    only for the rest, and each interval's GPU-seconds are added once (`exact_sum`)."""
    anywhere: set[PodKey] | None = None  # pods described in some interval, once needed
    for facts in intervals.values():
        described, guessed = [], []
        for pod, held in facts.alloc.items():
            identity = facts.identity.get(pod)
            if identity is None or not _described(identity):
                if anywhere is None:
                    anywhere = {
                        known
                        for other in intervals.values()
                        for known, found in other.identity.items()
                        if _described(found)
                    }
                if pod not in anywhere:
                    if held:
                        guessed.append((pod, held))
                    continue
            described.append(held)
        facts.described_gpu_seconds = Fraction(exact_sum(described))
        if not guessed:
            continue
        guessed.sort()
        facts.undescribed_gpu_seconds = Fraction(exact_sum(held for _, held in guessed))
        (namespace, name), _ = guessed[0]
        facts.warnings.append(
            UNDESCRIBED.format(
                count=len(guessed),
                seconds=half_up_rational_text(facts.undescribed_gpu_seconds, 6),
                example=f"{namespace}/{name}",
            )
        )


def _described(identity: PodIdentity) -> bool:
    """kube-state-metrics described the pod with its labels, its owner and its info, which
    name its task, team and kind: a pod missing one of them (its labels' series deleted, say)
    is guessed."""
    return identity.from_kube and identity.labelled and identity.owned and identity.informed


# The words of an interval with GPU-seconds of pods kube-state-metrics never described.
UNDESCRIBED = (
    "identity: {count} pod(s) held {seconds} GPU-seconds without kube-state-metrics describing"
    " them (their labels, owner and info) anywhere in the batch, e.g. {example}: their task, team"
    " and kind (pricing rates) are guesses from the pod's name and namespace; is"
    " kube-state-metrics (each of its shards) scraped, and are its series in this Prometheus?"
)


class ClustersMixedError(sources.SourceConfigurationError):
    """The GPU exporters a source reads are in more than one cluster."""


def _clusters_check(observed: dict[int, Observed], plan: sources.QueryPlan, first: int) -> None:
    """Refuses the batch (`ClustersMixedError`) where its GPU series carry two values of the
    source's cluster label that name two Kubernetes clusters: a store holding several (a
    Thanos or Mimir querier, a federation) read without a matcher that picks one. Read so,
    the clusters are one pool (capacity, the reserve, the rates' split) and their same-named
    tasks one task, each billed the other's GPU-seconds, with every window complete.

    The label is read on the GPU series themselves (their external label), not on `up`,
    which a remote write or federation may leave out. Two values name two clusters in an
    interval where:
    - no GPU (UUID) carries both (a relabel carries the same GPUs under both); and
    - each GPU series' node, where kube-state-metrics lists it with GPUs, is listed under
      the series' own value: each cluster's kube-state-metrics describes its own nodes. In
      Mimir, Cortex and Amazon Managed Prometheus `cluster` is also the label of a
      Prometheus HA group, one per shard of a sharded Prometheus; a shard's exporters are
      then listed by a kube-state-metrics under another shard's value, and the batch is
      metered as one cluster. With no node listed at all, nothing tells, and the batch is
      refused.
    A batch whose GPU series carry at most one value costs a set per interval."""
    if not plan.cluster_label:  # the source meters every cluster it reads as one pool
        return
    exporters: dict[str, set[Target]] = defaultdict(set)
    for start in sorted(observed):
        now = observed[start]
        if start < first or now.cluster_relabelled:
            continue
        if len({series.cluster for series in now.series.values()} - {""}) < 2:
            continue  # the usual interval: one cluster, or no label
        found: dict[str, set[Target]] = defaultdict(set)
        listed = now.gpu_node_clusters
        for series in now.series.values():
            if not series.cluster:
                continue
            if series.node in listed and series.cluster not in listed[series.node]:
                break  # a node listed under another value: shards of one cluster
            found[series.cluster].add(series.target)
        else:
            for cluster, targets in found.items():
                exporters[cluster] |= targets
    if len(exporters) < 2:
        return
    named = sorted(exporters)
    listed = "; ".join(
        f"{cluster}: {len(exporters[cluster])}, e.g. {_target_text(min(exporters[cluster]))}"
        for cluster in named[:CLUSTERS_NAMED]
    )
    more = f"; and {len(named) - CLUSTERS_NAMED} more" if len(named) > CLUSTERS_NAMED else ""
    label = plan.cluster_label
    raise ClustersMixedError(
        f"clusters: the GPU exporters this source reads are in {len(named)} clusters by their"
        f" {label!r} label (exporters by cluster: {listed}{more}): a source meters one cluster,"
        " and read together the clusters' GPUs would be one pool and their same-named tasks"
        " one task; give the source a matcher that picks one (label_mapping.matchers, e.g."
        f' {{"{label}": "{named[0]}"}}), and a source for each cluster; if the label names'
        " something else (a Prometheus shard or HA group of one cluster), set"
        ' label_mapping.cluster_label to the label that names the cluster, or to "" to'
        " meter everything the source reads as one pool; nothing was stored"
    )


# How many clusters a refused batch names.
CLUSTERS_NAMED = 5


class ScrapeIntervalError(sources.SourceConfigurationError):
    """Prometheus scraped a GPU exporter more often than the source's scrape interval allows."""


def _scrape_interval_check(
    observed: dict[int, Observed], plan: sources.QueryPlan, first: int
) -> None:
    """Refuses the batch (`ScrapeIntervalError`) when Prometheus' `up` shows a GPU exporter
    scraped more often than the source's `scrape_interval_seconds`, which every GPU tick is
    taken to last: counted so, a pod scraped every 10 s where the source says 15 would be
    billed half as much again, and capacity with it, with every window complete. Two
    Prometheus replicas read undeduplicated double `up` the same way (and the I/O and latency
    sums). Only the batch's own intervals count (the one before is another batch's), and only
    targets that answered some GPU series alone in the interval: other jobs may be scraped at
    their own pace, and a series two targets answered is counted per tick at the source's
    interval (`_time_sliced_devices`) whatever their pace.

    A late scrape can put one tick more into an interval (and one fewer into the next), so
    an interval may hold one tick more than the step allows, and the batch one more in all.
    Fewer ticks than expected are left to completeness: a Prometheus down for a while looks
    the same."""
    ticks = plan.step_seconds // plan.scrape_seconds
    batch = [start for start in sorted(observed) if start >= first]
    over = _scraped_over(observed, batch, ticks, alone=False)
    if over:  # rare: only then is every series looked at, for the targets answering alone
        over = _scraped_over(observed, batch, ticks, alone=True)
    if not over:
        return
    target = min(over)
    count, intervals, start = over[target]
    seconds = intervals * plan.step_seconds
    raise ScrapeIntervalError(
        f"scrape interval: Prometheus scraped {len(over)} GPU exporter(s) more often than the"
        f" source's scrape_interval_seconds of {plan.scrape_seconds} s allows, e.g."
        f" {_target_text(target)} {count} times in the {seconds} s from"
        f" {datetime.fromtimestamp(start, UTC):%Y-%m-%dT%H:%M:%SZ} (every"
        f" {seconds / count:.3g} s, where {intervals * ticks} scrapes were expected): set the"
        " source's scrape interval to the one Prometheus scrapes dcgm-exporter at; if two"
        " Prometheus replicas answer undeduplicated, point the source at a deduplicating"
        " querier; if the Prometheus holds two clusters whose exporters share addresses, give"
        " the source a matcher that picks one (label_mapping.matchers, e.g."
        ' {"cluster": "..."}); nothing was stored'
    )


def _scraped_over(
    observed: dict[int, Observed], batch: list[int], ticks: int, *, alone: bool
) -> dict[Target, tuple[int, int, int]]:
    """The scrape targets scraped more often than `ticks` an interval allows (one more in an
    interval, one more over the batch), each with (scrapes, intervals, first start); with
    `alone`, only targets that answered some GPU series alone in the interval."""
    scraped: dict[Target, int] = defaultdict(int)
    over: dict[Target, tuple[int, int, int]] = {}
    for start in batch:
        interval = observed[start]
        counted = (
            {s.target for s in interval.series.values() if s.also_target is None}
            if alone
            else interval.targets
        )
        for target, (attempted, _) in interval.targets.items():
            if target not in counted:
                continue
            scraped[target] += attempted
            if attempted > ticks + 1:
                over.setdefault(target, (attempted, 1, start))
    for target, count in scraped.items():
        if count > len(batch) * ticks + 1:
            over.setdefault(target, (count, len(batch), batch[0]))
    return over


def _gap_targets(
    answered: dict[Target, set[str]], observed: dict[int, Observed]
) -> dict[Target, set[str]]:
    """The scrape targets whose missed scrapes cost a meter (GAP_EFFECTS): those that answered
    its series in the batch and, for GAP_JOBS_METERS, the other targets of their jobs. A
    target may answer several (an aggregating agent's)."""
    found = {target: set(meters) for target, meters in answered.items()}
    jobs: dict[str, set[str]] = defaultdict(set)
    for (job, _), meters in answered.items():
        jobs[job] |= meters & GAP_JOBS_METERS
    for interval in observed.values():
        for target in interval.targets:
            if jobs.get(target[0]):
                found.setdefault(target, set()).update(jobs[target[0]])
    return found


def _gap_targets_warn(
    facts: IntervalFacts, now: Observed, gap_targets: dict[Target, set[str]]
) -> None:
    """One warning per meter whose targets missed scrapes in the interval (Prometheus' `up`),
    saying what the interval misses for it (GAP_EFFECTS). Completeness, a measure of GPU
    samples, is not lowered: the counts are right, and a late or unseen preemption is not a
    GPU sample."""
    missed: dict[str, list[tuple[Target, int, int]]] = defaultdict(list)
    failed = [(target, counts) for target, counts in now.targets.items() if counts[1] < counts[0]]
    for target, (attempted, answered) in sorted(failed):  # most intervals: none
        for meter in gap_targets.get(target, ()):
            missed[meter].append((target, answered, attempted))
    for meter, effect in GAP_EFFECTS.items():
        if not missed[meter]:
            continue
        (target, answered, attempted), count = missed[meter][0], len(missed[meter])
        facts.warnings.append(
            f"{meter}: {count} scrape target(s) missed scrapes, e.g. {_target_text(target)}"
            f" answered {answered} of {attempted}; {effect}"
        )


def _latency_unseen(
    facts: IntervalFacts,
    now: Observed,
    before: Observed,
    plan: sources.QueryPlan,
    histogram_targets: set[Target],
) -> None:
    """Inference pods that held GPUs through the interval and whose scrape targets all
    answered every scrape of it, without a series of the latency histogram: vLLM started with
    `--disable-log-stats` (it registers no `vllm:*` metric), another inference server, or the
    histogram under another name. Their intervals show no requests, no P99 and no breach, so
    pricing rule 4 moves nothing for them; the window names them (LATENCY_UNSEEN).

    vLLM's V1 engine writes its labelled histogram from its start, requests or not, so targets
    that answer without it are the signal. Left alone: a replica still loading its model or
    crash-looping (its server's target answers no scrape, whatever a sidecar's does); a
    replica the batch saw write the histogram (by its pod, or by its target where the
    histogram carries no pod label); a pod of a task another pod of which wrote it in the
    interval (a worker of a multi-node replica, its leader serving); and a pod on its host's
    network (its node's other targets, a node exporter's, share its address). A pod's targets
    are those at its address. The check costs no query: it reads the pods, `up` and the
    histogram that the batch read already, and only the pods that held GPUs."""
    if not now.targets:
        return  # no record of scrapes: nothing tells a pod's targets
    replicas = {(namespace, pod) for namespace, _, pod in now.latency_last}
    candidates = [
        (pod, identity)
        for pod, identity in _inference_through(facts, now, before, plan)
        if pod not in replicas
    ]
    if not candidates:
        return  # most intervals: every inference pod wrote the histogram
    served = {_task_of(pod, now.identity.get(pod)) for pod in replicas}
    # Tasks the source says serve without the histogram by design (an offline batch server).
    exempt = re.compile(plan.latency_unmeasured_tasks) if plan.latency_unmeasured_tasks else None
    by_host: dict[str, list[Target]] = defaultdict(list)
    for target in now.targets:
        by_host[_target_host(target)].append(target)
    unseen: list[tuple[PodKey, Target]] = []
    for pod, identity in candidates:
        targets = sorted(by_host.get(identity.pod_ip, []))
        task = _task_of(pod, identity)
        if (
            targets
            and task not in served
            and not (exempt is not None and exempt.fullmatch(f"{task[0]}/{task[1]}"))
            and not any(target in histogram_targets for target in targets)
            and all(0 < now.targets[t][1] == now.targets[t][0] for t in targets)
        ):
            unseen.append((pod, targets[0]))
    if not unseen:
        return
    unseen.sort()
    facts.latency_unseen = [pod for pod, _ in unseen]
    (namespace, name), target = unseen[0]
    facts.warnings.append(
        LATENCY_UNSEEN.format(
            count=len(unseen),
            histogram=plan.latency_histogram,
            example=f"{namespace}/{name} ({_target_text(target)})",
        )
    )


def _kinds_unmapped(measured: Measured, observed: dict[int, Observed]) -> None:
    """GPU-seconds of pods whose priority class the source does not map to a kind, which are
    counted as `training_batch` (sources.DEFAULT_KIND): training's rates and off-peak
    discount, none of inference's reserve, no SLA breach of theirs. A class the mapping does
    not name (a cluster's own, or one renamed) is said; so is no class at all on a task one of
    whose pods served the latency histogram in the interval (an inference server, or a
    worker of one, under no class). No class on a task that serves nothing is the contract's
    default, and says nothing.

    Each pod's class is read from the view its task's kind is taken from
    (`Measured.pod_identity`, as identity.py takes it), and only where kube-state-metrics'
    info was read somewhere in the batch: a pod it never described is `_identity_coverage`'s
    concern."""
    kinds = measured.plan.priority_class_kinds
    for start, facts in measured.intervals.items():
        serving: set[tuple[str, str]] | None = None  # the serving tasks, once needed
        unmapped: dict[str, list[tuple[PodKey, Fraction]]] = defaultdict(list)
        for pod, held in facts.alloc.items():
            view = facts.identity.get(pod)  # most pods: the interval's own view, informed
            if view is None or not view.informed:
                view = measured.pod_identity(start, pod)
            if not held or not view.informed or view.priority_class in kinds:
                continue
            if not view.priority_class:
                if serving is None:
                    serving = _serving_tasks(measured, start, observed[start])
                if (pod[0], view.task_name(pod[1])) not in serving:
                    continue
            unmapped[view.priority_class].append((pod, held))
        if not unmapped:
            continue
        facts.unmapped_kinds = {
            name: Fraction(exact_sum(held for _, held in pods))
            for name, pods in sorted(unmapped.items())
        }
        classes = ", ".join(
            f"{name or '(none, serving)'}: {half_up_rational_text(seconds, 6)}"
            for name, seconds in facts.unmapped_kinds.items()
        )
        namespace, pod = min(pod for pods in unmapped.values() for pod, _ in pods)
        remedy = [KINDS_MAP] if any(unmapped) else []
        remedy += [KINDS_GIVE_A_CLASS] if "" in unmapped else []
        facts.warnings.append(
            KINDS_UNMAPPED.format(
                classes=classes, example=f"{namespace}/{pod}", remedy="; ".join(remedy)
            )
        )


def _unheld_busy(
    intervals: dict[int, IntervalFacts], observed: dict[int, Observed], plan: sources.QueryPlan
) -> None:
    """Busy time of GPUs that no pod held, per interval, and a warning where there was any:
    work outside any pod's GPU request, which no task is billed for and the pool's effective
    utilization leaves out. A container that sees every GPU (`NVIDIA_VISIBLE_DEVICES=all` in
    its image, or a privileged one), a process on the host, a pod given the GPU through a DRA
    ResourceClaim while dcgm-exporter runs without `--kubernetes-enable-dra`: the exporter
    finds no pod for the GPU (kubelet's pod-resources), so its series is the bare one of a
    free GPU, and only its busy time tells.

    Counted only where no pod series of the device (a whole GPU, or a MIG instance: its
    activity is its own) is in the interval or the one before: DCGM averages activity over
    its sampling period, so a pod's last work can show on the first scrape after it left; a
    time-sliced GPU's bare series carries its pods' work. Left out too: nodes where
    kube-state-metrics shows a pod running with GPUs, at the end of the interval or of one of
    the two before, that no GPU series names in it or the one before (dcgm-exporter's pod
    mapping off there: `_unattributed_missing` counts those GPUs missing already; its last
    work, as above), and the source's `unmetered_nodes`.

    A GPU whose exporter was replaced within the interval has a bare series under each
    target; the larger of their sums is taken (`_grouped`), so the figure may be short of
    the interval's work there."""
    step, seconds = plan.step_seconds, plan.scrape_seconds
    outside = re.compile(plan.unmetered_nodes) if plan.unmetered_nodes else None
    for start, facts in intervals.items():
        now, before = observed[start], observed[start - step]
        busy = [
            (key, series)
            for key, series in now.series.items()
            if not key[4] and series.ticks and series.busy and not series.bad
        ]
        if not busy:  # the usual interval: free GPUs idle
            continue
        pods = [key for interval in (now, before) for key in interval.series if key[4]]
        held = {key[:2] for key in pods}
        busy = [
            (key, series)
            for key, series in busy
            if key[:2] not in held and (outside is None or not outside.fullmatch(series.node))
        ]
        if not busy:
            continue
        # The pods kube-state-metrics shows running with GPUs on those nodes, then whether a
        # GPU series names them: only those nodes' pods are looked at (a pool has many).
        on_nodes = {series.node for _, series in busy}
        earlier = observed.get(start - 2 * step, before)
        suspects = [
            (pod, identity.node)
            for views in (now.identity, before.identity, earlier.identity)
            for pod, identity in views.items()
            if identity.node in on_nodes and identity.running and identity.gpus_requested
        ]
        named = {key[3:] for key in pods} if suspects else set()
        mapping_off = {node for pod, node in suspects if pod not in named}
        parts: dict[str, Decimal | Fraction] = defaultdict(Decimal)  # busy x SHARE_PARTS
        nodes: dict[str, str] = {}
        with decimal.localcontext(EXACT):
            for (uuid, _, profile, _, _), series in busy:
                if series.node in mapping_off:
                    continue
                try:
                    parts[uuid] += series.busy * mig_parts(profile, series.model)
                except ValueError:
                    continue  # an unknown MIG profile: the devices' check says so
                nodes[uuid] = series.node
        if not parts:
            continue
        found = {uuid: Fraction(parts[uuid]) * seconds / SHARE_PARTS for uuid in sorted(parts)}
        facts.unheld_busy = found
        example = max(found, key=lambda uuid: (found[uuid], uuid))
        facts.warnings.append(
            UNHELD_BUSY.format(
                gpus=len(found),
                seconds=half_up_rational_text(exact_sum(found.values()), 6),
                example=example,
                node=nodes[example] or "(unknown)",
                example_seconds=half_up_rational_text(found[example], 6),
            )
        )


# The words of an interval in which GPUs no pod held were busy.
UNHELD_BUSY = (
    "unrequested work: {gpus} GPU(s) that no pod held were busy {seconds} GPU-seconds, e.g."
    " {example} on node {node} ({example_seconds}): work outside any pod's GPU request, which"
    " no task is billed for (a container that sees every GPU through NVIDIA_VISIBLE_DEVICES or"
    " privilege, a process on the host, a pod given the GPU by a DRA ResourceClaim while"
    " dcgm-exporter runs without --kubernetes-enable-dra, or under a resource name it does"
    " not map); find it on the node (nvidia-smi), and have it request its GPUs"
)


def _serving_tasks(measured: Measured, start: int, now: Observed) -> set[tuple[str, str]]:
    """(namespace, task) of the pods that wrote the latency histogram in the interval."""
    return {
        (namespace, measured.pod_identity(start, (namespace, pod)).task_name(pod))
        for namespace, _, pod in now.latency_last
    }


# The words of an interval with GPU-seconds under priority classes the source does not map.
KINDS_UNMAPPED = (
    "kind: pods held GPUs under priority classes the source's priority_class_kinds does not"
    " map (GPU-seconds by class: {classes}), e.g. {example}: counted as training_batch"
    " (training's rates and off-peak discount, none of inference's reserve, no SLA breach);"
    " {remedy}, and ingest these windows again"
)
KINDS_MAP = "map each class to its kind in the source"
KINDS_GIVE_A_CLASS = (
    "give the serving pods under no class a priority class the source maps to inference"
)


def _mapping_labels_dropped(
    facts: IntervalFacts, now: Observed, before: Observed, plan: sources.QueryPlan
) -> None:
    """The source's team or task label gone at once from every GPU pod that carried it at the
    interval before, kube-state-metrics describing them still: it was restarted without the
    label in its `--metric-labels-allowlist` (kube-state-metrics v2 writes no pod label it is
    not told to), or the pods were all relabelled. Their team is their namespace from here on
    (their task, their owner), which moves their money; the interval says so.

    Only pods read at both ends count: not one whose labels were not read now (its identity is
    `_identity_coverage`'s concern), nor one gone by the interval's end (its labels, read over
    the interval, may be the old ones), nor one recreated under its name (a new pod may carry
    new labels). One pod losing its label is a relabel: it takes two. Reads the GPU pods'
    identities only, which the batch read already."""
    team = _LabelCount()
    task = _LabelCount()
    for pod in facts.alloc:
        earlier, identity = before.identity.get(pod), now.identity.get(pod)
        if (
            earlier is None
            or identity is None
            or not identity.labelled
            or identity.from_history
            or identity.scheduled != earlier.scheduled
        ):
            continue
        team.add(earlier.team_label, identity.team_label)
        task.add(earlier.task_label, identity.task_label)
    for counted, label, fallback in (
        (team, plan.team_label, "their team is their namespace"),
        (task, plan.task_label, "their task is their owner's name (else the pod's)"),
    ):
        if counted.carried >= 2 and counted.dropped == counted.carried:
            facts.warnings.append(
                LABEL_DROPPED.format(label=label, count=counted.carried, fallback=fallback)
            )


@dataclass
class _LabelCount:
    """Pods that carried a label at the interval before, and those of them that carry none."""

    carried: int = 0
    dropped: int = 0

    def add(self, before: str, now: str) -> None:
        if before:
            self.carried += 1
            if not now:
                self.dropped += 1


# The words of an interval whose GPU pods all lost the source's team or task label at once.
LABEL_DROPPED = (
    "identity: every one of the {count} GPU pod(s) that carried {label} at the interval before"
    " carries none now, kube-state-metrics describing them still: is {label} still in its"
    " --metric-labels-allowlist? Unless it comes back, {fallback} from here on, which moves"
    " their money"
)


def _inference_through(
    facts: IntervalFacts, now: Observed, before: Observed, plan: sources.QueryPlan
) -> list[tuple[PodKey, PodIdentity]]:
    """Inference pods (by the source's priority classes) that held GPUs through the interval:
    Running at its start and its end, not preempted, GPU-seconds metered; not on their host's
    network (`pod_ip` equal to `host_ip`). Walks the pods that held GPUs, not every pod
    kube-state-metrics describes (a cluster's pods without GPUs may be many times more)."""
    inference = {pc for pc, kind in plan.priority_class_kinds.items() if kind == "inference"}
    found = []
    for pod, held in facts.alloc.items():
        identity, earlier = now.identity.get(pod), before.identity.get(pod)
        if (
            held
            and identity is not None
            and identity.priority_class in inference
            and identity.running
            and identity.pod_ip
            and identity.pod_ip != identity.host_ip
            and earlier is not None
            and earlier.running
            and pod not in now.preempted
        ):
            found.append((pod, identity))
    return found


def _task_of(pod: PodKey, identity: PodIdentity | None) -> tuple[str, str]:
    """(namespace, task) of a pod (`PodIdentity.task_name`); the pod itself without a view."""
    return pod if identity is None else (pod[0], identity.task_name(pod[1]))


# The words of a window with inference pods whose latency went unmeasured (`_latency_unseen`).
LATENCY_UNSEEN = (
    "latency: {count} inference pod(s) held GPUs through the interval and answered every"
    " scrape without a series of {histogram}, e.g. {example}: their requests, P99 and SLA"
    " breaches (pricing rule 4) are not measured. vLLM started with --disable-log-stats"
    " writes none; another server writes another histogram (the source's latency_histogram);"
    " a task meant to serve so goes in the source's latency_unmeasured_tasks"
)


def _target_host(target: Target) -> str:
    """The address of a scrape target's instance: "10.0.0.7:9400", "[fd00::7]:9400"."""
    return target[1].rpartition(":")[0].strip("[]")


_Request = tuple[bool, str]  # (raw samples?, the selector or the query)


def _requests_of(part: sources.Part) -> list[_Request]:
    """(raw samples?, the selector or the query) of each request a part's answer needs."""
    if part.samples:
        return [(True, selected) for selected in part.samples]
    return [(False, promql) for promql in part.queries]


def _costless(run: sources.QueryRun) -> sources.QueryRun:
    return replace(run, seconds=0.0, evaluation_seconds=0.0, samples=0)


def _concatenated(runs: list[sources.QueryRun]) -> sources.QueryRun:
    """The answers of one part's queries as one (a shard's two node selectors never hold the
    same series), so grouping sees them together as it would one query's."""
    if len(runs) == 1:
        return runs[0]
    return replace(
        runs[0],
        series=[series for run in runs for series in run.series],
        seconds=sum(run.seconds for run in runs),
        evaluation_seconds=sum(run.evaluation_seconds for run in runs),
        samples=sum(run.samples for run in runs),
    )


class _Runner:
    """Runs range queries over the batch (evaluated at each interval's end) and keeps their
    text and timings for the windows' records."""

    def __init__(
        self, client: sources.PrometheusClient, plan: sources.QueryPlan, first: int, last: int
    ) -> None:
        self.client, self.plan = client, plan
        self.first, self.last = first, last
        self.start = datetime.fromtimestamp(first + plan.step_seconds, UTC)
        self.end = datetime.fromtimestamp(last + plan.step_seconds, UTC)
        self.queries: list[dict[str, Any]] = []
        self.evaluation_seconds = 0.0
        self.lock = threading.Lock()

    def samples(self, name: str, selected: str) -> sources.QueryRun:
        """The raw samples of `selected` in [first, last + step): instant queries of a range
        vector, each over as many intervals as hold sources.MAX_POINTS_PER_QUERY samples a
        series (a range query's chunk: neither kind of request answers more), each interval
        [S, S + step) as `QueryPlan.window` holds it, so each sample is read once and falls
        in one interval."""
        step = self.plan.step_seconds
        per_request = max(1, sources.MAX_POINTS_PER_QUERY * self.plan.scrape_seconds // step)
        series: dict[tuple[tuple[str, str], ...], sources.Series] = {}
        seconds = evaluation = 0.0
        scanned = 0
        for start in range(self.first, self.last + 1, step * per_request):
            end = min(self.last + step, start + step * per_request)
            promql = f"{selected}{self.plan.samples_window(start, end)}"
            run = self.client.query_samples(name, promql, at=datetime.fromtimestamp(end, UTC))
            seconds += run.seconds
            evaluation += run.evaluation_seconds
            scanned += run.samples
            for item in run.series:
                sources.series_merge(series, item.labels, item.values)
        answered = list(series.values())
        return sources.QueryRun(
            name, selected, self.start, self.end, seconds, evaluation, answered, scanned
        )

    def run(
        self, name: str, promql: str, *, record: bool = True, at_start: bool = False
    ) -> sources.QueryRun:
        """Evaluated at each interval's end, or (`at_start`) at the batch's start only: the
        end of the interval before it, on which the answer's points then land."""
        result = self.client.query_range(
            name,
            promql,
            start=self.start,
            end=self.start if at_start else self.end,
            step_seconds=self.plan.step_seconds,
        )
        if record:
            self.record(name, promql, result)
        return result

    def run_parts(
        self, name: str, parts: dict[str, sources.Part], *, at_start: bool = False
    ) -> sources.QueryRun:
        """A narrowed meter asked part by part, each grouped in Python (see sources.Part),
        as one answer recorded once."""
        grouped = {
            part_name: _grouped(
                _concatenated(
                    [
                        self.run(name, promql, record=False, at_start=at_start)
                        for promql in part.queries
                    ]
                ),
                part_name,
                part,
            )
            for part_name, part in parts.items()
        }
        joined = _joined(name, grouped)
        self.record(name, sources.tagged_parts(parts), joined)
        return joined

    def record(self, name: str, promql: str, result: sources.QueryRun) -> None:
        """One entry per meter: a meter's parts are recorded as one expression (the same
        meaning), with their costs summed."""
        with self.lock:  # queries finish on several threads
            self._record(name, promql, result)

    def _record(self, name: str, promql: str, result: sources.QueryRun) -> None:
        self.evaluation_seconds += result.evaluation_seconds
        self.queries.append(
            {
                "meter": name,
                "promql": promql,
                "seconds": round(result.seconds, 6),
                "evaluation_seconds": round(result.evaluation_seconds, 6),
                "samples": result.samples,
            }
        )


def _batches(values: set[str], size: int = NARROWED_BATCH) -> Iterator[list[str]]:
    ordered = sorted(values)
    for index in range(0, len(ordered), size):
        yield ordered[index : index + size]


def _shared_gpus_per_request(plan: sources.QueryPlan, first: int, last: int) -> int:
    """How many time-sliced GPUs one request of their raw samples names (`_follow_ups`): as
    many as keep it near SHARED_SAMPLES_PER_REQUEST samples over the batch, at
    SHARED_SERIES_PER_GPU series a metric, and at most NARROWED_BATCH. A worker holds one
    group's three answers at a time: at a 15 s scrape, 250 such GPUs over a 72-window batch
    would be 1.44 M samples a metric, 4.3 M in all, each a decoded JSON pair; 17 a request
    are about 98,000 a metric."""
    ticks = (last - first + plan.step_seconds) // plan.scrape_seconds
    fitting = SHARED_SAMPLES_PER_REQUEST // (ticks * SHARED_SERIES_PER_GPU)
    return max(1, min(NARROWED_BATCH, fitting))


# --- Reading answers ---------------------------------------------------------------------


def _grouped(result: sources.QueryRun, name: str, part: sources.Part) -> sources.QueryRun:
    """The part's answer grouped as `max by (...)` / `sum by (...)` would have in PromQL (the
    labels kept are the grouping's non-empty ones), each series tagged `meter="<name>"`.

    Max as Prometheus takes it (a NaN gives way to any number); sums exact in Decimal (of
    counters: integers, which float sums also hold exactly).

    A sum adds the series of ONE scrape target (job, instance) per group and point: the first
    by name of those that answered. Every sum groups by pod, and a pod's series come from one
    exporter; a second target answering for the same pod is that exporter scraped twice (a
    second job or kube-state-metrics replica), whose series would double the sum. What was
    left out is counted in `repeated`, for the intervals' warnings."""
    groups: dict[tuple[str, ...], list[sources.Series]] = {}
    by, pods_only = part.by, part.pods_only
    blanks = ("",) * len(by)  # labels.get(label, "") for each label of `by`, in C
    for series in result.series:
        labels = series.labels
        if pods_only and not (labels.get("exported_pod") or labels.get("pod")):
            # pod_of(labels)[1], inlined: this runs for every series answered
            if not (part.busy_bare and any(text != "0" for _, text in series.values)):
                continue
        if by:
            key = tuple(map(labels.get, by, blanks))
        else:  # as answered: each series its own group
            key = tuple(sorted(labels.items()))
        members = groups.get(key)
        if members is None:
            groups[key] = [series]
        else:
            members.append(series)
    summed = part.how != "max"
    reduce = sample_texts.sum_text if summed else sample_texts.max_text
    grouped = []
    repeated: dict[Any, list] = {}
    for key, members in groups.items():
        if by:
            labels = {label: value for label, value in zip(by, key, strict=True) if value}
        else:
            labels = {k: v for k, v in key if k != "__name__"}
        labels["meter"] = name
        if len(members) == 1:  # most groups: one series, its points as they are
            grouped.append(sources.Series(labels=labels, values=members[0].values))
            continue
        if summed and len({_target(series.labels) for series in members}) > 1:
            values = _one_target_sums(members, labels, repeated)
        else:
            points: dict[Any, list[str]] = {}
            for series in members:
                for evaluated_at, text in series.values:
                    points.setdefault(evaluated_at, []).append(text)
            values = [[at, reduce(texts)] for at, texts in points.items()]
        grouped.append(sources.Series(labels=labels, values=values))
    return replace(
        result,
        series=grouped,
        repeated=tuple((at, count, example) for at, (count, example) in repeated.items()),
    )


def _target(labels: dict[str, str]) -> Target:
    return (labels.get("job", ""), labels.get("instance", ""))


def _one_target_sums(
    members: list[sources.Series], labels: dict[str, str], repeated: dict[Any, list]
) -> list[list]:
    """One group's sums, each point of the first target (by name) that answered at it; the
    other targets' points are counted in `repeated` (see `_grouped`)."""
    points: dict[Any, tuple[Target, list[str]]] = {}
    skipped: dict[Any, Target] = {}
    for series in sorted(members, key=lambda series: _target(series.labels)):
        target = _target(series.labels)
        for evaluated_at, text in series.values:
            found = points.get(evaluated_at)
            if found is None:
                points[evaluated_at] = (target, [text])
            elif found[0] == target:
                found[1].append(text)
            else:
                skipped.setdefault(evaluated_at, target)
    for evaluated_at, target in skipped.items():
        count = repeated.setdefault(evaluated_at, [0, ""])
        if not count[0]:
            kept = points[evaluated_at][0]
            count[1] = f"{describe(labels)} from {_target_text(kept)} and {_target_text(target)}"
        count[0] += 1
    return [[at, sample_texts.sum_text(texts)] for at, (_, texts) in points.items()]


def _target_text(target: Target) -> str:
    return f'job="{target[0]}" instance="{target[1]}"'


def _repeated_warn(
    result: sources.QueryRun, observed: dict[int, Observed], plan: sources.QueryPlan
) -> None:
    """One warning per interval in which a sum left out a second scrape target's points."""
    per_interval: dict[int, list] = {}
    for evaluated_at, count, example in result.repeated:
        found = per_interval.setdefault(int(evaluated_at) - plan.step_seconds, [0, example])
        found[0] += count
    for start, (count, example) in sorted(per_interval.items()):
        interval = observed.get(start)
        if interval is not None:
            interval.warnings.append(
                f"{result.name}: {count} sum(s) of series had points from a second scrape"
                f" target too, e.g. {example}; each counted once"
            )


def _over_time(
    run: sources.QueryRun, functions: set[str], first: int, step: int
) -> dict[str, sources.QueryRun]:
    """What each range function `f(<series>[S, S + step))` answers at the ends S + step of the
    intervals on the grid of `first`, from the raw samples in `run` (in time order, as
    Prometheus sends them): per series and interval, the texts a range query would answer.
    Each series' samples are grouped by interval once, for every function."""
    answers: dict[str, list[sources.Series]] = {function: [] for function in functions}
    taken = [(OVER_TIME[function], answers[function]) for function in functions]
    for series in run.series:
        groups: list[tuple[int, list[str]]] = []
        end: float = -math.inf  # the end of the interval the last group holds
        texts: list[str] = []
        for at, text in series.values:
            if at < end:
                texts.append(text)
                continue
            # Interval starts are whole seconds and sample times whole milliseconds: the
            # float division falls on the right side of every boundary.
            end = first + (int((at - first) // step) + 1) * step
            texts = [text]
            groups.append((end, texts))
        labels = series.labels
        for reduce, into in taken:
            values = [[at, reduce(texts)] for at, texts in groups]
            into.append(sources.Series(labels=labels, values=values))
    return {function: replace(run, series=answers[function]) for function in functions}


# The range functions taken from raw samples (the device meter's parts), as Prometheus computes
# them; texts as it writes them (the largest is one of the samples' own texts).
OVER_TIME: dict[str, Callable[[list[str]], str]] = {
    "count_over_time": lambda texts: str(len(texts)),
    "max_over_time": sample_texts.max_text,
    "avg_over_time": sample_texts.mean_text,
}


def _joined(name: str, parts: dict[str, sources.QueryRun]) -> sources.QueryRun:
    """A meter's parts as one answer (its parsers tell them apart by their `meter` label)."""
    runs = list(parts.values())
    return replace(
        runs[0],
        name=name,
        series=[item for run in runs for item in run.series],
        seconds=sum(run.seconds for run in runs),
        evaluation_seconds=sum(run.evaluation_seconds for run in runs),
        samples=sum(run.samples for run in runs),
        repeated=tuple(entry for run in runs for entry in run.repeated),
    )


def exact(text: str) -> Fraction:
    """The rational behind a Prometheus float (see MAX_DENOMINATOR)."""
    value = Fraction(text)
    if value.denominator > MAX_DENOMINATOR:
        value = value.limit_denominator(MAX_DENOMINATOR)
    return value


def pod_of(labels: dict[str, str]) -> PodKey:
    """(namespace, pod), the exported_* spelling first; ("", "") for a device's bare series."""
    return (
        labels.get("exported_namespace") or labels.get("namespace", ""),
        labels.get("exported_pod") or labels.get("pod", ""),
    )


def describe(labels: dict[str, str]) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()) if k != "meter") + "}"


class _Numbers(dict[str, Decimal | None]):
    """`sources.finite_non_negative` of each distinct value text, read once per answer:
    answers repeat a few values ("1", "0", tick counts) over a million points a batch."""

    def __missing__(self, text: str) -> Decimal | None:
        value = self[text] = sources.finite_non_negative(text)
        return value


def _by_end(observed: dict[int, Observed], step: int) -> dict[int, Observed]:
    """Each interval by its end, the time a range query evaluates it at: a point's interval in
    one look-up of the answer's own timestamp (whole seconds, as every range query starts on
    the step grid; anything else is looked up by its whole seconds, as before)."""
    return {start + step: interval for start, interval in observed.items()}


def _points(
    result: sources.QueryRun,
    observed: dict[int, Observed],
    plan: sources.QueryPlan,
    *,
    needs_pod: bool = True,
    required: tuple[str, ...] = (),
) -> Iterator[tuple[Observed, dict[str, str], PodKey, Decimal, str]]:
    """(interval, labels, (namespace, pod), value, its text) for every usable point; the rest
    are warnings. The pod is read once per series, and each distinct text once per answer:
    answers repeat a few values ("1", "0", tick counts) over a million points a batch."""
    step = plan.step_seconds
    numbers = _Numbers()
    ends = _by_end(observed, step)
    for series in result.series:
        labels = series.labels
        key = pod_of(labels)
        namespace, pod = key
        missing = [name for name in required if not labels.get(name)]
        if needs_pod and not (namespace and pod):
            missing = ["namespace" if pod else "pod", *missing]
        for evaluated_at, text in series.values:
            interval = ends.get(evaluated_at) or observed.get(int(evaluated_at) - step)
            if interval is None:
                continue
            if missing:
                interval.warnings.append(
                    f"{result.name}: series {describe(labels)} has no {', '.join(missing)} label"
                )
                continue
            value = numbers[text]
            if value is None:
                interval.warnings.append(
                    f"{result.name}: series {describe(labels)} has value {text}"
                )
                continue
            yield interval, labels, key, value, text


def _series_key(labels: dict[str, str]) -> SeriesKey:
    namespace, pod = pod_of(labels)
    return (
        labels.get("UUID", ""),
        labels.get("GPU_I_ID", ""),
        labels.get("GPU_I_PROFILE", ""),
        namespace,
        pod,
    )


def _series(observed: Observed, key: SeriesKey) -> SeriesTicks:
    found = observed.series.get(key)
    if found is None:
        found = observed.series[key] = SeriesTicks()
    return found


def _parse_devices(
    result: sources.QueryRun, observed: dict[int, Observed], plan: sources.QueryPlan
) -> None:
    step = plan.step_seconds
    numbers = _Numbers()
    ends = _by_end(observed, step)
    for series in result.series:
        labels = series.labels
        meter = labels.get("meter")
        if not labels.get("UUID"):
            continue  # not a GPU (dcgm-exporter's label-less dummies)
        key = _series_key(labels)
        domain = labels.get(plan.fault_domain_label, "")
        if meter == "ticks":  # the same for each of the series' points
            target = (labels.get("job", ""), labels.get("instance", ""))
            node = labels.get("Hostname") or labels.get("hostname", "")
            model = labels.get("modelName", "")
            cluster = labels.get(plan.cluster_label, "") if plan.cluster_label else ""
        for evaluated_at, text in series.values:
            interval = ends.get(evaluated_at) or observed.get(int(evaluated_at) - step)
            if interval is None:
                continue
            ticks = interval.series.get(key)
            if ticks is None:
                ticks = interval.series[key] = SeriesTicks()
            if meter == "ticks":
                first = target
                if ticks.ticks and ticks.target != target:
                    first, ticks.also_target = sorted((ticks.target, target))
                ticks.ticks += int(text)
                ticks.fault_domain, ticks.target, ticks.node = domain, first, node
                ticks.model = model
                if cluster != ticks.cluster:
                    # One GPU under two values in one interval: relabelled, no two clusters.
                    interval.cluster_relabelled |= bool(ticks.cluster)
                    ticks.cluster = cluster
                continue
            value = numbers[text]
            if value is None and not key[4]:
                continue  # a bare series' peak only tells `_own_figures_unread`; a NaN, nothing
            if value is None:
                ticks.bad = True
                interval.warnings.append(f"devices: series {describe(labels)} has value {text}")
            elif meter == "memory_peak":
                ticks.memory_peak = value
            else:
                ticks.memory_avg = value


def _parse_busy(
    result: sources.QueryRun, observed: dict[int, Observed], plan: sources.QueryPlan
) -> None:
    """The engine-active sum of a series where it has one in the interval (even an unusable
    one), else its GPU_UTIL sum / 100: what `active or utilization / 100` answered."""
    active: dict[SeriesKey, set[Any]] = defaultdict(set)
    for series in result.series:
        if series.labels.get("meter") == "active":
            active[_series_key(series.labels)].update(at for at, _ in series.values)
    for series in result.series:
        if series.labels.get("meter") == "utilization":
            taken = active.get(_series_key(series.labels), ())
            series.values[:] = [
                [at, _percent(text)] for at, text in series.values if at not in taken
            ]
    # A free GPU's bare series that was busy: work no pod requested (`_unheld_busy`). Only its
    # points with busy time, silently: an idle GPU's zeros, NaN and label-less dummies (no
    # UUID, skipped by the devices meter too) say nothing here.
    held = [series for series in result.series if pod_of(series.labels)[1]]
    bare = [
        replace(series, values=[point for point in series.values if _busy(point[1])])
        for series in result.series
        if not pod_of(series.labels)[1] and series.labels.get("UUID")
    ]
    for series, needs_pod in ((held, True), (bare, False)):
        for interval, labels, _, value, _ in _points(
            replace(result, series=series), observed, plan, needs_pod=needs_pod, required=("UUID",)
        ):
            # A sum of ratios Prometheus wrote as a float: its decimal text is what it measured
            # (sums of 2-decimal ratios cannot sit on a rounding boundary at 6 places).
            _series(interval, _series_key(labels)).busy = value


def _busy(text: str) -> bool:
    """A busy sum as Prometheus wrote it is a positive number (not NaN, not 0)."""
    if text == "0":  # nearly every point of a free GPU
        return False
    try:
        return bool(sources.finite_non_negative(text))
    except ValueError:
        return False


def _percent(text: str) -> str:
    """A sum of GPU_UTIL percentages as a ratio, exactly (NaN and infinities as they are)."""
    value = Decimal(text)
    return str(value / 100) if value.is_finite() else text


def _parse_shared(
    result: sources.QueryRun, observed: dict[int, Observed], plan: sources.QueryPlan
) -> None:
    present = [s for s in result.series if s.labels.get("meter") == "present"]
    for interval, labels, _, value, _ in _points(
        replace(result, series=present), observed, plan, needs_pod=False, required=("UUID",)
    ):
        interval.present[(labels["UUID"], "")] = round(value)  # per GPU, all its devices
    pods = [s for s in result.series if s.labels.get("meter") != "present"]
    for interval, labels, _, value, text in _points(
        replace(result, series=pods), observed, plan, required=("UUID",)
    ):
        series = _series(interval, _series_key(labels))
        meter = labels["meter"]
        if meter == "alloc":
            series.shared_alloc = exact(text)
        elif meter == "busy":
            series.shared_busy = exact(text)
        elif series.also_target is None:
            continue  # "seen" and its mean: only where a second target answered
        elif meter == "seen":
            # The ticks at which any target answered for the series, each once (the targets'
            # counts added up would count a tick both answered twice).
            series.ticks = round(value)
        else:
            series.memory_avg = value


def _parse_targets(
    result: sources.QueryRun, observed: dict[int, Observed], plan: sources.QueryPlan
) -> None:
    nodes = [series for series in result.series if series.labels.get("meter") in NODE_METERS]
    up = [series for series in result.series if series.labels.get("meter") not in NODE_METERS]
    for interval, labels, _, value, _ in _points(
        replace(result, series=nodes), observed, plan, needs_pod=False, required=("node",)
    ):
        node, meter = labels["node"], labels["meter"]
        if meter == "node_created":
            interval.node_created[node] = int(value)
        elif value <= 0:
            continue
        elif meter == "gpu_nodes":
            interval.gpu_nodes.add(node)
            cluster = labels.get(plan.cluster_label) if plan.cluster_label else None
            if cluster:
                interval.gpu_node_clusters.setdefault(node, set()).add(cluster)
        else:
            interval.nodes_leaving.add(node)
    for interval, labels, pod, value, _ in _points(
        replace(result, series=up), observed, plan, needs_pod=False, required=("meter", "instance")
    ):
        target = (labels.get("job", ""), labels["instance"])
        counts = interval.targets.setdefault(target, [0, 0])
        # One group per pod the target was in the interval (an exporter on its host's
        # network replaced at the same address: two), added up as the target's.
        counts[0 if labels["meter"] == "attempted" else 1] += round(value)
        if pod[0] and pod[1]:
            interval.target_pods.setdefault(target, set()).add(pod)


# The parts of the targets meter that read kube-state-metrics' nodes (sources.targets_parts).
NODE_METERS = frozenset({"gpu_nodes", "node_created", "node_leaving"})


def _parse_looked_up(
    result: sources.QueryRun,
    observed: dict[int, Observed],
    plan: sources.QueryPlan,
    *,
    into: str = "silent_gpus",
) -> None:
    """A look-back's GPUs, into each interval's `silent_gpus` (sources.silent_devices_query)
    or `node_gpus` (sources.node_devices_query)."""
    for interval, labels, _, _, _ in _points(
        result, observed, plan, needs_pod=False, required=("UUID", "instance")
    ):
        getattr(interval, into)[labels["UUID"]] = GpuInfo(
            target=(labels.get("job", ""), labels["instance"]),
            node=labels.get("Hostname") or labels.get("hostname", ""),
        )


def _parse_io(
    result: sources.QueryRun, observed: dict[int, Observed], plan: sources.QueryPlan
) -> None:
    """Per pod, counter and interval: the sum of its pod-level series (`container=""`) where
    it has one, else of its containers' (the `POD` sandbox is not asked for)."""
    by = sources.POD_LABELS.split(", ")
    pod_level = sources.Part("", tuple(by), "sum")
    for meter in sorted({series.labels["meter"] for series in result.series}):
        mine = [series for series in result.series if series.labels["meter"] == meter]
        levels = {}
        for level in (True, False):
            chosen = [s for s in mine if (not s.labels.get("container")) == level]
            levels[level] = _grouped(replace(result, series=chosen), meter, pod_level)
            _repeated_warn(levels[level], observed, plan)
        pod_level_at = {
            tuple(sorted(series.labels.items())): {at for at, _ in series.values}
            for series in levels[True].series
        }
        for series in levels[False].series:
            taken = pod_level_at.get(tuple(sorted(series.labels.items())))
            if taken:
                series.values[:] = [v for v in series.values if v[0] not in taken]
        joined = replace(result, series=levels[True].series + levels[False].series)
        for interval, labels, pod, value, _ in _points(joined, observed, plan, required=("meter",)):
            interval.io_last[pod][labels["meter"]] = value


def _parse_latency(
    result: sources.QueryRun, observed: dict[int, Observed], plan: sources.QueryPlan
) -> None:
    required = (plan.service_label, "le")
    # Each `le` text once per answer (a few bucket bounds over every point), and the bound
    # and replica once per series (its points come one after the other).
    bounds: dict[str, str | None] = {}
    current: dict[str, str] | None = None
    bound: str | None = None
    replica: tuple[str, str, str] = ("", "", "")
    for interval, labels, pod, value, _ in _points(result, observed, plan, required=required):
        if labels is not current:
            current, text = labels, labels["le"]
            if text not in bounds:
                try:
                    bounds[text] = canonical_le(text)
                except ValueError:
                    bounds[text] = None
            bound = bounds[text]
            replica = (pod[0], labels[plan.service_label], pod[1])
        if bound is None:
            interval.warnings.append(f"latency: series {describe(labels)} has a bad le")
            continue
        interval.latency_last[replica][bound] = value


def canonical_le(text: str) -> str:
    """'1.0', '1' and '1e0' are the same bucket bound: spell it one way ('1', '2.5', '+Inf')."""
    if is_infinity(text):
        return "+Inf"
    number = Decimal(text)
    if not number.is_finite() or number < 0:
        raise ValueError(text)
    return format(number.normalize(), "f")


def _le_order(bound: str) -> Decimal:
    return Decimal("Infinity") if bound == "+Inf" else Decimal(bound)


def _parse_identity(
    result: sources.QueryRun, observed: dict[int, Observed], plan: sources.QueryPlan
) -> None:
    for interval, labels, pod, value, _ in _points(result, observed, plan, required=("meter",)):
        if labels["meter"] == "preempted":
            # Read over the interval, unlike the rest: the pod may be gone by its end.
            interval.preemption_reason_series += 1
            if value == 1:
                interval.preempted.add(pod)
            continue
        if labels["meter"] == "pending":
            # Over the interval too: not a view of the pod at its end.
            interval.pending.add(pod)
            continue
        identity = interval.identity.get(pod)
        if identity is None:
            identity = interval.identity[pod] = PodIdentity(from_kube=True)
        _identity_set(identity, labels["meter"], labels, value, plan)


def _parse_pod_history(
    result: sources.QueryRun, observed: dict[int, Observed], plan: sources.QueryPlan
) -> None:
    """Fill in what the interval-end view lacks; never overwrite it."""
    for interval, labels, pod, value, _ in _points(result, observed, plan, required=("meter",)):
        meter = labels["meter"].split(":", 1)[0]  # "<part>:<pod label spelling>"
        identity = interval.identity.get(pod)
        if identity is None:
            identity = interval.identity[pod] = PodIdentity(from_kube=True, from_history=True)
        if meter == "ended":
            identity.ended = identity.ended or value == 1
        elif identity.from_history:
            _identity_set(identity, meter, labels, value, plan)


def _identity_set(
    identity: PodIdentity,
    meter: str,
    labels: dict[str, str],
    value: Decimal,
    plan: sources.QueryPlan,
) -> None:
    if meter == "labels":
        identity.labelled = True
        identity.task_label = labels.get(plan.task_label, "")
        identity.team_label = labels.get(plan.team_label, "")
    elif meter == "owner":
        identity.owned = True
        owner = labels.get("owner_name", "")
        identity.owner_name = "" if owner == NO_OWNER else owner
        identity.owner_kind = labels.get("owner_kind", "")
    elif meter == "info":
        identity.informed = True
        identity.priority_class = labels.get("priority_class", "")
        identity.node = labels.get("node", "")
        identity.pod_ip = labels.get("pod_ip", "")
        identity.host_ip = labels.get("host_ip", "")
    elif meter == "scheduled":
        identity.scheduled = round(value)
    elif meter == "requests":
        identity.gpus_requested = Fraction(value)
    elif meter == "running":
        identity.running = value == 1


def _parse_pod_details(
    result: sources.QueryRun, observed: dict[int, Observed], plan: sources.QueryPlan
) -> None:
    for interval, labels, pod, value, text in _points(result, observed, plan, required=("meter",)):
        identity = interval.identity.get(pod)
        if identity is None:
            continue  # not alive in kube-state-metrics' view of this interval
        if labels["meter"].startswith("created"):
            identity.created = round(value)
        else:
            identity.gpus = exact(text)


def _parse_pending_pods(
    result: sources.QueryRun, observed: dict[int, Observed], plan: sources.QueryPlan
) -> None:
    for interval, labels, pod, value, _ in _points(result, observed, plan, required=("meter",)):
        meter = labels["meter"].split(":", 1)[0]  # "<part>:<pod label spelling>"
        view = interval.pending_views.setdefault(pod, PendingView())
        if meter == "created":
            view.created = round(value)
        elif meter == "scheduled":
            view.scheduled = True
        elif meter == "requests":
            view.requests_gpus = view.requests_gpus or value > 0
        else:
            tick = round(value)
            view.last_pending_tick = max(view.last_pending_tick or tick, tick)


def _parse_preemption_ticks(
    result: sources.QueryRun, observed: dict[int, Observed], plan: sources.QueryPlan
) -> None:
    for interval, _, pod, value, _ in _points(result, observed, plan):
        interval.preempted_at[pod] = round(value)


PARSERS: dict[str, Callable[[sources.QueryRun, dict[int, Observed], sources.QueryPlan], None]] = {
    "devices": _parse_devices,
    "busy": _parse_busy,
    "io": _parse_io,
    "latency": _parse_latency,
    "identity": _parse_identity,
    "targets": _parse_targets,
}


# --- What needs a narrowed per-tick query -----------------------------------------------


def _time_sliced_devices(
    observed: dict[int, Observed], plan: sources.QueryPlan
) -> tuple[set[str], set[str], dict[int, set[Device]]]:
    """GPUs whose series may overlap in time, so that only a per-tick view counts them right:
    more series-ticks than ticks in some interval, several series and fewer series-ticks
    than ticks (samples missing could hide an overlap), or a series two scrape targets
    answered for; and, apart, those last ones (`SeriesTicks.also_target`); and, per interval,
    the devices held by one pod beside their own bare series (`_held_beside_bare`), which
    need no per-tick view.

    A whole GPU or MIG instance shows one series per tick (handing over from one pod to the
    next, or to its bare series, never overlaps), but under dcgm-exporter's
    --kubernetes-virtual-gpus its bare series stays beside its pod's; a time-sliced GPU shows
    its pods' series side by side (and, in that mode, its bare series beside them), and the
    same GPU may be held whole in other ticks. Whatever the mix, the per-tick queries split
    and count each tick by what it shows.
    """
    ticks_per_interval = plan.step_seconds // plan.scrape_seconds
    shared: set[str] = set()
    repeated_anywhere: set[str] = set()
    beside: dict[int, set[Device]] = {}
    for start, interval in observed.items():
        per_device: dict[Device, list[int]] = defaultdict(lambda: [0, 0])
        bare: dict[Device, int] = {}
        repeated: dict[str, SeriesTicks] = {}
        targets: dict[str, set[Target]] = defaultdict(set)
        for (uuid, instance, _, _, pod), series in interval.series.items():
            if series.ticks:
                per_device[(uuid, instance)][0] += series.ticks
                per_device[(uuid, instance)][1] += 1
                targets[uuid].add(series.target)
                if not pod:
                    bare[(uuid, instance)] = series.ticks
            if series.also_target is not None:
                repeated.setdefault(uuid, series)
        overlapping = {
            device
            for device, (ticks, count) in per_device.items()
            if ticks > ticks_per_interval or (count > 1 and ticks < ticks_per_interval)
        }
        held = _held_beside_bare(interval, overlapping, per_device, bare, targets)
        if held:
            beside[start] = held
        shared |= {uuid for uuid, _ in overlapping - held}
        shared |= set(repeated)
        shared |= _devices_apart(interval, per_device, targets, ticks_per_interval)
        repeated_anywhere |= set(repeated)
        if repeated:
            uuid = min(repeated)
            first, second = repeated[uuid].target, repeated[uuid].also_target or ("", "")
            interval.warnings.append(
                f"devices: {len(repeated)} GPU(s) answered for by two scrape targets, e.g."
                f" {uuid} by {_target_text(first)} and {_target_text(second)} (an exporter"
                " scraped twice, or replaced); each tick counted once"
            )
    # A GPU per-tick in one interval is so in all (its devices' keys would mix the two ways).
    beside = {
        start: {device for device in held if device[0] not in shared}
        for start, held in beside.items()
    }
    return shared, repeated_anywhere, beside


def _held_beside_bare(
    interval: Observed,
    overlapping: set[Device],
    per_device: dict[Device, list[int]],
    bare: dict[Device, int],
    targets: dict[str, set[Target]],
) -> set[Device]:
    """Of the devices whose series overlap, those held by one pod beside their own bare
    series at every scrape its one exporter answered: dcgm-exporter with
    --kubernetes-virtual-gpus (4.5.3-4.8.2 on) keeps a held device's bare DCGM_FI_DEV_FB_USED
    beside its pod's (`isPerProcessMetric`), so every held device overlaps. One pod cannot
    overlap another: its series' ticks are its own, and the device was present at the bare
    series' ticks, every answered scrape (`_gpu_presence`). Without this, every GPU of such
    a pool went through the per-tick query, at 10,000 GPUs forty narrowed subqueries a batch.

    Not where a target's answered scrapes are unknown (no `up`), nor where two pods' series
    or two targets are in the interval: those stay per tick."""
    held = set()
    for device in overlapping:
        ticks, count = per_device[device]
        bare_ticks = bare.get(device)
        if count != 2 or bare_ticks is None or len(targets[device[0]]) != 1:
            continue
        (target,) = targets[device[0]]
        answered = _answered(interval, target)
        if answered is not None and bare_ticks == answered and ticks - bare_ticks <= answered:
            held.add(device)
    return held


def _devices_apart(
    interval: Observed,
    per_device: dict[Device, list[int]],
    targets: dict[str, set[Target]],
    ticks_per_interval: int,
) -> set[str]:
    """GPUs of several devices whose ticks may not cover each other's, so that the most ticks
    of any one device is not the ticks at which the GPU was present: a GPU re-laid within the
    interval (NVIDIA's mig-manager stops dcgm-exporter, applies a MIG layout and starts it
    again, which then writes the GPU's instances instead of the whole GPU, or new instances
    instead of the old ones). Counted as the most of one device's, such a GPU was present
    only for the longer part of the interval, with every window complete: the ticks between
    were its exporter gone while its node's device plugin was stopped too, the GPU away.

    A GPU whose devices all had as many ticks as their one exporter answered scrapes (static
    MIG instances, present together at every scrape, a missed one included) needs no per-tick
    view, nor does one whose device had a tick at every point of the interval."""
    most: dict[str, int] = defaultdict(int)
    devices: dict[str, int] = defaultdict(int)
    for (uuid, _), (ticks, _) in per_device.items():
        most[uuid] = max(most[uuid], ticks)
        devices[uuid] += 1
    apart: set[str] = set()
    for uuid, count in devices.items():
        if count < 2 or most[uuid] >= ticks_per_interval:
            continue
        (target, *others) = targets[uuid]
        answered = None if others else _answered(interval, target)
        if answered is None or most[uuid] < answered:
            apart.add(uuid)
    return apart


def _exporters_own_series_freed(observed: dict[int, Observed]) -> set[str]:
    """The device series that carry the exporter's own pod, made the devices' bare series
    (free GPUs); returns those pods' names.

    A scrape that adds its target's pod as `pod` (a ServiceMonitor's target labels) puts
    the dcgm-exporter pod on every series the exporter wrote without one: each free GPU's,
    and, where the scrape does not honour the exporter's labels (`exported_pod`), every
    series. Read as a pod, the exporter would hold every free GPU. It is told by the scrape
    target's `up`, which carries the same target labels (`_exporters_own`), and by
    kube-state-metrics: a DaemonSet's pod at the address Prometheus scraped the series from,
    as the interval shows it, else as another interval of the batch showed the same pod on
    the same target's series. The shard of a sharded kube-state-metrics that describes the
    exporter's pod may be silent a while; before, the free GPUs of those intervals were
    billed to the exporter's namespace as held (window by window, where no interval of the
    batch described it, until the target's `up` told it)."""
    exporters: set[str] = set()
    own_pods: dict[PodKey, set[Target]] = {}  # each exporter's pod, the targets it was on
    for interval in observed.values():
        own = [
            key
            for key, series in interval.series.items()
            if key[4] and _exporters_own(interval, key[3:], series.target)
        ]
        for key in own:
            own_pods.setdefault(key[3:], set()).add(_free(interval, key))
            exporters.add(key[4])
    for interval in observed.values():
        # Most intervals describe every such pod (or there is none): no second walk.
        if all(pod in interval.identity for pod in own_pods):
            continue
        for key in [
            key
            for key, series in interval.series.items()
            if key[3:] not in interval.identity and series.target in own_pods.get(key[3:], ())
        ]:
            _free(interval, key)
            exporters.add(key[4])
    return exporters


def _exporters_own(interval: Observed, pod: PodKey, target: Target) -> bool:
    """Whether the pod a device series names is the exporter that wrote it.

    Where the target's `up` names pods (service discovery's target labels), they are the
    target's: a pod it names is the exporter, unless kube-state-metrics shows it owned by
    other than a DaemonSet (a dcgm-exporter run as a sidecar of a GPU workload), and one it
    does not name is not, whatever its address (a GPU workload of a DaemonSet on its host's
    network, at the exporter's address). A pod it names that kube-state-metrics does not
    describe (its shard silent, window by window) is taken for the exporter, which the
    interval's warnings say: a sidecar's workload would be read as free there.

    Where `up` names none (a relabelling), kube-state-metrics tells it: a DaemonSet's pod at
    the address scraped."""
    identity = interval.identity.get(pod)
    described = identity is not None and identity.owned
    named = interval.target_pods.get(target)
    if not named:
        return (
            described
            and identity.owner_kind == "DaemonSet"
            and bool(identity.pod_ip)
            and _target_host(target) == identity.pod_ip
        )
    if pod not in named:
        return False
    if described:
        return identity.owner_kind == "DaemonSet"
    warning = (
        f"devices: pod {pod[0]}/{pod[1]} is the exporter's own, the scrape target"
        f" {_target_text(target)} (its `up` names it; kube-state-metrics does not describe"
        " it in this interval): its series read as free GPUs"
    )
    if warning not in interval.warnings:  # once, not once per GPU
        interval.warnings.append(warning)
    return True


def _free(interval: Observed, key: SeriesKey) -> Target:
    """The exporter's own pod's series made the device's bare series; returns its target."""
    series = interval.series.pop(key)
    bare = (*key[:3], "", "")
    found = interval.series.get(bare)
    if found is None:
        interval.series[bare] = series
    else:  # the exporter wrote a bare series too (another target's): one of each tick
        found.ticks = max(found.ticks, series.ticks)
        if series.busy is not None:
            found.busy = series.busy if found.busy is None else max(found.busy, series.busy)
    return series.target


def _answered(interval: Observed, target: Target) -> int | None:
    """How many scrapes of the interval `target` answered (its `up`); None where the source
    holds no `up` of it."""
    return interval.targets.get(target, (0, None))[1]


def _gpu_presence(
    observed: Observed, plan: sources.QueryPlan, shared: set[str], beside: set[Device]
) -> None:
    """Ticks at which each physical GPU was present, whatever its use in each tick: a device
    of a GPU whose series may overlap counts the ticks with any series (per tick, from
    Prometheus); one held by a pod beside its own bare series, the bare series' ticks
    (`_held_beside_bare`); any other device the sum of its series' ticks (they never
    overlap). A MIG GPU is present when its instances are."""
    devices: dict[Device, int] = defaultdict(int)
    gpus = observed.gpus
    for (uuid, instance, _, _, pod), series in observed.series.items():
        if series.ticks:
            gpu = gpus.get(uuid)
            if gpu is None:  # not setdefault, which would build a GpuInfo for every series
                gpu = gpus[uuid] = GpuInfo()
            gpu.target, gpu.node = series.target, series.node
            gpu.fault_domain = series.fault_domain
            gpu.model = gpu.model or series.model
            if uuid not in shared:
                # Beside its pod's, the bare series holds every tick the device was present.
                if not pod or (uuid, instance) not in beside:
                    devices[(uuid, instance)] += series.ticks
            elif (uuid, "") not in observed.present:
                observed.warnings.append(f"devices: {uuid} has no per-tick presence")
    # Per tick, a GPU's presence is of all its devices at once (a MIG layout changed within
    # the interval: its whole device, then its instances), under the key of its whole device.
    devices.update((device, ticks) for device, ticks in observed.present.items() if ticks)
    for (uuid, _), ticks in devices.items():
        gpu = gpus.get(uuid)
        if gpu is None:
            gpu = gpus[uuid] = GpuInfo()
        gpu.ticks = max(gpu.ticks, ticks)


def _known_gpus(observed: dict[int, Observed]) -> dict[Target, dict[str, GpuInfo]]:
    """The GPUs each scrape target reported anywhere in the batch."""
    known: dict[Target, dict[str, GpuInfo]] = defaultdict(dict)
    for interval in observed.values():
        for uuid, gpu in interval.gpus.items():
            known[gpu.target][uuid] = gpu
    return known


def _silent_unknown_targets(
    observed: dict[int, Observed], known: dict[Target, dict[str, GpuInfo]]
) -> set[str]:
    """Instances that failed scrapes in the batch without reporting any GPU in it: their GPUs
    come from a look-back (most are not GPU exporters at all, and the look-back finds none)."""
    return {
        instance
        for interval in observed.values()
        for (job, instance), (attempted, answered) in interval.targets.items()
        if answered < attempted and (job, instance) not in known
    }


def _unreported_gpu_nodes(
    observed: dict[int, Observed], plan: sources.QueryPlan
) -> Iterator[tuple[int, str, dict[str, GpuInfo] | None]]:
    """(interval, node, its GPUs as last seen before) for each interval of the batch and each
    GPU node kube-state-metrics lists at its end that no GPU series names in it: last seen in
    an earlier interval of the batch, or the one before it, or else in the look-back of
    `sources.node_devices_query` (on the interval before the batch); None where never seen
    since the node was created: GPUs seen by a time at or before the node's creation
    (`kube_node_created`) were another machine's of that name; where kube-state-metrics
    writes no creation times, a node is forgotten when it is not listed.

    Not yielded: nodes being taken out (`Observed.nodes_leaving`: their exporter may go
    first), and nodes of the source's `unmetered_nodes` (another source's)."""
    first = min(observed)
    unreported = {
        start: now.gpu_nodes - {gpu.node for gpu in now.gpus.values()}
        for start, now in observed.items()
        if start != first and now.gpu_nodes
    }
    if not any(unreported.values()):  # every listed node reported: the usual batch
        return
    outside = re.compile(plan.unmetered_nodes) if plan.unmetered_nodes else None
    last_seen = _looked_back(observed, plan)
    for start in sorted(observed):
        now = observed[start]
        for node in sorted(unreported.get(start, ())):
            if node in now.nodes_leaving or (outside is not None and outside.fullmatch(node)):
                continue
            seen = last_seen.get(node)
            if seen is not None and seen[0] <= now.node_created.get(node, -1):
                seen = None  # a machine of the same name before this one
            yield start, node, seen[1] if seen is not None else None
        reported: dict[str, dict[str, GpuInfo]] = defaultdict(dict)
        for uuid, gpu in now.gpus.items():
            reported[gpu.node][uuid] = gpu
        # Seen by the interval's end: a node created inside the interval reported them.
        seen_by = start + plan.step_seconds
        last_seen.update((node, (seen_by, gpus)) for node, gpus in reported.items())
        if now.gpu_nodes and not now.node_created:
            # No creation times to tell a new machine by: a node not listed has left (a
            # listing that misses a node for one scrape forgets it for the batch).
            for node in [node for node in last_seen if node not in now.gpu_nodes]:
                del last_seen[node]


def _lookback_spans(
    observed: dict[int, Observed], plan: sources.QueryPlan, nodes: set[str]
) -> dict[int, set[str]]:
    """The nodes to look back for, by how far: sources.NODE_LOOKBACK_SECONDS, or since the
    node was created where that is nearer (down to the hour; under an hour, to the minute:
    a young pool's nodes share a few queries): the GPUs of a machine that had the name
    before it are not its own. A node created after the batch started has none to look
    for."""
    batch_start = min(observed) + plan.step_seconds
    created: dict[str, int] = {}
    for interval in observed.values():
        for node, at in interval.node_created.items():
            created.setdefault(node, at)
    spans: dict[int, set[str]] = defaultdict(set)
    for node in nodes:
        seconds = sources.NODE_LOOKBACK_SECONDS
        if node in created:
            since = batch_start - created[node]
            unit = 3600 if since >= 3600 else 60
            seconds = min(seconds, since // unit * unit)
        if seconds > 0:
            spans[seconds].add(node)
    return spans


def _looked_back(
    observed: dict[int, Observed], plan: sources.QueryPlan
) -> dict[str, tuple[int, dict[str, GpuInfo]]]:
    """Per node, the GPUs the look-back found (since the node was created, see
    `_lookback_spans`), as seen by the batch's start."""
    first = min(observed)
    found: dict[str, tuple[int, dict[str, GpuInfo]]] = {}
    for uuid, gpu in observed[first].node_gpus.items():
        found.setdefault(gpu.node, (first + plan.step_seconds, {}))[1][uuid] = gpu
    return found


def _vanished_gpus(
    observed: dict[int, Observed], plan: sources.QueryPlan
) -> dict[int, dict[str, GpuInfo]]:
    """Per interval, the GPUs of nodes kube-state-metrics still lists whose exporter left no
    trace in it, `up` included (its target gone from Prometheus' service discovery: the
    exporter's pod deleted, its DaemonSet changed; or its samples not arrived): missing at
    every tick, as a silent exporter's are, not gone as a removed node's. An exporter that
    Prometheus recorded scrapes of is left to that record (`_derive_completeness`)."""
    found: dict[int, dict[str, GpuInfo]] = defaultdict(dict)
    for start, _, gpus in _unreported_gpu_nodes(observed, plan):
        now = observed[start]
        for uuid, gpu in (gpus or {}).items():
            if gpu.target not in now.targets and uuid not in now.gpus:
                found[start][uuid] = gpu
    return found


def _without_identity(observed: dict[int, Observed]) -> set[str]:
    """Pods that used GPUs or disk in an interval but were gone at its end."""
    pods = set()
    for interval in observed.values():
        active = {key[3:] for key in interval.series if key[4]} | set(interval.io_last)
        pods |= {pod for namespace, pod in active - set(interval.identity)}
    return pods


def _disappeared(observed: dict[int, Observed]) -> set[str]:
    """Pods alive at one interval's end and not at the next one's: did they end?"""
    starts = sorted(observed)
    pods = set()
    for before, start in pairwise(starts):
        pods |= {pod for _, pod in set(observed[before].identity) - set(observed[start].identity)}
    return pods


def _pending_gone(observed: dict[int, Observed]) -> dict[int, set[PodKey]]:
    """For each interval but the first, by the start of the interval before it: the pods
    Pending in that interval and neither Pending in this one nor alive at its end. Gone
    while waiting, or scheduled, or unseen (kube-state-metrics silent): `_gave_up` tells."""
    return {
        before: {
            pod
            for pod in observed[before].pending - observed[start].pending
            if pod not in observed[start].identity  # a dict of every pod: not made a set
        }
        for before, start in pairwise(sorted(observed))
    }


def _gave_up(
    observed: dict[int, Observed],
    plan: sources.QueryPlan,
    first: int,
    last: int,
    gap_targets: dict[Target, set[str]],
) -> dict[int, dict[PodKey, GaveUp]]:
    """For each interval of the batch, the pods that gave up waiting: never scheduled,
    shown Pending in the interval before (I) and not at all in this one (I + 1), while
    kube-state-metrics answered every scrape of it. A wait counts where it ends, so the row
    is this interval's (I + 1's), written and taken back with it, and read again from
    Prometheus whenever it is ingested: the interval before the batch is the meters' first
    point, so no state outside Prometheus is needed.

    Its end is the end of the last tick at which kube-state-metrics showed it Pending (the
    slot of that sample, as every sample is taken to last a scrape interval): right to the
    scrape interval, since it was deleted between that sample and the next scrape. A pod
    created and deleted within one interval counts too. A pod Pending at the batch's end is
    not counted: the next batch (or the next window, ingested alone) sees whether it goes."""
    step = plan.step_seconds
    kube_state_metrics = {target for target, meters in gap_targets.items() if "identity" in meters}
    gone = _pending_gone(observed)
    found: dict[int, dict[PodKey, GaveUp]] = {}
    for start in range(first, last + 1, step):
        before, now = observed[start - step], observed[start]
        found[start] = {}
        if not _answered_throughout(before, now, kube_state_metrics):
            continue  # a scrape gap shows no pod: not a deletion
        for pod in sorted(gone[start - step]):
            seen, after = before.pending_views.get(pod), now.pending_views.get(pod)
            if after is not None or seen is None or seen.scheduled:
                continue  # still there, or scheduled (a wait of its own)
            if seen.created is None or seen.last_pending_tick is None:
                continue
            ended = seen.last_pending_tick + plan.scrape_seconds
            if ended < seen.created:
                continue
            found[start][pod] = GaveUp(seen.created, ended, before.identity.get(pod))
    return found


def _asking_no_gpu(observed: dict[int, Observed]) -> set[PodKey]:
    """The pods kube-state-metrics describes in the batch that request no GPU in any of its
    views and hold none: the cluster's CPU-only pods. kube-state-metrics and cAdvisor report
    every pod of the cluster, and a real one runs many beside the GPU pool's (55 of the 366
    pods of the `openb` trace's day in tests/fixtures/traces): their scheduling waits, I/O
    and evictions are none of the pool's (`_pool_pods_only`).

    Requests are read in the views at the intervals' ends, with the creation time of each
    pod newly scheduled (`sources.pod_details_parts`) and with the pods gone while Pending
    (`sources.pending_pods_parts`), so every pod a wait is recorded for has one read. None
    is left out where no pod of the batch shows a GPU request (kube-state-metrics told not
    to write `kube_pod_container_resource_requests`): a missing request then tells nothing."""
    described: set[PodKey] = set()
    requested: set[PodKey] = set()  # a GPU request in some view
    for interval in observed.values():
        for pod, identity in interval.identity.items():
            if identity.from_kube and (not identity.from_history or identity.created):
                described.add(pod)  # a view that reads the requests (see below)
            if identity.gpus_requested or identity.gpus:
                requested.add(pod)
        for pod, view in interval.pending_views.items():
            if view.created is not None:
                described.add(pod)
            if view.requests_gpus:
                requested.add(pod)
    unrequested = described - requested if requested else set()
    if not unrequested:  # a pool of GPU pods only (every simulated one): no series to read
        return unrequested
    for interval in observed.values():  # a GPU series makes a pod the pool's, request or not
        unrequested.difference_update((namespace, pod) for *_, namespace, pod in interval.series)
    return unrequested


def _pool_pods_only(facts: IntervalFacts, no_gpu: set[PodKey]) -> None:
    """An interval's facts without the pods that ask for no GPU (`_asking_no_gpu`): no wait,
    no I/O and no preemption of theirs makes a task of the pool's or moves its health numbers."""
    if not no_gpu:
        return
    for found in (facts.waits, facts.gave_up, facts.io, facts.preemptions):
        for pod in no_gpu.intersection(found):
            del found[pod]


def _answered_throughout(before: Observed, now: Observed, targets: set[Target]) -> bool:
    """Whether the scrape targets (kube-state-metrics') answered every scrape Prometheus
    attempted in `now`, and each of them scraped in `before` was scraped in `now`: then a
    pod they do not show in `now` is gone. Without any answer (down, or no `up` at all),
    the interval says nothing of which pods are gone."""
    scraped = {target: counts for target, counts in now.targets.items() if target in targets}
    if not any(answered for _, answered in scraped.values()):
        return False
    if any(answered < attempted for attempted, answered in scraped.values()):
        return False
    return all(
        target in scraped
        for target, (attempted, _) in before.targets.items()
        if target in targets and attempted
    )


def _newly_scheduled(observed: dict[int, Observed]) -> set[str]:
    return {pod[1] for pods in _scheduled_since(observed).values() for pod in pods}


def _scheduled_since(observed: dict[int, Observed]) -> dict[int, dict[PodKey, int]]:
    """For each interval of the batch, the pods scheduled in it, with when: the scheduling
    time kube-state-metrics shows for a pod differs from the last it showed for it in the
    batch (unscheduled before, or a pod of the same name re-created), or it shows the pod
    for the first time since the interval before the batch, which it described.

    Kept per pod over the batch, not taken from the interval just before: after
    kube-state-metrics missed the scrapes of an interval's end (or of all but part of it),
    the pods it shows again are not all new (a wait each, a task for a pod that never held a
    GPU, and their details asked again). Where it described nothing yet in the batch, a pod
    is new if scheduled since the interval before the batch began: earlier ones belong to an
    earlier batch."""
    starts = sorted(observed)
    first = starts[0]
    last_scheduled: dict[PodKey, int | None] = {}
    described = False  # kube-state-metrics answered at an interval's end so far
    found: dict[int, dict[PodKey, int]] = {}
    for start in starts:
        new = found[start] = {}
        for pod, identity in observed[start].identity.items():
            scheduled = identity.scheduled
            if pod not in last_scheduled:
                if scheduled is not None and start > first and (described or scheduled >= first):
                    new[pod] = scheduled
            elif scheduled is not None and scheduled != last_scheduled[pod]:
                new[pod] = scheduled
            if scheduled is not None or pod not in last_scheduled:
                last_scheduled[pod] = scheduled
        if not described:
            described = any(not i.from_history for i in observed[start].identity.values())
    del found[first]
    return found


def _reason_unwritten(observed: dict[int, Observed]) -> bool:
    """Whether an interval of the batch shows pods but no series of the preemption reason:
    none was preempted (kube-state-metrics v2.20 on writes a reason only once it is set), or
    kube-state-metrics cannot say (before v2.19), which `sources.reasons_at_zero_query` tells."""
    first = min(observed)
    return any(
        interval.identity and not interval.preemption_reason_series
        for start, interval in observed.items()
        if start != first
    )


def _newly_preempted(observed: dict[int, Observed]) -> set[str]:
    starts = sorted(observed)
    pods = set()
    for before, start in pairwise(starts):
        pods |= {pod for _, pod in observed[start].preempted - observed[before].preempted}
    return pods


# --- Deriving an interval's facts ---------------------------------------------------------


# A MIG instance's `Ng` is N compute slices of its GPU, and the GPU's slices depend on its
# model: seven on the A100, H100, H200, B200 and GB200, fewer on these (NVIDIA's MIG user
# guide, "Supported GPUs" and "Supported MIG Profiles": the A30's `4g.24gb` is the whole
# GPU). Matched in dcgm-exporter's `modelName` ("NVIDIA A30"), which a MIG instance's
# series carries from its physical GPU. Read as sevenths, an A30's slices were billed at 4/7
# of what they held, with every window complete.
MIG_SLICES_BY_MODEL = (  # matched in the model's `gpu_model_key`, as GPU classes are
    (re.compile(r"\ba30x?\b"), 4),
    (re.compile(r"\brtx pro 6000 blackwell\b"), 4),
    (re.compile(r"\brtx pro (?:5000|4500) blackwell\b"), 2),
)
MIG_SLICES = 7  # any other model, and a series that names none
# The unit of a pod's GPU time before it is turned into a rational (`_PodSums`): every MIG
# share above is a whole number of 28ths of a GPU (28 = lcm(7, 4, 2)).
SHARE_PARTS = 28


@cache
def mig_slices(model: str) -> int:
    """The compute slices a GPU of `model` is cut into by MIG."""
    key = gpu_model_key(model)
    for pattern, slices in MIG_SLICES_BY_MODEL:
        if pattern.search(key):
            return slices
    return MIG_SLICES


@cache
def mig_share(profile: str, model: str = "") -> Fraction:
    """A MIG instance is its slices over its GPU's (`mig_slices`): "3g.40gb" of an H100 is
    3/7, "1g.6gb" of an A30 1/4; a whole device is 1. A profile with more slices than its
    GPU has is unknown (ValueError)."""
    if not profile:
        return Fraction(1)
    slices, whole = whole_number(profile.split("g.", 1)[0], max_digits=1), mig_slices(model)
    if slices is None or not 1 <= slices <= whole:
        raise ValueError(profile)
    return Fraction(slices, whole)


@cache
def mig_parts(profile: str, model: str = "") -> int:
    """`mig_share` in SHARE_PARTS of a GPU: 12 for an H100's "3g.40gb", 28 for a whole
    device."""
    return int(mig_share(profile, model) * SHARE_PARTS)


def _derive(
    now: Observed,
    before: Observed,
    plan: sources.QueryPlan,
    shared: set[str],
    known: dict[Target, dict[str, GpuInfo]],
    io_earlier: dict[PodKey, dict[str, Decimal]],
    latency_earlier: dict[tuple[str, str, str], dict[str, Decimal]],
    scheduled: dict[PodKey, int],
    vanished: dict[str, GpuInfo],
) -> IntervalFacts:
    """One interval's facts; `scheduled` holds the pods scheduled since kube-state-metrics'
    last view (`_scheduled_since`): a wait each; `vanished` the GPUs of `_vanished_gpus`."""
    facts = IntervalFacts(identity=now.identity, warnings=list(now.warnings))
    _derive_gpus(facts, now, plan, shared)
    _derive_completeness(facts, now, before, plan, known, vanished)
    _pods_in_turn(facts, now, before)
    _names_taken_over(facts, now, before, scheduled)
    _own_figures_unread(facts, now)
    _derive_io(facts, now, io_earlier)
    _derive_latency(facts, now, latency_earlier)
    facts.waits.update(scheduled)
    _derive_preemptions(facts, now, before, plan, shared)
    if now.preemptions_unreadable:
        facts.preemptions_unreadable = True
        facts.warnings.append(PREEMPTIONS_UNREADABLE.format(reason=plan.preemption_reason))
    return facts


# The words of a window whose preemptions cannot be seen (sources.reasons_at_zero_query).
PREEMPTIONS_UNREADABLE = (
    "preemptions: kube-state-metrics writes no kube_pod_status_reason series for reason"
    ' "{reason}" while it writes the other reasons at 0, as its releases before v2.19.0 do:'
    " no preemption in this window can be seen, nor any starvation credit (pricing rule 5)"
    " paid for one; upgrade kube-state-metrics (or correct the source's preemption_reason)"
)


def _derive_preemptions(
    facts: IntervalFacts, now: Observed, before: Observed, plan: sources.QueryPlan, shared: set[str]
) -> None:
    """Pods whose reason turned 1 in this interval, with the GPUs they held as metered.

    A pod's GPU request is no GPU count (kube-state-metrics reports MIG requests as
    `nvidia_com_mig_*` resources, and 1 per time-sliced replica), so the GPUs lost are what
    the devices series show the pod holding: in the interval before (it ran throughout),
    else in this one up to its eviction, else (no device series at all) its request.
    """
    pods = now.preempted - before.preempted
    held_before = _held_gpus(before, pods, plan, shared)
    held_now = _held_gpus(now, pods, plan, shared)
    for pod in sorted(pods):
        at, identity = now.preempted_at.get(pod), now.identity.get(pod)
        if at is None or identity is None:
            facts.warnings.append(f"preemptions: pod {pod[0]}/{pod[1]} has no preempted tick")
            continue
        gpus, model = held_before.get(pod) or held_now.get(pod) or (None, "")
        if gpus is None:
            facts.warnings.append(
                f"preemptions: pod {pod[0]}/{pod[1]} has no metered GPUs; its request counts"
            )
            gpus = identity.gpus
        facts.preemptions[pod] = {
            "at": at,
            "gpus": gpus,
            "scheduled": identity.scheduled,
            "model": model,
        }


def _held_gpus(
    observed: Observed, pods: set[PodKey], plan: sources.QueryPlan, shared: set[str]
) -> dict[PodKey, tuple[Fraction, str]]:
    """GPUs each of `pods` held while it was there: its allocated GPU-seconds over the
    seconds it was seen (a MIG slice its slices over its GPU's, a time-sliced replica its
    share), and
    the GPU model that held most of them (ties: the first name), which prices its
    compensation (docs/pricing.md "GPU classes", rule 5)."""
    seconds: dict[PodKey, Fraction] = defaultdict(Fraction)
    by_model: dict[PodKey, dict[str, Fraction]] = defaultdict(lambda: defaultdict(Fraction))
    ticks: dict[PodKey, int] = defaultdict(int)
    if not pods:  # most intervals: nobody preempted, no need to look at every series
        return {}
    for (uuid, _, profile, namespace, pod), series in observed.series.items():
        key = (namespace, pod)
        if key not in pods or series.bad or not series.ticks:
            continue
        held = series.shared_alloc if uuid in shared else Fraction(series.ticks)
        gpu = observed.gpus.get(uuid)
        model = series.model or (gpu.model if gpu else "")
        try:
            share = mig_share(profile, model)
        except ValueError:
            continue  # _derive_gpus warns about the profile
        if held is not None:
            seconds[key] += held * share
            by_model[key][model] += held * share
            ticks[key] = max(ticks[key], series.ticks)
    return {
        key: (seconds[key] / ticks[key], _largest(by_model[key])) for key in seconds if ticks[key]
    }


def _largest(amounts: dict[str, Fraction]) -> str:
    """The key with the largest amount, the first by name among equals ("" when none)."""
    return min(amounts, key=lambda name: (-amounts[name], name), default="")


# Exact Decimal sums: a precision no sum of samples reaches, and a trap should one ever round.
EXACT = decimal.Context(
    prec=decimal.MAX_PREC,
    Emax=decimal.MAX_EMAX,
    Emin=decimal.MIN_EMIN,
    traps=[decimal.Inexact, decimal.InvalidOperation],
)


@dataclass
class _PodSums:
    """One pod's (or pod and model's) GPU time in an interval, in SHARE_PARTS of a GPU-second
    (a MIG slice is a whole number of them, `mig_parts`): integers and exact Decimals as the
    samples come, rationals only where a time-sliced GPU splits a tick 1/k. Turned into
    rationals once, by `_from_parts`."""

    alloc: int | Fraction = 0
    busy: Decimal | None = None
    split_busy: Fraction | None = None


def _from_parts(
    rationals: dict[int | Decimal | Fraction, Fraction],
    whole: int | Decimal | Fraction,
    split: Fraction | None = None,
) -> Fraction:
    """`whole` SHARE_PARTS of a GPU-second (and `split`, SHARE_PARTS too) as a rational; each
    distinct `whole` made once per interval in `rationals`: an interval's sums repeat a few
    values (every pod that held its GPU all interval has the same allocation), and a Fraction
    is dear to build (its gcd). Equal keys (2 and Decimal("2.0")) are equal rationals."""
    value = rationals.get(whole)
    if value is None:
        if isinstance(whole, Decimal):
            numerator, denominator = whole.as_integer_ratio()
            value = Fraction(numerator, denominator * SHARE_PARTS)
        else:
            value = Fraction(whole, SHARE_PARTS)
        rationals[whole] = value
    return value if split is None else value + split / SHARE_PARTS


def _derive_gpus(
    facts: IntervalFacts, now: Observed, plan: sources.QueryPlan, shared: set[str]
) -> None:
    """Allocation, busy time and memory per pod; capacity and completeness per interval."""
    seconds = plan.scrape_seconds
    averages: dict[PodKey, list[Decimal]] = defaultdict(list)
    model_averages: dict[ModelKey, list[Decimal]] = defaultdict(list)
    sums: dict[PodKey, _PodSums] = {}
    model_sums: dict[ModelKey, _PodSums] = {}
    with decimal.localcontext(EXACT):
        for (uuid, _, profile, namespace, pod), series in now.series.items():
            if not pod or series.bad:
                continue
            if not namespace:
                facts.warnings.append(
                    f'devices: series {{UUID="{uuid}",pod="{pod}"}} has no namespace label'
                )
                continue
            # A pod series without the label (a partial scrape) takes its GPU's model.
            gpu = now.gpus.get(uuid)
            model = series.model or (gpu.model if gpu else "")
            try:
                share = mig_parts(profile, model) * seconds
            except ValueError:
                facts.warnings.append(
                    f"devices: {uuid} has an unknown MIG profile {profile}"
                    + (f" for its model {model}" if model else "")
                )
                continue
            if uuid in shared:
                ticks, busy = series.shared_alloc, series.shared_busy
                if ticks is None:
                    facts.warnings.append(
                        f"devices: {uuid} of {namespace}/{pod} has unusable samples"
                    )
                    continue
            else:
                ticks, busy = series.ticks, series.busy
            key = (namespace, pod)
            model_key = (namespace, pod, model)
            allocated = ticks * share
            busy_parts = None if busy is None else busy * share
            # The pod's sums and the pod and model's alike, spelled out: this runs for every
            # series of every interval.
            pod_sums = sums.get(key)
            if pod_sums is None:
                pod_sums = sums[key] = _PodSums()
            pod_model_sums = model_sums.get(model_key)
            if pod_model_sums is None:
                pod_model_sums = model_sums[model_key] = _PodSums()
            pod_sums.alloc += allocated
            pod_model_sums.alloc += allocated
            if isinstance(busy_parts, Decimal):
                for summed in (pod_sums, pod_model_sums):
                    summed.busy = busy_parts if summed.busy is None else summed.busy + busy_parts
            elif busy_parts is not None:
                for summed in (pod_sums, pod_model_sums):
                    summed.split_busy = (summed.split_busy or 0) + busy_parts
            if series.memory_peak is not None:
                peak = round(series.memory_peak * sources.MIB)
                facts.memory_peak[key] = max(facts.memory_peak.get(key, 0), peak)
                facts.memory_peak_by_model[model_key] = max(
                    facts.memory_peak_by_model.get(model_key, 0), peak
                )
            if series.memory_avg is not None:
                averages[key].append(series.memory_avg)
                model_averages[model_key].append(series.memory_avg)
    rationals: dict[int | Decimal | Fraction, Fraction] = {}
    for found, alloc, busy in (
        (sums, facts.alloc, facts.busy),
        (model_sums, facts.alloc_by_model, facts.busy_by_model),
    ):
        for key, summed in found.items():
            alloc[key] = _from_parts(rationals, summed.alloc)
            if summed.busy is not None or summed.split_busy is not None:
                busy[key] = _from_parts(rationals, summed.busy or 0, summed.split_busy)
    # Per GPU: the mean over the pod's devices (a sum would count a time-sliced GPU's memory
    # once per pod).
    for key, values in averages.items():
        facts.memory_avg[key] = round(sum(values) * sources.MIB / len(values))
    for model_key, values in model_averages.items():
        facts.memory_avg_by_model[model_key] = round(sum(values) * sources.MIB / len(values))
    capacity: dict[str, int] = defaultdict(int)
    capacity_by_model: dict[tuple[str, str], int] = defaultdict(int)
    for uuid, gpu in now.gpus.items():
        capacity[gpu.fault_domain] += gpu.ticks * seconds
        capacity_by_model[(gpu.fault_domain, gpu.model)] += gpu.ticks * seconds
        if gpu.ticks:
            facts.gpus_present[uuid] = gpu.node
    facts.capacity.update((domain, Fraction(value)) for domain, value in capacity.items())
    facts.capacity_by_model.update(
        (key, Fraction(value)) for key, value in capacity_by_model.items()
    )


def _derive_completeness(
    facts: IntervalFacts,
    now: Observed,
    before: Observed,
    plan: sources.QueryPlan,
    known: dict[Target, dict[str, GpuInfo]],
    vanished: dict[str, GpuInfo] | None = None,
) -> None:
    """Samples expected and seen, per GPU and per exporter: a GPU seen in this interval or the
    one before is expected at every tick, and so is every GPU of an exporter that failed
    scrapes (known from the batch or a look-back), so one silent node lowers completeness by
    its share of the pool. Where Prometheus recorded its scrapes (`up`), a tick at which a
    GPU's exporter answered without it is no sample missing: the GPU was absent (capacity
    says so); the ticks its exporter failed, or at which Prometheus scraped nothing at all, are.
    So are all ticks of the GPUs in `vanished` (`_vanished_gpus`: their node still listed,
    their exporter without a trace). Warnings name each node with GPUs missing, the GPUs and
    for how long."""
    ticks = plan.step_seconds // plan.scrape_seconds
    vanished = vanished or {}
    expected = {**before.gpus, **now.gpus}
    for target, (attempted, answered) in now.targets.items():
        if answered < attempted:
            silent = known.get(target) or {
                uuid: gpu for uuid, gpu in now.silent_gpus.items() if gpu.target == target
            }
            for uuid, gpu in silent.items():
                expected.setdefault(uuid, gpu)
    for uuid, gpu in vanished.items():
        expected.setdefault(uuid, gpu)
    scraped = max((attempted for attempted, _ in now.targets.values()), default=0)
    missing_by_node: dict[tuple[str, Target], list[tuple[str, int]]] = defaultdict(list)
    seen_by_node: dict[str, int] = defaultdict(int)
    for uuid, gpu in sorted(expected.items()):
        seen = min(ticks, now.gpus[uuid].ticks if uuid in now.gpus else 0)
        if uuid in vanished:
            missing = ticks
        elif now.targets:
            attempted, answered = now.targets.get(gpu.target, (0, 0))
            missing = max(0, attempted - answered) + max(0, ticks - scraped)
        else:  # no record of scrapes: every tick without the GPU is missing
            missing = ticks - seen
        missing = min(missing, ticks - seen)
        facts.samples_seen += seen
        facts.samples_expected += seen + missing
        seen_by_node[gpu.node] += seen
        if missing:
            missing_by_node[(gpu.node or gpu.target[1], gpu.target)].append((uuid, missing))
    silent_nodes = {node for node, _ in missing_by_node}
    _unattributed_missing(facts, now, before, plan, seen_by_node, silent_nodes)
    if facts.samples_expected:
        facts.completeness = Fraction(facts.samples_seen, facts.samples_expected)
    for (node, (job, instance)), gpus in sorted(missing_by_node.items()):
        listed = ", ".join(f"{uuid} {count * plan.scrape_seconds} s" for uuid, count in gpus)
        message = (
            f"completeness: node {node} ({job} {instance}) missing {len(gpus)} GPU(s): {listed}"
        )
        if (job, instance) in now.targets:
            attempted, answered = now.targets[(job, instance)]
            message += f"; its exporter answered {answered} of {attempted} scrapes"
            if attempted < ticks:  # Prometheus down a while, or scraping less often
                message += (
                    f", {ticks} expected at the source's scrape interval of {plan.scrape_seconds} s"
                )
        elif any(uuid in vanished for uuid, _ in gpus):
            message += (
                "; no sample of its exporter, `up` included, while kube-state-metrics lists"
                " the node (the exporter's target gone from Prometheus, or its samples late)"
            )
        facts.warnings.append(message)


def _names_taken_over(
    facts: IntervalFacts, now: Observed, before: Observed, scheduled: dict[PodKey, int]
) -> None:
    """Warns of a pod name that two pods held in one interval under different tasks, teams or
    priority classes: the pod the interval before ended with, and another created under its
    name, scheduled in this interval (`scheduled`, from `_scheduled_since`: a pod's own
    scheduled time never changes). dcgm-exporter names the pod, not its uid, and the
    interval's pod is read at its end, so all its GPU time goes to the second
    (docs/telemetry.md "Known gaps"); where both count alike (a StatefulSet's `name-0`
    recreated), it is billed right either way."""
    for pod in sorted(scheduled.keys() & facts.alloc.keys()):
        earlier = before.identity.get(pod)
        if earlier is None or earlier.scheduled is None:
            continue  # a new name, or its pod Pending before: no other pod held it
        namespace, name = pod
        was, is_now = _counted_as(earlier, name), _counted_as(now.identity[pod], name)
        if was == is_now:
            continue
        allocated = facts.alloc[pod]
        seconds = allocated if allocated.denominator == 1 else round(allocated, 1)
        facts.warnings.append(
            f"attribution: pod {namespace}/{name} was created anew within the interval"
            f" (scheduled {datetime.fromtimestamp(scheduled[pod], UTC):%H:%M:%S} UTC):"
            f" {was} before, {is_now} after; all {seconds} of its GPU-seconds are counted as"
            " the latter's (dcgm-exporter names the pod, not its uid)"
        )


def _counted_as(identity: PodIdentity, name: str) -> str:
    """What a pod counts as: its task, its team label and its priority class, where set."""
    team = f", team {identity.team_label}" if identity.team_label else ""
    kind = f", {identity.priority_class}" if identity.priority_class else ""
    return f"task {identity.task_name(name)}{team}{kind}"


def _pods_in_turn(facts: IntervalFacts, now: Observed, before: Observed) -> None:
    """Warns of whole GPUs whose series named several pods in turn, two of them running
    through the whole interval (kube-state-metrics: Running at its start and its end, not
    preempted): a GPU time-sliced between them, which dcgm-exporter without
    --kubernetes-virtual-gpus writes as one series naming the pod the kubelet listed last
    (`toDeviceToPod`), which may change from scrape to scrape. Their shares of it are as the
    scrapes fell, not measured; the GPU's total is right, so nothing counts missing. A pod
    that hands a whole GPU over to another has ended (or started) within the interval, and
    with the flag the pods' series overlap (more ticks than the GPU was present for, scrapes
    missed or not), so neither is taken for this."""
    # The GPUs that two pod series name, in one pass over the keys: nearly always none.
    named, twice = set(), set()
    for uuid, instance, _, _, pod in now.series:
        if pod and not instance:  # a MIG instance is never time-sliced by the device plugin
            (twice if uuid in named else named).add(uuid)
    if not twice:
        return
    holders: dict[str, set[PodKey]] = defaultdict(set)
    held_ticks: dict[str, int] = defaultdict(int)
    nodes: dict[str, str] = {}
    for (uuid, instance, _, namespace, pod), series in now.series.items():
        if uuid not in twice or instance or not pod or not series.ticks:
            continue
        holders[uuid].add((namespace, pod))
        held_ticks[uuid] += series.ticks
        nodes[uuid] = series.node
    in_turn = {
        uuid: through
        for uuid, pods in sorted(holders.items())
        if len(pods) > 1
        and uuid in now.gpus
        and held_ticks[uuid] <= now.gpus[uuid].ticks
        and len(through := sorted(pod for pod in pods if _ran_through(pod, now, before))) > 1
    }
    if in_turn:
        uuid, pods = next(iter(in_turn.items()))
        named = ", ".join(f"{namespace}/{pod}" for namespace, pod in pods)
        facts.warnings.append(
            f"attribution: {len(in_turn)} GPU(s) named pods in turn that all ran the whole"
            f" interval, e.g. {uuid} on node {nodes[uuid] or '(unknown)'}: {named}; a GPU"
            " time-sliced, which dcgm-exporter writes under one of its pods at each scrape:"
            " their shares are as the scrapes fell, not measured. Run dcgm-exporter with"
            " --kubernetes-virtual-gpus"
        )


def _own_figures_unread(facts: IntervalFacts, now: Observed) -> None:
    """Warns of devices held by pods whose own framebuffer reads 0 all interval while the
    device's bare series, kept beside them, reads more.

    dcgm-exporter with --kubernetes-virtual-gpus (4.5.3-4.8.2 on) writes a held device's
    memory and utilisation as each pod's own processes' (NVML's per-process figures, a process
    told to its pod by /proc/<pid>/cgroup), an idle pod 0, beside the device's. In its own PID
    namespace (its Helm chart's `hostPID: false`) it finds no process's pod, and every pod
    reads 0: their memory, and their busy time where it falls back to utilisation. Copies of
    the device's values (the default mode) read as the device does."""
    # A bare series has a peak only where it was not 0 (`sources.Part.busy_bare`): nearly
    # always none, and then the pods' series need no pass.
    device_peak: dict[Device, Decimal] = {}
    nodes: dict[str, str] = {}
    for (uuid, instance, _, _, pod), series in now.series.items():
        if not pod and series.memory_peak:
            device_peak[(uuid, instance)] = series.memory_peak
            nodes[uuid] = series.node
    if not device_peak:
        return
    pod_peaks: dict[Device, list[tuple[Decimal, PodKey]]] = defaultdict(list)
    for (uuid, instance, _, namespace, pod), series in now.series.items():
        if pod and series.memory_peak is not None and (uuid, instance) in device_peak:
            pod_peaks[(uuid, instance)].append((series.memory_peak, (namespace, pod)))
    unread = {
        device: sorted(pod for _, pod in pod_peaks[device])
        for device, peak in sorted(device_peak.items())
        if peak and pod_peaks.get(device) and not any(own for own, _ in pod_peaks[device])
    }
    if not unread:
        return
    (uuid, instance), pods = next(iter(unread.items()))
    named = ", ".join(f"{namespace}/{pod}" for namespace, pod in pods)
    facts.warnings.append(
        f"memory: {len(unread)} GPU(s) held by pods whose own framebuffer reads 0 while the"
        f" GPU's reads up to {device_peak[(uuid, instance)]:,} MiB, e.g. {uuid} on node"
        f" {nodes[uuid] or '(unknown)'} ({named}): dcgm-exporter with"
        " --kubernetes-virtual-gpus sees its pods' processes only in the host's PID namespace"
        " (hostPID: true; its Helm chart's default is false), so their memory, and their busy"
        " time where it falls back to GPU_UTIL, read 0 (or the memory is a process no pod"
        " requested)"
    )


def _ran_through(pod: PodKey, now: Observed, before: Observed) -> bool:
    identity, earlier = now.identity.get(pod), before.identity.get(pod)
    return (
        identity is not None
        and identity.running
        and earlier is not None
        and earlier.running
        and pod not in now.preempted
    )


def _unattributed_missing(
    facts: IntervalFacts,
    now: Observed,
    before: Observed,
    plan: sources.QueryPlan,
    seen_by_node: dict[str, int],
    silent_nodes: set[str],
) -> None:
    """Pods that ran through the whole interval holding GPUs (kube-state-metrics: Running at
    its start and its end, GPUs requested) and that no GPU series names went unmetered.

    On a node whose GPU exporter reported GPUs, their GPUs were scraped without them
    (dcgm-exporter's pod mapping off, or broken on that node: they look free): their ticks
    count as missing samples, not seen ones (up to what the node showed), so the window is
    incomplete and the month's close refuses it until the mapping is mended and the window
    ingested again, or the loss accepted. A MIG instance or a time-sliced replica counts as
    kube-state-metrics counts it, the node's sum rounded up. On a node no GPU exporter
    reports (none deployed there: a new node pool the DaemonSet does not tolerate; or a
    `Hostname` that is not the node's name) the pods' GPUs were not scraped at all: their
    ticks are expected and missing, so the window is incomplete the same way; unless an
    exporter that missed scrapes in the interval goes by a name that is no pod's node (its
    GPUs, counted missing already, may be these: the window only says so). Pods on a node
    whose exporter missed scrapes are left to that count, and pods on the source's
    `unmetered_nodes` (another source's pool) to that source."""
    ticks = plan.step_seconds // plan.scrape_seconds
    named = {key[3:] for key in now.series if key[4]}
    outside = re.compile(plan.unmetered_nodes) if plan.unmetered_nodes else None
    unmetered: dict[str, list[tuple[PodKey, Fraction]]] = defaultdict(list)
    for pod, identity in now.identity.items():
        if not identity.running or not identity.gpus_requested or pod in named:
            continue
        if outside is not None and outside.fullmatch(identity.node):
            continue  # another source's node
        earlier = before.identity.get(pod)
        if earlier is None or not earlier.running or pod in now.preempted:
            continue
        if identity.node not in silent_nodes:
            unmetered[identity.node].append((pod, identity.gpus_requested))
    if not unmetered:  # every interval of a healthy pool: nothing below to work out
        return
    # An exporter that missed scrapes under a name kube-state-metrics gives no pod's node (a
    # `Hostname` that is not the node's name): its GPUs, counted missing already, may be
    # those of a node that looks unreported.
    unnamed_silent = sorted(
        silent_nodes - {identity.node for identity in now.identity.values()} - now.gpu_nodes
    )
    held_on: dict[str, str] = {}  # a GPU of each node that some series names a pod on
    for key, series in sorted(now.series.items()):
        if key[4] and series.ticks:
            held_on.setdefault(series.node, key[0])
    for node, pods in sorted(unmetered.items()):
        (namespace, name), gpus = min(pods)
        found = (
            f"attribution: node {node or '(unknown)'}: {len(pods)} pod(s) ran the whole"
            f" interval with GPUs that no GPU series names, e.g. {namespace}/{name}"
            f" requesting {gpus} GPU(s)"
        )
        requested = math.ceil(sum(gpus for _, gpus in pods)) * ticks
        seen = seen_by_node.get(node, 0)
        if seen:  # scraped, but as free GPUs
            missing = min(seen, requested)
            facts.samples_seen -= missing
            held = held_on.get(node)
            cause = (
                "dcgm-exporter's pod mapping off or broken there?"
                if held is None
                # The mapping works on the node: without --kubernetes-virtual-gpus, a
                # time-sliced GPU is written under one of its pods, the others unnamed.
                else f"dcgm-exporter names pods on its GPUs, e.g. {held}: a GPU time-sliced,"
                " which it writes under one of its pods? Run it with"
                " --kubernetes-virtual-gpus; else its pod mapping is broken for some GPUs"
            )
        elif unnamed_silent:
            facts.warnings.append(
                f"{found} (no GPU exporter reports the node by that name); not counted:"
                f" {unnamed_silent[0]}'s exporter missed scrapes, counted missing already"
            )
            continue
        else:  # not scraped at all
            missing = requested
            facts.samples_expected += missing
            cause = "no GPU exporter reports the node"
        facts.warnings.append(
            f"{found} ({cause}); {missing * plan.scrape_seconds} GPU-seconds counted missing"
        )


def _derive_io(
    facts: IntervalFacts, now: Observed, io_earlier: dict[PodKey, dict[str, Decimal]]
) -> None:
    """Each pod's counters' increments since their last readings (see `derive`)."""
    for pod, counters in now.io_last.items():
        earlier = io_earlier.get(pod, {})
        for meter, last in counters.items():
            increment = last - earlier.get(meter, 0)
            if increment < 0:  # the counter restarted: what it counted since
                facts.warnings.append(f"io: {meter} of {pod[0]}/{pod[1]} went down")
                increment = last
            facts.io[pod][meter] = round(increment)


def _histogram_restarted(now: dict[str, Decimal], earlier: dict[str, Decimal]) -> bool:
    """Whether a replica's histogram started again from zero since its `earlier` reading.

    A restart resets every bucket at once, so it is judged on the whole histogram, never bound
    by bound: in the interval of a restart the fast buckets may have caught up with their old
    counts while the slow ones have not, and counted apart (the rising bounds as increments,
    the others from zero) they made requests that never were, a P99 of seconds for one under
    a second (tests/metering/test_latency_restarts.py). A process writes one set of bounds all
    its life, so a bound its last reading lacked is a new process too: vLLM upgraded in place
    (a StatefulSet's pod keeps its name) to a release with more buckets, whose shared bounds
    may all have risen. A bound gone is not: the interval of a rollback to fewer buckets still
    reads the old process' last values of the others, which are gone from the next one.
    What it cannot see is a restart after which every bucket passed its old count with no new
    bound: the interval's increments then lack what the old process had counted."""
    if not earlier:
        return False  # a first reading counts from zero anyway
    return any(bound not in earlier or value < earlier[bound] for bound, value in now.items())


def _derive_latency(
    facts: IntervalFacts,
    now: Observed,
    latency_earlier: dict[tuple[str, str, str], dict[str, Decimal]],
) -> None:
    """Bucket increments per service since each replica's last readings (see `derive`),
    summed over its replicas, on the bounds every replica reports (bucket sets differ
    between vLLM versions)."""
    services: dict[tuple[str, str], list[tuple[dict[str, Decimal], dict[str, Decimal]]]] = (
        defaultdict(list)
    )
    for replica, buckets in now.latency_last.items():
        services[replica[:2]].append((buckets, latency_earlier.get(replica, {})))
    for service, replicas in sorted(services.items()):
        common = set.intersection(*(set(buckets) for buckets, _ in replicas))
        if any(len(buckets) != len(common) for buckets, _ in replicas):
            facts.warnings.append(f"latency: {service[0]}/{service[1]} replicas disagree on bounds")
        if "+Inf" not in common:
            continue
        increments: dict[str, Decimal | int] = dict.fromkeys(common, 0)
        for buckets, earlier in replicas:
            restarted = _histogram_restarted(buckets, earlier)
            for bound in common:
                increments[bound] += buckets[bound] - (0 if restarted else earlier.get(bound, 0))
        if increments["+Inf"]:
            facts.latency[service] = [
                (bound, round(increments[bound])) for bound in sorted(common, key=_le_order)
            ]
