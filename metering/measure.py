"""Prometheus answers -> the facts of each interval of a batch (pure Python, no database).

`measure` runs the meters of `sources.METERS` as range queries over a batch of consecutive
intervals plus the interval before it (the baseline for counters and for "first seen"), then
the narrowed per-tick queries the answers call for, and derives per interval: each pod's
allocated and busy GPU-seconds, memory, I/O increments, capacity, completeness, latency bucket
increments, waits and preemptions. Anything unusable (a NaN, a negative value, a missing
label) is skipped and described in that interval's warnings.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from fractions import Fraction
from functools import cache
from itertools import pairwise
from typing import Any

from metering import sources

PodKey = tuple[str, str]  # (namespace, pod)
# (UUID, GPU_I_ID, GPU_I_PROFILE, namespace, pod); namespace and pod are "" for the bare
# (unattributed) series of a device.
SeriesKey = tuple[str, str, str, str, str]
NO_OWNER = "<none>"  # what kube-state-metrics writes for a pod without owner
# Float sums of small-denominator shares (1/3 of a tick) are recovered exactly from their
# rounding; real-valued data is off by less than 1e-12 after this.
MAX_DENOMINATOR = 1_000_000
# Narrowed queries name their series in a regex; keep each request a sensible size.
NARROWED_BATCH = 100


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
    from_history: bool = False  # read over the interval: the pod was gone by its end


@dataclass
class SeriesTicks:
    """One dcgm-exporter series in one interval."""

    ticks: int = 0
    fault_domain: str = ""
    memory_peak: Decimal | None = None  # MiB, as exporters write it
    memory_avg: Decimal | None = None
    busy: Decimal | Fraction | None = None
    shared_alloc: Fraction | None = None  # time-sliced devices: ticks split 1/k per tick
    shared_busy: Fraction | None = None
    bad: bool = False


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
    warnings: list[str] = field(default_factory=list)


@dataclass
class IntervalFacts:
    alloc: dict[PodKey, Fraction] = field(default_factory=lambda: defaultdict(Fraction))
    busy: dict[PodKey, Fraction] = field(default_factory=lambda: defaultdict(Fraction))
    memory_peak: dict[PodKey, int] = field(default_factory=dict)
    memory_avg: dict[PodKey, int] = field(default_factory=dict)
    io: dict[PodKey, dict[str, int]] = field(default_factory=lambda: defaultdict(dict))
    capacity: dict[str, Fraction] = field(default_factory=lambda: defaultdict(Fraction))
    samples_seen: int = 0
    samples_expected: int = 0
    completeness: Fraction = Fraction(0)
    identity: dict[PodKey, PodIdentity] = field(default_factory=dict)
    waits: dict[PodKey, int] = field(default_factory=dict)  # scheduled, Unix seconds
    preemptions: dict[PodKey, dict[str, Any]] = field(default_factory=dict)
    # (namespace, service label value) -> [(le, cumulative increment), ...] in `le` order
    latency: dict[tuple[str, str], list[tuple[str, int]]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


@dataclass
class Measured:
    intervals: dict[int, IntervalFacts]  # by interval start (Unix seconds), the batch only
    queries: list[dict[str, Any]]
    evaluation_seconds: float
    plan: sources.QueryPlan


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
    several cores while Python reads the answers that came back).
    """
    step = plan.step_seconds
    observed = {start: Observed() for start in range(first - step, last + 1, step)}
    runner = _Runner(client, plan, first - step, last)
    with ThreadPoolExecutor(max_workers=max(1, parallel)) as pool:
        pending = {
            pool.submit(runner.run, name, build(plan)): name
            for name, build in sources.METERS.items()
        }
        for done in as_completed(pending):
            PARSERS[pending[done]](done.result(), observed, plan)
    for pods in _batches(_without_identity(observed) | _disappeared(observed)):
        result = runner.run("pod_history", sources.pod_history_query(plan, pods))
        _parse_pod_history(result, observed, plan)
    shared = _time_sliced_devices(observed, plan)
    for uuids in _batches(shared):
        result = runner.run("shared", sources.shared_devices_query(plan, uuids))
        _parse_shared(result, observed, plan)
    preempted = _newly_preempted(observed)
    for pods in _batches(preempted):
        result = runner.run("preemption_ticks", sources.preemption_ticks_query(plan, pods))
        _parse_preemption_ticks(result, observed, plan)
    for pods in _batches(preempted | _newly_scheduled(observed)):
        result = runner.run("pod_details", sources.pod_details_query(plan, pods))
        _parse_pod_details(result, observed, plan)
    intervals = {
        start: _derive(observed[start], observed[start - step], plan, shared)
        for start in range(first, last + 1, step)
    }
    return Measured(intervals, runner.queries, runner.evaluation_seconds, plan)


