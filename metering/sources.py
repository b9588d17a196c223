"""PromQL for each meter, and the HTTP client that runs it against a source.

An interval named by its start S holds the samples in [S, S + step): the sample taken at
exactly 00:00:00 on the 1st belongs to the 1st. Every meter is evaluated at the interval's end
T = S + step, `offset 1ms`, so its range ends at the last millisecond of the interval. Where
the range starts depends on the server: Prometheus 2.x ranges hold both ends, [a, b], 3.x ranges
(and subqueries) only the right one, (a, b]. A one-point probe tells which (see
`PrometheusClient.ranges_closed`) and the plan takes `step - 1ms` for closed ranges and `step`
for left-open ones: [S, S + step - 1ms] either way, to the millisecond Prometheus stores, so a
sample on a boundary lands in exactly one interval whatever its millisecond. The result at T is
stored under S = T - step.

Prometheus aggregates, with range functions over each series (`count_over_time`,
`last_over_time`, ...), which cost about one pass over the samples: Python sees one number per
series and interval, never raw samples. Cost is samples read, so:
- the few cases that need a per-tick view get a subquery narrowed (by a regex of names) to
  just the series concerned: a time-sliced GPU split between the pods holding it *at each
  tick* (1/k per pod) and counted present at each tick it had any series (held whole, shared
  or free, which may change within the hour), and the first tick at which a preemption's
  reason turned 1;
- pod identity (kube-state-metrics: many series per pod, pending pods included) is read at
  each interval's end; pods that ran but were gone by then are read over the interval.
Counters come back as each pod's last value per interval; Python takes the difference with
the interval before (0 when the pod had none there: it started inside this interval), which is
exact where `increase()` extrapolates.

Label spellings: `exported_pod`/`exported_namespace` win over `pod`/`namespace` (with
`honor_labels: false`, `pod` is the exporter's own pod); Python picks, so both come back.
Several meters share one request: each part carries a `meter` label, joined with `or`.
"""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from typing import Any

import requests
from django.conf import settings
from prometheus_api_client import PrometheusApiClientException
from prometheus_api_client.prometheus_connect import PrometheusConnect
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.util.retry import Retry

from kernel.tasks import TASK_KINDS
from metering.models import DEFAULT_LABEL_MAPPING, DEFAULT_PRIORITY_CLASS_KINDS, Source

# Prometheus refuses more than 11,000 points per series in one query_range answer.
RANGE_PROBE = "count_over_time(vector(1)[2s:1s])"
RANGE_PROBE_AT = 1_000_000_000  # any whole second
MAX_POINTS_PER_QUERY = 10_000
# The most samples per series an interval may hold for the device meter to read raw samples
# (QueryPlan.reads_raw_samples): five at a minute's scrape and the 5-minute step.
RAW_SAMPLES_PER_STEP = 5
DEFAULT_TIMEOUT_SECONDS = 120  # per read
DEFAULT_DEADLINE_SECONDS = 300  # per request, headers and body (TANDEM_PROMETHEUS_DEADLINE_SECONDS)
DEFAULT_MAX_RESPONSE_BYTES = 512 * 1024 * 1024
MIB = 1_048_576

LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
METRIC_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")

# What a source may set in `label_mapping`, beyond DEFAULT_LABEL_MAPPING's keys.
MAPPING_DEFAULTS: dict[str, Any] = {
    **DEFAULT_LABEL_MAPPING,
    # extra matchers added to every selector, e.g. {"cluster": "prod"} for a shared Prometheus
    "matchers": {},
    # a label on the GPU exporter's series that names the fault domain; "" = the whole pool
    "fault_domain_label": "",
    # the label that names a Kubernetes cluster in a store holding several (a Thanos or Mimir
    # external label): GPU series of two clusters under it refuse the batch
    # (measure._clusters_check); "" = no check, every cluster the matchers reach is one pool
    "cluster_label": "cluster",
    "latency_histogram": "vllm:e2e_request_latency_seconds",
    "preemption_reason": "PreemptionByScheduler",
    "gpu_resource": "nvidia_com_gpu",
    # a regular expression of the nodes whose GPUs this source does not meter (another
    # source's pool): pods running there with GPUs are not counted missing; "" = none
    "unmetered_nodes": "",
    # a regular expression of the inference tasks ("namespace/task") that serve without the
    # latency histogram by design (an offline batch server, a Triton): not named for it;
    # "" = none (measure._latency_unseen)
    "latency_unmeasured_tasks": "",
    # a regular expression of the Kueue cluster queues whose preemptions this source counts
    # (those of its pool's training workloads); "" = every one (measure._kueue_preemptions)
    "kueue_cluster_queues": "",
}


class PrometheusError(Exception):
    """Something went wrong talking to Prometheus."""


class PrometheusUnavailable(PrometheusError):
    """Unreachable, timed out, answering 5xx/429, or answering with part of the data missing:
    retry later, the data is not lost."""


class PrometheusPartialAnswer(PrometheusUnavailable):
    """An answer that says part of the data is missing: a Thanos querier with a store down
    (its default allows partial responses, with a warning), VictoriaMetrics' `isPartial`, a
    Prometheus whose remote read failed. Metered, the missing series would just be absent:
    no samples expected of GPUs never seen, so every window complete and under-billed."""


class PrometheusQueryError(PrometheusError):
    """Prometheus refused the query or answered nonsense: retrying will not help."""


class SourceConfigurationError(ValueError):
    """A source's label mapping is unusable; the message names the field."""


