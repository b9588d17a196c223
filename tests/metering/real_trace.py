"""A day of a real GPU cluster (Alibaba's `openb` trace, tests/fixtures/traces/openb) as the
exporters would have written it, and what exact metering must find in it, worked out from
the trace's own times with nothing of Tandem's or of the simulator's.

The trace gives each pod its GPUs (whole ones, or a share of one: `gpu_milli`), its QoS class
and its creation, scheduling and deletion times (none of the simulator's assumptions: real
arrivals, run lengths, retries, pods that gave up waiting, CPU-only pods beside GPU ones); not
its node. The replay places each pod at its real scheduling time on the 16 real nodes of
`nodes.csv`: g whole GPUs on the first node with g free; a GPU-sharing pod on the first shared
GPU with room left for its share (up to 1000 milli), else on a free GPU of its own. Then,
every 60 s from ten minutes before the day to five minutes after it (at hh:mm:30: real
scrapes fall between the intervals' boundaries):

- kube-state-metrics, for each pod from its creation to its deletion: creation time, owner
  (a Job named after the pod), labels, info (its node once scheduled; its priority class by
  QoS), phase (Pending, then Running), its request (`nvidia_com_gpu`, a sharing pod's one
  replica included; `cpu` for a CPU-only pod), and its scheduled time once scheduled; each
  node's GPUs (allocatable, capacity) and creation;
- dcgm-exporter with `--kubernetes-virtual-gpus`, the flag without which sharing does not
  show (docs/telemetry.md, "Shared GPUs"): each GPU's bare `FB_USED` and `GPU_UTIL`, a free
  GPU's engine activity, and for each pod holding it its own `FB_USED`, `GPU_UTIL` and
  engine activity;
- the kubelet's cAdvisor: each running CPU-only pod's disk counters (as for every pod it runs;
  the GPU pods' are left out, which no assertion here reads);
- `up` of every target.

Namespaces are the QoS classes (LS online, BE batch, Burstable research, Guaranteed
platform), each its own team; LS pods run as inference, the others as training.

What exact metering finds (`expected_allocation`, `expected_busy`, `expected_waits`): a pod
holds each of its GPUs at every tick from its scheduling to its deletion, 60 s a tick, split
evenly between the pods holding a shared GPU at that tick, and its busy time is the GPU's
engine activity split the same way; its wait is from creation to scheduling where a tick
shows it running, else, where a tick shows it Pending, to the end of its last Pending tick
(it gave up waiting, or was scheduled and gone between two scrapes: the same to anything
that reads the exporters); a pod no tick shows has neither. A CPU-only pod has none of them.
"""

from __future__ import annotations

import csv
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal
from fractions import Fraction
from pathlib import Path

import pytest

from metering.models import PodWait, UsageInterval
from tests.metering.conftest import source_remove
from tests.metering.jobs import KSM, backfilled_prometheus, ingest_command, jobs_source

TRACE = Path(__file__).resolve().parent.parent / "fixtures" / "traces" / "openb"
SCRAPE = 60
STEP = 300
DAY = 140  # of the trace: seconds 12,096,000 to 12,182,400
START = datetime(2026, 10, 12, tzinfo=UTC)  # trace day 140, 00:00
END = START + timedelta(days=1)
OFFSET = int(START.timestamp()) - DAY * 86_400  # a trace second + OFFSET = Unix seconds
LEAD_IN = 600
FIRST_TICK = int(START.timestamp()) - LEAD_IN + 30
LAST_TICK = int(END.timestamp()) + STEP  # exclusive
NAMESPACES = {  # QoS class -> (namespace, priority class)
    "LS": ("online", "inference-critical"),
    "BE": ("batch", "training-batch"),
    "Burstable": ("research", "training-interactive"),
    "Guaranteed": ("platform", "training-interactive"),
}
# dcgm-exporter's modelName for the trace's GPU types (G2 and G3 are undisclosed: kept as named).
MODEL_NAMES = {
    "G2": "G2",
    "G3": "G3",
    "T4": "Tesla T4",
    "V100M16": "Tesla V100-SXM2-16GB",
    "V100M32": "Tesla V100-SXM2-32GB",
}
DCGM_JOB = 'job="dcgm-exporter"'
CPU_NODE = "openb-cpu-node"  # where the CPU-only pods run (the trace's nodes.csv lists GPU nodes)
CADVISOR = 'job="kubelet",metrics_path="/metrics/cadvisor",instance="10.2.0.1:10250"'
CADVISOR_METRICS = (
    "container_fs_reads_total",
    "container_fs_writes_total",
    "container_fs_reads_bytes_total",
    "container_fs_writes_bytes_total",
)
IO_PER_SECOND = 10
POD_FB_MIB = 2000
POD_UTIL = 30


