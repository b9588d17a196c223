"""truth.json: what the simulated pool really did, from the simulator's own bookkeeping.

The metering code reads the pool only through Prometheus; tests compare what it stored with
this file. The file is built from the simulator's state, never by parsing metrics.om: per
interval as the ticks go, each task's entry set aside (`TaskSpool`) once the task is over, so
memory holds the live tasks only, whatever the pool's size or period.

CONTRACT (metering codes against exactly this)
==============================================

Clocks. `s` = scrape interval (meta.scrape_interval_seconds), `d` = step (meta.step_seconds, a
multiple of `s`). Every sample is written at a tick `t` that is an exact multiple of `s` (Unix
seconds); a sample at `t` stands for the `s` seconds starting at `t` and belongs to the interval
starting at `S` with `S <= t < S + d` (`S` a multiple of `d` since the epoch): an interval is
named by its start and holds [S, S + d), so the sample at exactly 00:00:00 on the 1st belongs
to the 1st. Interval keys are ISO 8601 UTC strings with `Z`, e.g. "2026-10-01T00:05:00Z".
Ticks run over [start, end).

GPU share of one dcgm-exporter device series at one tick: a whole GPU 1; a MIG instance
slices/7 (`GPU_I_PROFILE` "3g.40gb" -> 3/7); a time-sliced GPU held by k pods at that tick 1/k
per pod, where k counts that device's pod-labelled series at that tick (the device's series
without pod labels is never attributed). A device is (`UUID`, `GPU_I_ID`). A "timesliced" GPU
is also handed out whole to a pod asking for a whole GPU when no time-sliced pod holds it: then
it has only that pod's series (no bare one) and a share of 1, and it may switch between the
two uses within any interval. A GPU is present at a tick when any series of it is written.

Prometheus' own `up{job="dcgm-exporter",instance="<node ip>:9400"}` is written per node at each
tick while the node is up: 1, or 0 while the exporter is silent (`PoolConfig.silent_exporters`;
its GPUs' series are then not written, but the GPUs and pods work on and this file counts them
in capacity and allocation; a `gone` one has no `up` series either; one in `maintenance` has
stopped its device plugin too, and its GPUs are not counted, as a down node's). A node that is
down has no `up` series (its target is gone) and is not listed by kube-state-metrics, which
writes `kube_node_status_capacity` and `kube_node_status_allocatable`
`{node,resource="nvidia_com_gpu",unit="integer"}` (its GPUs) and `kube_node_created{node}` (a
day before the pool's start, or the tick a lost node came back at: it registers again) for
every node that is up, and for one in maintenance (allocatable 0, capacity 0 after 5 minutes).

Label spellings vary per node, as in real pools: `Hostname` or `hostname`; pod attribution as
`pod`/`namespace`/`container` or, on other nodes, `exported_pod`/`exported_namespace`/
`exported_container` (never both on one series).

Decimal strings: GPU-second amounts are exact fractions quantized to 6 places with
ROUND_HALF_UP (computed in integers, never floats), e.g. "25.714286".

Top level
---------
{"meta": {"seed", "gpus", "start", "end" (ISO Z), "scrape_interval_seconds", "step_seconds",
          "timezone", "pools": "shared"|"separate" (separate adds inference-only nodes),
          "preemptions_by": "kueue" (only then; absent: kube-scheduler preempts),
          "nodes": [{"name", "hostname_label": "Hostname"|"hostname",
          "pod_label_style": "pod"|"exported_pod", "gpus": [{"UUID", "gpu",
          "mode": "whole"|"mig"|"timesliced", "modelName",
          "instances": [{"GPU_I_ID", "GPU_I_PROFILE"}]}]}],
          "silent_exporters": [{"node", "start" (ISO Z), "seconds", "gone", "maintenance"}],
          "samples_written": N},
 "capacity": {"<interval>": "<gpu_seconds>"},   physical GPUs present x s, summed over the
                                                interval's ticks (a MIG GPU's instances sum to 1)
 "capacity_by_model": {"<modelName>": {"<interval>": "<gpu_seconds>"}},  the same per model
 "kueue_admissions": [{"task", "cluster_queue", "priority_class", "kind", "admitted", "at",
          "seconds"}],  only with "preemptions_by": "kueue", in admission order (see below)
 "tasks": {"<task id>": {
     "team", "kind", "namespace", "priority_class", "owner", "pods": ["<pod>", ...],
     "alloc_gpu_seconds": {"<interval>": "<decimal>"},  sum over the task's pod-labelled
                                      DCGM_FI_DEV_FB_USED samples of share x s
     "alloc_gpu_seconds_by_model": {"<modelName>": {"<interval>": "<decimal>"}},  the same
                                      per model of the GPU (a slice or share: its GPU's)
     "busy_gpu_seconds": {"<interval>": "<decimal>"},   same samples, each weighted by its
                                      DCGM_FI_PROF_GR_ENGINE_ACTIVE value (as written, 2
                                      decimals) x share x s; a time-sliced GPU reports the
                                      device's activity on every pod series, split by 1/k
     "memory_peak_bytes": int,        max DCGM_FI_DEV_FB_USED (MiB) on the task's pod-labelled
                                      series x 1048576 (a time-sliced GPU reports the device's
                                      total on each pod series, as dcgm-exporter does)
     "io_operations": {"<interval>": int},  increments of container_fs_reads_total +
                                      container_fs_writes_total at pod level (container="");
                                      where container-level series exist too they sum to the
                                      same numbers: use one level per pod, never both
     "preemptions": [{"pod", "at", "gpus", "seconds_since_start", "lost_gpu_seconds"}],
          at = ISO time of the first tick with kube_pod_status_reason{reason=
          "PreemptionByScheduler"} = 1 (with "preemptions_by": "kueue", never 1 for a
          Job's pod: at = the first tick of the pod's phase Failed, where its task's
          kueue_evicted_workloads_total counts the eviction; see below; a notebook, which
          Kueue does not queue, is preempted by kube-scheduler as without Kueue);
          gpus = the pod's nvidia_com_gpu request;
          seconds_since_start = at - the pod's kube_pod_status_scheduled_time;
          lost_gpu_seconds = work since the pod's last checkpoint x gpus (decimal string;
          exporters cannot tell this)
     "waits": [{"pod", "created", "scheduled", "seconds"}],  one per pod that got
          scheduled: kube_pod_created and kube_pod_status_scheduled_time as ISO Z, and their
          difference in seconds (a Kueue-managed pod's created is its workload's admission,
          see below: its wait is that of kube-scheduler only)
     "checkpoint_seconds": int | null}},  (extra, for invariant checks) how often a Job's
          pods checkpoint; null for services and notebooks
 "services": {"<namespace>/<model_name>": {"team", "slo_p99_ms",
     "bucket_bounds": ["0.3", ..., "60.0", "+Inf"],  exactly the `le` strings written
     "increments": {"<interval>": [cumulative count per bound, summed over replicas]}}}}

With "preemptions_by": "kueue", Prometheus' `up{job="kueue",instance="10.96.0.50:8443"}` is 1
at every tick, and `kueue_evicted_workloads_total{job="kueue",instance="10.96.0.50:8443",
cluster_queue="<task namespace>",reason="Preempted",underlying_cause="",
priority_class="<task priority_class>",replica_role="leader"}` counts the workloads evicted so far
(one per Job task and tick in "preemptions": a gang Job's pods preempted at one tick count once),
written from the tick of its first eviction on (first value 1, or more if several at that tick;
never 0) at every tick, the increment at the preemption's `at`.

Kueue also queues the Jobs (batch training, gang and preprocessing Jobs; not the inference
services, nor the notebooks): it holds a Job suspended until it admits its workload, and only
then are the pods created, so kube-state-metrics writes no series of such a pod before the
admission. A workload is admitted one second before its first pod is bound, or at the bind when
the bind falls in the first second after the previous tick (`admitted`, ISO Z, always after the
previous tick); the Job's pods then pending are created at `admitted` (their
kube_pod_created), so the first pod waits one second or none, and a sibling bound later (a gang
Job's) waits from `admitted` to its bind. The wait until then is Kueue's:
`kueue_admission_wait_time_seconds{job="kueue",instance="10.96.0.50:8443",
cluster_queue="<task namespace>",priority_class="<task priority_class>",replica_role="leader"}`
observes, per admission, `seconds` = `admitted` - the workload's creation or requeue (the
earliest queued time of its pods then waiting: a pod's submission, or its re-creation after the
workload's eviction; a pod still pending when its workload is evicted waits again from the
eviction's tick), so seconds + the first pod's wait = its bind - that queued time. Written as
client_golang writes a HistogramVec's label set: from the tick of its first observation on, at
every tick, `_bucket` lines with `le` = "1", "2.5", "5", "10", "20", ..., "40960", "+Inf"
(cumulative; +Inf = `_count`), `_sum` (whole seconds) and `_count`; the increment at the
admission's `at` (ISO Z: the first tick whose samples include it, the tick of the bind; its
pods' series appear at that tick too). A workload stays admitted while a pod of it runs or is
pending after the admission; after Kueue evicts it, or once all its pods have ended (a node
lost under its only pod), its next pod bound is a new admission, listed and observed again.
Entries: "task" (its id), "cluster_queue" (its namespace), "priority_class", "kind" (as the
task's), "admitted", "at", "seconds" (int).

Counter increments per interval = value at the last sample in the interval - value at the last
sample before it (0 if the series had none: counters start at 0 when the pod starts, so its
first sample counts whole). A replica's counters never reset while it lives.
Per-interval maps omit zero entries (an interval whose increments are all 0 is left out).

Other facts a reader may rely on: a pod's series appear when it is created (kube-state-metrics;
a Kueue-managed pod's at its workload's admission) or scheduled (dcgm-exporter, cAdvisor, vLLM)
and disappear when it ends; kube-state-metrics keeps an ended pod one more tick with its final
phase. A pod preempted at tick `t` still reports its
GPU at `t` (it held it during (t - s, t]); the Job re-creates a new pod (new name, same owner and
labels) that waits in Pending and resumes from the last checkpoint. Pending pods hold no device.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import IO, TYPE_CHECKING

from simulator.layout import SHARE_UNITS, describe_nodes
from simulator.workload import LATENCY_LE

if TYPE_CHECKING:
    from simulator.pool import Pool
    from simulator.workload import Task

MICRO = 10**6


def iso(epoch_seconds: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch_seconds))


def decimal_string(numerator: int, denominator: int = 1) -> str:
    """numerator/denominator (both >= 0) rounded half up to 6 places, in exact integers."""
    millionths = (2 * numerator * MICRO + denominator) // (2 * denominator)
    whole, fraction = divmod(millionths, MICRO)
    return f"{whole}.{fraction:06d}"


def _interval_map(values: dict[int, int], denominator: int) -> dict[str, str]:
    return {iso(start): decimal_string(v, denominator) for start, v in sorted(values.items()) if v}


def build_truth(pool: Pool, *, samples_written: int) -> dict:
    config = pool.config
    return {
        "meta": {
            "seed": config.seed,
            "gpus": config.gpus,
            "start": iso(config.start_epoch),
            "end": iso(config.end_epoch),
            "scrape_interval_seconds": config.scrape_interval_seconds,
            "step_seconds": config.step_seconds,
            "timezone": config.timezone,
            "pools": config.pools,
            # Only when not the default, so that the default file stays as it was.
            **({"preemptions_by": "kueue"} if config.preemptions_by == "kueue" else {}),
            "nodes": describe_nodes(pool.nodes),
            "silent_exporters": [
                {
                    "node": silent.node,
                    "start": iso(silent.start),
                    "seconds": silent.seconds,
                    "gone": silent.gone,
                    "maintenance": silent.maintenance,
                }
                for silent in config.silent_exporters
            ],
            "samples_written": samples_written,
        },
        "capacity": _interval_map(pool.capacity_gpu_seconds, 1),
        # The same per GPU model (dcgm-exporter's modelName), for pricing by GPU class.
        "capacity_by_model": {
            model: _interval_map(values, 1)
            for model, values in sorted(pool.capacity_by_model.items())
        },
        # Only with Kueue; before "tasks", where write_streamed_truth writes the head's keys.
        **({"kueue_admissions": list(pool.kueue_admissions)} if pool.kueue else {}),
        "tasks": {task.id: _task_truth(task) for task in pool.tasks.values()},
        "services": {service.key: _service_truth(service) for service in pool.services},
    }


def _task_truth(task) -> dict:
    return {
        "team": task.team,
        "kind": task.kind,
        "namespace": task.namespace,
        "priority_class": task.priority_class,
        "owner": task.owner_name,
        "pods": list(task.pods),
        "alloc_gpu_seconds": _interval_map(task.alloc_units, SHARE_UNITS),
        "alloc_gpu_seconds_by_model": {
            model: _interval_map(values, SHARE_UNITS)
            for model, values in sorted(task.alloc_units_by_model.items())
        },
        "busy_gpu_seconds": _interval_map(task.busy_units, SHARE_UNITS * 100),
        "memory_peak_bytes": task.memory_peak_mib * 1048576,
        "io_operations": {iso(s): v for s, v in sorted(task.io_operations.items()) if v},
        "preemptions": list(task.preemptions),
        "waits": list(task.waits),
        "checkpoint_seconds": task.checkpoint_seconds or None,
    }


def _service_truth(service) -> dict:
    return {
        "team": service.namespace,
        "slo_p99_ms": service.slo_p99_ms,
        "bucket_bounds": list(LATENCY_LE),
        "increments": {
            iso(start): list(counts)
            for start, counts in sorted(service.increments.items())
            if any(counts)
        },
    }


def write_truth(truth: dict, path: Path) -> None:
    # One write: json.dump would issue a write per token.
    path.write_text(json.dumps(truth, indent=1) + "\n", encoding="utf-8")


class TaskSpool:
    """Finished tasks' truth.json entries, written to a scratch file as the tasks finish, so
    a long or large simulation holds only its live tasks (a 10,000-GPU day starts thousands of
    Jobs). `write_streamed_truth` then writes truth.json in the order the tasks were created,
    byte for byte what `write_truth(build_truth(pool))` writes for a pool that kept them all."""

    def __init__(self) -> None:
        self._file: IO[bytes] = tempfile.TemporaryFile()
        self._end = 0
        self.order: list[str] = []  # every task id, in creation order
        self._known: set[str] = set()
        self._where: dict[str, tuple[int, int]] = {}  # id -> (offset, length) in the file

    def created(self, task_id: str) -> None:
        if task_id not in self._known:
            self._known.add(task_id)
            self.order.append(task_id)

    def retire(self, task: Task) -> None:
        data = _nested(_task_truth(task), 2).encode()
        self._file.seek(self._end)
        self._file.write(data)
        self._where[task.id] = (self._end, len(data))
        self._end += len(data)

    def entry(self, task_id: str) -> str | None:
        where = self._where.get(task_id)
        if where is None:
            return None
        self._file.seek(where[0])
        return self._file.read(where[1]).decode()

    def close(self) -> None:
        self._file.close()


def _nested(value: object, level: int) -> str:
    """`value` as json.dumps(indent=1) writes it `level` dicts deep in a document."""
    return json.dumps(value, indent=1).replace("\n", "\n" + " " * level)


def write_streamed_truth(pool: Pool, spool: TaskSpool, path: Path, *, samples_written: int):
    """truth.json from the live pool and the spooled tasks, written piece by piece: the same
    bytes as `write_truth(build_truth(...))`, without the whole document in memory."""
    head = build_truth(pool, samples_written=samples_written)  # tasks: the live ones only
    live = head.pop("tasks")
    services = head.pop("services")
    with open(path, "w", encoding="utf-8", buffering=1 << 20) as out:
        out.write("{")
        for key, value in head.items():
            out.write(f"\n {json.dumps(key)}: {_nested(value, 1)},")
        out.write('\n "tasks": ')
        first = True
        for task_id in spool.order:
            entry = _nested(live[task_id], 2) if task_id in live else spool.entry(task_id)
            if entry is None:
                continue
            out.write(f"{'{' if first else ','}\n  {json.dumps(task_id)}: {entry}")
            first = False
        out.write("{}" if first else "\n }")
        out.write(f',\n "services": {_nested(services, 1)}\n}}\n')


def load_truth(path: Path | str) -> dict:
    with open(path, encoding="utf-8") as source:
        return json.load(source)


def device_count(truth: dict) -> int:
    """dcgm-exporter devices (UUID, GPU_I_ID) of the whole pool when every GPU is present."""
    return sum(
        max(1, len(gpu["instances"])) for node in truth["meta"]["nodes"] for gpu in node["gpus"]
    )
