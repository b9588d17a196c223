"""kube-state-metrics sharded horizontally (`--shard=N --total-shards=M`): each replica writes the
pods and nodes whose uid hashes to its shard, under its own `instance`. Three faults of such a
deployment, each back-filled into a real Prometheus (promtool) beside a clean copy of the same
pool, and ingested as beat does (window by window) and as a back-fill does (one batch):

- a shard silent for an hour (its replica OOM-killed: `up` 0, none of its series);
- two replicas writing the same shard for 20 minutes (a rollout): every kube_pod_* and
  kube_node_* series of the shard twice, under two instances;
- a re-balance from two shards to three at 11:07, mid-window: pods' series move to the new
  replica's instance.

node-1 has four GPUs. `serve-0` (team red, inference-critical) is on shard 0 and holds GPU-a,
`train-0` (team blue, training-interactive) on shard 1 holds GPU-b, both throughout; `batch-0`
(team blue, training-batch, shard 1) is created at 10:35, scheduled at 10:35:30 (a wait of
30 s), holds GPU-c and is preempted at 10:43. The node's allocatable GPUs are on shard 1."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from metering.models import CapacityInterval, IngestWindow, PodWait, Preemption, UsageInterval
from tests.metering.jobs import backfilled_prometheus, ingest_command, jobs_source
from tests.slow import starts

pytestmark = [pytest.mark.slow, pytest.mark.django_db]

SCRAPE = 60
STEP = timedelta(seconds=300)
START = datetime(2026, 10, 20, 10, tzinfo=UTC)
END = START + timedelta(hours=2)
LEAD_IN = timedelta(minutes=30)
# Ingested from 09:25: the first window holds serve-0's and train-0's scheduling (09:29:30)
# and, with the series starting at 09:30, no GPU sample (completeness 0 in every run).
INGEST_START = START - LEAD_IN - STEP
DCGM = 'job="dcgm-exporter",instance="10.0.0.7:9400"'
# The same target with `instance` relabelled to its node's name (the exporter's pod_ip is
# then nowhere in it).
DCGM_NODE_INSTANCE = 'job="dcgm-exporter",instance="node-1:9400"'
SHARD_0, SHARD_1, SHARD_2 = "10.42.0.5:8080", "10.42.0.6:8080", "10.42.0.7:8080"
SILENT = (START + timedelta(minutes=30), START + timedelta(minutes=90))
DOUBLED = (START + timedelta(minutes=30), START + timedelta(minutes=50))
REBALANCED = START + timedelta(minutes=67)


def _at(moment: datetime) -> int:
    return int(moment.timestamp())


# (pod, team, priority class, owner, shard, GPU, first tick, last tick, preempted from)
PODS = (
    ("serve-0", "red", "inference-critical", "StatefulSet/serve", 0, "GPU-a", None, None, None),
    ("train-0", "blue", "training-interactive", "Job/train", 1, "GPU-b", None, None, None),
    (
        "batch-0",
        "blue",
        "training-batch",
        "Job/batch",
        1,
        "GPU-c",
        _at(START + timedelta(minutes=36)),
        _at(START + timedelta(minutes=44)),
        _at(START + timedelta(minutes=43)),
    ),
)


def _pod_lines(pod: tuple, tick: int, instance: str) -> list[str]:
    name, team, priority, owner, _, _, first, _, preempted = pod
    created = (first or _at(START - LEAD_IN)) - 60
    kind, owner_name = owner.split("/")
    base = (
        f'job="kube-state-metrics",instance="{instance}",namespace="ml",pod="{name}",'
        f'uid="uid-{name}"'
    )
    reason = int(preempted is not None and tick >= preempted)
    return [
        f"kube_pod_created{{{base}}} {created}",
        f"kube_pod_status_scheduled_time{{{base}}} {created + 30}",
        f'kube_pod_info{{{base},node="node-1",priority_class="{priority}"}} 1',
        f'kube_pod_owner{{{base},owner_kind="{kind}",owner_name="{owner_name}",'
        'owner_is_controller="true"} 1',
        f'kube_pod_labels{{{base},label_team="{team}"}} 1',
        f'kube_pod_status_phase{{{base},phase="Running"}} 1',
        f'kube_pod_container_resource_requests{{{base},container="main",node="node-1",'
        'resource="nvidia_com_gpu",unit="integer"} 1',
        f'kube_pod_status_reason{{{base},reason="PreemptionByScheduler"}} {reason}',
    ]


def _node_lines(instance: str) -> list[str]:
    return [
        f'kube_node_status_allocatable{{job="kube-state-metrics",instance="{instance}",'
        'node="node-1",resource="nvidia_com_gpu",unit="integer"} 4'
    ]


EXPORTER_POD = "nvidia-dcgm-exporter-x7k2p"


def _exporter_pod_lines(instance: str) -> list[str]:
    """The dcgm-exporter's own pod as kube-state-metrics writes it: a DaemonSet's, at the
    address Prometheus scrapes the exporter from."""
    base = (
        f'job="kube-state-metrics",instance="{instance}",namespace="gpu-operator",'
        f'pod="{EXPORTER_POD}",uid="uid-exporter"'
    )
    created = _at(START - timedelta(days=1))
    return [
        f"kube_pod_created{{{base}}} {created}",
        f"kube_pod_status_scheduled_time{{{base}}} {created + 5}",
        f'kube_pod_info{{{base},node="node-1",priority_class="system-node-critical",'
        'pod_ip="10.0.0.7",host_ip="10.0.0.7"} 1',
        f'kube_pod_owner{{{base},owner_kind="DaemonSet",owner_name="nvidia-dcgm-exporter",'
        'owner_is_controller="true"} 1',
        f'kube_pod_labels{{{base},label_app="nvidia-dcgm-exporter"}} 1',
        f'kube_pod_status_phase{{{base},phase="Running"}} 1',
    ]


def _gpu_lines(
    uuid: str, gpu: int, holder: str | None, own: bool = False, dcgm: str = DCGM
) -> list[str]:
    labels = (
        f'gpu="{gpu}",UUID="{uuid}",device="nvidia{gpu}",modelName="NVIDIA A100-SXM4-80GB",'
        f'Hostname="node-1",{dcgm}'
    )
    if holder is None:
        if own:  # a ServiceMonitor's scrape puts the exporter's pod on a free GPU's series
            labels += f",{EXPORTER_TARGET}"
        return [f"DCGM_FI_DEV_FB_USED{{{labels}}} 0"]
    labels += f',namespace="ml",pod="{holder}",container="main"'
    return [
        f"DCGM_FI_DEV_FB_USED{{{labels}}} 1024",
        f"DCGM_FI_PROF_GR_ENGINE_ACTIVE{{{labels}}} 0.5",
    ]


def _instances(shard: int, tick: int, fault: str) -> list[str]:
    """The instances writing `shard`'s series at `tick` under `fault`."""
    at = datetime.fromtimestamp(tick, UTC)
    if fault in ("silent", "gone") and shard == 1 and SILENT[0] <= at < SILENT[1]:
        return []
    if fault == "rebalanced" and at >= REBALANCED:
        # total-shards 2 -> 3: serve-0 hashes to the new shard 2, train-0 and batch-0 stay.
        return [SHARD_2] if shard == 0 else [SHARD_1]
    instances = [SHARD_0] if shard == 0 else [SHARD_1]
    if fault == "doubled" and shard == 1 and DOUBLED[0] <= at < DOUBLED[1]:
        instances.append(SHARD_2)
    return instances