@dataclass(frozen=True)
class TracePod:
    name: str
    namespace: str
    priority_class: str
    gpus: int
    milli: int
    cpu_milli: int
    created: int  # Unix seconds
    scheduled: int | None
    deleted: int

    @property
    def shares(self) -> bool:
        return self.gpus == 1 and self.milli < 1000

    def running_at(self, tick: int) -> bool:
        return self.scheduled is not None and self.scheduled <= tick < self.deleted

    def pending_at(self, tick: int) -> bool:
        return self.created <= tick < (self.scheduled or self.deleted) and tick < self.deleted


@dataclass
class Gpu:
    node: str
    index: int
    model: str
    address: str
    held: list[tuple[TracePod, int]] = field(default_factory=list)  # (pod, milli) placed

    @property
    def uuid(self) -> str:
        return f"GPU-{self.node}-{self.index}"

    def holders(self, tick: int) -> list[TracePod]:
        return [pod for pod, _ in self.held if pod.running_at(tick)]


def trace_pods() -> list[TracePod]:
    with open(TRACE / "pods.csv", newline="", encoding="utf-8") as rows:
        return [
            TracePod(
                name=row["name"],
                namespace=NAMESPACES[row["qos"]][0],
                priority_class=NAMESPACES[row["qos"]][1],
                gpus=int(row["num_gpu"]),
                milli=int(row["gpu_milli"]),
                cpu_milli=int(row["cpu_milli"]),
                created=int(row["creation_time"]) + OFFSET,
                scheduled=int(row["scheduled_time"]) + OFFSET if row["scheduled_time"] else None,
                deleted=int(row["deletion_time"]) + OFFSET,
            )
            for row in csv.DictReader(rows)
        ]


def trace_gpus() -> list[Gpu]:
    with open(TRACE / "nodes.csv", newline="", encoding="utf-8") as rows:
        nodes = list(csv.DictReader(rows))
    return [
        Gpu(node["sn"], index, MODEL_NAMES[node["model"]], f"10.1.0.{number}")
        for number, node in enumerate(nodes, start=1)
        for index in range(int(node["gpu"]))
    ]


def placed(pods: list[TracePod], gpus: list[Gpu]) -> list[Gpu]:
    """Each GPU pod on GPUs at its scheduling time, releases before placements at the same
    second; a pod that fits nowhere is an error of the fixture, not a pod left out."""
    events = sorted(
        [(pod.deleted, 0, pod) for pod in pods if pod.gpus and pod.scheduled is not None]
        + [(pod.scheduled, 1, pod) for pod in pods if pod.gpus and pod.scheduled is not None],
        key=lambda event: (event[0], event[1], event[2].name),
    )
    using: dict[int, list[tuple[TracePod, int]]] = defaultdict(list)  # id(gpu) -> now
    for _, placing, pod in events:
        if not placing:
            for gpu in gpus:
                using[id(gpu)] = [(p, m) for p, m in using[id(gpu)] if p is not pod]
            continue
        chosen = _shared_gpu(pod, gpus, using) if pod.shares else _whole_gpus(pod, gpus, using)
        if not chosen:
            raise AssertionError(f"{pod.name} ({pod.gpus} GPUs) fits on none of the nodes")
        for gpu in chosen:
            using[id(gpu)].append((pod, pod.milli if pod.shares else 1000))
            gpu.held.append((pod, pod.milli))
    return gpus