def escape_label_value(value: str) -> str:
    """Quote-safe PromQL string content: backslash, double quote and newline escaped."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def label_matcher(name: str, value: str, operator: str = "=") -> str:
    if not LABEL_NAME.match(name):
        raise SourceConfigurationError(f"label name {name!r} is not a valid Prometheus label name")
    if operator not in ("=", "!=", "=~", "!~"):
        raise SourceConfigurationError(f"matcher operator {operator!r} is not one of = != =~ !~")
    return f'{name}{operator}"{escape_label_value(value)}"'


@dataclass(frozen=True)
class NodeSet:
    """The nodes of one shard of a sharded window (docs/architecture.md "Sharded windows").

    A node is what a GPU exporter's series names in `Hostname`, else in `hostname` (exporter
    builds spell it either way, per node). Shard i of a source's patterns p0, p1, ... holds
    the nodes `p_i` matches and no earlier pattern does; the last shard (`pattern` None) holds
    every other node and the series that name none. So whatever the patterns say, each series
    belongs to exactly one shard: the shards partition the pool, and their facts add up.
    """

    pattern: str | None  # an RE2 pattern (anchored, as PromQL's =~), None: the rest
    earlier: tuple[str, ...] = ()  # the patterns of the shards before this one

    def selectors(self, plan: QueryPlan, metric: str, *matchers: str) -> tuple[str, str]:
        """Two selectors of `metric` that together hold this shard's series exactly once:
        those with a `Hostname`, and those without one (by `hostname`)."""
        return (
            selector(plan, metric, *matchers, 'Hostname!=""', *self._matchers("Hostname")),
            selector(plan, metric, *matchers, 'Hostname=""', *self._matchers("hostname")),
        )

    def _matchers(self, label: str) -> list[str]:
        found = []
        if self.pattern is not None:
            found.append(label_matcher(label, self.pattern, "=~"))
        if self.earlier:
            found.append(label_matcher(label, "|".join(f"(?:{p})" for p in self.earlier), "!~"))
        return found

    def describe(self) -> str:
        if self.pattern is None:
            return "the rest" + (f" (not {', '.join(self.earlier)})" if self.earlier else "")
        return self.pattern + (f" (not {', '.join(self.earlier)})" if self.earlier else "")


def node_sets(patterns: Iterable[str]) -> list[NodeSet]:
    """The shards of a source's `shard_node_patterns`: the rest first (shard 0), then one per
    pattern."""
    patterns = list(patterns)
    shards = [NodeSet(None, tuple(patterns))]
    for index, pattern in enumerate(patterns):
        shards.append(NodeSet(pattern, tuple(patterns[:index])))
    return shards


def shard_patterns_validate(patterns: object) -> list[str]:
    """A source's `shard_node_patterns`: a list of non-empty regular expressions (RE2 as
    Prometheus reads them; checked here with Python's, which accepts what RE2 does for plain
    node-name patterns). Errors name the field."""
    if not isinstance(patterns, list) or not all(isinstance(p, str) for p in patterns):
        raise SourceConfigurationError("shard_node_patterns must be a list of regular expressions")
    for pattern in patterns:
        if not pattern.strip():
            raise SourceConfigurationError("shard_node_patterns: a pattern is empty")
        try:
            re.compile(pattern)
        except re.error as error:
            raise SourceConfigurationError(
                f"shard_node_patterns: {pattern!r} is not a regular expression ({error})"
            ) from None
    if len(set(patterns)) != len(patterns):
        raise SourceConfigurationError("shard_node_patterns: a pattern is listed twice")
    return patterns


# The kind of a task whose priority class the source does not map: training's rates.
DEFAULT_KIND = "training_batch"


@dataclass(frozen=True)
class QueryPlan:
    """Everything PromQL building needs from a source, validated once."""

    scrape_seconds: int
    step_seconds: int
    task_label: str = DEFAULT_LABEL_MAPPING["task_label"]
    team_label: str = DEFAULT_LABEL_MAPPING["team_label"]
    service_label: str = DEFAULT_LABEL_MAPPING["service_label"]
    matchers: tuple[tuple[str, str], ...] = ()
    fault_domain_label: str = ""
    cluster_label: str = MAPPING_DEFAULTS["cluster_label"]
    latency_histogram: str = MAPPING_DEFAULTS["latency_histogram"]
    preemption_reason: str = MAPPING_DEFAULTS["preemption_reason"]
    gpu_resource: str = MAPPING_DEFAULTS["gpu_resource"]
    unmetered_nodes: str = ""  # see MAPPING_DEFAULTS
    latency_unmeasured_tasks: str = ""  # see MAPPING_DEFAULTS
    kueue_cluster_queues: str = ""  # see MAPPING_DEFAULTS
    priority_class_kinds: Mapping[str, str] = field(
        default_factory=lambda: dict(DEFAULT_PRIORITY_CLASS_KINDS)
    )
    # Prometheus 2.x: a range [a, b] holds both ends; 3.x: (a, b]. See the module docstring.
    closed_ranges: bool = True
    # A shard of a sharded window (metering.shards): the GPU exporter's series of these nodes
    # only; None reads every node.
    node_set: NodeSet | None = None
    # The meters of `METER_PARTS` this plan reads; None: every one. A sharded window's shards
    # read the device meters (`DEVICE_METERS`) of their nodes, its combiner the rest
    # (`POD_METERS`) for the whole pool.
    meters: frozenset[str] | None = None
    # Whether the device meter reads its series' raw samples (see `reads_raw_samples`); None
    # decides by the scrape interval.
    raw_samples: bool | None = None
    # Whether the time-sliced GPUs' per-tick split (`shared_devices_query`) is taken in Python
    # from their raw samples, read once a batch (metering.shared_split), instead of asked of
    # Prometheus, which evaluates it at every scrape tick whatever the samples. Every tick's
    # samples lie in the interval of its tick: windows are aligned to the step and the scrape
    # interval divides it (`query_plan_for`). False asks Prometheus (the tests' oracle).
    shared_from_samples: bool = True

    def kind_of(self, priority_class: str) -> str:
        """The task kind of a priority class: a class the source does not map (or none) is
        `DEFAULT_KIND`, the contract's default (measure.KINDS_UNMAPPED says which)."""
        return self.priority_class_kinds.get(priority_class, DEFAULT_KIND)

    @property
    def range_ms(self) -> int:
        return self.step_seconds * 1000 - (1 if self.closed_ranges else 0)

    @property
    def window(self) -> str:
        """The range of an interval's samples, [S, S + step), for a query evaluated at S + step."""
        return f"[{self.range_ms}ms] offset 1ms"

    @property
    def window_to_end(self) -> str:
        """An interval's samples and the one at its end, which identity reads (`identity_parts`
        are instant selectors at S + step): for a pod's constants (creation time, GPU request),
        which a pod that kube-state-metrics shows again at that end, after missing the
        interval's scrapes, has only there."""
        return f"[{self.range_ms + 1}ms]"

    def samples_window(self, start: int, end: int) -> str:
        """The range of the samples in [start, end) for an instant query evaluated at `end`
        (Unix seconds), as `window` holds one interval's."""
        return f"[{(end - start) * 1000 - (1 if self.closed_ranges else 0)}ms] offset 1ms"

    @property
    def ticks_window(self) -> str:
        """The same interval as a subquery: one point per scrape tick S, S + scrape, ..."""
        return f"[{self.range_ms}ms:{self.scrape}] offset 1ms"

    @property
    def tick_slot(self) -> str:
        """The range of one tick's sample inside a `ticks_window` subquery: at its point p,
        the samples in [p, p + scrape), as `window` holds an interval's.

        A subquery's points fall on multiples of the scrape interval, but Prometheus scrapes
        each target at an offset of its own (a hash of its labels), so its samples fall
        between the points. An instant selector at p reads the sample before p: the one of
        the tick before, which may be in the interval before. Each tick of a time-sliced GPU
        then landed one tick late, so on the other side of an interval's, a peak hour's or a
        month's boundary from the samples that `count_over_time` counts. Read forward (a
        negative offset, Prometheus 2.33 on) the points hold the ticks the counts hold."""
        scrape_ms = self.scrape_seconds * 1000
        return f"[{scrape_ms - (1 if self.closed_ranges else 0)}ms] offset -{scrape_ms - 1}ms"

    @property
    def reads_raw_samples(self) -> bool:
        """Whether the device meter fetches DCGM_FI_DEV_FB_USED's raw samples once and takes
        its three range functions (ticks, peak, mean) per interval in Python
        (`measure._over_time`) instead of asking Prometheus for each.

        Prometheus evaluates a range function series by series at every step, at a cost per
        series and step whatever the samples. Where an interval holds at most
        RAW_SAMPLES_PER_STEP samples (a scrape of a fifth of the step or sparser: a minute at
        the 5-minute step), they are read once instead of three times: the same numbers, a
        third of Prometheus' evaluation. Up to three samples an interval the workers get fewer
        points than the three answers; at four or five, more: their CPU and peak memory grow
        (at 10,000 GPUs and a 60 s scrape, about a tenth and 130 MB; docs/telemetry.md,
        "Presence, allocation, capacity and memory"). The trade is taken there because
        Prometheus is what every worker shares and what does not scale out with them.
        Denser scrapes (dcgm-exporter's 30 s: ten samples) keep the three range functions, whose
        answers are then far fewer points than the samples.
        """
        if self.raw_samples is not None:
            return self.raw_samples
        return self.step_seconds // self.scrape_seconds <= RAW_SAMPLES_PER_STEP

    @property
    def scrape(self) -> str:
        return f"{self.scrape_seconds}s"

    @property
    def step(self) -> str:
        return f"{self.step_seconds}s"


# Labels with a meaning of their own to the meters: none names a cluster.
LABELS_READ = frozenset(
    {"job", "instance", "meter", "node", "Hostname", "hostname", "UUID", "namespace", "pod"}
)


def query_plan_for(source: Source, *, step_seconds: int) -> QueryPlan:
    """Validate a source's mapping and turn it into a QueryPlan (errors name the field)."""
    mapping = {**MAPPING_DEFAULTS, **(source.label_mapping or {})}
    unknown = sorted(set(mapping) - set(MAPPING_DEFAULTS))
    if unknown:
        raise SourceConfigurationError(f"label_mapping has unknown keys: {', '.join(unknown)}")
    for key in ("task_label", "team_label", "service_label"):
        if not isinstance(mapping[key], str) or not LABEL_NAME.match(mapping[key]):
            raise SourceConfigurationError(f"label_mapping.{key} must be a label name")
    for key in ("fault_domain_label", "cluster_label"):  # each may be "" (none)
        name = mapping[key]
        if not isinstance(name, str) or (name and not LABEL_NAME.match(name)):
            raise SourceConfigurationError(f"label_mapping.{key} must be a label name")
    if mapping["cluster_label"] in LABELS_READ:
        raise SourceConfigurationError(
            f"label_mapping.cluster_label: {mapping['cluster_label']!r} names no cluster"
            " (Tandem reads it as a scrape target's, a node's, a GPU's or a pod's)"
        )
    histogram = mapping["latency_histogram"]
    if not isinstance(histogram, str) or not METRIC_NAME.match(histogram):
        raise SourceConfigurationError("label_mapping.latency_histogram must be a metric name")
    for key in ("preemption_reason", "gpu_resource"):
        if not isinstance(mapping[key], str) or not mapping[key]:
            raise SourceConfigurationError(f"label_mapping.{key} must be a non-empty string")
    for key in ("unmetered_nodes", "latency_unmeasured_tasks", "kueue_cluster_queues"):
        try:
            re.compile(mapping[key])
        except (re.error, TypeError) as error:
            raise SourceConfigurationError(
                f"label_mapping.{key} must be a regular expression ({error})"
            ) from error
    matchers = mapping["matchers"]
    if not isinstance(matchers, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in matchers.items()
    ):
        raise SourceConfigurationError("label_mapping.matchers must map label names to strings")
    for name in matchers:
        if not LABEL_NAME.match(name):
            raise SourceConfigurationError(f"label_mapping.matchers: {name!r} is not a label name")
    kinds = source.priority_class_kinds or DEFAULT_PRIORITY_CLASS_KINDS
    known = set(TASK_KINDS)
    if not isinstance(kinds, dict) or not set(kinds.values()) <= known:
        raise SourceConfigurationError(
            f"priority_class_kinds must map priority classes to one of {', '.join(sorted(known))}"
        )
    if source.scrape_interval_seconds <= 0 or step_seconds % source.scrape_interval_seconds:
        raise SourceConfigurationError(
            f"scrape_interval_seconds {source.scrape_interval_seconds} must divide the step "
            f"{step_seconds}"
        )
    return QueryPlan(
        scrape_seconds=source.scrape_interval_seconds,
        step_seconds=step_seconds,
        task_label=mapping["task_label"],
        team_label=mapping["team_label"],
        service_label=mapping["service_label"],
        matchers=tuple(sorted(matchers.items())),
        fault_domain_label=mapping["fault_domain_label"],
        cluster_label=mapping["cluster_label"],
        latency_histogram=histogram,
        preemption_reason=mapping["preemption_reason"],
        gpu_resource=mapping["gpu_resource"],
        unmetered_nodes=mapping["unmetered_nodes"],
        latency_unmeasured_tasks=mapping["latency_unmeasured_tasks"],
        kueue_cluster_queues=mapping["kueue_cluster_queues"],
        priority_class_kinds=dict(kinds),
    )