# The dcgm-exporter's own pod, as a ServiceMonitor's scrape writes it on every series of the
# target, `up` included (Kubernetes service discovery's target labels).
EXPORTER_TARGET = f'namespace="gpu-operator",pod="{EXPORTER_POD}",container="exporter"'


def series_at(
    fault: str, own: bool = False, up_named: bool = True, dcgm: str = DCGM
) -> dict[int, list[str]]:
    """The pool's lines per tick under `fault`; with `own`, the free GPUs' series carry the
    exporter's own pod, and, unless not `up_named` (a metric relabelling that writes it on the
    GPU series alone), so does the exporter's `up`; `dcgm` is the exporter's target."""
    lines: dict[int, list[str]] = defaultdict(list)
    for tick in range(_at(START - LEAD_IN), _at(END + STEP), SCRAPE):
        live = [
            pod
            for pod in PODS
            if pod[6] is None or (pod[6] <= tick <= pod[7] and tick % STEP.seconds)
        ]
        holders = {pod[5]: pod[0] for pod in live}
        for n, uuid in enumerate(("GPU-a", "GPU-b", "GPU-c", "GPU-d")):
            lines[tick] += _gpu_lines(uuid, n, holders.get(uuid), own, dcgm)
        lines[tick].append(
            f"up{{{dcgm},{EXPORTER_TARGET}}} 1" if own and up_named else f"up{{{dcgm}}} 1"
        )
        answering: set[str] = set()
        for pod in live:
            for instance in _instances(pod[4], tick, fault):
                lines[tick] += _pod_lines(pod, tick, instance)
        for shard in (0, 1):
            answering.update(_instances(shard, tick, fault))
        for instance in _instances(1, tick, fault):
            lines[tick] += _node_lines(instance)
            if own:
                lines[tick] += _exporter_pod_lines(instance)
        for instance in (SHARD_0, SHARD_1, SHARD_2):
            if instance in answering:
                up = 1
            elif fault == "silent" and instance == SHARD_1:
                up = 0  # OOM-killed: the target stays, its scrapes fail
            else:
                continue
            lines[tick].append(f'up{{job="kube-state-metrics",instance="{instance}"}} {up}')
    return lines


