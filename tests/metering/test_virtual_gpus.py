"""dcgm-exporter's two Kubernetes modes as its current releases (4.5.3-4.8.2) write them, for
whole GPUs and time-sliced ones (`internal/pkg/transformation/kubernetes.go`, `Process`):

- with `--kubernetes-virtual-gpus`, a GPU that pods hold has each counter's series replaced by
  one copy per pod (`pod`, `namespace`, `container`, and `vgpu` for a time-sliced replica),
  except `DCGM_FI_DEV_GPU_UTIL` and `DCGM_FI_DEV_FB_USED` (`isPerProcessMetric`): their bare
  device series stays, and each pod gets a series whose VALUE is its own processes' figure
  (NVML's per-process SM utilisation, its processes' memory in MiB), with `pod_uid`, an idle
  pod 0;
- without it, a time-sliced replica `GPU-x::N` is mapped to `GPU-x` (`toDeviceToPod`) and the
  last pod the kubelet lists wins: one series per counter, naming one pod, which one changing
  from scrape to scrape (the kubelet lists pods from a map).

Six nodes back-filled into a real Prometheus (promtool), each its own exporter, three windows
of five one-minute ticks:

- node-a (virtual GPUs): GPU-a held whole by Job `whole`; GPU-f free;
- node-b (virtual GPUs): GPU-b time-sliced between Jobs `left` and `right`;
- node-c (default mode): GPU-c time-sliced between Jobs `ping` and `pong`, its series naming
  `ping` at even minutes and `pong` at odd ones;
- node-d (virtual GPUs, no profiling metric: a GPU without DCP, or a counters file without
  `DCGM_FI_PROF_GR_ENGINE_ACTIVE`): GPU-d time-sliced between Jobs `heavy` and `light`;
- node-e (default mode): GPU-e time-sliced between Jobs `first` and `second`, the kubelet
  listing `first` last at every scrape, so its series never name `second`;
- node-f (virtual GPUs): GPU-m cut into MIG instances, a `3g.40gb` held by Job `slice`.

The truth, per window: a whole GPU is its pod's 300 GPU-seconds; a time-sliced GPU gives each
of its two pods 150 (Tandem's rule: 1/k of each tick to each of the k pods holding it), and
busy time splits the engine activity (a copy of the device's) the same way, where a pod's
utilisation series, its own processes', is its own busy time as it stands.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from metering.models import CapacityInterval, IngestWindow, UsageInterval
from simulator.prometheus import PrometheusProcess
from tests.metering.jobs import KSM, SCRAPE, backfilled_prometheus, ingested_windows
from tests.slow import starts

START = datetime(2026, 10, 19, 10, tzinfo=UTC)
STEP = timedelta(seconds=300)
END = START + 3 * STEP
LEAD_IN = timedelta(minutes=10)
CREATED = START - timedelta(minutes=15)
MIB = 1_048_576
MODEL = "NVIDIA A100-SXM4-80GB"

# node -> (exporter instance, GPUs, allocatable nvidia.com/gpu: 2 replicas a time-sliced GPU)
NODES = {
    "node-a": ("10.0.0.11:9400", ("GPU-a", "GPU-f"), 2),
    "node-b": ("10.0.0.12:9400", ("GPU-b",), 2),
    "node-c": ("10.0.0.13:9400", ("GPU-c",), 2),
    "node-d": ("10.0.0.14:9400", ("GPU-d",), 2),
    "node-e": ("10.0.0.15:9400", ("GPU-e",), 2),
    "node-f": ("10.0.0.16:9400", ("GPU-m",), 0),
}
# pod -> (node, its processes' framebuffer MiB, their SM utilisation %, replica)
PODS = {
    "whole-0": ("node-a", 10000, 80, ""),
    "left-0": ("node-b", 4096, 60, "0"),
    "right-0": ("node-b", 2048, 30, "1"),
    "ping-0": ("node-c", 4096, 60, ""),
    "pong-0": ("node-c", 2048, 30, ""),
    "heavy-0": ("node-d", 4096, 60, "0"),
    "light-0": ("node-d", 2048, 30, "1"),
    "first-0": ("node-e", 4096, 60, ""),
    "second-0": ("node-e", 2048, 30, ""),
    "slice-0": ("node-f", 20000, 0, ""),
}
# GPU -> (device framebuffer MiB, device utilisation %, engine activity; None: not collected)
DEVICES = {
    "GPU-a": (10240, 80, "0.8"),
    "GPU-f": (0, 0, "0"),
    "GPU-b": (6144, 90, "0.9"),
    "GPU-c": (6144, 90, "0.9"),
    "GPU-d": (6144, 90, None),
    "GPU-e": (6144, 90, "0.9"),
}
HOLDERS = {
    "GPU-a": ("whole-0",),
    "GPU-b": ("left-0", "right-0"),
    "GPU-c": ("ping-0", "pong-0"),
    "GPU-d": ("heavy-0", "light-0"),
    "GPU-e": ("first-0", "second-0"),
}


def _labels(node: str, gpu: int, uuid: str) -> str:
    instance = NODES[node][0]
    return (
        f'gpu="{gpu}",UUID="{uuid}",device="nvidia{gpu}",modelName="{MODEL}",'
        f'Hostname="{node}",job="dcgm-exporter",instance="{instance}"'
    )


def _pod_labels(pod: str, *, uid: bool) -> str:
    replica = PODS[pod][3]
    labels = f',namespace="ml",pod="{pod}",container="main"'
    labels += f',pod_uid="uid-{pod}"' if uid else ""
    return labels + (f',vgpu="{replica}"' if replica else "")


def _virtual(node: str, gpu: int, uuid: str, *, processes_seen: bool) -> list[str]:
    """`--kubernetes-virtual-gpus`: the per-process counters' device series kept beside each
    pod's own figure (with `pod_uid`), every other counter's replaced by one copy per pod.
    An exporter that does not see the GPU's processes' pods writes each pod's figures 0."""
    labels = _labels(node, gpu, uuid)
    framebuffer, utilisation, active = DEVICES[uuid]
    lines = [
        f"DCGM_FI_DEV_FB_USED{{{labels}}} {framebuffer}",
        f"DCGM_FI_DEV_GPU_UTIL{{{labels}}} {utilisation}",
    ]
    holders = HOLDERS.get(uuid, ())
    if not holders and active is not None:
        lines.append(f"DCGM_FI_PROF_GR_ENGINE_ACTIVE{{{labels}}} {active}")
    for pod in holders:
        own = labels + _pod_labels(pod, uid=True)
        memory, utilisation = PODS[pod][1:3] if processes_seen else (0, 0)
        lines += [
            f"DCGM_FI_DEV_FB_USED{{{own}}} {memory}",
            f"DCGM_FI_DEV_GPU_UTIL{{{own}}} {utilisation}",
        ]
        if active is not None:
            # A copy of the device's, `pod_uid` only with --kubernetes-enable-pod-uid.
            copy = labels + _pod_labels(pod, uid=False)
            lines.append(f"DCGM_FI_PROF_GR_ENGINE_ACTIVE{{{copy}}} {active}")
    return lines