# --- PromQL building blocks -------------------------------------------------------------


def selector(plan: QueryPlan, metric: str, *matchers: str) -> str:
    """`metric{...}` with the source's own matchers appended (values escaped)."""
    if not METRIC_NAME.match(metric):
        raise SourceConfigurationError(f"{metric!r} is not a metric name")
    parts = [*matchers, *(label_matcher(name, value) for name, value in plan.matchers)]
    return f"{metric}{{{','.join(parts)}}}" if parts else metric


RE2_SPECIAL = re.compile(r"([\\.+*?()|\[\]{}^$])")


def regex_alternatives(values: Iterable[str]) -> str:
    """An RE2 alternation matching exactly these values (their metacharacters escaped; RE2
    refuses some of the escapes Python's re.escape writes)."""
    return "|".join(RE2_SPECIAL.sub(r"\\\1", value) for value in sorted(set(values)))


POD_LABELS = "namespace, pod, exported_namespace, exported_pod"
# A dcgm-exporter device is (UUID, GPU_I_ID); a series of it is also told apart by its pod.
DEVICE_SERIES_LABELS = f"UUID, GPU_I_ID, GPU_I_PROFILE, {POD_LABELS}"
# The same with the pod in one spelling (the `exported_*` one moved to the plain labels).
DEVICE_POD_LABELS = "UUID, GPU_I_ID, GPU_I_PROFILE, namespace, pod"
# Which exporter answered for a device (Prometheus' target labels) and on which node.
TARGET_LABELS = "job, instance"
NODE_LABELS = "Hostname, hostname"
MODEL_LABEL = "modelName"
# How far back a silent exporter's GPUs are looked up when the batch never saw them.
SILENT_LOOKBACK = "24h"


def pod_series(
    plan: QueryPlan, metric: str, *matchers: str, not_pods: Sequence[str] = ()
) -> tuple[str, str]:
    """The two selectors of a GPU exporter's pod-attributed series (the `pod=""` device
    series are not attributed): one per label spelling, never overlapping. A `pod` among
    `not_pods` (exporters' own) attributes nothing."""
    plain = ('pod!=""', 'exported_pod=""')
    if not_pods:
        plain += (label_matcher("pod", regex_alternatives(not_pods), "!~"),)
    return (
        selector(plan, metric, 'exported_pod!=""', *matchers),
        selector(plan, metric, *plain, *matchers),
    )


def tagged(parts: Mapping[str, str]) -> str:
    """Fold several expressions into one query; each result carries `meter="<name>"`."""
    return " or ".join(
        f'label_replace({expression}, "meter", "{name}", "", "")'
        for name, expression in parts.items()
    )


# --- One function per meter -------------------------------------------------------------


@dataclass(frozen=True)
class Part:
    """One query of a meter: PromQL that applies a range function to the raw series and no
    more, and how Python then groups its answer (what `max by (...)` / `sum by (...)` did).

    Grouping in Prometheus costs a label set built per series and step, several times the
    range function itself; so do `label_replace` tags joined with `or`. Python groups each
    series once (see measure._grouped), so a part costs Prometheus about its samples.
    """

    promql: str
    by: tuple[str, ...] = ()  # () : the answer as it is
    how: str = "max"  # "max" or "sum" of the series sharing `by`
    pods_only: bool = False  # only pod-attributed series (see `pod_series`)
    # With `pods_only`, a device's bare series too where some point of it is not 0 (a free
    # GPU that was busy: measure._unheld_busy; a held GPU's memory beside its pods' own:
    # measure._own_figures_unread); an idle one's zeros cost nothing further.
    busy_bare: bool = False
    # More queries whose series join this one's answer before it is grouped: a shard's node
    # set needs two selectors (see NodeSet), which never hold the same series.
    also: tuple[str, ...] = ()
    # Where set, the part is not asked of Prometheus: `function` (the range function of
    # `promql`) is taken in Python from these selectors' raw samples, fetched once for every
    # part that names them (see QueryPlan.reads_raw_samples); `promql` says what it means.
    samples: tuple[str, ...] = ()
    function: str = ""

    @property
    def queries(self) -> tuple[str, ...]:
        return (self.promql, *self.also)


def _labels(text: str) -> tuple[str, ...]:
    return tuple(name.strip() for name in text.split(",") if name.strip())


def _cluster(plan: QueryPlan) -> tuple[str, ...]:
    """The source's cluster label, where it names one."""
    return (plan.cluster_label,) if plan.cluster_label else ()


def device_series_labels(plan: QueryPlan) -> tuple[str, ...]:
    domain = (plan.fault_domain_label,) if plan.fault_domain_label else ()
    return (*_labels(DEVICE_SERIES_LABELS), *domain)


def devices_parts(plan: QueryPlan) -> dict[str, Part]:
    """Per dcgm-exporter series: ticks present (allocation, capacity, completeness), and for
    pod series the peak and mean framebuffer MiB.

    A whole GPU or MIG instance has exactly one series per tick (its pod's, or the bare one
    when free), so a pod's allocation is its series' ticks x share. A time-sliced GPU shows
    its pods' series side by side, and with dcgm-exporter's --kubernetes-virtual-gpus any
    held GPU keeps its bare FB_USED beside its pods' own figures: see `shared_devices_query`.
    """
    by = device_series_labels(plan)
    series = gpu_series(plan, "DCGM_FI_DEV_FB_USED")
    frame_buffers = [f"{selected}{plan.window}" for selected in series]
    samples = series if plan.reads_raw_samples else ()
    # The GPU model (dcgm-exporter's `modelName`, the same on every series of a physical GPU
    # and its MIG instances) rides along with the ticks: it never splits a series.
    # The source's cluster label rides along too (measure._clusters_check).
    by_target = (
        *by,
        *_labels(TARGET_LABELS),
        *_labels(NODE_LABELS),
        MODEL_LABEL,
        *_cluster(plan),
    )
    # Ticks are summed over the series of one target that share these labels: an exporter
    # upgraded in place (an `instance` that stays: host network, or relabelled to the node)
    # writes each GPU's series under a new label set from its restart on (a `pci_bus_id` or
    # `DCGM_FI_DRIVER_VERSION` label added), and the two series' ticks are the GPU's, one
    # after the other. Their max counted only the longer part of the window, with every
    # window complete. Series of one target that overlap add up past the ticks an interval
    # holds, so the per-tick query counts them (measure._time_sliced_devices).
    return {
        "ticks": _gpu_part("count_over_time", frame_buffers, by_target, how="sum", samples=samples),
        # A held device's bare series too, where not 0: with --kubernetes-virtual-gpus it
        # stands beside its pods' own figures (measure._own_figures_unread).
        "memory_peak": _gpu_part(
            "max_over_time", frame_buffers, by, pods_only=True, busy_bare=True, samples=samples
        ),
        "memory_avg": _gpu_part(
            "avg_over_time", frame_buffers, by, pods_only=True, samples=samples
        ),
    }