FAULTS = ("clean", "silent", "gone", "doubled", "rebalanced")


@pytest.fixture(scope="module")
@starts("Prometheus")
def shard_prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    running = {
        fault: backfilled_prometheus(tmp_path_factory.mktemp(fault), series_at(fault))
        for fault in FAULTS
    }
    for fault in ("clean", "silent", "gone"):
        running[f"own {fault}"] = backfilled_prometheus(
            tmp_path_factory.mktemp(f"own-{fault}"), series_at(fault, own=True)
        )
    running["own gone, up unnamed"] = backfilled_prometheus(
        tmp_path_factory.mktemp("own-gone-unnamed"), series_at("gone", own=True, up_named=False)
    )
    running["own clean, instance the node's"] = backfilled_prometheus(
        tmp_path_factory.mktemp("own-node-instance"),
        series_at("clean", own=True, dcgm=DCGM_NODE_INSTANCE),
    )
    yield running
    for process in running.values():
        process.stop()


def ingested(url: str, *, window_by_window: bool) -> dict:
    """What the pool's two hours stored: usage per (task, team, kind), capacity, waits,
    preemptions, and the completeness and warnings of each window from the first with samples
    (09:30)."""
    jobs_source(url)
    if window_by_window:
        moment = INGEST_START
        while moment < END:
            ingest_command(moment, moment + STEP)
            moment += STEP
    else:
        ingest_command(INGEST_START, END)
    usage: dict[tuple, Decimal] = defaultdict(Decimal)
    for task, team, kind, seconds in UsageInterval.objects.values_list(
        "task__external_id", "task__team__name", "task__kind", "alloc_gpu_seconds"
    ):
        usage[task, team, kind] += seconds
    windows = IngestWindow.objects.filter(start__gte=START - LEAD_IN, start__lt=END).order_by(
        "start"
    )
    return {
        "usage": dict(usage),
        "capacity": sum(CapacityInterval.objects.values_list("capacity_gpu_seconds", flat=True)),
        # In the order the pods were created (a query's order is the table's, which the
        # writer's order of rows does not fix).
        "waits": list(
            PodWait.objects.order_by("created", "pod").values_list(
                "task__external_id", "pod", "seconds"
            )
        ),
        "preemptions": list(
            Preemption.objects.order_by("at", "pod").values_list(
                "task__external_id", "pod", "pods", "gpus"
            )
        ),
        "windows": [(w.start, w.completeness, w.warnings) for w in windows],
    }


def _guessed(result: dict) -> list[tuple[str, str]]:
    """(window start, the pod named) of each window's warning of guessed identity."""
    return [
        (start.strftime("%H:%M"), warning.split(" e.g. ")[1].split(":")[0])
        for start, _, warnings in result["windows"]
        for warning in warnings
        if " without kube-state-metrics describing them " in warning
    ]


def _warned(result: dict, text: str) -> list[str]:
    """The windows with a warning that holds `text`."""
    return [
        start.strftime("%H:%M")
        for start, _, warnings in result["windows"]
        if any(text in warning for warning in warnings)
    ]


def _silent_named(result: dict) -> list[str]:
    """The windows whose warnings name the silent shard's instance."""
    return _warned(result, f'instance="{SHARD_1}" answered 0 of 5')


def _starts(first: str, last: str) -> list[str]:
    moment, end = datetime.fromisoformat(f"2026-10-20T{first}"), f"2026-10-20T{last}"
    found = []
    while moment.isoformat(timespec="minutes") <= end:
        found.append(moment.strftime("%H:%M"))
        moment += STEP
    return found


CLEAN = {
    "usage": {
        ("serve", "red", "inference"): Decimal(9000),
        ("train", "blue", "training_interactive"): Decimal(9000),
        ("batch", "blue", "training_batch"): Decimal(480),
    },
    "capacity": Decimal(36000),  # 4 GPUs x 150 minutes
    "waits": [("serve", "serve-0", 30), ("train", "train-0", 30), ("batch", "batch-0", 30)],
    "preemptions": [("batch", "batch-0", 1, Decimal(1))],
}