def _whole_gpus(pod: TracePod, gpus: list[Gpu], using: dict) -> list[Gpu]:
    by_node: dict[str, list[Gpu]] = defaultdict(list)
    for gpu in gpus:
        if not using[id(gpu)]:
            by_node[gpu.node].append(gpu)
    return next((free[: pod.gpus] for free in by_node.values() if len(free) >= pod.gpus), [])


def _shared_gpu(pod: TracePod, gpus: list[Gpu], using: dict) -> list[Gpu]:
    for gpu in gpus:
        held = using[id(gpu)]
        if held and all(m < 1000 for _, m in held) and sum(m for _, m in held) + pod.milli <= 1000:
            return [gpu]
    return next(([gpu] for gpu in gpus if not using[id(gpu)]), [])


def ticks() -> range:
    return range(FIRST_TICK, LAST_TICK, SCRAPE)


def series_at(
    pods: list[TracePod], gpus: list[Gpu], *, requests: bool = True
) -> dict[int, list[str]]:
    """Every tick's samples; without `requests`, kube-state-metrics writes no
    `kube_pod_container_resource_requests` (told not to, to save series)."""
    nodes = {gpu.node: gpu for gpu in gpus}  # one GPU of each node: its name and address
    node_gpus: dict[str, int] = defaultdict(int)
    for gpu in gpus:
        node_gpus[gpu.node] += 1
    node_created = FIRST_TICK - 30 * 86_400
    node_of = {pod.name: gpu.node for gpu in gpus for pod, _ in gpu.held}
    lines: dict[int, list[str]] = {}
    for tick in ticks():
        at = [f"up{{{KSM}}} 1", f"up{{{CADVISOR}}} 1"]
        for node, first in nodes.items():
            resource = f'{KSM},node="{node}",resource="nvidia_com_gpu",unit="integer"'
            at += [
                f'up{{{DCGM_JOB},instance="{first.address}:9400"}} 1',
                f"kube_node_status_allocatable{{{resource}}} {node_gpus[node]}",
                f"kube_node_status_capacity{{{resource}}} {node_gpus[node]}",
                f'kube_node_created{{{KSM},node="{node}"}} {node_created}',
            ]
        for gpu in gpus:
            at += _device_lines(gpu, gpu.holders(tick))
        for pod in pods:
            if pod.created <= tick < pod.deleted:
                at += _pod_lines(pod, tick, node_of.get(pod.name, CPU_NODE), requests=requests)
                if not pod.gpus and pod.running_at(tick):
                    at += _cadvisor_lines(pod, tick)
        lines[tick] = at
    return lines


def _device_lines(gpu: Gpu, holders: list[TracePod]) -> list[str]:
    labels = (
        f'gpu="{gpu.index}",UUID="{gpu.uuid}",device="nvidia{gpu.index}",'
        f'modelName="{gpu.model}",Hostname="{gpu.node}",{DCGM_JOB},instance="{gpu.address}:9400"'
    )
    engine = _engine(len(holders))
    lines = [
        f"DCGM_FI_DEV_FB_USED{{{labels}}} {POD_FB_MIB * len(holders)}",
        f"DCGM_FI_DEV_GPU_UTIL{{{labels}}} {min(100, POD_UTIL * len(holders))}",
    ]
    if not holders:
        return [*lines, f"DCGM_FI_PROF_GR_ENGINE_ACTIVE{{{labels}}} 0"]
    for pod in holders:
        own = f'{labels},container="main",namespace="{pod.namespace}",pod="{pod.name}"'
        lines += [
            f"DCGM_FI_DEV_FB_USED{{{own}}} {POD_FB_MIB}",
            f"DCGM_FI_DEV_GPU_UTIL{{{own}}} {POD_UTIL}",
            f"DCGM_FI_PROF_GR_ENGINE_ACTIVE{{{own}}} {engine}",
        ]
    return lines


