"""The work on the pool: tasks (a Job, a notebook, an inference service), their pods, and the
kube-state-metrics series each pod carries.

Identity follows docs/telemetry.md: task = pod label `task` if present, else the owner's name;
team = pod label `team` if present, else the namespace (namespaces are named after teams, so both
agree).
"""

from __future__ import annotations

import math
import random
from collections import defaultdict
from dataclasses import dataclass, field

from simulator.layout import SHARE_UNITS, TIME_SLICE_REPLICAS, Device, Node, mig_slices

TEAMS = ("search", "ads", "speech", "vision", "nlp", "recsys")
PRIORITIES = {
    "inference-critical": 1_000_000,
    "training-interactive": 10_000,
    "training-batch": 1_000,
    "preprocessing": 500,
}
KIND_OF_PRIORITY_CLASS = {
    "inference-critical": "inference",
    "training-interactive": "training_interactive",
    "training-batch": "training_batch",
    "preprocessing": "preprocessing",
}
PHASES = ("Pending", "Running", "Succeeded", "Failed", "Unknown")
KSM_TARGET = 'job="kube-state-metrics",instance="10.42.0.5:8080"'
# What kube-state-metrics writes of `kube_pod_status_reason`, by release (its
# internal/store/pod.go): up to v2.18 a series per pod for each of five reasons, 0 or 1, and
# none for a preemption by the scheduler; v2.19 adds `PreemptionByScheduler` (and two more);
# from v2.20 on, a series only for a reason that is set, at 1. "" (the simulator's default)
# writes v2.19's one series that Tandem reads, 0 or 1, and leaves out the other reasons.
KSM_STATUS_REASONS = {
    "2.18": ("Evicted", "NodeAffinity", "NodeLost", "Shutdown", "UnexpectedAdmissionError"),
    "2.19": (
        "Evicted",
        "NodeAffinity",
        "NodeLost",
        "PreemptionByScheduler",
        "SchedulingGated",
        "Shutdown",
        "TerminationByKubelet",
        "UnexpectedAdmissionError",
    ),
    "2.20": ("PreemptionByScheduler",),
    "": ("PreemptionByScheduler",),
}
KSM_VERSIONS = tuple(version for version in KSM_STATUS_REASONS if version)
# Kubernetes' random name suffix alphabet (no vowels, no look-alike digits).
NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
# vLLM's e2e request latency buckets (V0 set: contains 1, 2.5, 5, ... 60 and sub-second ones).
LATENCY_BOUNDS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0)
LATENCY_LE = (*(repr(b) for b in LATENCY_BOUNDS), "+Inf")
LOG_LATENCY_BOUNDS = tuple(math.log(b) for b in LATENCY_BOUNDS)


def name_suffix(rng: random.Random, length: int = 5) -> str:
    return "".join(rng.choice(NAME_ALPHABET) for _ in range(length))


@dataclass(eq=False)
class Service:
    """An inference Deployment serving one model through vLLM replicas."""

    namespace: str
    model_name: str
    replicaset: str
    slo_p99_ms: int
    median_seconds: float
    sigma: float
    capacity_rps: float
    min_replicas: int
    max_replicas: int
    peak_rps: float = 0.0
    rate_rps: float = 0.0
    utilization: float = 0.0
    surge_until: int = 0
    surge_factor: float = 1.0
    low_since: int | None = None
    pods: list[Pod] = field(default_factory=list)
    task: Task | None = None
    increments: dict[int, list[int]] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.model_name}"


@dataclass(eq=False)
class Task:
    id: str
    team: str
    namespace: str
    priority_class: str
    owner_kind: str
    owner_name: str
    label_task: str | None
    label_team: bool
    request_mode: str  # whole | mig | timesliced
    request_gpus: int = 1
    request_profile: str = ""
    remaining_seconds: int = 0
    checkpoint_seconds: int = 0
    containers: tuple[str, ...] = ("main",)
    service: Service | None = None
    gang: bool = False  # a multi-node Job: its pods run at once, each on another node
    pods: list[str] = field(default_factory=list)
    # --preemptions-by kueue, a Job (see Pool._kueue_managed): whether Kueue has admitted its
    # workload, its pods not ended yet, and its pods waiting for the admission (no Kueue-held
    # Job has pods yet, so kube-state-metrics shows none of them: see Pod.hidden).
    admitted: bool = False
    live_pods: int = 0
    awaiting: list[Pod] = field(default_factory=list)
    alloc_units: defaultdict[int, int] = field(default_factory=lambda: defaultdict(int))
    busy_units: defaultdict[int, int] = field(default_factory=lambda: defaultdict(int))
    # The same allocation by GPU model (dcgm-exporter's modelName) -> interval -> units.
    alloc_units_by_model: defaultdict[str, defaultdict[int, int]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(int))
    )
    io_operations: defaultdict[int, int] = field(default_factory=lambda: defaultdict(int))
    memory_peak_mib: int = 0
    preemptions: list[dict] = field(default_factory=list)
    waits: list[dict] = field(default_factory=list)

    @property
    def kind(self) -> str:
        return KIND_OF_PRIORITY_CLASS[self.priority_class]

    @property
    def priority(self) -> int:
        return PRIORITIES[self.priority_class]

    @property
    def request_value(self) -> str:
        """kube_pod_container_resource_requests value: GPUs, or the share of one for MIG/slices."""
        if self.request_mode == "whole":
            return str(self.request_gpus)
        if self.request_mode == "mig":
            return repr(round(mig_slices(self.request_profile) / 7, 6))
        return repr(1 / TIME_SLICE_REPLICAS)