class _Runner:
    """Runs range queries over the batch (evaluated at each interval's end) and keeps their
    text and timings for the windows' records."""

    def __init__(
        self, client: sources.PrometheusClient, plan: sources.QueryPlan, first: int, last: int
    ) -> None:
        self.client, self.plan = client, plan
        self.start = datetime.fromtimestamp(first + plan.step_seconds, UTC)
        self.end = datetime.fromtimestamp(last + plan.step_seconds, UTC)
        self.queries: list[dict[str, Any]] = []
        self.evaluation_seconds = 0.0
        self.lock = threading.Lock()

    def run(self, name: str, promql: str) -> sources.QueryRun:
        result = self.client.query_range(
            name, promql, start=self.start, end=self.end, step_seconds=self.plan.step_seconds
        )
        with self.lock:  # queries finish on several threads
            self._record(name, promql, result)
        return result

    def _record(self, name: str, promql: str, result: sources.QueryRun) -> None:
        self.evaluation_seconds += result.evaluation_seconds
        self.queries.append(
            {
                "meter": name,
                "promql": promql,
                "seconds": round(result.seconds, 6),
                "evaluation_seconds": round(result.evaluation_seconds, 6),
            }
        )


def _batches(values: set[str]) -> Iterator[list[str]]:
    ordered = sorted(values)
    for index in range(0, len(ordered), NARROWED_BATCH):
        yield ordered[index : index + NARROWED_BATCH]


# --- Reading answers ---------------------------------------------------------------------


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


def _points(
    result: sources.QueryRun,
    observed: dict[int, Observed],
    plan: sources.QueryPlan,
    *,
    needs_pod: bool = True,
    required: tuple[str, ...] = (),
) -> Iterator[tuple[Observed, dict[str, str], Decimal, str]]:
    """(interval, labels, value, its text) for every usable point; the rest are warnings."""
    step = plan.step_seconds
    for series in result.series:
        labels = series.labels
        namespace, pod = pod_of(labels)
        missing = [name for name in required if not labels.get(name)]
        if needs_pod and not (namespace and pod):
            missing = ["namespace" if pod else "pod", *missing]
        for evaluated_at, text in series.values:
            interval = observed.get(int(evaluated_at) - step)
            if interval is None:
                continue
            if missing:
                interval.warnings.append(
                    f"{result.name}: series {describe(labels)} has no {', '.join(missing)} label"
                )
                continue
            value = sources.finite_non_negative(text)
            if value is None:
                interval.warnings.append(
                    f"{result.name}: series {describe(labels)} has value {text}"
                )
                continue
            yield interval, labels, value, text


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
    for series in result.series:
        labels = series.labels
        meter = labels.get("meter")
        if not labels.get("UUID"):
            continue  # not a GPU (dcgm-exporter's label-less dummies)
        key = _series_key(labels)
        domain = labels.get(plan.fault_domain_label, "")
        for evaluated_at, text in series.values:
            interval = observed.get(int(evaluated_at) - step)
            if interval is None:
                continue
            ticks = _series(interval, key)
            if meter == "ticks":
                ticks.ticks += int(text)
                ticks.fault_domain = domain
                continue
            value = sources.finite_non_negative(text)
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
    for interval, labels, _, text in _points(result, observed, plan, required=("UUID",)):
        # A sum of ratios Prometheus wrote as a float: its decimal text is what it measured
        # (sums of 2-decimal ratios cannot sit on a rounding boundary at 6 places).
        _series(interval, _series_key(labels)).busy = Decimal(text)