def gpu_series(plan: QueryPlan, metric: str, *matchers: str) -> tuple[str, ...]:
    """The selectors of a GPU exporter metric: one for the whole pool, or the two of a
    shard's node set (`NodeSet.selectors`)."""
    if plan.node_set is None:
        return (selector(plan, metric, *matchers),)
    return plan.node_set.selectors(plan, metric, *matchers)


def _gpu_part(function: str, ranges: Iterable[str], by: tuple[str, ...], **options: Any) -> Part:
    first, *more = (f"{function}({series})" for series in ranges)
    return Part(first, by, also=tuple(more), function=function, **options)


def busy_parts(plan: QueryPlan) -> dict[str, Part]:
    """Per series: the sum of its engine-active ratio over the interval's ticks (x share
    x scrape seconds in Python), else of GPU_UTIL / 100 where profiling metrics are absent
    (measure._parse_busy prefers the first, series by series and interval by interval). A
    free GPU's bare series too where it was busy, which Prometheus reads anyway: work no pod
    requested (measure._unheld_busy)."""
    by = _labels(DEVICE_SERIES_LABELS)
    return {
        meter: _gpu_part(
            "sum_over_time",
            [f"{series}{plan.window}" for series in gpu_series(plan, metric)],
            by,
            pods_only=True,
            busy_bare=True,
        )
        for meter, metric in (
            ("active", "DCGM_FI_PROF_GR_ENGINE_ACTIVE"),
            ("utilization", "DCGM_FI_DEV_GPU_UTIL"),
        )
    }


def shared_devices_query(
    plan: QueryPlan, uuids: Iterable[str], *, seen: bool = False, exporters: Iterable[str] = ()
) -> str:
    """For GPUs whose series overlap in time (time-sliced, in some tick of the batch): each
    pod's allocated and busy ticks, split 1/k between the k pods holding the device at each
    tick, and the ticks at which the GPU had any series at all, of any of its devices (a
    subquery at the scrape interval). Per tick, so a GPU that is held whole, time-sliced and
    free in turn within the batch, or re-laid into other MIG instances, is split and counted
    present right in each of its ticks.

    A pod's series is one per tick however many scrape targets answered for it (`max by`
    its device and pod, the `exported_*` spelling read as the plain one: an exporter scraped
    by two jobs, one of them honouring its labels, or replaced by a new pod, writes the same
    series under two targets); `seen` adds, for such series, the ticks at which each had a
    sample and its mean framebuffer over them (each target's own mean would be of its ticks
    only).

    The `pod` of the `exporters` (their own pods, which a scrape's target labels add where
    the exporter wrote none) holds nothing: such a series is the device's bare one.

    A NaN or negative sample gives +Inf (1/0), so its series is skipped, not counted.
    """
    only = label_matcher("UUID", regex_alternatives(uuids), "=~")
    device = "UUID, GPU_I_ID"
    own = sorted(exporters)

    def at_tick(series: str) -> str:  # the sample of the tick at each point (`tick_slot`)
        return f"last_over_time({series}{plan.tick_slot})"

    def once(metric: str) -> str:
        exported, plain = map(at_tick, pod_series(plan, metric, only, not_pods=own))
        for label in ("pod", "namespace"):
            exported = f'label_replace({exported}, "{label}", "$1", "exported_{label}", "(.+)")'
        return f"max by ({DEVICE_POD_LABELS}) ({exported} or {plain})"

    held = f"({once('DCGM_FI_DEV_FB_USED')})"
    active, utilization = once("DCGM_FI_PROF_GR_ENGINE_ACTIVE"), once("DCGM_FI_DEV_GPU_UTIL")
    window = plan.ticks_window

    def per_holder(expression: str, holders: str) -> str:
        return f"({expression}) / on({device}) group_left() count by ({device}) ({holders})"

    # dcgm-exporter with --kubernetes-virtual-gpus (4.5.3-4.8.2 on) keeps a held device's
    # bare utilisation series beside its pods' ones only where those are the pods' own (NVML's
    # per-process figure, `isPerProcessMetric`); any other pod series is a copy of the
    # device's. An own figure is the pod's busy time as it stands: divided by the k holders,
    # a GPU time-sliced between two pods lost half its busy time.
    bare = selector(
        plan,
        "DCGM_FI_DEV_GPU_UTIL",
        only,
        'exported_pod=""',
        label_matcher("pod", regex_alternatives(["", *own]), "=~"),
    )
    beside = f"clamp_max(count by ({device}) ({at_tick(bare)}), 1)"
    holders = f"(count by ({device}) ({utilization}) unless on({device}) {beside}) or {beside}"
    busy = (
        f"({per_holder(active, active)})"
        f" or (({utilization}) / 100 / on({device}) group_left() ({holders}))"
    )

    def split(per_tick: str) -> str:
        return f"max by ({DEVICE_SERIES_LABELS}) (sum_over_time(({per_tick}){window}))"

    # Present per GPU, whatever its devices at each tick: a MIG layout changed within the
    # interval shows the whole GPU, then its instances (measure._devices_apart).
    any_series = f"count by (UUID) ({at_tick(selector(plan, 'DCGM_FI_DEV_FB_USED', only))})"
    parts = {
        "alloc": split(per_holder(f"({held} >= bool 0) ^ -1", held)),
        "busy": split(busy),
        "present": f"count_over_time(({any_series}){window})",
    }
    if seen:
        parts["seen"] = f"count_over_time({held}{window})"
        parts["memory_avg"] = f"avg_over_time({held}{window})"
    return tagged(parts)


def targets_parts(plan: QueryPlan) -> dict[str, Part]:
    """Per scrape target: the scrapes Prometheus attempted in the interval and those that
    answered (its own `up` series), so an exporter that stopped answering is told apart from
    GPUs that left (completeness, see measure._derive_completeness).

    With them, kube-state-metrics' view of the nodes in the interval: those with GPUs
    (allocatable of the source's GPU resource, or of a MIG instance's), when each was
    created, and those being taken out (`LEAVING_TAINTS`). A node listed with GPUs whose
    exporter left no trace, `up` included, is still there: its GPUs are missing, not gone
    (measure._vanished_gpus).

    Allocatable, not capacity: when the device plugin stops (NVIDIA's mig-manager applying a
    MIG layout, its GPU pods gone first), the kubelet's device manager marks its devices
    unhealthy at once (allocatable 0) and keeps them in capacity for a 5-minute grace; its
    GPUs are out of use then, not unmetered. Pods still running there with GPUs count
    missing all the same (measure._unattributed_missing)."""
    up = f"{selector(plan, 'up')}{plan.window}"
    # With the pod the target is, where service discovery's target labels name one
    # (measure._exporters_own): Python adds a target's groups up again.
    by = (*_labels(TARGET_LABELS), "namespace", "pod")
    leaving = selector(
        plan, "kube_node_spec_taint", label_matcher("key", regex_alternatives(LEAVING_TAINTS), "=~")
    )
    # Each node's last sample in the interval, as the interval holds samples: one at its very
    # end is the next interval's (a node listed from then on has GPUs only from then on).
    # Each node under the source's cluster label too: the clusters kube-state-metrics lists it
    # in (measure._clusters_check; Python groups the raw series, so it costs nothing more).
    allocatable = _gpu_resource_part(
        plan, "kube_node_status_allocatable", ("node", *_cluster(plan)), "max"
    )
    return {
        "attempted": Part(f"count_over_time({up})", by, "sum"),
        "answered": Part(f"sum_over_time({up})", by, "sum"),
        "gpu_nodes": replace(
            allocatable,
            promql=f"last_over_time({allocatable.promql}{plan.window})",
            also=tuple(f"last_over_time({query}{plan.window})" for query in allocatable.also),
        ),
        "node_created": Part(
            f"last_over_time({selector(plan, 'kube_node_created')}{plan.window})", ("node",)
        ),
        "node_leaving": Part(f"last_over_time({leaving}{plan.window})", ("node",)),
    }


# The taints of a node on its way out: cordoned (drained for maintenance, or by an
# autoscaler), or marked for deletion by the cluster autoscaler or Karpenter. Their exporter
# may go before the node does (an autoscaler evicts DaemonSet pods too): its GPUs are leaving.
LEAVING_TAINTS = (
    "node.kubernetes.io/unschedulable",
    "ToBeDeletedByClusterAutoscaler",
    "karpenter.sh/disrupted",
    "karpenter.sh/disruption",
)
# How far back the GPUs of a node whose exporter left no trace are looked up, when the batch
# never saw them: a weekend without the exporter is still counted missing on Monday. Each
# series' week of samples is read one series at a time (Prometheus' peak is one series', far
# from `--query.max-samples`); an hourly subquery read fewer samples but cost Prometheus 14 to
# 25 times the time on the week-long test pool (benchmarks/_node_lookback.py).
NODE_LOOKBACK_SECONDS = 7 * 86_400