def _pod_lines(pod: TracePod, tick: int, node: str, *, requests: bool) -> list[str]:
    base = f'{KSM},namespace="{pod.namespace}",pod="{pod.name}",uid="uid-{pod.name}"'
    if pod.gpus:
        request = f'resource="nvidia_com_gpu",unit="integer"}} {pod.gpus}'
    else:
        request = f'resource="cpu",unit="core"}} {pod.cpu_milli / 1000:g}'
    lines = [
        f"kube_pod_created{{{base}}} {pod.created}",
        f'kube_pod_owner{{{base},owner_kind="Job",owner_name="{pod.name}",'
        'owner_is_controller="true"} 1',
        f"kube_pod_labels{{{base}}} 1",
    ]
    if requests:
        lines.append(f'kube_pod_container_resource_requests{{{base},container="main",{request}')
    if not pod.running_at(tick):
        return [
            *lines,
            f'kube_pod_info{{{base},node="",priority_class="{pod.priority_class}"}} 1',
            f'kube_pod_status_phase{{{base},phase="Pending"}} 1',
            f"kube_pod_status_unschedulable{{{base}}} 1",
            f'kube_pod_status_condition{{{base},condition="PodScheduled",status="false"}} 1',
        ]
    return [
        *lines,
        f'kube_pod_info{{{base},node="{node}",priority_class="{pod.priority_class}"}} 1',
        f'kube_pod_status_phase{{{base},phase="Running"}} 1',
        f"kube_pod_status_scheduled_time{{{base}}} {pod.scheduled}",
        f'kube_pod_status_condition{{{base},condition="PodScheduled",status="true"}} 1',
    ]


def _engine(holders: int) -> str:
    """A GPU's engine activity with `holders` pods on it (0.3 each, at most 1), as written."""
    return str(min(Decimal(1), Decimal("0.3") * holders))


def _cadvisor_lines(pod: TracePod, tick: int) -> list[str]:
    """The kubelet's cAdvisor counters of a running CPU-only pod (as for every pod it runs):
    the pod level and its one container, growing by IO_PER_SECOND of each since it started."""
    assert pod.scheduled is not None
    count = (tick - pod.scheduled) * IO_PER_SECOND
    lines = []
    for container in ("", "main"):
        labels = (
            f'container="{container}",device="/dev/nvme0n1",namespace="{pod.namespace}",'
            f'pod="{pod.name}",{CADVISOR}'
        )
        lines += [f"{metric}{{{labels}}} {count}" for metric in CADVISOR_METRICS]
    return lines


def _interval(tick: int) -> datetime:
    return datetime.fromtimestamp(tick - tick % STEP, UTC)


def six_places(value: Fraction) -> Decimal:
    """Rounded once, half up, to 6 places (pricing.md); worked out here rather than with
    `kernel`'s helper so the expected figures owe nothing to Tandem's code."""
    exact = Decimal(value.numerator) / Decimal(value.denominator)
    return exact.quantize(Decimal("0.000001"), rounding=ROUND_HALF_UP)


UsageKey = tuple[str, str, datetime, str]  # namespace, pod, interval start, GPU model


def _split_per_tick(
    gpus: list[Gpu], per_gpu_tick: Callable[[int], Fraction]
) -> dict[UsageKey, Decimal]:
    """Over the day's ticks, `per_gpu_tick(k)` GPU-seconds of each GPU held by k pods, split
    evenly between them, summed per pod and interval."""
    exact: dict[UsageKey, Fraction] = defaultdict(Fraction)
    for tick in ticks():
        if not START.timestamp() <= tick < END.timestamp():
            continue
        for gpu in gpus:
            holders = gpu.holders(tick)
            for pod in holders:
                key = (pod.namespace, pod.name, _interval(tick), gpu.model)
                exact[key] += per_gpu_tick(len(holders)) / len(holders)
    return {key: six_places(value) for key, value in exact.items()}