def _parse_shared(
    result: sources.QueryRun, observed: dict[int, Observed], plan: sources.QueryPlan
) -> None:
    for interval, labels, _, text in _points(result, observed, plan, required=("UUID",)):
        series = _series(interval, _series_key(labels))
        if labels["meter"] == "alloc":
            series.shared_alloc = exact(text)
        else:
            series.shared_busy = exact(text)


def _parse_io(
    result: sources.QueryRun, observed: dict[int, Observed], plan: sources.QueryPlan
) -> None:
    for interval, labels, value, _ in _points(result, observed, plan, required=("meter",)):
        interval.io_last[pod_of(labels)][labels["meter"]] = value


def _parse_latency(
    result: sources.QueryRun, observed: dict[int, Observed], plan: sources.QueryPlan
) -> None:
    required = (plan.service_label, "le")
    for interval, labels, value, _ in _points(result, observed, plan, required=required):
        try:
            bound = canonical_le(labels["le"])
        except ValueError:
            interval.warnings.append(f"latency: series {describe(labels)} has a bad le")
            continue
        namespace, pod = pod_of(labels)
        replica = (namespace, labels[plan.service_label], pod)
        interval.latency_last[replica][bound] = value


def canonical_le(text: str) -> str:
    """'1.0', '1' and '1e0' are the same bucket bound: spell it one way ('1', '2.5', '+Inf')."""
    if text in ("+Inf", "Inf", "inf", "+inf"):
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
    for interval, labels, value, _ in _points(result, observed, plan, required=("meter",)):
        pod = pod_of(labels)
        if labels["meter"] == "preempted":
            # Read over the interval, unlike the rest: the pod may be gone by its end.
            if value == 1:
                interval.preempted.add(pod)
            continue
        identity = interval.identity.get(pod)
        if identity is None:
            identity = interval.identity[pod] = PodIdentity(from_kube=True)
        _identity_set(identity, labels["meter"], labels, value, plan)


def _parse_pod_history(
    result: sources.QueryRun, observed: dict[int, Observed], plan: sources.QueryPlan
) -> None:
    """Fill in what the interval-end view lacks; never overwrite it."""
    for interval, labels, value, _ in _points(result, observed, plan, required=("meter",)):
        pod = pod_of(labels)
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
        identity.task_label = labels.get(plan.task_label, "")
        identity.team_label = labels.get(plan.team_label, "")
    elif meter == "owner":
        owner = labels.get("owner_name", "")
        identity.owner_name = "" if owner == NO_OWNER else owner
    elif meter == "info":
        identity.priority_class = labels.get("priority_class", "")
        identity.node = labels.get("node", "")
    elif meter == "scheduled":
        identity.scheduled = round(value)


def _parse_pod_details(
    result: sources.QueryRun, observed: dict[int, Observed], plan: sources.QueryPlan
) -> None:
    for interval, labels, value, text in _points(result, observed, plan, required=("meter",)):
        identity = interval.identity.get(pod_of(labels))
        if identity is None:
            continue  # not alive in kube-state-metrics' view of this interval
        if labels["meter"].startswith("created"):
            identity.created = round(value)
        else:
            identity.gpus = exact(text)


def _parse_preemption_ticks(
    result: sources.QueryRun, observed: dict[int, Observed], plan: sources.QueryPlan
) -> None:
    for interval, labels, value, _ in _points(result, observed, plan):
        interval.preempted_at[pod_of(labels)] = round(value)