def node_devices_query(plan: QueryPlan, nodes: Iterable[str], seconds: int) -> str:
    """The GPU devices reported on the given nodes in the last `seconds` (by `Hostname`, else
    `hostname`, as `NodeSet` reads a node): what a GPU node kube-state-metrics still lists
    had, where its exporter left no trace in the batch (narrowed, and rare)."""
    names = regex_alternatives(nodes)
    spellings = (
        (label_matcher("Hostname", names, "=~"),),
        ('Hostname=""', label_matcher("hostname", names, "=~")),
    )
    frame_buffers = [selector(plan, "DCGM_FI_DEV_FB_USED", *spelling) for spelling in spellings]
    return _devices_reported(frame_buffers, f"{seconds}s")


def _devices_reported(frame_buffers: Iterable[str], lookback: str) -> str:
    """Each device the `DCGM_FI_DEV_FB_USED` selectors hold a sample of in the last
    `lookback`, with who reported it and on which node."""
    return " or ".join(
        f"group by (UUID, GPU_I_ID, {TARGET_LABELS}, {NODE_LABELS}) "
        f"(last_over_time({frame_buffer}[{lookback}]))"
        for frame_buffer in frame_buffers
    )


def silent_devices_query(plan: QueryPlan, instances: Iterable[str]) -> str:
    """The GPU devices the given scrape targets reported in the last SILENT_LOOKBACK: what an
    exporter silent for the whole batch is expected to report (narrowed, and rare)."""
    only = label_matcher("instance", regex_alternatives(instances), "=~")
    # A shard looks up only its own nodes' GPUs: another shard counts the others.
    return _devices_reported(gpu_series(plan, "DCGM_FI_DEV_FB_USED", only), SILENT_LOOKBACK)


IO_METRICS = {
    "read_operations": "container_fs_reads_total",
    "write_operations": "container_fs_writes_total",
    "read_bytes": "container_fs_reads_bytes_total",
    "write_bytes": "container_fs_writes_bytes_total",
}


def io_parts(plan: QueryPlan) -> dict[str, Part]:
    """cAdvisor counters: each pod's last value per interval, from ONE level per pod (pod
    level, `container=""`, where it exists, else its containers summed: measure._parse_io)."""
    parts = {}
    for meter, metric in IO_METRICS.items():
        series = selector(plan, metric, 'container!="POD"')
        parts[meter] = Part(f"last_over_time({series}{plan.window})")
    return parts


# How far back a counter's last reading is looked for where a pod's counters resume at a
# batch's start after a gap (measure._counters_looked_back): a day of a few pods' series.
COUNTER_LOOKBACK_SECONDS = 86_400
# The range of a look-up evaluated at a batch's start: the day before it.
BEFORE_BATCH = f"[{COUNTER_LOOKBACK_SECONDS}s] offset 1ms"


def _before_batch(plan: QueryPlan, metric: str, pods: Iterable[str], *matchers: str) -> Part:
    """Each of the pods' series' last reading in the COUNTER_LOOKBACK_SECONDS up to the
    batch's start (the query is evaluated there), one selector per pod label spelling."""
    names = regex_alternatives(pods)
    spellings = (
        (label_matcher("exported_pod", names, "=~"),),
        ('exported_pod=""', label_matcher("pod", names, "=~")),
    )
    first, *more = (
        f"last_over_time({selector(plan, metric, *matchers, *spelling)}{BEFORE_BATCH})"
        for spelling in spellings
    )
    return Part(first, also=tuple(more))


def io_before_batch_parts(plan: QueryPlan, pods: Iterable[str]) -> dict[str, Part]:
    """The I/O counters of `io_parts`, read as `_before_batch` says."""
    return {
        meter: _before_batch(plan, metric, pods, 'container!="POD"')
        for meter, metric in IO_METRICS.items()
    }


def latency_before_batch_parts(plan: QueryPlan, pods: Iterable[str]) -> dict[str, Part]:
    """The latency buckets of `latency_parts`, read as `_before_batch` says."""
    found = _before_batch(plan, f"{plan.latency_histogram}_bucket", pods)
    by = (*_labels(POD_LABELS), plan.service_label, "le")
    return {"buckets": replace(found, by=by, how="sum")}


def latency_parts(plan: QueryPlan) -> dict[str, Part]:
    """The latency histogram's cumulative bucket counters: each replica's last value per
    service, `le` and interval (increments in Python, per replica, so scaling in and out
    never double counts)."""
    buckets = selector(plan, f"{plan.latency_histogram}_bucket")
    by = (*_labels(POD_LABELS), plan.service_label, "le")
    return {"buckets": Part(f"last_over_time({buckets}{plan.window})", by, "sum")}


def _identity_meters(plan: QueryPlan) -> tuple[tuple[str, str, tuple[str, ...]], ...]:
    """(meter, kube-state-metrics metric, the labels it is read for besides the pod's)."""
    return (
        ("labels", "kube_pod_labels", (plan.task_label, plan.team_label)),
        ("owner", "kube_pod_owner", ("owner_kind", "owner_name")),
        # The pod's address tells a GPU exporter's own pod (measure._exporters_own_series_freed)
        # and an inference pod's scrape targets (measure._latency_unseen); its node's address,
        # a pod on the host's network (whose address its node's other targets share).
        ("info", "kube_pod_info", ("priority_class", "node", "pod_ip", "host_ip")),
        ("scheduled", "kube_pod_status_scheduled_time", ()),
    )


MIG_RESOURCES = re.compile(r"nvidia_com_mig_.+")


def _gpu_resource_part(plan: QueryPlan, metric: str, by: tuple[str, ...], how: str) -> Part:
    """`metric` of GPU resources, under kube-state-metrics' names of them: the mapping's
    resource (`nvidia_com_gpu`), and a MIG instance's under the device plugin's mixed
    strategy (`nvidia_com_mig_3g_40gb`), asked apart (two disjoint selectors, so the
    mapping's value stays an exact match)."""
    mapped = selector(plan, metric, label_matcher("resource", plan.gpu_resource))
    if MIG_RESOURCES.fullmatch(plan.gpu_resource):
        return Part(mapped, by, how)
    mig = selector(plan, metric, label_matcher("resource", MIG_RESOURCES.pattern, "=~"))
    return Part(mapped, by, how, also=(mig,))


def _gpu_requests_part(plan: QueryPlan, by: tuple[str, ...]) -> Part:
    """Each pod's GPU request, summed over its containers (see `_gpu_resource_part`)."""
    return _gpu_resource_part(plan, "kube_pod_container_resource_requests", by, "sum")


def identity_parts(plan: QueryPlan) -> dict[str, Part]:
    """Who each pod alive at the interval's end is (labels, owner, priority class, when it was
    scheduled, the GPUs it requests, whether it runs), and which pods were preempted during
    the interval.

    Identity is read at the interval's end only: kube-state-metrics writes several series per
    pod, pending ones included, and reading each of their samples would cost more than all the
    GPU meters together. A pod that ran but was gone by the end gets its identity from
    `pod_history_parts` (range vectors) instead.
    """
    pod = _labels(POD_LABELS)
    parts = {
        meter: Part(selector(plan, metric), (*pod, *labels))
        for meter, metric, labels in _identity_meters(plan)
    }
    # Which pods hold GPUs and run: a pod that does so for a whole interval and that no GPU
    # series names was not metered (measure._unattributed_missing). A completed pod keeps its
    # requests in kube-state-metrics until it is deleted, so the phase is read too.
    parts["requests"] = _gpu_requests_part(plan, pod)
    parts["running"] = Part(selector(plan, "kube_pod_status_phase", 'phase="Running"'), pod)
    reason = selector(
        plan, "kube_pod_status_reason", label_matcher("reason", plan.preemption_reason)
    )
    # The reason may be 1 for a single tick before the pod is gone: read every sample.
    parts["preempted"] = Part(f"max_over_time({reason}{plan.window})", pod)
    # The pods Pending at some tick of the interval (not only at its end: a pod deleted in
    # it while Pending is gone by then), whose wait ends where they are gone unscheduled
    # (measure._gave_up). One series per pod, its pending ticks summed; `> 0` keeps the
    # answer to the pending pods (kube-state-metrics writes every phase of every pod, 0 or 1).
    pending = selector(plan, "kube_pod_status_phase", 'phase="Pending"')
    parts["pending"] = Part(f"sum_over_time({pending}{plan.window}) > 0", pod)
    return parts