# Window by window with shard 1 silent for the hour: train-0's 11 windows of the hour and
# batch-0's whole life go to tasks guessed from their pods (team ml, training_batch).
GUESSED_WINDOW_BY_WINDOW = {
    ("serve", "red", "inference"): Decimal(9000),
    ("train", "blue", "training_interactive"): Decimal(5700),
    ("train-0", "ml", "training_batch"): Decimal(3300),
    ("batch-0", "ml", "training_batch"): Decimal(480),
}


@pytest.mark.parametrize("fault", ["silent", "gone"])
def test_it_guesses_a_silent_shards_pods_window_by_window_and_says_so(
    shard_prometheus, fault: str
) -> None:
    """As beat ingests, each window alone: train-0's 11 windows of the hour (3,300 of its 9,000
    GPU-seconds) go to a task `train-0` of team `ml` at training_batch's rate, batch-0 (never
    described) to `batch-0` of `ml`, and its preemption is not seen. Every window is complete,
    and each says whose identity it guessed; a shard whose target stays (`up` 0, OOM-killed)
    is named by its instance in the window's gap warning, one gone from service discovery
    (evicted, no `up`) is not: nothing in Prometheus says it was there."""
    result = ingested(shard_prometheus[fault].url, window_by_window=True)
    assert result["usage"] == GUESSED_WINDOW_BY_WINDOW
    assert result["capacity"] == CLEAN["capacity"]
    # batch-0's wait and preemption were never written. train-0, shown again at 11:30 after
    # its last view a batch before, looks newly scheduled: its wait of 09:29:30 is recorded
    # again, and stays one (PodWait is unique per task, pod and creation).
    assert (result["waits"], result["preemptions"]) == (CLEAN["waits"][:2], [])
    assert {completeness for _, completeness, _ in result["windows"]} == {1}
    train = [(start, "ml/train-0") for start in _starts("10:30", "11:20")]
    train[1:3] = [("10:35", "ml/batch-0"), ("10:40", "ml/batch-0")]  # both: batch-0 first
    assert _guessed(result) == train
    assert _silent_named(result) == (_starts("10:30", "11:25") if fault == "silent" else [])


@pytest.mark.parametrize("fault", ["silent", "gone"])
def test_it_keeps_a_silent_shards_pods_identity_within_one_batch(
    shard_prometheus, fault: str
) -> None:
    """Ingested as one batch (a back-fill), train-0 is described before and after the hour and
    keeps its task, team and kind throughout; only batch-0, whose whole life fell in the
    silence, is guessed, and its two windows say so."""
    result = ingested(shard_prometheus[fault].url, window_by_window=False)
    assert result["usage"] == {
        ("serve", "red", "inference"): Decimal(9000),
        ("train", "blue", "training_interactive"): Decimal(9000),
        ("batch-0", "ml", "training_batch"): Decimal(480),
    }
    assert (result["waits"], result["preemptions"]) == (CLEAN["waits"][:2], [])
    assert {completeness for _, completeness, _ in result["windows"]} == {1}
    assert _guessed(result) == [("10:35", "ml/batch-0"), ("10:40", "ml/batch-0")]


@pytest.mark.parametrize("window_by_window", [True, False], ids=["beat", "backfill"])
def test_it_counts_a_shard_that_two_replicas_write_once(
    shard_prometheus, window_by_window: bool
) -> None:
    """Every kube_pod_* and kube_node_* series of shard 1 twice for 20 minutes: usage, node
    capacity, the wait and the preemption are the clean pool's, and the four windows name the
    second replica."""
    result = ingested(shard_prometheus["doubled"].url, window_by_window=window_by_window)
    assert {key: result[key] for key in CLEAN} == CLEAN
    assert {completeness for _, completeness, _ in result["windows"]} == {1}
    assert _warned(result, f'instance="{SHARD_2}"; each counted once') == _starts("10:25", "10:40")


@pytest.mark.parametrize("window_by_window", [True, False], ids=["beat", "backfill"])
def test_it_keeps_identity_across_a_rebalance_mid_window(
    shard_prometheus, window_by_window: bool
) -> None:
    """Two shards to three at 11:07: serve-0's series move to the new replica's instance inside
    the 11:05 window. Nothing splits or moves, and nothing needs saying."""
    result = ingested(shard_prometheus["rebalanced"].url, window_by_window=window_by_window)
    assert {key: result[key] for key in CLEAN} == CLEAN
    assert [(completeness, warnings) for _, completeness, warnings in result["windows"]] == [
        (1, [])
    ] * 30