PARSERS: dict[str, Callable[[sources.QueryRun, dict[int, Observed], sources.QueryPlan], None]] = {
    "devices": _parse_devices,
    "busy": _parse_busy,
    "io": _parse_io,
    "latency": _parse_latency,
    "identity": _parse_identity,
}


# --- What needs a narrowed per-tick query -----------------------------------------------


def _time_sliced_devices(observed: dict[int, Observed], plan: sources.QueryPlan) -> set[str]:
    """GPUs whose series overlap in time: more series-ticks than ticks in some interval.

    A whole GPU or MIG instance shows one series per tick (handing over from one pod to the
    next, or to its bare series, never overlaps); a time-sliced GPU shows its bare series and
    its pods' ones side by side.
    """
    ticks_per_interval = plan.step_seconds // plan.scrape_seconds
    shared = set()
    for interval in observed.values():
        per_device: dict[tuple[str, str], int] = defaultdict(int)
        for (uuid, instance, *_), series in interval.series.items():
            per_device[(uuid, instance)] += series.ticks
        shared |= {uuid for (uuid, _), ticks in per_device.items() if ticks > ticks_per_interval}
    return shared


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


def _newly_scheduled(observed: dict[int, Observed]) -> set[str]:
    starts = sorted(observed)
    pods = set()
    for before, start in pairwise(starts):
        for pod, identity in observed[start].identity.items():
            earlier = observed[before].identity.get(pod)
            if identity.scheduled is not None and (earlier is None or earlier.scheduled is None):
                pods.add(pod[1])
    return pods


def _newly_preempted(observed: dict[int, Observed]) -> set[str]:
    starts = sorted(observed)
    pods = set()
    for before, start in pairwise(starts):
        pods |= {pod for _, pod in observed[start].preempted - observed[before].preempted}
    return pods


# --- Deriving an interval's facts ---------------------------------------------------------


@cache
def mig_share(profile: str) -> Fraction:
    """A MIG instance is slices/7 of a GPU ("3g.40gb" -> 3/7); a whole device is 1."""
    if not profile:
        return Fraction(1)
    slices = profile.split("g.", 1)[0]
    if not slices.isdigit() or not 1 <= int(slices) <= 7:
        raise ValueError(profile)
    return Fraction(int(slices), 7)


def _derive(
    now: Observed, before: Observed, plan: sources.QueryPlan, shared: set[str]
) -> IntervalFacts:
    facts = IntervalFacts(identity=now.identity, warnings=list(now.warnings))
    _derive_gpus(facts, now, plan, shared)
    _derive_io(facts, now, before)
    _derive_latency(facts, now, before)
    for pod, identity in now.identity.items():
        earlier = before.identity.get(pod)
        if identity.scheduled is not None and (earlier is None or earlier.scheduled is None):
            facts.waits[pod] = identity.scheduled
    for pod in sorted(now.preempted - before.preempted):
        at, identity = now.preempted_at.get(pod), now.identity.get(pod)
        if at is None or identity is None:
            facts.warnings.append(f"preemptions: pod {pod[0]}/{pod[1]} has no preempted tick")
            continue
        facts.preemptions[pod] = {"at": at, "gpus": identity.gpus, "scheduled": identity.scheduled}
    return facts