def pod_history_parts(plan: QueryPlan, pods: Iterable[str]) -> dict[str, Part]:
    """For pods that ran but were gone at the interval's end, or disappeared: their identity
    over the whole interval (range vectors) and whether they ended (Succeeded or Failed).

    Narrowed to the pods by name, and asked as parts (bare range functions, grouped in
    Python) rather than as one `max by` ... `or` query, which cost Prometheus about four times
    as long (docs/telemetry.md, "Identity, waits and preemptions")."""
    names = regex_alternatives(pods)
    pod = _labels(POD_LABELS)
    parts = {}
    for pod_label in ("exported_pod", "pod"):
        only = label_matcher(pod_label, names, "=~")
        for meter, metric, labels in _identity_meters(plan):
            series = selector(plan, metric, only)
            parts[f"{meter}:{pod_label}"] = Part(
                f"last_over_time({series}{plan.window})", (*pod, *labels)
            )
        phase = selector(plan, "kube_pod_status_phase", 'phase=~"Succeeded|Failed"', only)
        parts[f"ended:{pod_label}"] = Part(f"max_over_time({phase}{plan.window})", pod)
    return parts


def pod_details_parts(plan: QueryPlan, pods: Iterable[str]) -> dict[str, Part]:
    """For pods that started or were preempted: creation time and GPU request (narrowed,
    since kube-state-metrics series are many and most pods need neither), as parts like
    `pod_history_parts`."""
    parts = {}
    requested = label_matcher("resource", plan.gpu_resource)
    names = regex_alternatives(pods)
    pod = _labels(POD_LABELS)
    window = plan.window_to_end
    for pod_label in ("exported_pod", "pod"):
        only = label_matcher(pod_label, names, "=~")
        created = selector(plan, "kube_pod_created", only)
        requests_ = selector(plan, "kube_pod_container_resource_requests", requested, only)
        parts[f"created_{pod_label}"] = Part(f"last_over_time({created}{window})", pod)
        parts[f"gpus_{pod_label}"] = Part(f"last_over_time({requests_}{window})", pod, "sum")
    return parts


def pending_pods_parts(plan: QueryPlan, pods: Iterable[str]) -> dict[str, Part]:
    """For pods Pending in an interval and not at the next one's end (measure._gave_up):
    over each interval, their creation time (whether kube-state-metrics showed the pod at
    all), whether it showed a scheduled time, and the tick of the last sample at which it
    showed the pod Pending (as `preemption_ticks_query` finds a tick: the point whose slot
    holds it), narrowed by name like `pod_details_parts`; and whether it requested a GPU (of
    the mapping's resource or a MIG instance's: measure._asking_no_gpu leaves out the pods that
    request none)."""
    names = regex_alternatives(pods)
    pod = _labels(POD_LABELS)
    gpu = label_matcher("resource", f"{plan.gpu_resource}|{MIG_RESOURCES.pattern}", "=~")
    parts = {}
    for pod_label in ("exported_pod", "pod"):
        only = label_matcher(pod_label, names, "=~")
        created = selector(plan, "kube_pod_created", only)
        scheduled = selector(plan, "kube_pod_status_scheduled_time", only)
        requests_ = selector(plan, "kube_pod_container_resource_requests", gpu, only)
        pending = selector(plan, "kube_pod_status_phase", 'phase="Pending"', only)
        at_tick = f"last_over_time({pending}{plan.tick_slot})"
        parts[f"created:{pod_label}"] = Part(f"last_over_time({created}{plan.window})", pod)
        parts[f"scheduled:{pod_label}"] = Part(f"last_over_time({scheduled}{plan.window})", pod)
        parts[f"requests:{pod_label}"] = Part(f"max_over_time({requests_}{plan.window})", pod)
        parts[f"pending_tick:{pod_label}"] = Part(
            f"max_over_time(timestamp({at_tick} == 1){plan.ticks_window})", pod
        )
    return parts


# A reason every kube-state-metrics release writes for every pod, at 0 unless set, up to
# v2.19; from v2.20 on, a reason's series exists only while it is set (its pod.go).
REASON_WRITTEN_BY_ALL = "Evicted"


def reasons_at_zero_query(plan: QueryPlan) -> str:
    """How many pods kube-state-metrics last wrote a reason for at 0 in each interval.

    Asked only of a batch with an interval whose pods have no series of the preemption
    reason (measure._reason_unwritten). With pods counted here, kube-state-metrics writes
    every reason it knows, and the preemption reason is not one of them: releases before
    v2.19.0 have no `PreemptionByScheduler`, so a preemption leaves no trace in them. From
    v2.20 on, nothing is written at 0 and the count is empty: no pod was preempted.

    Read over the interval as the preemption reason is (`identity_parts`), never at its
    end: a kube-state-metrics that missed the interval's scrapes and answers again on its
    end, or is scraped less often than the step, then shows neither, not one without the
    other."""
    evicted = selector(
        plan, "kube_pod_status_reason", label_matcher("reason", REASON_WRITTEN_BY_ALL)
    )
    return f"count(last_over_time({evicted}{plan.window}) == 0)"


# Kueue preempts a workload itself: it evicts it (suspends its Job, whose pods are then
# deleted), never through kube-scheduler, so the pods carry no `PreemptionByScheduler`
# reason and kube-state-metrics shows no preemption. What Kueue counts is per cluster queue,
# each label set's series created at its first eviction (kubernetes-sigs/kueue,
# pkg/metrics/metrics.go), which cannot say which task it was.
KUEUE_EVICTIONS = "kueue_evicted_workloads_total"
KUEUE_PREEMPTED = "Preempted"


def _kueue_evictions(plan: QueryPlan) -> str:
    matchers = [label_matcher("reason", KUEUE_PREEMPTED)]
    if plan.kueue_cluster_queues:
        matchers.append(label_matcher("cluster_queue", plan.kueue_cluster_queues, "=~"))
    return selector(plan, KUEUE_EVICTIONS, *matchers)


# Kueue's histogram of how long each workload it admitted waited, from its creation or its
# requeue (after an eviction) until admission, by cluster queue and priority class
# (pkg/metrics: `AdmittedWorkload`, observed once per admission). Under Kueue a Job is
# suspended, with no pod, until admitted, so its pods' own waits (`kube_pod_created` to
# scheduled) leave this wait out: measure._kueue_admissions adds it to the average wait.
KUEUE_ADMISSION_WAIT = "kueue_admission_wait_time_seconds"


def _kueue_admission_series(plan: QueryPlan, suffix: str) -> str:
    matchers = []
    if plan.kueue_cluster_queues:
        matchers.append(label_matcher("cluster_queue", plan.kueue_cluster_queues, "=~"))
    return selector(plan, f"{KUEUE_ADMISSION_WAIT}_{suffix}", *matchers)


# Kueue's counts, as counters each read the same way (measure._kueue_increments): the
# workloads it evicted to preempt them; those it admitted (the histogram's count) and the
# seconds they had waited (its sum).
KUEUE_COUNTERS: dict[str, Callable[[QueryPlan], str]] = {
    "evicted": _kueue_evictions,
    "admitted": lambda plan: _kueue_admission_series(plan, "count"),
    "waited": lambda plan: _kueue_admission_series(plan, "sum"),
}


def kueue_counter_query(plan: QueryPlan, counter: str) -> str:
    """Each series of one of Kueue's counts (of the source's cluster queues): its last
    reading in each interval (measure._kueue_increments takes the increments)."""
    return f"last_over_time({KUEUE_COUNTERS[counter](plan)}{plan.window})"


def kueue_before_batch_query(plan: QueryPlan, counter: str) -> str:
    """The same series' last reading in the COUNTER_LOOKBACK_SECONDS up to the batch's start
    (evaluated there), from which the batch's first increments count."""
    return f"last_over_time({KUEUE_COUNTERS[counter](plan)}{BEFORE_BATCH})"


def kueue_targets_before_batch_query(plan: QueryPlan, instances: Iterable[str]) -> str:
    """Which of Kueue's scrape targets (by `instance`) answered a scrape in the
    COUNTER_LOOKBACK_SECONDS up to the batch's start: a series of theirs first read later was
    created by an eviction while Prometheus scraped them."""
    up = selector(plan, "up", label_matcher("instance", regex_alternatives(instances), "=~"))
    return f"max by (instance) (max_over_time({up}{BEFORE_BATCH})) == 1"


