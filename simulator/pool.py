"""The pool engine: one scrape tick at a time, the scheduler, the controllers and the exporters.

Each tick `t` runs, in order: hardware (GPUs/nodes drop out and come back), controllers (the
inference autoscaler, Job arrivals, Jobs re-creating preempted pods, notebooks), progress
(finished pods end), the scheduler (priority order, preemption for inference), then the
exporters write every series for `t` and the bookkeeping for truth.json. A sample taken at `t`
stands for [t, t + s) and belongs to the interval holding `t`. Devices freed at `t` are free
from the next tick on: a pod that ends at `t` still reports its GPU at `t`.

Everything random comes from one `random.Random(seed)`; nothing reads the clock, so a seed
gives the same files byte for byte.
"""

from __future__ import annotations

import datetime as dt
import math
import random
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from operator import add
from pathlib import Path

from simulator.config import PoolConfig, SilentExporter, SimulatorConfigError
from simulator.layout import (
    IDLE_POWER_W,
    POWER_PER_BUSY_PERCENT_W,
    SHARE_UNITS,
    TIME_SLICE_REPLICAS,
    Device,
    Gpu,
    Node,
    build_layout,
    fake_uuid,
)
from simulator.truth import TaskSpool, iso, write_streamed_truth
from simulator.workload import (
    KSM_TARGET,
    LATENCY_BOUNDS,
    LATENCY_LE,
    LOG_LATENCY_BOUNDS,
    TEAMS,
    Pod,
    Service,
    Task,
    name_suffix,
)

DCGM_METRICS = (
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
)
# DCGM_FI_DEV_GPU_UTIL is not supported in MIG mode: instances report only profiling metrics.
MIG_DCGM_METRICS = DCGM_METRICS[1:]
CADVISOR_METRICS = (
    "container_fs_reads_total",
    "container_fs_writes_total",
    "container_fs_reads_bytes_total",
    "container_fs_writes_bytes_total",
)
PERCENT = tuple(str(i) for i in range(101))
RATIO = tuple(f"{i / 100:.2f}" for i in range(101))
DISK = "/dev/nvme0n1"
# (reads/s, writes/s, bytes per read, bytes per write) of a pod's main container, per kind.
IO_RATES = {
    "inference": (2.0, 1.0, 65536, 4096),
    "training_batch": (40.0, 5.0, 262144, 1048576),
    "preprocessing": (400.0, 150.0, 131072, 131072),
    "training_interactive": (10.0, 3.0, 65536, 65536),
}
SERVED_MODELS = (  # (model_name, median latency s, lognormal sigma)
    ("qwen2-7b-instruct", 0.9, 0.45),
    ("llama3-8b-chat", 1.1, 0.5),
    ("mistral-7b-instruct", 0.8, 0.45),
    ("deepseek-coder-6-7b", 1.3, 0.55),
    ("qwen2-72b-awq", 2.2, 0.5),
    ("glm4-9b-chat", 1.0, 0.5),
)
TRAINED_MODELS = ("llama3-8b", "qwen2-7b", "mixtral-8x7b", "vit-l16", "whisper-large", "dlrm")
PURPOSES = ("sft", "pretrain", "dpo", "lora", "distill")
DATASETS = ("clickstream", "asr-corpus", "web-crawl", "images-v3", "catalog")
USERS = ("alice", "bob", "chen", "dana", "eve", "farid", "gao", "hana")
JOB_GPU_CHOICES = ((1, 0.45), (2, 0.3), (4, 0.2), (8, 0.05))
REPLICA_TARGET_LOAD = 0.7
SCALE_DOWN_AFTER_SECONDS = 600
STARVATION_SECONDS = 3 * 3600
# Kueue's controller as Prometheus scrapes it (its metrics Service, HTTPS port 8443), and its
# counter of evicted workloads (Kueue's pkg/metrics: per cluster queue, reason, underlying
# cause, priority class and replica role; a Prometheus client CounterVec, so a label set's
# series exists only from its first increment on).
KUEUE_TARGET = 'job="kueue",instance="10.96.0.50:8443"'
KUEUE_UP = f"up{{{KUEUE_TARGET}}} "
# Kueue's admission wait histogram (pkg/metrics: `generateExponentialBuckets(16)`, i.e. 1, then
# 2.5 doubling 15 times up to 40960 s), its `le` strings as client_golang's text format writes
# them (shortest 'g': "1", "2.5", ..., "40960"). A HistogramVec too: a label set's series
# exist only from its first observation on.
KUEUE_WAIT_LE = ("1", "2.5", *(str(5 * 2**i) for i in range(14)), "+Inf")
KUEUE_WAIT_BOUNDS = tuple(Decimal(le) for le in KUEUE_WAIT_LE[:-1])  # exact, as written
KUEUE_WAIT = "kueue_admission_wait_time_seconds"


@dataclass(frozen=True)
class SimulationResult:
    metrics_paths: tuple[Path, ...]  # one file, or consecutive parts in time order
    truth_path: Path
    samples_written: int
    seconds: float

    @property
    def metrics_path(self) -> Path:
        return self.metrics_paths[0]


def demand_shape(hour: float) -> float:
    """Inference demand by local hour, 1.0 at the top of the 9:00-22:00 peak."""
    if 9 <= hour < 22:
        return 0.7 + 0.3 * math.sin(math.pi * (hour - 9) / 13)
    if 7 <= hour < 9:
        return 0.12 + 0.3 * (hour - 7) / 2
    if 22 <= hour < 24:
        return 0.42 - 0.3 * (hour - 22) / 2
    return 0.12


def bucket_p99(median: float, sigma: float) -> float:
    """P99 of a lognormal as read back from vLLM's buckets by linear interpolation."""
    spread = 1 / (sigma * math.sqrt(2))
    previous_bound, previous_share = 0.0, 0.0
    for bound, log_bound in zip(LATENCY_BOUNDS, LOG_LATENCY_BOUNDS, strict=True):
        share = 0.5 * (1 + math.erf((log_bound - math.log(median)) * spread))
        if share >= 0.99:
            fraction = (0.99 - previous_share) / (share - previous_share)
            return previous_bound + (bound - previous_bound) * fraction
        previous_bound, previous_share = bound, share
    return LATENCY_BOUNDS[-1]