def _derive_gpus(
    facts: IntervalFacts, now: Observed, plan: sources.QueryPlan, shared: set[str]
) -> None:
    """Allocation, busy time and memory per pod; capacity and completeness per interval."""
    seconds = plan.scrape_seconds
    present: dict[tuple[str, str], int] = defaultdict(int)  # device -> ticks present
    domains: dict[str, str] = {}
    averages: dict[PodKey, list[Decimal]] = defaultdict(list)
    for (uuid, instance, profile, namespace, pod), series in now.series.items():
        domains.setdefault(uuid, series.fault_domain)
        time_sliced = uuid in shared
        # A time-sliced GPU is present whenever its bare series is; others: any series.
        if not pod or not time_sliced:
            present[(uuid, instance)] += series.ticks
        if not pod or series.bad:
            continue
        if not namespace:
            facts.warnings.append(
                f'devices: series {{UUID="{uuid}",pod="{pod}"}} has no namespace label'
            )
            continue
        try:
            share = mig_share(profile) * seconds
        except ValueError:
            facts.warnings.append(f"devices: {uuid} has an unknown MIG profile {profile}")
            continue
        ticks = series.shared_alloc if time_sliced else Fraction(series.ticks)
        busy = series.shared_busy if time_sliced else series.busy
        if ticks is None:
            facts.warnings.append(f"devices: {uuid} of {namespace}/{pod} has unusable samples")
            continue
        key = (namespace, pod)
        facts.alloc[key] += ticks * share
        if busy is not None:
            facts.busy[key] += (Fraction(busy) if isinstance(busy, Decimal) else busy) * share
        if series.memory_peak is not None:
            peak = round(series.memory_peak * sources.MIB)
            facts.memory_peak[key] = max(facts.memory_peak.get(key, 0), peak)
        if series.memory_avg is not None:
            averages[key].append(series.memory_avg)
    # Per GPU: the mean over the pod's devices (a sum would count a time-sliced GPU's memory
    # once per pod).
    for key, values in averages.items():
        facts.memory_avg[key] = round(sum(values) * sources.MIB / len(values))
    gpus: dict[str, int] = defaultdict(int)  # a GPU is present when its devices are
    for (uuid, _), ticks in present.items():
        gpus[uuid] = max(gpus[uuid], ticks)
    for uuid, ticks in gpus.items():
        facts.capacity[domains[uuid]] += ticks * seconds
    ticks_per_interval = plan.step_seconds // seconds
    pool_ticks = max(present.values(), default=0)
    facts.samples_seen = sum(present.values())
    if pool_ticks:
        # Ticks at which the exporter answered for nobody count as missing for every device.
        facts.samples_expected = round(facts.samples_seen * ticks_per_interval / pool_ticks)
        facts.completeness = Fraction(facts.samples_seen, facts.samples_expected)


def _derive_io(facts: IntervalFacts, now: Observed, before: Observed) -> None:
    for pod, counters in now.io_last.items():
        earlier = before.io_last.get(pod, {})
        for meter, last in counters.items():
            increment = last - earlier.get(meter, 0)
            if increment < 0:  # the counter restarted: what it counted since
                facts.warnings.append(f"io: {meter} of {pod[0]}/{pod[1]} went down")
                increment = last
            facts.io[pod][meter] = round(increment)


def _derive_latency(facts: IntervalFacts, now: Observed, before: Observed) -> None:
    """Bucket increments per service, summed over its replicas, on the bounds every replica
    reports (bucket sets differ between vLLM versions)."""
    services: dict[tuple[str, str], list[tuple[dict[str, Decimal], dict[str, Decimal]]]] = (
        defaultdict(list)
    )
    for replica, buckets in now.latency_last.items():
        services[replica[:2]].append((buckets, before.latency_last.get(replica, {})))
    for service, replicas in sorted(services.items()):
        common = set.intersection(*(set(buckets) for buckets, _ in replicas))
        if any(len(buckets) != len(common) for buckets, _ in replicas):
            facts.warnings.append(f"latency: {service[0]}/{service[1]} replicas disagree on bounds")
        if "+Inf" not in common:
            continue
        increments: dict[str, Decimal | int] = dict.fromkeys(common, 0)
        for buckets, earlier in replicas:
            for bound in common:
                increment = buckets[bound] - earlier.get(bound, 0)
                increments[bound] += buckets[bound] if increment < 0 else increment
        if increments["+Inf"]:
            facts.latency[service] = [
                (bound, round(increments[bound])) for bound in sorted(common, key=_le_order)
            ]