# A MIG GPU's instances: (GPU_I_ID, profile, holding pod or None, FB_USED MiB, engine activity)
MIG = {"GPU-m": (("1", "3g.40gb", "slice-0", 20480, "0.5"), ("2", "4g.40gb", None, 0, "0"))}


def _mig(node: str, gpu: int, uuid: str, *, processes_seen: bool) -> list[str]:
    """`--kubernetes-virtual-gpus` on a GPU cut into MIG instances, which report no
    utilisation: a held instance keeps its bare framebuffer series beside its pod's own (its
    processes' in that instance), its engine activity copied to the pod."""
    lines = []
    for instance, profile, pod, framebuffer, active in MIG[uuid]:
        labels = _labels(node, gpu, uuid) + f',GPU_I_PROFILE="{profile}",GPU_I_ID="{instance}"'
        lines.append(f"DCGM_FI_DEV_FB_USED{{{labels}}} {framebuffer}")
        if pod is None:
            lines.append(f"DCGM_FI_PROF_GR_ENGINE_ACTIVE{{{labels}}} {active}")
            continue
        memory = PODS[pod][1] if processes_seen else 0
        own, copy = _pod_labels(pod, uid=True), _pod_labels(pod, uid=False)
        lines += [
            f"DCGM_FI_DEV_FB_USED{{{labels}{own}}} {memory}",
            f"DCGM_FI_PROF_GR_ENGINE_ACTIVE{{{labels}{copy}}} {active}",
        ]
    return lines