class Pool:
    def __init__(self, config: PoolConfig) -> None:
        self.config = config
        self.rng = random.Random(config.seed)
        self.s = config.scrape_interval_seconds
        self.d = config.step_seconds
        self.zone = config.zone
        self.mixed_models = config.gpu_models == "mixed"
        self.nodes: list[Node] = build_layout(config.gpus, self.rng, mixed_models=self.mixed_models)
        self.gpus: list[Gpu] = [gpu for node in self.nodes for gpu in node.gpus]
        self.devices: list[Device] = [d for gpu in self.gpus for d in gpu.devices]
        self.whole_by_node = {
            node: [d for gpu in node.gpus for d in gpu.devices if d.mode == "whole"]
            for node in self.nodes
        }
        self.mig_devices = [d for d in self.devices if d.mode == "mig"]
        self.timesliced_devices = [d for d in self.devices if d.mode == "timesliced"]
        # Where a pod asking for whole GPUs may land: whole GPUs, and time-sliced GPUs that no
        # time-sliced pod holds (see layout.Device.exclusive).
        self.exclusive_by_node = {
            node: [d for gpu in node.gpus for d in gpu.devices if d.mode != "mig"]
            for node in self.nodes
        }
        self.bare_prefixes = {d: _dcgm_prefixes(d, "") for d in self.devices}
        # What Prometheus itself writes per scrape of each node's dcgm-exporter.
        self.up_prefixes = {node: _up_prefix(node) for node in self.nodes}
        # kube-state-metrics' view of each node (its GPUs, its creation: a day before the
        # pool's start, or when it came back from a loss), written while the node is up.
        self.node_created = config.start_epoch - 86_400
        self.registered = dict.fromkeys(self.nodes, self.node_created)
        self.node_lines = {node: _node_lines(node, self.node_created) for node in self.nodes}
        # Nodes in maintenance (SilentExporter.maintenance): not present, still listed.
        self.maintained: dict[Node, SilentExporter] = {}
        self.whole_count = sum(len(v) for v in self.whole_by_node.values())
        self.max_whole_per_node = max(len(v) for v in self.whole_by_node.values())
        # Free whole-GPU slots per present node, kept up to date lazily so that placing a pod
        # costs a few set lookups, not a scan of every device (10,000 GPUs: see _fit_whole).
        # Every change of a device's holders or reservation, or of a GPU's or node's presence,
        # marks its node dirty; _refresh_free recounts only those nodes.
        self._free_of: dict[Node, int] = {}
        self._free_nodes: dict[int, set[Node]] = {}
        self._dirty: set[Node] = set()
        self.tasks: dict[str, Task] = {}
        # With a spool (simulate() sets one), finished tasks leave `tasks` for it each tick.
        self.spool: TaskSpool | None = None
        self.services: list[Service] = []
        self.capacity_gpu_seconds: dict[int, int] = {}
        # GPU model -> interval -> GPU-seconds present (truth.json's `capacity_by_model`).
        self.capacity_by_model: dict[str, dict[int, int]] = {}
        self.pending: list[Pod] = []
        self.running: list[Pod] = []
        self.lingering: list[Pod] = []
        self.recreate: list[Task] = []
        self.sequence = 0
        self.started = False
        self.separate = config.pools == "separate"
        # --preemptions-by kueue: the `kueue_evicted_workloads_total` line prefix of each label
        # set evicted so far -> its workloads evicted, in the order the label sets appeared;
        # and the tasks already evicted at the tick being run, since a workload is evicted
        # once however many of its pods go (see _count_eviction).
        self.kueue = config.preemptions_by == "kueue"
        self.kueue_evictions: dict[str, int] = {}
        self._evicted_tick: int | None = None
        self._evicted_tasks: set[Task] = set()
        # Kueue's admission waits: per label set, its line prefixes (a bucket per bound, _sum,
        # _count) and their values, in the order the label sets appeared; the admissions for
        # truth.json (`kueue_admissions`); and this tick's pods bound while their workload
        # waited for admission, admitted together once the scheduler's pass is over.
        self.kueue_waits: dict[str, tuple[list[str], list[int]]] = {}
        self.kueue_admissions: list[dict] = []
        self._admitting: list[Pod] = []
        self._create_services()
        served = {service.model_name for service in self.services}
        for model in config.vllm_without_stats:
            if model not in served:
                raise SimulatorConfigError(
                    f"--vllm-without-stats model {model!r} is not one of"
                    f" {', '.join(sorted(served))}"
                )
        if self.separate:
            self._add_inference_pool()
        # After the inference nodes: a silent exporter may be on one of them.
        names = {node.name for node in self.nodes}
        for silent in config.silent_exporters:
            if silent.node not in names:
                raise SimulatorConfigError(
                    f"--silent-exporter node {silent.node!r} is not one of "
                    f"{', '.join(sorted(names))}"
                )
        self._dirty.update(self.exclusive_by_node)
        self.max_exclusive_per_node = max(len(v) for v in self.exclusive_by_node.values())

    # -- names -------------------------------------------------------------------------------

    def _next(self) -> int:
        self.sequence += 1
        return self.sequence

    def _local(self, t: int) -> tuple[float, bool]:
        local = dt.datetime.fromtimestamp(t, self.zone)
        return local.hour + local.minute / 60, local.weekday() >= 5

    # -- one tick ----------------------------------------------------------------------------

    def step(self, t: int) -> list[str]:
        """Advance to tick `t` and return every sample line for it (without the timestamp)."""
        hour, weekend = self._local(t)
        if not self.started:
            self.started = True
            self._initial_backlog(t)
        self._hardware(t)
        self._controllers(t, hour, weekend)
        self._progress(t)
        self._schedule(t)
        lines = self._emit(t)
        self._finish()
        if self.spool is not None:
            self._retire_finished()
        return lines

    def _live_tasks(self) -> set[Task]:
        """Tasks something can still happen to: a pod pending, running or lingering one more
        tick, a Job about to re-create its pod, an inference service."""
        live = {p.task for group in (self.pending, self.running, self.lingering) for p in group}
        return live | set(self.recreate) | {service.task for service in self.services}

    def _retire_finished(self) -> None:
        live = self._live_tasks()
        done = [task for task in self.tasks.values() if task not in live]
        for task in done:
            self.spool.retire(task)
            del self.tasks[task.id]

    def forget_history(self) -> None:
        """Drop the bookkeeping kept for truth.json (live mode runs for days, memory stays flat):
        per-interval amounts, and tasks that have no pod left."""
        live = self._live_tasks()
        self.tasks = {task_id: task for task_id, task in self.tasks.items() if task in live}
        self.capacity_gpu_seconds.clear()
        self.capacity_by_model.clear()
        self.kueue_admissions.clear()
        for service in self.services:
            service.increments.clear()
        for task in self.tasks.values():
            for amounts in (task.alloc_units, task.busy_units, task.io_operations):
                amounts.clear()
            task.alloc_units_by_model.clear()
            task.pods.clear()
            task.preemptions.clear()
            task.waits.clear()

    # -- hardware ----------------------------------------------------------------------------

    def _hardware(self, t: int) -> None:
        rng, s = self.rng, self.s
        for node in self.nodes:
            if not node.present and t >= node.down_until:
                node.present = True
                self._dirty.add(node)
                if self.maintained.pop(node, None) is None:
                    # A lost node left the cluster: it registers again, as a new node object.
                    self.registered[node] = t
                    self.node_lines[node] = _node_lines(node, t)
        for silent in self.config.silent_exporters:
            if silent.maintenance and silent.covers(t):
                node = next(node for node in self.nodes if node.name == silent.node)
                if node.present:
                    self._lose_node(node, t, silent.start + silent.seconds)
                    self.maintained[node] = silent
        for gpu in self.gpus:
            if not gpu.present and t >= gpu.down_until:
                gpu.present = True
                self._dirty.add(gpu.node)
        # Each GPU fails about once in 20 days, each node about once in 30 (if the pool has >1).
        if rng.random() < len(self.gpus) * s / (20 * 86400):
            free = [
                g
                for g in self.gpus
                if g.mode == "whole"
                and g.present
                and g.node.present
                and not g.devices[0].holders
                and g.devices[0].reserved_for is None
            ]
            if free:
                gpu = rng.choice(free)
                gpu.present = False
                self._dirty.add(gpu.node)
                gpu.down_until = t + rng.randrange(3600, 4 * 3600)
        if len(self.nodes) > 1 and rng.random() < len(self.nodes) * s / (30 * 86400):
            up = [n for n in self.nodes if n.present]
            if len(up) > 1:
                self._lose_node(rng.choice(up), t, t + rng.randrange(1200, 5400))

    def _lose_node(self, node: Node, t: int, until: int) -> None:
        node.present = False
        node.down_until = until
        self._dirty.add(node)
        for device in (d for gpu in node.gpus for d in gpu.devices):
            if device.reserved_for is not None:
                device.reserved_for.reserved.remove(device)
                device.reserved_for = None
                self._dirty.add(node)
        for pod in self.running:
            if pod.node is node and not pod.ended:
                # The kubelet is gone: no telemetry at t; the controllers re-create the work.
                ran = max(0, t - self.s - pod.scheduled)
                self._end(pod, t, "Failed", telemetry=False)
                self._release(pod)
                self._after_interruption(pod, ran)

    # -- controllers -------------------------------------------------------------------------

    def _controllers(self, t: int, hour: float, weekend: bool) -> None:
        recreate, self.recreate = self.recreate, []
        for task in recreate:
            self._new_pod(task, t)
        for service in self.services:
            self._autoscale(service, t, hour, weekend)
        self._arrivals(t, hour, weekend)

    def _autoscale(self, service: Service, t: int, hour: float, weekend: bool) -> None:
        rng = self.rng
        if t >= service.surge_until and 9 <= hour < 22 and rng.random() < self.s / (3 * 3600):
            service.surge_until = t + rng.randrange(1200, 3600)
            service.surge_factor = 1.3 + 0.3 * rng.random()
        surge = service.surge_factor if t < service.surge_until else 1.0
        service.rate_rps = service.peak_rps * demand_shape(hour) * (0.8 if weekend else 1.0) * surge
        wanted = math.ceil(service.rate_rps / (REPLICA_TARGET_LOAD * service.capacity_rps))
        wanted = max(service.min_replicas, min(service.max_replicas, wanted))
        live = service.pods
        if wanted > len(live):
            service.low_since = None
            self._new_pod(service.task, t)
        elif wanted < len(live):
            service.low_since = service.low_since if service.low_since is not None else t
            if t - service.low_since >= SCALE_DOWN_AFTER_SECONDS:
                service.low_since = None
                self._scale_down(service, t)
        else:
            service.low_since = None

    def _scale_down(self, service: Service, t: int) -> None:
        pending = [p for p in service.pods if p.phase == "Pending"]
        if pending:
            pod = pending[-1]
            self._drop_pending(pod)
            return
        pod = max(service.pods, key=lambda p: (p.scheduled, p.seq))
        self._end(pod, t, "Succeeded")

    def _arrivals(self, t: int, hour: float, weekend: bool) -> None:
        rng, per_hour = self.rng, self.s / 3600
        if rng.random() < self.batch_rate * per_hour:
            self._new_batch_job(t, hours=min(30.0, max(0.5, rng.lognormvariate(math.log(3), 0.7))))
        busy_day = 8 <= hour < 20
        prep_rate = 0.2 * (len(self.mig_devices) + 1) * (1.3 if busy_day else 0.6)
        if rng.random() < prep_rate * per_hour:
            self._new_preprocessing_job(t)
        office = 9 <= hour < 19 and not weekend
        notebook_rate = (0.6 if office else 0.05) * (len(self.timesliced_devices) + 1)
        if rng.random() < notebook_rate * per_hour:
            self._new_notebook(t)

    @property
    def batch_rate(self) -> float:
        """Batch Jobs per hour for ~30% of the whole GPUs on average: inference takes about
        half of them at the peak, Jobs queue by day and fill the nights."""
        choices = [(g, w) for g, w in JOB_GPU_CHOICES if g <= self.max_whole_per_node]
        mean_gpus = sum(g * w for g, w in choices) / sum(w for _, w in choices)
        mean_hours = 3 * math.exp(0.7**2 / 2)
        return 0.3 * self.whole_count / (mean_gpus * mean_hours)

    def _initial_backlog(self, t: int) -> None:
        """Jobs submitted before the period began, so the pool starts as busy as it runs."""
        requested = 0
        while requested < self.whole_count:
            task = self._new_batch_job(t, hours=4 + 12 * self.rng.random())
            requested += task.request_gpus
        for _ in range(self.config.gang_jobs):
            self._new_gang_job(t)

    def _new_gang_job(self, t: int) -> None:
        """A multi-node training Job: two pods of one GPU each, which the scheduler places on
        two different nodes (see _schedule), re-created like any Job's when preempted."""
        rng, n = self.rng, self._next()
        team = rng.choice(TEAMS)
        job = f"{rng.choice(TRAINED_MODELS)}-gang-{n:04d}"
        task = self._add_task(
            Task(
                id=job,
                team=team,
                namespace=team,
                priority_class="training-batch",
                owner_kind="Job",
                owner_name=job,
                label_task=None,
                label_team=True,
                request_mode="whole",
                request_gpus=1,
                remaining_seconds=6 * 3600,
                checkpoint_seconds=900,
                containers=("trainer",),
                gang=True,
            )
        )
        for _ in range(2):
            self._new_pod(task, t)

    # -- tasks and pods ----------------------------------------------------------------------

    def _create_services(self) -> None:
        count = min(
            len(SERVED_MODELS), max(2 if self.whole_count >= 3 else 1, self.whole_count // 4)
        )
        total = max(2 * count, round(0.55 * self.whole_count))
        for index in range(count):
            model, median, sigma = SERVED_MODELS[index]
            team = TEAMS[index % len(TEAMS)]
            replicas = total // count + (1 if index < total % count else 0)
            # The SLO sits above what the buckets show for an unloaded replica, below a crowded
            # one: readers interpolate P99 inside the bucket, as histogram_quantile does.
            p99 = bucket_p99(median * 1.9, sigma)
            service = Service(
                namespace=team,
                model_name=model,
                replicaset=f"vllm-{model}-{name_suffix(self.rng, 10)}",
                slo_p99_ms=math.ceil(p99 * 1.08 * 10) * 100,
                median_seconds=median,
                sigma=sigma,
                capacity_rps=4.0,
                min_replicas=1,
                max_replicas=max(1, replicas),
            )
            service.peak_rps = service.max_replicas * service.capacity_rps * REPLICA_TARGET_LOAD
            service.task = self._add_task(
                Task(
                    id=model,
                    team=team,
                    namespace=team,
                    priority_class="inference-critical",
                    owner_kind="ReplicaSet",
                    owner_name=service.replicaset,
                    label_task=model,
                    label_team=True,
                    request_mode="whole",
                    containers=("vllm", "proxy"),
                    service=service,
                )
            )
            self.services.append(service)

    def _add_inference_pool(self) -> None:
        """Separate pools: inference gets whole GPUs of its own, as many as its services' peak
        replicas, on nodes of their own; the configured GPUs keep training alone. Workloads stay
        those of the shared pool (sized from its GPUs), so only the sharing differs."""
        for node in self.nodes:
            node.serves = "training"
        peak = sum(service.max_replicas for service in self.services)
        added = build_layout(
            peak,
            self.rng,
            first_node=len(self.nodes),
            whole_only=True,
            mixed_models=self.mixed_models,
        )
        for node in added:
            node.serves = "inference"
            devices = [d for gpu in node.gpus for d in gpu.devices]
            self.whole_by_node[node] = devices
            self.exclusive_by_node[node] = devices
            self.up_prefixes[node] = _up_prefix(node)
            self.registered[node] = self.node_created
            self.node_lines[node] = _node_lines(node, self.node_created)
            self.gpus += node.gpus
            self.devices += devices
            self.bare_prefixes.update({d: _dcgm_prefixes(d, "") for d in devices})
        self.nodes += added

    def _add_task(self, task: Task) -> Task:
        self.tasks[task.id] = task
        if self.spool is not None:
            self.spool.created(task.id)
        return task

    def _new_batch_job(self, t: int, *, hours: float) -> Task:
        rng, n = self.rng, self._next()
        team, purpose = rng.choice(TEAMS), rng.choice(PURPOSES)
        job = f"{rng.choice(TRAINED_MODELS)}-{purpose}-{n:04d}"
        label = f"{team}-{purpose}-{n:04d}" if rng.random() < 0.65 else None
        choices = [(g, w) for g, w in JOB_GPU_CHOICES if g <= self.max_whole_per_node]
        gpus = rng.choices([g for g, _ in choices], weights=[w for _, w in choices])[0]
        task = self._add_task(
            Task(
                id=label or job,
                team=team,
                namespace=team,
                priority_class="training-batch",
                owner_kind="Job",
                owner_name=job,
                label_task=label,
                label_team=rng.random() < 0.85,
                request_mode="whole",
                request_gpus=gpus,
                remaining_seconds=int(hours * 3600),
                checkpoint_seconds=rng.choice((600, 900, 1800, 3600)),
                containers=("trainer",),
            )
        )
        self._new_pod(task, t)
        return task

    def _new_preprocessing_job(self, t: int) -> None:
        rng, n = self.rng, self._next()
        team = rng.choice(TEAMS)
        job = f"prep-{rng.choice(DATASETS)}-{n:04d}"
        label = f"{team}-prep-{n:04d}" if rng.random() < 0.5 else None
        on_mig = bool(self.mig_devices) and rng.random() < 0.85
        task = self._add_task(
            Task(
                id=label or job,
                team=team,
                namespace=team,
                priority_class="preprocessing",
                owner_kind="Job",
                owner_name=job,
                label_task=label,
                label_team=rng.random() < 0.85,
                request_mode="mig" if on_mig else "whole",
                request_profile=rng.choice(self.mig_devices).profile if on_mig else "",
                remaining_seconds=rng.randrange(20 * 60, 120 * 60),
                checkpoint_seconds=600,
                containers=("worker",),
            )
        )
        self._new_pod(task, t)

    def _new_notebook(self, t: int) -> None:
        rng, n = self.rng, self._next()
        team, user = rng.choice(TEAMS), rng.choice(USERS)
        small_mig = [d.profile for d in self.mig_devices if d.profile in ("1g.10gb", "2g.20gb")]
        mode, profile = "whole", ""
        if self.timesliced_devices and (not small_mig or rng.random() < 0.7):
            mode = "timesliced"
        elif small_mig:
            mode, profile = "mig", rng.choice(small_mig)
        owner = f"nb-{user}-{n:04d}"
        task = self._add_task(
            Task(
                id=owner,
                team=team,
                namespace=team,
                priority_class="training-interactive",
                owner_kind="StatefulSet",
                owner_name=owner,
                label_task=None,
                label_team=rng.random() < 0.9,
                request_mode=mode,
                request_profile=profile,
                remaining_seconds=rng.randrange(3600, 5 * 3600),
                containers=("notebook",),
            )
        )
        self._new_pod(task, t)

    def _new_pod(self, task: Task, t: int) -> Pod:
        rng, seq = self.rng, self._next()
        if task.owner_kind == "StatefulSet":
            name = f"{task.owner_name}-0"
        else:
            name = f"{task.owner_name}-{name_suffix(rng)}"
        uid = fake_uuid(rng)  # before `created`: the same random numbers, in the same order
        created = t - rng.randrange(0, self.s)
        pod = Pod(
            name=name,
            uid=uid,
            task=task,
            seq=seq,
            created=created,
            created_tick=t,
            pod_ip=f"10.244.{(seq // 250) % 250}.{seq % 250 + 2}",
            ksm_version=self.config.kube_state_metrics,
            queued=created,
        )
        if self._kueue_managed(task):
            task.live_pods += 1
            if not task.admitted:
                # Kueue holds the Job suspended until it admits the workload: no pod yet.
                pod.hidden, pod.awaiting_since = True, created
                task.awaiting.append(pod)
        pod.rebuild_ksm_lines()
        task.pods.append(name)
        if task.service is not None:
            task.service.pods.append(pod)
        self.pending.append(pod)
        return pod

    # -- progress and endings ----------------------------------------------------------------

    def _progress(self, t: int) -> None:
        for pod in self.running:
            if pod.ended or pod.task.kind == "inference":
                continue
            if t - pod.scheduled >= pod.run_seconds:
                pod.task.remaining_seconds = 0
                self._end(pod, t, "Succeeded")

    def _end(
        self, pod: Pod, t: int, phase: str, *, preempted: bool = False, telemetry: bool = True
    ) -> None:
        pod.ended = True
        pod.phase = phase
        pod.preempted = preempted
        pod.telemetry = telemetry
        pod.rebuild_ksm_lines()
        task = pod.task
        if self._kueue_managed(task):
            task.live_pods -= 1
            if not task.live_pods:
                # Kueue releases a finished workload's quota; a pod re-created after it (a node
                # lost) is a new admission.
                task.admitted = False
        service = pod.task.service
        if service is not None and pod in service.pods:
            service.pods.remove(pod)

    def _drop_pending(self, pod: Pod) -> None:
        """A pending pod deleted (scale-down): it never ran, its series simply stop."""
        pod.ended = True
        for device in pod.reserved:
            device.reserved_for = None
            self._dirty.add(device.node)
        pod.reserved = []
        self.pending.remove(pod)
        service = pod.task.service
        if service is not None and pod in service.pods:
            service.pods.remove(pod)

    def _release(self, pod: Pod) -> None:
        for device in pod.devices:
            device.holders.remove(pod)
            self._dirty.add(device.node)
        pod.devices = []

    def _after_interruption(self, pod: Pod, ran: int) -> int:
        """Work since the last checkpoint is lost; Jobs re-create a pod. Returns lost seconds."""
        task = pod.task
        if task.owner_kind != "Job":
            return 0
        saved = ran // task.checkpoint_seconds * task.checkpoint_seconds
        task.remaining_seconds -= saved
        self.recreate.append(task)
        return ran - saved

    def _finish(self) -> None:
        ended = [p for p in self.running if p.ended]
        for pod in ended:
            self._release(pod)
        self.running = [p for p in self.running if not p.ended]
        self.lingering = ended

    # -- scheduler ---------------------------------------------------------------------------

    def _schedule(self, t: int) -> None:
        order = sorted(self.pending, key=lambda p: (-p.task.priority, p.queued, p.seq))
        draining: Node | None = None
        for pod in order:
            if pod.created_tick >= t:
                continue  # the scheduler sees a pod from the tick after its creation
            if pod.hidden and pod.awaiting_since >= t:
                continue  # its workload was evicted at this tick: Kueue admits it later
            whole_training = pod.task.request_mode == "whole" and pod.task.service is None
            avoid = draining if whole_training else None
            if pod.task.gang:  # beside its running sibling, never on the same node
                avoid = next(
                    (p.node for p in self.running if p.task is pod.task and not p.ended), avoid
                )
            devices = self._fit(pod, avoid=avoid)
            if devices:
                self._bind(pod, devices, t)
            elif (
                pod.task.priority_class == "inference-critical"
                and not pod.reserved
                and not self.separate  # its own pool is sized for its peak: nothing to evict
            ):
                self._preempt_for(pod, t)
            elif whole_training and draining is None and t - pod.queued > STARVATION_SECONDS:
                # A large Job has waited long: keep smaller training pods off the node that
                # can free up most GPUs for it, so it cannot starve behind them.
                draining = max(self.nodes, key=self._drainable_gpus)
        self.pending = [p for p in self.pending if p.phase == "Pending"]
        if self._admitting:
            self._admit_bound(t)

    def _drainable_gpus(self, node: Node) -> int:
        if not node.present or node.serves == "inference":
            return -1
        devices = self.whole_by_node[node]
        return sum(
            1 for d in devices if d.gpu.present and not any(p.task.service for p in d.holders)
        )

    def _fit(self, pod: Pod, avoid: Node | None = None) -> list[Device] | None:
        task = pod.task
        if task.request_mode == "whole":
            return self._fit_whole(pod, task.request_gpus, avoid)
        if task.request_mode == "mig":
            for device in self.mig_devices:
                if (
                    device.profile == task.request_profile
                    and device.available
                    and not device.holders
                    and device.reserved_for is None
                ):
                    return [device]
            return None
        open_slices = [d for d in self.timesliced_devices if d.available and d.capacity_left() > 0]
        if not open_slices:
            return None
        return [min(open_slices, key=lambda d: len(d.holders))]

    def _refresh_free(self) -> None:
        for node in self._dirty:
            old = self._free_of.pop(node, None)
            if old is not None:
                self._free_nodes[old].discard(node)
            if node.present:
                count = sum(1 for d in self.exclusive_by_node[node] if _free(d))
                self._free_of[node] = count
                self._free_nodes.setdefault(count, set()).add(node)
        self._dirty.clear()

    def _fit_whole(self, pod: Pod, gpus: int, avoid: Node | None) -> list[Device] | None:
        if pod.reserved:
            return self._fit_whole_scan(pod, gpus, avoid)
        return self._fit_whole_free(pod, gpus, avoid)

    def _fit_whole_free(self, pod: Pod, gpus: int, avoid: Node | None) -> list[Device] | None:
        """_fit_whole_scan's choice for a pod no device is reserved for (the usual case), from
        the free slots per node: the fullest node that fits, the first in node order on a tie."""
        pool = "inference" if pod.task.service is not None else "training"
        self._refresh_free()
        for count in range(gpus, self.max_exclusive_per_node + 1):
            fits = [
                node
                for node in self._free_nodes.get(count, ())
                if node is not avoid and node.serves in ("", pool)
            ]
            if fits:
                node = min(fits, key=lambda n: n.index)
                return [d for d in self.exclusive_by_node[node] if _free(d)][:gpus]
        return None

    def _fit_whole_scan(self, pod: Pod, gpus: int, avoid: Node | None) -> list[Device] | None:
        pool = "inference" if pod.task.service is not None else "training"
        best = None
        for node, devices in self.exclusive_by_node.items():
            if not node.present or node is avoid or node.serves not in ("", pool):
                continue
            free = [
                d
                for d in devices
                if d.gpu.present and not d.holders and d.reserved_for in (None, pod)
            ]
            if len(free) < gpus:
                continue
            # Prefer the node holding this pod's reservation, then the fullest node that fits.
            key = (not any(d.reserved_for is pod for d in free), len(free))
            if best is None or key < best[0]:
                best = (key, free)
        if best is None:
            return None
        return sorted(best[1], key=lambda d: d.reserved_for is not pod)[:gpus]

    def _bind(self, pod: Pod, devices: list[Device], t: int) -> None:
        rng, task = self.rng, pod.task
        for device in pod.reserved:
            device.reserved_for = None
            self._dirty.add(device.node)
        pod.reserved = []
        pod.devices = devices
        pod.node = devices[0].node
        for device in devices:
            device.holders.append(pod)
            self._dirty.add(device.node)
        pod.scheduled = t - self.s + (rng.randrange(1, self.s) if self.s > 1 else 0)
        pod.phase = "Running"
        pod.run_seconds = task.remaining_seconds
        pod.rebuild_ksm_lines()
        self._set_dynamics(pod)
        self._build_prefixes(pod)
        if pod.hidden:
            # Kueue admits its workload just before this bind; _admit_bound sets `created`
            # (after the pass: a gang Job's pods may bind at this tick too) and the wait.
            self._admitting.append(pod)
        else:
            self._record_wait(pod)
        self.running.append(pod)

    def _record_wait(self, pod: Pod) -> None:
        pod.task.waits.append(
            {
                "pod": pod.name,
                "created": iso(pod.created),
                "scheduled": iso(pod.scheduled),
                "seconds": pod.scheduled - pod.created,
            }
        )

    def _preempt_for(self, pod: Pod, t: int) -> None:
        """Free one whole GPU for an inference pod: reuse a GPU already being freed, else evict
        the lowest-priority, most recently started training pod (as kube-scheduler prefers)."""
        freeing = [
            d
            for devices in self.whole_by_node.values()
            for d in devices
            if d.available and d.reserved_for is None and d.holders and d.holders[0].ended
        ]
        if not freeing:
            victims = [
                p
                for p in self.running
                if not p.ended
                and p.task.request_mode == "whole"
                and p.task.priority < pod.task.priority
            ]
            if not victims:
                return
            victim = min(victims, key=lambda p: (p.task.priority, -p.scheduled, -p.seq))
            self._preempt(victim, t)
            freeing = victim.devices
        device = freeing[0]
        device.reserved_for = pod
        pod.reserved.append(device)
        self._dirty.add(device.node)

    def _preempt(self, victim: Pod, t: int) -> None:
        task = victim.task
        ran = t - victim.scheduled
        # Kueue evicts the workload (suspends its Job, whose pods are deleted): kube-scheduler
        # preempted nothing, so the pod carries no PreemptionByScheduler reason. A workload
        # Kueue does not queue (a notebook on a whole GPU) kube-scheduler preempts, as without.
        by_kueue = self._kueue_managed(task)
        self._end(victim, t, "Failed", preempted=not by_kueue)
        if by_kueue:
            self._count_eviction(task, t)
            self._requeue(task, t)
        lost = self._after_interruption(victim, ran)
        task.preemptions.append(
            {
                "pod": victim.name,
                "at": iso(t),
                "gpus": task.request_gpus,
                "seconds_since_start": ran,
                "lost_gpu_seconds": f"{lost * task.request_gpus}.000000",
            }
        )

    def _kueue_managed(self, task: Task) -> bool:
        """Whether Kueue queues `task`'s workload (--preemptions-by kueue): its Jobs (batch
        training, gang and preprocessing Jobs, whatever GPUs they ask for: Kueue's batch/Job
        integration queues every Job of the namespaces it manages), the workloads whose
        evictions `_preempt` counts. Not the inference services (ReplicaSets, which must not
        wait for quota) nor the notebooks (StatefulSets): those pods exist from submission."""
        return self.kueue and task.owner_kind == "Job"

    def _requeue(self, task: Task, t: int) -> None:
        """Kueue evicted `task`'s workload at `t`: the next pod bound is a new admission. A pod
        of it still pending after the last admission (a gang Job's sibling) goes with its
        suspended Job and waits for that admission again, from `t`."""
        task.admitted = False
        for pod in self.pending:
            if pod.task is task and pod.phase == "Pending" and not pod.hidden:
                pod.hidden, pod.awaiting_since = True, t
                pod.rebuild_ksm_lines()
                task.awaiting.append(pod)

    def _admit_bound(self, t: int) -> None:
        """Kueue admits the workloads whose pods this tick's pass bound while they waited for
        it: their pods are created then, and kube-scheduler binds them a second later."""
        bound, self._admitting = self._admitting, []
        by_task: dict[Task, list[Pod]] = {}
        for pod in bound:
            by_task.setdefault(pod.task, []).append(pod)
        # In the order of their first binds, so that truth.json lists admissions in time order.
        for task, pods in sorted(by_task.items(), key=lambda item: _first_bind(item[1])):
            first = _first_bind(pods)
            # A second before the first bind, so that the pod's own wait is that second; but
            # after the previous tick (whose sample saw no pod), or at the bind itself when the
            # bind is the first second after it.
            admitted = min(first, max(first - 1, t - self.s + 1))
            # From the workload's creation or requeue: the earliest of its waiting pods.
            seconds = admitted - min(pod.awaiting_since for pod in task.awaiting)
            for pod in task.awaiting:
                pod.created, pod.hidden = admitted, False
                pod.rebuild_ksm_lines()
            task.awaiting = []
            task.admitted = True
            for pod in pods:
                self._record_wait(pod)
            self._observe_admission(task, admitted, t, seconds)

    def _observe_admission(self, task: Task, admitted: int, t: int, seconds: int) -> None:
        """Kueue's `kueue_admission_wait_time_seconds` observes `seconds` (written at `t`
        already, as the pods' series are), and truth.json's `kueue_admissions` records it."""
        base = (
            f'{KUEUE_TARGET},cluster_queue="{task.namespace}",'
            f'priority_class="{task.priority_class}",replica_role="leader"'
        )
        series = self.kueue_waits.get(base)
        if series is None:
            prefixes = [f'{KUEUE_WAIT}_bucket{{{base},le="{le}"}} ' for le in KUEUE_WAIT_LE]
            prefixes += [f"{KUEUE_WAIT}_sum{{{base}}} ", f"{KUEUE_WAIT}_count{{{base}}} "]
            series = self.kueue_waits[base] = (prefixes, [0] * len(prefixes))
        values = series[1]
        for index, bound in enumerate(KUEUE_WAIT_BOUNDS):
            if seconds <= bound:
                values[index] += 1
        values[-3] += 1  # +Inf
        values[-2] += seconds  # waits are whole seconds: the sum stays an integer
        values[-1] += 1
        self.kueue_admissions.append(
            {
                "task": task.id,
                "cluster_queue": task.namespace,
                "priority_class": task.priority_class,
                "kind": task.kind,
                "admitted": iso(admitted),
                "at": iso(t),
                "seconds": seconds,
            }
        )

    def _count_eviction(self, task: Task, t: int) -> None:
        """Kueue's count of `task`'s workload evicted at `t`, once per tick: the pods of a gang
        Job preempted at one tick are one workload's eviction. _emit writes it at `t` already,
        with the pod's end (preemption runs in _schedule, before _emit)."""
        if self._evicted_tick != t:
            self._evicted_tick, self._evicted_tasks = t, set()
        if task in self._evicted_tasks:
            return
        self._evicted_tasks.add(task)
        # The simulated pool queues each namespace's workloads in a ClusterQueue named after
        # it (through a LocalQueue), so the cluster queue is the task's namespace.
        prefix = (
            f'kueue_evicted_workloads_total{{{KUEUE_TARGET},cluster_queue="{task.namespace}",'
            f'reason="Preempted",underlying_cause="",priority_class="{task.priority_class}",'
            f'replica_role="leader"}} '
        )
        self.kueue_evictions[prefix] = self.kueue_evictions.get(prefix, 0) + 1

    # -- per-pod behaviour -------------------------------------------------------------------

    def _set_dynamics(self, pod: Pod) -> None:
        rng, kind = self.rng, pod.task.kind
        memory = pod.devices[0].memory_mib
        if pod.task.request_mode == "timesliced":
            memory //= TIME_SLICE_REPLICAS
        if kind == "training_batch":
            pod.engine_base, fill = 82 + rng.randrange(0, 14), 0.6 + 0.35 * rng.random()
        elif kind == "inference":
            pod.engine_base, fill = 0, 0.9
        elif kind == "preprocessing":
            pod.engine_base, fill = 25 + rng.randrange(0, 30), 0.3 + 0.4 * rng.random()
        else:
            pod.engine_base, fill = 0, 0.2 + 0.6 * rng.random()
        pod.memory_mib = int(memory * fill)
        pod.checkpoints_done = 0
        pod.io = {c: [0, 0, 0, 0] for c in pod.task.containers}
        pod.latency_counts = [0] * len(LATENCY_LE)
        pod.latency_sum = 0.0

    def _build_prefixes(self, pod: Pod) -> None:
        node, task = pod.node, pod.task
        pod.device_prefixes = {
            id(d): _dcgm_prefixes(d, _pod_labels(node, pod, task.containers[0]))
            for d in pod.devices
        }
        where = (
            f'job="kubelet",instance="{node.ip}:10250",namespace="{pod.namespace}",'
            f'pod="{pod.name}",device="{DISK}"'
        )
        levels = list(task.containers) if node.cadvisor_container_level else []
        pod.cadvisor_prefixes = [
            (level, [f'{m}{{{where},container="{level}"}} ' for m in CADVISOR_METRICS])
            for level in [*levels, ""]
        ]
        if task.service is not None:
            target = (
                f'job="vllm",instance="{pod.pod_ip}:8000",namespace="{pod.namespace}",'
                f'pod="{pod.name}"'
            )
            if self.config.vllm_without_stats:
                pod.vllm_up_prefix = f"up{{{target}}} "
            if task.service.model_name in self.config.vllm_without_stats:
                pod.vllm_prefixes = []  # --disable-log-stats: the requests, not their series
            else:
                where = f'{target},model_name="{task.service.model_name}"'
                name = "vllm:e2e_request_latency_seconds"
                pod.vllm_prefixes = [f'{name}_bucket{{{where},le="{le}"}} ' for le in LATENCY_LE]
                pod.vllm_prefixes += [f"{name}_sum{{{where}}} ", f"{name}_count{{{where}}} "]

    def _sample_pod(self, pod: Pod, t: int) -> None:
        """This tick's engine activity (percent) and memory of a running pod."""
        rnd, kind = self.rng.random, pod.task.kind
        if kind == "training_batch":
            engine = pod.engine_base + int(rnd() * 9) - 4
            checkpoints = (t - pod.scheduled) // pod.task.checkpoint_seconds
            if checkpoints > pod.checkpoints_done:
                pod.checkpoints_done = checkpoints  # writing a checkpoint stalls the GPU
                engine = 12
        elif kind == "inference":
            load = pod.task.service.utilization
            engine = int(15 + 70 * min(1.0, load)) + int(rnd() * 7) - 3
        elif kind == "preprocessing":
            engine = pod.engine_base + int(rnd() * 31) - 15
            pod.memory_mib += int(rnd() * 257) - 128
        else:
            engine = 40 + int(rnd() * 50) if rnd() < 0.2 else int(rnd() * 8)
            pod.memory_mib += int(rnd() * 129) - 64
        pod.engine_percent = 0 if engine < 0 else (100 if engine > 100 else engine)
        pod.memory_mib = max(512, pod.memory_mib)

    # -- exporters ---------------------------------------------------------------------------

    def _emit(self, t: int) -> list[str]:
        interval = t // self.d * self.d
        lines: list[str] = []
        present = [g for g in self.gpus if g.present and g.node.present]
        self.capacity_gpu_seconds[interval] = (
            self.capacity_gpu_seconds.get(interval, 0) + len(present) * self.s
        )
        for gpu in present:
            by_interval = self.capacity_by_model.setdefault(gpu.model, {})
            by_interval[interval] = by_interval.get(interval, 0) + self.s
        for service in self.services:
            replicas = sum(1 for p in service.pods if p.devices) or 1
            service.utilization = service.rate_rps / (replicas * service.capacity_rps)
        for pod in self.running:
            if pod.telemetry:
                self._sample_pod(pod, t)
        silent, gone = self._silent_nodes(t)
        for node in self.nodes:
            if node in self.maintained:
                # The device plugin stopped: no GPU allocatable, and none in capacity once the
                # kubelet's grace for the plugin has passed.
                grace = t < self.maintained[node].start + DEVICE_PLUGIN_GRACE_SECONDS
                lines += _node_lines(
                    node,
                    self.registered[node],
                    capacity=len(node.gpus) if grace else 0,
                    allocatable=0,
                )
            if node.present:
                lines += self.node_lines[node]
                if node not in gone:
                    lines.append(self.up_prefixes[node] + ("0" if node in silent else "1"))
        training_units = self._emit_devices(present, interval, lines, silent)
        crowding = training_units / (SHARE_UNITS * len(present)) if present else 0.0
        if self.separate:
            crowding = 0.0  # inference's own GPUs share nothing with training
        for pod in self.running:
            if pod.telemetry:
                self._emit_cadvisor(pod, interval, lines)
                if pod.task.service is not None:
                    if pod.vllm_up_prefix:
                        lines.append(pod.vllm_up_prefix + "1")
                    self._emit_vllm(pod, interval, crowding, lines)
        for group in (self.lingering, self.pending, self.running):
            for pod in group:
                lines += pod.ksm_lines
        if self.kueue:
            lines.append(KUEUE_UP + "1")
            lines += [prefix + str(count) for prefix, count in self.kueue_evictions.items()]
            for prefixes, values in self.kueue_waits.values():
                lines += map(add, prefixes, map(str, values))
        return lines

    def _read_device(self, device: Device) -> tuple[int, int, list[str]]:
        """(engine percent, FB used MiB, the exporter's values) of one device at this tick.

        A time-sliced GPU reports the sum of its pods' activity and memory on every series.
        MIG instances get the parent's power split by slices, so sums over devices hold."""
        holders = device.holders
        if not holders:
            engine, used = 0, 0
        elif device.sliced:
            engine = min(100, sum(p.engine_percent for p in holders))
            used = min(device.memory_mib - 512, sum(p.memory_mib for p in holders))
        else:
            engine, used = holders[0].engine_percent, min(device.memory_mib, holders[0].memory_mib)
        share = device.share_units / SHARE_UNITS
        power = (IDLE_POWER_W + POWER_PER_BUSY_PERCENT_W * engine) * share + 3 * self.rng.random()
        device.energy_mj += int(power * self.s * 1000)
        values = [
            RATIO[engine],
            str(used),
            str(device.memory_mib - used),
            f"{power:.3f}",
            str(device.energy_mj),
        ]
        if device.mode != "mig":  # DCGM_FI_DEV_GPU_UTIL is not reported in MIG mode
            values.insert(0, PERCENT[min(100, engine + 2) if engine else 0])
        return engine, used, values

    def _silent_nodes(self, t: int) -> tuple[set[Node], set[Node]]:
        """The nodes whose exporter is silent at `t`, and those of them whose target is gone."""
        covering = [silent for silent in self.config.silent_exporters if silent.covers(t)]
        if not covering:
            return set(), set()
        names = {silent.node for silent in covering}
        gone = {silent.node for silent in covering if silent.gone}
        silent_nodes = {node for node in self.nodes if node.name in names}
        return silent_nodes, {node for node in silent_nodes if node.name in gone}

    def _emit_devices(
        self, present: list[Gpu], interval: int, lines: list[str], silent: set[Node]
    ) -> int:
        """dcgm-exporter's series and the GPU bookkeeping; returns training's share units.
        A silent exporter writes nothing; its GPUs and pods work on (and count in the truth)."""
        s, training_units = self.s, 0
        for gpu in present:
            # A silent node's samples go to a list nobody keeps.
            out = [] if gpu.node in silent else lines
            for device in gpu.devices:
                engine, used, values = self._read_device(device)
                holders = device.holders
                if not holders or device.sliced:
                    out += map(add, self.bare_prefixes[device], values)
                if device.sliced and holders:
                    units = SHARE_UNITS // len(holders)
                else:
                    units = device.share_units
                for pod in holders:
                    out += map(add, pod.device_prefixes[id(device)], values)
                    task = pod.task
                    task.alloc_units[interval] += units * s
                    task.alloc_units_by_model[gpu.model][interval] += units * s
                    task.busy_units[interval] += engine * units * s
                    if used > task.memory_peak_mib and out is lines:
                        task.memory_peak_mib = used
                    if task.service is None:
                        training_units += units
        return training_units

    def _emit_cadvisor(self, pod: Pod, interval: int, lines: list[str]) -> None:
        task = pod.task
        reads, writes, read_size, write_size = IO_RATES[task.kind]
        scale = self.s * (0.5 + self.rng.random())
        r, w = int(reads * scale), int(writes * scale)
        main = pod.io[task.containers[0]]
        main[0] += r
        main[1] += w
        main[2] += r * read_size
        main[3] += w * write_size
        operations = r + w
        for sidecar in task.containers[1:]:
            logs = self.s // 10  # a proxy writing access logs
            counters = pod.io[sidecar]
            counters[1] += logs
            counters[3] += logs * 512
            operations += logs
        task.io_operations[interval] += operations
        if len(pod.io) == 1:
            totals = main
        else:
            totals = [sum(column) for column in zip(*pod.io.values(), strict=True)]
        for level, prefixes in pod.cadvisor_prefixes:
            counters = pod.io[level] if level else totals
            lines += map(add, prefixes, map(str, counters))

    def _emit_vllm(self, pod: Pod, interval: int, crowding: float, lines: list[str]) -> None:
        """Requests of this tick, bucketed from a lognormal whose median grows with the replica's
        load and, under load, with how much of the pool training holds (shared PCIe, power,
        memory bandwidth): that is what makes peak hours breach the SLO."""
        rng, service = self.rng, pod.task.service
        replicas = sum(1 for p in service.pods if p.devices) or 1
        mean = service.rate_rps * self.s / replicas
        count = max(0, int(mean + math.sqrt(mean) * rng.gauss(0.0, 1.0) + 0.5)) if mean else 0
        load = min(1.5, service.utilization)
        median = service.median_seconds * (1 + 0.3 * load + 2.5 * load * crowding)
        median *= (1 + max(0.0, load - 1.0)) * math.exp(0.05 * rng.gauss(0.0, 1.0))
        mu, spread = math.log(median), 1 / (service.sigma * math.sqrt(2))
        cumulative = [
            int(count * 0.5 * (1 + math.erf((bound - mu) * spread)) + 0.5)
            for bound in LOG_LATENCY_BOUNDS
        ]
        cumulative.append(count)
        totals = service.increments.setdefault(interval, [0] * len(LATENCY_LE))
        counts = pod.latency_counts
        for i, c in enumerate(cumulative):
            counts[i] += c
            totals[i] += c
        pod.latency_sum += count * median * math.exp(service.sigma**2 / 2)
        values = [*map(str, counts), f"{pod.latency_sum:.3f}", str(counts[-1])]
        lines += map(add, pod.vllm_prefixes, values)


def _first_bind(pods: list[Pod]) -> int:
    return min(pod.scheduled for pod in pods)


def _free(device: Device) -> bool:
    """A device a pod without a reservation may take whole (its node's presence aside)."""
    return device.gpu.present and not device.holders and device.reserved_for is None


def _pod_labels(node: Node, pod: Pod, container: str) -> str:
    container_key, namespace_key, pod_key = node.pod_label_keys
    return (
        f',{container_key}="{container}",{namespace_key}="{pod.namespace}",{pod_key}="{pod.name}"'
    )


def _up_prefix(node: Node) -> str:
    """What Prometheus itself writes per scrape of a node's dcgm-exporter."""
    return f'up{{job="dcgm-exporter",instance="{node.ip}:9400"}} '


def _node_lines(
    node: Node, created: int, *, capacity: int | None = None, allocatable: int | None = None
) -> list[str]:
    """kube-state-metrics' series of a listed node: its GPUs in capacity and allocatable (all
    of them unless said: the kubelet reserves none), and when it registered."""
    gpus = f'{KSM_TARGET},node="{node.name}",resource="nvidia_com_gpu",unit="integer"'
    whole = len(node.gpus)
    return [
        f"kube_node_status_capacity{{{gpus}}} {whole if capacity is None else capacity}",
        f"kube_node_status_allocatable{{{gpus}}} {whole if allocatable is None else allocatable}",
        f'kube_node_created{{{KSM_TARGET},node="{node.name}"}} {created}',
    ]


# How long the kubelet keeps a stopped device plugin's devices in the node's capacity
# (its device manager's endpointStopGracePeriod); allocatable drops to 0 at once.
DEVICE_PLUGIN_GRACE_SECONDS = 300


def _dcgm_prefixes(device: Device, pod_labels: str) -> list[str]:
    metrics = MIG_DCGM_METRICS if device.mode == "mig" else DCGM_METRICS
    return [f"{m}{{{device.labels}{pod_labels}}} " for m in metrics]


def run_ticks(pool: Pool, ticks: range) -> Iterator[tuple[int, list[str]]]:
    for t in ticks:
        yield t, pool.step(t)


class ScrapeOffsets:
    """Each scrape target's offset within the scrape interval, as Prometheus spreads its
    scrapes (a hash of the target's `instance`), from 1 s to the interval, in milliseconds."""

    def __init__(self, scrape_seconds: int) -> None:
        self.span_ms = max(1, scrape_seconds * 1000 - 1000)
        self.of_instance: dict[str, int] = {}

    def stamp(self, line: str, t: int) -> str:
        """The timestamp of `line`'s sample of tick `t`: seconds, to the millisecond."""
        at = line.find('instance="')
        if at < 0:
            return str(t)
        instance = line[at + 10 : line.find('"', at + 10)]
        offset = self.of_instance.get(instance)
        if offset is None:
            offset = 1000 + zlib.crc32(instance.encode()) % self.span_ms
            self.of_instance[instance] = offset
        return f"{t + offset // 1000}.{offset % 1000:03d}"


def write_openmetrics(pool: Pool, path: Path) -> int:
    """Stream every tick's samples to `path` (OpenMetrics, seconds timestamps, `# EOF`).
    Returns the number of samples written. Memory stays flat: one tick is held at a time."""
    return write_openmetrics_parts(pool, path.parent, part_seconds=0, name=path.name)[1]


def write_openmetrics_parts(
    pool: Pool,
    out: Path,
    *,
    part_seconds: int,
    name: str = "metrics.om",
    ticks: range | None = None,
) -> tuple[tuple[Path, ...], int]:
    """Like `write_openmetrics`, cut into files of `part_seconds` of simulated time each
    (`metrics-01.om`, ...; 0 means one file named `name`), so that several `promtool`
    processes can back-fill them side by side. `ticks`: the first ones only (a benchmark's
    few hours). Returns the files and the samples written."""
    paths: list[Path] = []
    samples = 0
    out_file = None
    part_end = None
    config = pool.config
    offsets = ScrapeOffsets(config.scrape_interval_seconds) if config.scrape_offsets else None
    try:
        for t, lines in run_ticks(pool, pool.config.ticks() if ticks is None else ticks):
            if out_file is None or (part_seconds and t >= part_end):
                if out_file is not None:
                    out_file.write("# EOF\n")
                    out_file.close()
                path = out / (f"metrics-{len(paths) + 1:02d}.om" if part_seconds else name)
                paths.append(path)
                out_file = open(path, "w", encoding="utf-8", buffering=1 << 20)
                part_end = t - t % part_seconds + part_seconds if part_seconds else None
            if lines and offsets is not None:
                out_file.write("".join(f"{line} {offsets.stamp(line, t)}\n" for line in lines))
                samples += len(lines)
            elif lines:
                # Lines are prebuilt "name{labels} " prefixes plus a value: joining them with
                # " <t>\n" appends every timestamp at C speed.
                separator = f" {t}\n"
                out_file.write(separator.join(lines))
                out_file.write(separator)
                samples += len(lines)
        if out_file is not None:
            out_file.write("# EOF\n")
    finally:
        if out_file is not None:
            out_file.close()
    return tuple(paths), samples


def simulate(
    config: PoolConfig, out_dir: Path | str, *, part_days: int = 0, part_seconds: int = 0
) -> SimulationResult:
    """Simulate `config` and write `metrics.om` (or, with `part_days`, `metrics-NN.om` parts of
    that many days each; `part_seconds` cuts finer, e.g. a 10,000-GPU day into hours) and
    `truth.json` into `out_dir` (created if missing). Pure Python, no Django: tests and the demo
    call it directly. Memory holds one tick's samples and the live tasks, whatever the size."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    began = time.perf_counter()  # only to report speed; the simulation never reads the clock
    pool = Pool(config)
    # Tasks created while the pool was built (the inference services) come first in truth.json.
    pool.spool = spool = TaskSpool()
    for task_id in pool.tasks:
        spool.created(task_id)
    truth_path = out / "truth.json"
    try:
        metrics_paths, samples = write_openmetrics_parts(
            pool, out, part_seconds=part_seconds or part_days * 86400
        )
        write_streamed_truth(pool, spool, truth_path, samples_written=samples)
    finally:
        spool.close()
    return SimulationResult(metrics_paths, truth_path, samples, time.perf_counter() - began)