@dataclass(eq=False)
class Pod:
    name: str
    uid: str
    task: Task
    seq: int
    created: int
    created_tick: int
    pod_ip: str
    # When the pod joined the scheduler's queue: its creation, except that Kueue holds a
    # workload's Job suspended until admitted, so kube-state-metrics' `created` moves to the
    # admission while the scheduler model keeps ordering and starving by this one.
    queued: int = 0
    # Waiting for Kueue's admission: kube-state-metrics writes nothing of it; and since when
    # it waits (its queued time, or its workload's eviction).
    hidden: bool = False
    awaiting_since: int = 0
    phase: str = "Pending"
    scheduled: int | None = None
    node: Node | None = None
    devices: list[Device] = field(default_factory=list)
    reserved: list[Device] = field(default_factory=list)
    ended: bool = False
    preempted: bool = False
    telemetry: bool = True
    run_seconds: int = 0  # how long this pod must run to finish its task's remaining work
    checkpoints_done: int = 0
    # per-tick dynamics
    engine_base: int = 0
    engine_percent: int = 0
    memory_mib: int = 0
    io: dict[str, list[int]] = field(default_factory=dict)  # container -> [r, w, rB, wB]
    latency_counts: list[int] = field(default_factory=list)
    latency_sum: float = 0.0
    ksm_lines: list[str] = field(default_factory=list)
    ksm_version: str = ""  # see KSM_STATUS_REASONS
    device_prefixes: dict[int, list[str]] = field(default_factory=dict)
    cadvisor_prefixes: list[tuple[str, list[str]]] = field(default_factory=list)
    vllm_prefixes: list[str] = field(default_factory=list)
    vllm_up_prefix: str = ""  # Prometheus' `up` of its vLLM target, where written

    @property
    def namespace(self) -> str:
        return self.task.namespace

    def ksm_base(self) -> str:
        return f'{KSM_TARGET},namespace="{self.namespace}",pod="{self.name}",uid="{self.uid}"'

    def rebuild_ksm_lines(self) -> None:
        """kube-state-metrics' series for this pod in its current state (label sets change when
        the pod is scheduled, as kube_pod_info's node/host_ip do in reality); none while it
        waits for Kueue's admission (its Job suspended, the pod does not exist yet)."""
        if self.hidden:
            self.ksm_lines = []
            return
        task, base = self.task, self.ksm_base()
        node = self.node.name if self.node else ""
        host_ip = self.node.ip if self.node else ""
        pod_ip = self.pod_ip if self.node else ""
        pod_labels = ""
        if task.label_team:
            pod_labels += f',label_team="{task.team}"'
        if task.label_task:
            pod_labels += f',label_task="{task.label_task}"'
        lines = [
            f"kube_pod_created{{{base}}} {self.created}",
            f'kube_pod_info{{{base},host_ip="{host_ip}",pod_ip="{pod_ip}",node="{node}",'
            f'created_by_kind="{task.owner_kind}",created_by_name="{task.owner_name}",'
            f'priority_class="{task.priority_class}",host_network="false"}} 1',
            f'kube_pod_owner{{{base},owner_kind="{task.owner_kind}",'
            f'owner_name="{task.owner_name}",owner_is_controller="true"}} 1',
            f"kube_pod_labels{{{base}{pod_labels}}} 1",
            f'kube_pod_container_resource_requests{{{base},container="{task.containers[0]}",'
            f'resource="nvidia_com_gpu",unit="integer"}} {task.request_value}',
        ]
        lines += [
            f'kube_pod_status_phase{{{base},phase="{phase}"}} {int(phase == self.phase)}'
            for phase in PHASES
        ]
        if self.scheduled is not None:
            lines.append(f"kube_pod_status_scheduled_time{{{base}}} {self.scheduled}")
        for reason in KSM_STATUS_REASONS[self.ksm_version]:
            value = int(self.preempted and reason == "PreemptionByScheduler")
            if value or self.ksm_version != "2.20":
                lines.append(f'kube_pod_status_reason{{{base},reason="{reason}"}} {value}')
        self.ksm_lines = lines


def device_share_units(device: Device) -> int:
    """This tick's share of `device` held by each of its pods, in 84ths of a GPU."""
    if device.sliced:
        return SHARE_UNITS // len(device.holders)
    return device.share_units