def preemption_ticks_query(plan: QueryPlan, pods: Iterable[str]) -> str:
    """For the pods found preempted: the first tick at which their reason was 1."""
    names = regex_alternatives(pods)
    reason = label_matcher("reason", plan.preemption_reason)
    window = plan.ticks_window
    parts = []
    for pod_label in ("exported_pod", "pod"):
        series = selector(
            plan, "kube_pod_status_reason", reason, label_matcher(pod_label, names, "=~")
        )
        # `timestamp` of an expression is its point's: the tick whose slot holds the sample.
        at_tick = f"last_over_time({series}{plan.tick_slot})"
        parts.append(f"min by ({POD_LABELS}) (min_over_time(timestamp({at_tick} == 1){window}))")
    return " or ".join(parts)


def pod_allocation_query(plan: QueryPlan, *, namespace: str, pod: str) -> str:
    """What "explain a charge" shows an operator: one pod's GPU series and their ticks."""
    matchers = []
    for pod_label, namespace_label in (
        ("pod", "namespace"),
        ("exported_pod", "exported_namespace"),
    ):
        series = selector(
            plan,
            "DCGM_FI_DEV_FB_USED",
            label_matcher(pod_label, pod),
            label_matcher(namespace_label, namespace),
        )
        matchers.append(f"count_over_time({series}{plan.window})")
    return " or ".join(matchers)


def tagged_parts(parts: Mapping[str, Part]) -> str:
    """A meter's parts as one expression (what "explain a charge" shows; ingest runs the
    parts one by one)."""
    return tagged({name: " or ".join(part.queries) for name, part in parts.items()})


def devices_query(plan: QueryPlan) -> str:
    return tagged_parts(devices_parts(plan))


def busy_query(plan: QueryPlan) -> str:
    return tagged_parts(busy_parts(plan))


def io_query(plan: QueryPlan) -> str:
    return tagged_parts(io_parts(plan))


def latency_query(plan: QueryPlan) -> str:
    return tagged_parts(latency_parts(plan))


def identity_query(plan: QueryPlan) -> str:
    return tagged_parts(identity_parts(plan))


def targets_query(plan: QueryPlan) -> str:
    return tagged_parts(targets_parts(plan))


# The meters of the GPU exporter's series, which carry their node: what a shard of a sharded
# window reads, for its node set.
DEVICE_METERS = frozenset({"devices", "busy"})
# Meters no GPU series narrows (kube-state-metrics' pods carry no node, the scrape targets
# are the whole pool's): a sharded window's combiner reads them for the whole pool.
POD_METERS = frozenset({"io", "latency", "identity", "targets"})
# Queries run for every batch, part by part; the narrowed ones follow from their answers.
METER_PARTS = {
    "devices": devices_parts,
    "busy": busy_parts,
    "io": io_parts,
    "latency": latency_parts,
    "identity": identity_parts,
    "targets": targets_parts,
}
# Each meter as one expression, for display.
METERS = {
    "devices": devices_query,
    "busy": busy_query,
    "io": io_query,
    "latency": latency_query,
    "identity": identity_query,
    "targets": targets_query,
}


# --- HTTP ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Series:
    labels: dict[str, str]
    values: list[list]  # [evaluation time in Unix seconds, value as Prometheus wrote it]


@dataclass(frozen=True)
class QueryRun:
    name: str
    promql: str
    start: datetime
    end: datetime
    seconds: float  # wall time, HTTP included
    evaluation_seconds: float  # Prometheus' own evalTotalTime
    series: list[Series]
    samples: int = 0  # Prometheus' totalQueryableSamples: what the query cost in data read
    # Where Python summed series (measure._grouped): per evaluation time, how many groups had
    # points from a second scrape target that were left out, and one of them described.
    repeated: tuple[tuple[float, int, str], ...] = ()


# The sockets each thread's request uses, for the deadline's watcher to cut.
_IN_FLIGHT = threading.local()


def _watch(sock: socket.socket | None) -> None:
    watched = getattr(_IN_FLIGHT, "sockets", None)
    if watched is not None and sock is not None:
        watched.append(sock)


class _WatchedConnectionMixin:
    """Records the socket of every connection it opens (the response may keep reading it
    after the connection object has let go of it)."""

    def connect(self) -> None:
        super().connect()  # type: ignore[misc]
        _watch(self.sock)  # type: ignore[attr-defined]


class _WatchedHTTPConnection(_WatchedConnectionMixin, HTTPConnection):
    pass


class _WatchedHTTPSConnection(_WatchedConnectionMixin, HTTPSConnection):
    pass


class _WatchedPoolMixin:
    """Records the socket of a connection kept alive from an earlier request."""

    def _get_conn(self, timeout: float | None = None) -> Any:
        conn = super()._get_conn(timeout)  # type: ignore[misc]
        _watch(conn.sock)
        return conn


class _WatchedHTTPPool(_WatchedPoolMixin, HTTPConnectionPool):
    ConnectionCls = _WatchedHTTPConnection


class _WatchedHTTPSPool(_WatchedPoolMixin, HTTPSConnectionPool):
    ConnectionCls = _WatchedHTTPSConnection


WATCHED_POOLS = {"http": _WatchedHTTPPool, "https": _WatchedHTTPSPool}


class _DeadlineAdapter(HTTPAdapter):
    """An adapter whose pools (direct or through a proxy) let the deadline find the socket."""

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = WATCHED_POOLS

    def proxy_manager_for(self, proxy: str, **proxy_kwargs: Any) -> Any:
        manager = super().proxy_manager_for(proxy, **proxy_kwargs)
        manager.pool_classes_by_scheme = WATCHED_POOLS
        return manager


def _cut_at_deadline(
    deadline_seconds: float,
    sockets: list[socket.socket],
    finished: threading.Event,
    expired: threading.Event,
) -> None:
    """Shut the request's sockets down once the deadline passes: a blocked read returns at
    once. Repeated until the request gives up, for a socket still connecting at the deadline."""
    if finished.wait(deadline_seconds):
        return
    expired.set()
    while True:
        for sock in list(sockets):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except (OSError, ValueError):
                pass  # already closed
        if finished.wait(0.1):
            return


class _LimitedSession(requests.Session):
    """A session that refuses answers larger than a limit or later than a deadline, and parses
    JSON once.

    The deadline bounds the whole request, headers and body: the per-read time-out alone lets
    a server that trickles a byte now and then hold a worker forever.

    PrometheusConnect only hands back `data.result`; the parsed body (with `stats`) is kept
    per thread so the caller can read Prometheus' evaluation time.
    """

    def __init__(self, max_response_bytes: int, deadline_seconds: float) -> None:
        super().__init__()
        self.max_response_bytes = max_response_bytes
        self.deadline_seconds = deadline_seconds
        self.local = threading.local()

    def request(self, method: str, url: str, **kwargs: Any) -> requests.Response:
        sockets: list[socket.socket] = []
        finished, expired = threading.Event(), threading.Event()
        watcher = threading.Thread(
            target=_cut_at_deadline,
            args=(self.deadline_seconds, sockets, finished, expired),
            daemon=True,
        )
        _IN_FLIGHT.sockets = sockets
        watcher.start()
        late = PrometheusUnavailable(
            f"Prometheus did not answer within the deadline of {self.deadline_seconds:g} s"
        )
        try:
            response = self._request_within_deadline(method, url, **kwargs)
        except Exception as error:
            if expired.is_set():
                raise late from error
            raise
        finally:
            _IN_FLIGHT.sockets = None
            finished.set()
            watcher.join()
        # A cut socket can also read as a body ended early (no Content-Length): never trust it.
        if expired.is_set():
            raise late
        return response

    def _request_within_deadline(self, method: str, url: str, **kwargs: Any) -> requests.Response:
        kwargs["stream"] = True
        response = super().request(method, url, **kwargs)
        if response.status_code >= 500 or response.status_code == 429:
            response.close()
            raise PrometheusUnavailable(f"Prometheus answered HTTP {response.status_code}")
        body = bytearray()
        for chunk in response.iter_content(chunk_size=1 << 20):
            body += chunk
            if len(body) > self.max_response_bytes:
                response.close()
                raise PrometheusQueryError(
                    f"Prometheus answer exceeds {self.max_response_bytes} bytes: "
                    "narrow the query or raise the limit"
                )
        response._content = bytes(body)
        try:
            payload = json.loads(response._content) if response._content else None
        except ValueError:
            payload = None
        self.local.payload = payload
        response.json = lambda **_: payload  # type: ignore[method-assign]
        return response


# Prometheus' notes on a query itself (its annotations; Thanos tells them apart from a store's
# warnings so): a counter function over a gauge, histograms of mixed kinds. Not about the data.
PROMQL_NOTES = ("PromQL info:", "PromQL warning:")