@pytest.mark.parametrize("pool", ["own clean", "own silent", "own gone", "own gone, up unnamed"])
def test_it_frees_the_gpus_of_an_exporter_whose_shard_is_silent_within_one_batch(
    shard_prometheus, pool: str
) -> None:
    """The free GPUs' series carry the dcgm-exporter's own pod (a ServiceMonitor's scrape),
    which shard 1 describes (a DaemonSet's pod at the address scraped). With shard 1 silent
    for the hour, the exporter was taken for a pod holding them: 6,120 GPU-seconds of free
    GPUs billed to task nvidia-dcgm-exporter of team gpu-operator at training_batch's rate,
    every window complete, and where the replica's target was gone the windows said only that
    the class system-node-critical has no kind. Now the target's `up`, which names the pod,
    tells it, and where a relabelling left `up` unnamed, the batch's view of the pod does:
    the GPUs are free, as in the clean pool."""
    result = ingested(shard_prometheus[pool].url, window_by_window=False)
    usage = dict(CLEAN["usage"])
    if pool != "own clean":
        usage.pop(("batch", "blue", "training_batch"))
        usage["batch-0", "ml", "training_batch"] = Decimal(480)  # never described, as above
    assert result["usage"] == usage
    assert result["capacity"] == CLEAN["capacity"]
    assert not [w for _, _, warnings in result["windows"] for w in warnings if "kind:" in w]


@pytest.mark.parametrize("fault", ["silent", "gone"])
def test_it_frees_the_gpus_of_an_exporter_whose_shard_is_silent_window_by_window(
    shard_prometheus, fault: str
) -> None:
    """As beat ingests, window by window, no window of the silent hour holds kube-state-metrics'
    view of the exporter's pod, and 5,520 GPU-seconds of free GPUs went to a guessed
    `nvidia-dcgm-exporter-x7k2p` of `gpu-operator` at training_batch's rate. The target's `up`
    names its own pod: the GPUs are free, and each window of the hour says how it told the
    exporter (a sidecar exporter's workload would be read so too)."""
    result = ingested(shard_prometheus[f"own {fault}"].url, window_by_window=True)
    assert result["usage"] == GUESSED_WINDOW_BY_WINDOW  # as without the exporter's pod
    assert result["capacity"] == CLEAN["capacity"]
    told = _warned(result, f"pod gpu-operator/{EXPORTER_POD} is the exporter's own")
    assert told == _starts("10:30", "11:20")


@pytest.mark.parametrize("window_by_window", [True, False], ids=["beat", "backfill"])
def test_it_tells_the_exporters_own_pod_by_its_up_where_instance_is_not_its_address(
    shard_prometheus, window_by_window: bool
) -> None:
    """`instance` relabelled to the node's name: kube-state-metrics' pod_ip of the exporter's
    DaemonSet pod (10.0.0.7) is not the address scraped, which was the only sign before: the
    exporter held its node's free GPUs, 17,520 GPU-seconds billed to task nvidia-dcgm-exporter
    of team gpu-operator at training_batch's rate, batched or not (the known gap "An
    exporter's own pod where `instance` is not its address"). The target's `up` names the
    pod: the clean pool, no warning."""
    result = ingested(
        shard_prometheus["own clean, instance the node's"].url, window_by_window=window_by_window
    )
    assert {key: result[key] for key in CLEAN} == CLEAN
    assert [(completeness, warnings) for _, completeness, warnings in result["windows"]] == [
        (1, [])
    ] * 30


def test_it_says_whose_identity_it_guessed_where_a_window_alone_cannot_tell_the_exporter(
    shard_prometheus,
) -> None:
    """Window by window, where a metric relabelling put the exporter's pod on its GPU series
    but not on its `up`, the silent hour's windows hold no view of the exporter's pod but the
    first (the interval before it shows it): 5,520 GPU-seconds of free GPUs go to a guessed
    `nvidia-dcgm-exporter-x7k2p` of `gpu-operator`, and each of those windows names it."""
    result = ingested(shard_prometheus["own gone, up unnamed"].url, window_by_window=True)
    assert result["usage"]["nvidia-dcgm-exporter-x7k2p", "gpu-operator", "training_batch"] == 5520
    named = [start for start, pod in _guessed(result) if pod == f"gpu-operator/{EXPORTER_POD}"]
    assert named == _starts("10:35", "11:20")