def _default(node: str, gpu: int, uuid: str, tick: int) -> list[str]:
    """No `--kubernetes-virtual-gpus`: one series a counter, the device's values, under the
    pod the kubelet listed last at that scrape (here `ping` at even minutes)."""
    pod = HOLDERS[uuid][(tick // SCRAPE) % 2 if uuid == "GPU-c" else 0]
    labels = _labels(node, gpu, uuid) + _pod_labels(pod, uid=False)
    framebuffer, utilisation, active = DEVICES[uuid]
    return [
        f"DCGM_FI_DEV_FB_USED{{{labels}}} {framebuffer}",
        f"DCGM_FI_DEV_GPU_UTIL{{{labels}}} {utilisation}",
        f"DCGM_FI_PROF_GR_ENGINE_ACTIVE{{{labels}}} {active}",
    ]


def _pod(pod: str) -> list[str]:
    base = f'{KSM},namespace="ml",pod="{pod}",uid="uid-{pod}"'
    created = int(CREATED.timestamp())
    resource = "nvidia_com_mig_3g.40gb" if pod == "slice-0" else "nvidia_com_gpu"
    return [
        f"kube_pod_created{{{base}}} {created}",
        f"kube_pod_status_scheduled_time{{{base}}} {created + 30}",
        f'kube_pod_info{{{base},node="{PODS[pod][0]}",priority_class="training-batch"}} 1',
        f'kube_pod_owner{{{base},owner_kind="Job",owner_name="{pod[:-2]}",'
        'owner_is_controller="true"} 1',
        f"kube_pod_labels{{{base}}} 1",
        # A time-sliced replica is requested as a whole GPU, a MIG instance as its profile.
        f'kube_pod_container_resource_requests{{{base},container="main",'
        f'resource="{resource}",unit="integer"}} 1',
        f'kube_pod_status_phase{{{base},phase="Running"}} 1',
    ]


def series_at(*, processes_seen: bool = True) -> dict[int, list[str]]:
    lines: dict[int, list[str]] = {}
    for tick in range(int((START - LEAD_IN).timestamp()), int((END + STEP).timestamp()), SCRAPE):
        lines[tick] = [f"up{{{KSM}}} 1"]
        for node, (instance, uuids, allocatable) in NODES.items():
            lines[tick] += [
                f'up{{job="dcgm-exporter",instance="{instance}"}} 1',
                f'kube_node_status_allocatable{{{KSM},node="{node}",resource="nvidia_com_gpu",'
                f'unit="integer"}} {allocatable}',
            ]
            for gpu, uuid in enumerate(uuids):
                if node in ("node-c", "node-e"):
                    lines[tick] += _default(node, gpu, uuid, tick)
                elif uuid in MIG:
                    lines[tick] += _mig(node, gpu, uuid, processes_seen=processes_seen)
                else:
                    lines[tick] += _virtual(node, gpu, uuid, processes_seen=processes_seen)
        for pod in PODS:
            lines[tick] += _pod(pod)
    return lines


@pytest.fixture(scope="module")
@starts("Prometheus")
def virtual_prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusProcess]:
    running = backfilled_prometheus(tmp_path_factory.mktemp("virtual"), series_at())
    yield running
    running.stop()


@pytest.fixture(scope="module")
@starts("Prometheus")
def hidden_prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusProcess]:
    """The same pool, its exporters with --kubernetes-virtual-gpus in their own PID namespace
    (the Helm chart's `hostPID: false`): /proc/<pid>/cgroup of the GPU's processes is not
    there, so no process is told to its pod and every pod's own figures are 0."""
    lines = series_at(processes_seen=False)
    running = backfilled_prometheus(tmp_path_factory.mktemp("hidden"), lines)
    yield running
    running.stop()