def expected_allocation(gpus: list[Gpu]) -> dict[UsageKey, Decimal]:
    """GPU-seconds per pod and interval: each tick of a GPU, 60 s, split between its pods."""
    return _split_per_tick(gpus, lambda _: Fraction(SCRAPE))


def expected_busy(gpus: list[Gpu]) -> dict[UsageKey, Decimal]:
    """Busy GPU-seconds per pod and interval: at each tick a GPU's engine activity (a copy of
    the device's on each of its pods' series) split between its pods, as its allocation is."""
    return _split_per_tick(gpus, lambda holders: Fraction(_engine(holders)) * SCRAPE)


def expected_waits(pods: list[TracePod]) -> dict[str, tuple[int, datetime, datetime | None]]:
    """GPU pod -> (seconds, ended, scheduled or None) of the waits exact metering records."""
    waits = {}
    for pod in pods:
        if not pod.gpus:
            continue
        seen = [tick for tick in ticks() if pod.created <= tick < pod.deleted]
        if any(pod.running_at(tick) for tick in seen):
            ended, scheduled = pod.scheduled, pod.scheduled
        elif seen:
            # The end of its last Pending tick: the slot on the scrape interval's grid that
            # holds its last Pending sample, plus the interval (docs/telemetry.md, "gave up
            # waiting"); the pod went between that sample and the next scrape.
            ended, scheduled = seen[-1] - seen[-1] % SCRAPE + SCRAPE, None
        else:
            continue
        waits[pod.name] = (
            ended - pod.created,
            datetime.fromtimestamp(ended, UTC),
            None if scheduled is None else datetime.fromtimestamp(scheduled, UTC),
        )
    return waits


Day = tuple[list[TracePod], list[Gpu]]
Wait = tuple[int, datetime, datetime | None]  # seconds, ended, scheduled (None: gave up)
# Waits ending in the day, its first and last ten minutes aside (a pod first seen at an edge
# is the neighbouring day's).
WAITS_FROM, WAITS_TO = START + timedelta(minutes=10), END - timedelta(minutes=10)


@pytest.fixture(scope="module")
def trace_day() -> Day:
    pods = trace_pods()
    return pods, placed(pods, trace_gpus())


def day_ingested(
    blocker: pytest.FixtureRequest, out: Path, day: Day, *, requests: bool = True
) -> Iterator[None]:
    """A module fixture's body: the day back-filled into a Prometheus in `out`, ingested once
    through `manage.py ingest` (committed), then removed and the Prometheus stopped."""
    prometheus = backfilled_prometheus(out, series_at(*day, requests=requests), SCRAPE)
    try:
        with blocker.unblock():
            source = jobs_source(prometheus.url)
            ingest_command(START, END)
            yield
            source_remove(source.pk)
    finally:
        prometheus.stop()


def in_the_day(waits: dict[str, Wait]) -> dict[str, Wait]:
    return {pod: wait for pod, wait in waits.items() if WAITS_FROM <= wait[1] < WAITS_TO}


def stored_waits() -> dict[str, Wait]:
    rows = PodWait.objects.values_list("pod", "seconds", "ended", "scheduled")
    return in_the_day({pod: (seconds, ended, scheduled) for pod, seconds, ended, scheduled in rows})


def stored_usage(field: str = "alloc_gpu_seconds") -> dict[UsageKey, Decimal]:
    """The stored GPU-seconds (`field`: allocated, or busy) per pod and interval, where some."""
    rows = UsageInterval.objects.values_list(
        "task__namespace", "task__external_id", "interval_start", "gpu_model", field
    )
    return {
        (namespace, pod, start, model): seconds
        for namespace, pod, start, model, seconds in rows
        if seconds
    }