class PrometheusClient:
    """query_range through prometheus-api-client, with auth, TLS, time-outs and a size cap."""

    def __init__(
        self,
        *,
        url: str,
        bearer_token: str = "",
        basic_auth: tuple[str, str] | None = None,
        verify_tls: bool = True,
        timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        deadline_seconds: float = DEFAULT_DEADLINE_SECONDS,
        compressed: bool = False,
    ) -> None:
        session = _LimitedSession(max_response_bytes, deadline_seconds)
        session.verify = verify_tls
        if not compressed:
            # requests asks for gzip by default, and compressing is then about 30% of
            # Prometheus' CPU for a batch: 2.07-2.20 s against 1.47-1.56 s for the 55 MB a
            # 10,000-GPU batch's meter queries answer (benchmarks/_batch_cost.py). Worth it
            # only over a slow link (TANDEM_PROMETHEUS_COMPRESSED).
            session.headers["Accept-Encoding"] = "identity"
        headers = {"Authorization": f"Bearer {bearer_token}"} if bearer_token else None
        self._session = session
        self._ranges_closed: bool | None = None
        # Retries belong to Celery (backoff, window stays pending), not to the HTTP layer.
        retry = Retry(total=0, raise_on_status=False)
        self._connect = PrometheusConnect(
            url=url.rstrip("/"),
            headers=headers,
            disable_ssl=not verify_tls,
            retry=retry,
            auth=basic_auth,
            session=session,
            timeout=(min(10.0, timeout_seconds), timeout_seconds),
            method="POST",  # narrowed queries name many series; no URL length limit
        )
        # In place of the plain adapter PrometheusConnect mounted for this URL.
        session.mount(self._connect.url, _DeadlineAdapter(max_retries=retry))

    @classmethod
    def for_source(cls, source: Source) -> PrometheusClient:
        basic_auth = (
            (source.basic_auth_user, source.basic_auth_password) if source.basic_auth_user else None
        )
        return cls(
            url=source.url,
            bearer_token=source.bearer_token,
            basic_auth=basic_auth,
            verify_tls=source.verify_tls,
            deadline_seconds=settings.TANDEM_PROMETHEUS_DEADLINE_SECONDS,
            compressed=settings.TANDEM_PROMETHEUS_COMPRESSED,
        )

    def close(self) -> None:
        self._connect.close()

    def ranges_closed(self) -> bool:
        """Whether this server's ranges hold both ends (Prometheus 2.x) or only the right one
        (3.x, and engines that copied it): two points of a one-second grid in a two-second
        subquery are three in the first case, two in the second. Asked once per client."""
        if self._ranges_closed is None:
            at = datetime.fromtimestamp(RANGE_PROBE_AT, UTC)
            result = self._run(RANGE_PROBE, at, at, 1)
            values = [v for item in result for _, v in item.get("values", [])]
            if values == ["3"]:
                self._ranges_closed = True
            elif values == ["2"]:
                self._ranges_closed = False
            else:
                raise PrometheusQueryError(
                    f"Prometheus answered {values!r} to {RANGE_PROBE}: expected 2 or 3 points"
                )
        return self._ranges_closed

    def query_range(
        self, name: str, promql: str, *, start: datetime, end: datetime, step_seconds: int
    ) -> QueryRun:
        """Evaluate at start, start+step, …, end (all inclusive), chunked under the point limit."""
        series: dict[tuple[tuple[str, str], ...], Series] = {}
        seconds = evaluation = 0.0
        samples = 0
        for chunk_start, chunk_end in _chunks(start, end, step_seconds):
            began = time.perf_counter()
            result = self._run(promql, chunk_start, chunk_end, step_seconds)
            seconds += time.perf_counter() - began
            reported, scanned = self._stats()
            evaluation += reported
            samples += scanned
            for item in result:
                # [evaluation time, "value"] pairs as Prometheus sent them: whole seconds here,
                # since every range query starts on the step grid.
                series_merge(series, item.get("metric", {}), item.get("values", []))
        return QueryRun(
            name, promql, start, end, seconds, evaluation, list(series.values()), samples
        )

    def query_samples(self, name: str, promql: str, *, at: datetime) -> QueryRun:
        """An instant query of a range vector: each series' raw samples, [time, "value"]."""
        began = time.perf_counter()
        result = self._ask(
            lambda: self._connect.custom_query(
                promql, params={"time": f"{at.timestamp():.3f}", "stats": "all"}
            )
        )
        seconds = time.perf_counter() - began
        evaluation, samples = self._stats()
        series = [Series(item.get("metric", {}), item.get("values", [])) for item in result]
        return QueryRun(name, promql, at, at, seconds, evaluation, series, samples)

    def _stats(self) -> tuple[float, int]:
        """The last answer's evaluation seconds and samples scanned (`stats=all`)."""
        payload = getattr(self._session.local, "payload", None) or {}
        stats = _object(_object(_object(payload).get("data")).get("stats"))
        reported = _object(stats.get("timings")).get("evalTotalTime")
        scanned = _object(stats.get("samples")).get("totalQueryableSamples")
        # JSON numbers already; anything else (a hostile or broken server) counts 0.
        return (
            reported if isinstance(reported, int | float) else 0.0,
            scanned if isinstance(scanned, int) else 0,
        )

    def _run(self, promql: str, start: datetime, end: datetime, step: int) -> list[dict]:
        return self._ask(
            lambda: self._connect.custom_query_range(
                promql, start_time=start, end_time=end, step=str(step), params={"stats": "all"}
            )
        )

    def _ask(self, call: Callable[[], Any]) -> list[dict]:
        try:
            result = call()
        except PrometheusError:
            raise
        except (requests.ConnectionError, requests.Timeout) as error:
            raise PrometheusUnavailable(f"Prometheus unreachable: {error}") from error
        except requests.RequestException as error:
            raise PrometheusUnavailable(f"Prometheus request failed: {error}") from error
        except PrometheusApiClientException as error:
            raise PrometheusQueryError(f"Prometheus refused the query: {error}") from error
        except (KeyError, TypeError) as error:
            raise PrometheusQueryError(f"Prometheus answered without data: {error}") from error
        # A success whose data is not a list of series (null, an object) is garbage, not empty.
        if not isinstance(result, list) or not all(isinstance(item, dict) for item in result):
            raise PrometheusQueryError(
                f"Prometheus answered a result that is not a list of series: {str(result)[:200]}"
            )
        self._whole_answer_check()
        return result

    def _whole_answer_check(self) -> None:
        """Raises `PrometheusPartialAnswer` when the last answer says data is missing from it:
        a warning that is not PromQL's own note on the query (`PromQL info:`, `PromQL
        warning:`, which say nothing about the data), or `isPartial`."""
        payload = _object(getattr(self._session.local, "payload", None))
        warnings = payload.get("warnings")
        missing = [
            str(warning)
            for warning in (warnings if isinstance(warnings, list) else [])
            if not str(warning).startswith(PROMQL_NOTES)
        ]
        if payload.get("isPartial") is True:
            missing.insert(0, "isPartial: true")
        if missing:
            raise PrometheusPartialAnswer(
                "Prometheus answered with part of the data missing, retrying until it answers"
                f" whole: {'; '.join(missing)[:1000]}"
            )


def series_merge(
    found: dict[tuple[tuple[str, str], ...], Series], labels: dict[str, str], values: list
) -> None:
    """Add one answer's points of a series to those of the same labels from earlier answers
    (the chunks of one query, in time order)."""
    key = tuple(sorted(labels.items()))
    if key in found:
        found[key].values.extend(values)
    else:
        found[key] = Series(labels=labels, values=values)


def _object(value: Any) -> dict:
    """A JSON object of the answer, or {} where a broken server wrote something else."""
    return value if isinstance(value, dict) else {}


def _chunks(start: datetime, end: datetime, step: int) -> Iterator[tuple[datetime, datetime]]:
    first, last = int(start.timestamp()), int(end.timestamp())
    span = step * (MAX_POINTS_PER_QUERY - 1)
    while first <= last:
        chunk_last = min(last, first + span)
        yield datetime.fromtimestamp(first, UTC), datetime.fromtimestamp(chunk_last, UTC)
        first = chunk_last + step


def finite_non_negative(value: str) -> Decimal | None:
    """The exact number a Prometheus value string spells, or None for NaN, ±Inf and
    negatives; ValueError for text that is no number at all."""
    try:
        number = Decimal(value)
    except InvalidOperation:
        raise ValueError(f"not a number: {value!r}") from None
    if not number.is_finite() or number < 0:
        return None
    return number