def _scraped_by_service_monitor(lines: dict[int, list[str]]) -> dict[int, list[str]]:
    """The pool as a ServiceMonitor without `honor_labels` stores it: the exporter's pod
    labels as `exported_*`, its own pod's (the target's) as `pod` and `namespace` on each of
    its series and its `up`, and kube-state-metrics describing that pod (a DaemonSet's)."""
    exporters = {instance: f"dcgm-exporter-{node}" for node, (instance, _, _) in NODES.items()}
    scraped: dict[int, list[str]] = {}
    for tick, samples in lines.items():
        scraped[tick] = []
        for line in samples:
            instance = next((i for i in exporters if f'instance="{i}"' in line), None)
            if instance is None:
                scraped[tick].append(line)
                continue
            for label in ("namespace", "pod", "container", "pod_uid"):
                line = line.replace(f',{label}="', f',exported_{label}="')
            name, rest = line.split("}", 1)
            target = f',namespace="gpu-operator",pod="{exporters[instance]}"'
            scraped[tick].append(f"{name}{target}}}{rest}")
        for instance, pod in exporters.items():
            base = f'{KSM},namespace="gpu-operator",pod="{pod}",uid="uid-{pod}"'
            host = instance.split(":")[0]
            scraped[tick] += [
                f'kube_pod_info{{{base},node="x",pod_ip="{host}",priority_class=""}} 1',
                f'kube_pod_owner{{{base},owner_kind="DaemonSet",owner_name="dcgm-exporter",'
                'owner_is_controller="true"} 1',
                f"kube_pod_labels{{{base}}} 1",
                f'kube_pod_status_phase{{{base},phase="Running"}} 1',
            ]
    return scraped


@pytest.fixture(scope="module")
@starts("Prometheus")
def relabelled_prometheus(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[PrometheusProcess]:
    lines = _scraped_by_service_monitor(series_at())
    running = backfilled_prometheus(tmp_path_factory.mktemp("relabelled"), lines)
    yield running
    running.stop()


@pytest.fixture
def windows(virtual_prometheus: PrometheusProcess) -> list[IngestWindow]:
    return ingested_windows(virtual_prometheus.url, START, END)


def _per_window(field: str) -> dict[str, list[Decimal | int]]:
    """Each task's `field` in each window, in time order."""
    found: dict[str, list[Decimal | int]] = {}
    rows = UsageInterval.objects.order_by("interval_start").values_list("task__external_id", field)
    for task, value in rows:
        found.setdefault(task, []).append(value)
    return found


def _mib(mib: int) -> int:
    return mib * MIB


@pytest.mark.slow
@pytest.mark.django_db
def test_it_bills_a_whole_gpu_once_beside_its_kept_device_series(windows) -> None:
    # The device's memory and utilisation series stay beside the pod's: no second holder.
    assert _per_window("alloc_gpu_seconds")["whole"] == [Decimal(300)] * 3
    assert _per_window("busy_gpu_seconds")["whole"] == [Decimal(240)] * 3  # 0.8 x 300
    # Its processes' 10,000 MiB, not the device's 10,240.
    assert _per_window("memory_peak_bytes")["whole"] == [_mib(10000)] * 3


@pytest.mark.slow
@pytest.mark.django_db
def test_it_splits_a_virtual_gpu_between_its_pods(windows) -> None:
    alloc, busy = _per_window("alloc_gpu_seconds"), _per_window("busy_gpu_seconds")
    memory = _per_window("memory_avg_bytes")
    for pod, own_mib in (("left", 4096), ("right", 2048)):
        assert alloc[pod] == [Decimal(150)] * 3
        # The engine activity is a copy of the device's 0.9 on each pod: half of it each.
        assert busy[pod] == [Decimal(135)] * 3
        assert memory[pod] == [_mib(own_mib)] * 3


@pytest.mark.slow
@pytest.mark.django_db
def test_it_bills_a_mig_instance_once_beside_its_kept_device_series(windows) -> None:
    assert _per_window("alloc_gpu_seconds")["slice"] == [Decimal("128.571429")] * 3  # 3/7
    assert _per_window("busy_gpu_seconds")["slice"] == [Decimal("64.285714")] * 3  # x 0.5
    assert _per_window("memory_peak_bytes")["slice"] == [_mib(20000)] * 3


@pytest.mark.slow
@pytest.mark.django_db
def test_it_takes_a_pods_own_utilisation_as_its_busy_time(windows) -> None:
    # Without the engine activity, each pod's utilisation series is its own processes'
    # (60% and 30% of the GPU beside the device's 90%): 0.6 x 300 and 0.3 x 300. Divided again
    # by the two holders, as a copy of the device's would be, they were 90 and 45.
    busy = _per_window("busy_gpu_seconds")
    assert (busy["heavy"], busy["light"]) == ([Decimal(180)] * 3, [Decimal(90)] * 3)
    alloc = _per_window("alloc_gpu_seconds")
    assert (alloc["heavy"], alloc["light"]) == ([Decimal(150)] * 3, [Decimal(150)] * 3)


IN_TURN = (
    "attribution: 1 GPU(s) named pods in turn that all ran the whole interval, e.g. GPU-c on"
    " node node-c: ml/ping-0, ml/pong-0; a GPU time-sliced, which dcgm-exporter writes under"
    " one of its pods at each scrape: their shares are as the scrapes fell, not measured. Run"
    " dcgm-exporter with --kubernetes-virtual-gpus"
)
UNNAMED = (
    "attribution: node node-e: 1 pod(s) ran the whole interval with GPUs that no GPU series"
    " names, e.g. ml/second-0 requesting 1 GPU(s) (dcgm-exporter names pods on its GPUs, e.g."
    " GPU-e: a GPU time-sliced, which it writes under one of its pods? Run it with"
    " --kubernetes-virtual-gpus; else its pod mapping is broken for some GPUs); 300"
    " GPU-seconds counted missing"
)


@pytest.mark.slow
@pytest.mark.django_db
def test_it_warns_of_a_time_sliced_gpu_named_for_one_pod_at_a_time(windows) -> None:
    # Without --kubernetes-virtual-gpus the shares are as the scrapes fell (ping at 10:00,
    # 10:02, 10:04, ...), 150 each in truth; the GPU's 300 a window are all there.
    alloc = _per_window("alloc_gpu_seconds")
    assert alloc["ping"] == [Decimal(180), Decimal(120), Decimal(180)]
    assert alloc["pong"] == [Decimal(120), Decimal(180), Decimal(120)]
    # The pod listed last throughout holds the GPU alone; its sharer's 150 are billed to it.
    assert alloc["first"] == [Decimal(300)] * 3
    assert "second" not in alloc
    assert [w.warnings for w in windows] == [[UNNAMED, IN_TURN]] * 3
    # The sharer named nowhere counts missing (a window the close refuses until accepted):
    # 300 of node-e's GPU-seconds, 1,800 of 2,100 seen.
    assert [(w.status, w.completeness) for w in windows] == [("done", Decimal("0.857143"))] * 3


@pytest.mark.slow
@pytest.mark.django_db
def test_it_counts_each_gpu_present_once_in_either_mode(windows) -> None:
    capacity = dict(CapacityInterval.objects.values_list("interval_start", "capacity_gpu_seconds"))
    assert capacity == {START + n * STEP: Decimal(7 * 300) for n in range(3)}  # MIG: one GPU


@pytest.mark.slow
@pytest.mark.django_db
def test_it_asks_per_tick_only_for_the_gpus_pods_share(windows) -> None:
    # A GPU (or MIG instance) held by one pod keeps its bare series beside the pod's, so its
    # series overlap; one pod cannot overlap another, so it needs no per-tick query: asked
    # for every held GPU, a 10,000-GPU pool's batch asked forty of them.
    shared = " ".join(
        query["promql"] for query in windows[0].recorded_queries if query["meter"] == "shared"
    )
    assert all(f"GPU-{gpu}" in shared for gpu in "bd"), shared
    assert not any(f"GPU-{gpu}" in shared for gpu in "afm"), shared


HIDDEN = (
    "memory: 4 GPU(s) held by pods whose own framebuffer reads 0 while the GPU's reads up to"
    " 10,240 MiB, e.g. GPU-a on node node-a (ml/whole-0): dcgm-exporter with"
    " --kubernetes-virtual-gpus sees its pods' processes only in the host's PID namespace"
    " (hostPID: true; its Helm chart's default is false), so their memory, and their busy time"
    " where it falls back to GPU_UTIL, read 0 (or the memory is a process no pod requested)"
)


@pytest.mark.slow
@pytest.mark.django_db
def test_it_warns_where_the_exporter_cannot_see_the_pods_processes(hidden_prometheus) -> None:
    windows = ingested_windows(hidden_prometheus.url, START, END)
    # The pods' own figures read 0: memory, and busy time without the engine activity.
    peaks = _per_window("memory_peak_bytes")
    assert {pod: peaks[pod] for pod in ("whole", "left", "heavy")} == {
        "whole": [0] * 3,
        "left": [0] * 3,
        "heavy": [0] * 3,
    }
    busy = _per_window("busy_gpu_seconds")
    assert (busy["whole"], busy["left"], busy["heavy"]) == (
        [Decimal(240)] * 3,  # the engine activity, a copy of the device's
        [Decimal(135)] * 3,
        [Decimal(0)] * 3,
    )
    assert _per_window("alloc_gpu_seconds")["heavy"] == [Decimal(150)] * 3
    assert [w.warnings for w in windows] == [[UNNAMED, IN_TURN, HIDDEN]] * 3


@pytest.mark.slow
@pytest.mark.django_db
def test_it_says_nothing_of_memory_where_the_pods_processes_are_seen(windows) -> None:
    assert not any(warning.startswith("memory:") for w in windows for warning in w.warnings)


@pytest.mark.slow
@pytest.mark.django_db
def test_it_reads_the_same_through_a_service_monitor(relabelled_prometheus) -> None:
    # The pods' labels spelled `exported_*`, the exporter's own pod on every series, the
    # kept device series' among them: the same rows and warnings as the exporter wrote them.
    windows = ingested_windows(relabelled_prometheus.url, START, END)
    fields = ("alloc_gpu_seconds", "busy_gpu_seconds", "memory_peak_bytes")
    found = {field: _per_window(field) for field in fields}
    assert found["busy_gpu_seconds"]["heavy"] == [Decimal(180)] * 3
    assert found["memory_peak_bytes"]["left"] == [_mib(4096)] * 3
    assert found["alloc_gpu_seconds"]["whole"] == [Decimal(300)] * 3
    assert "dcgm-exporter" not in found["alloc_gpu_seconds"]
    assert [w.warnings for w in windows] == [[UNNAMED, IN_TURN]] * 3
