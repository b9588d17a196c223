"""Preemptions as docs/pricing.md "Preemptions across periods" counts them: one event per task
and interval (a gang's pods summed), GPUs from what the devices series show each pod holding.

A three-GPU node, back-filled into a real Prometheus (promtool): Job `gang` of namespace `ml`
runs two pods on GPU-a and GPU-b; Job `tune` runs one pod on a 3g.40gb MIG slice of GPU-c and,
as kube-state-metrics reports MIG, requests `nvidia_com_mig_3g.40gb`, no `nvidia_com_gpu`. All
three pods are evicted at the same tick, in the second window. GPU-a and GPU-b are A100s,
GPU-c an H100: each preemption records the model its metered GPUs had (docs/pricing.md "GPU
classes", rule 5: its compensation is priced in that model's class).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from metering.models import Preemption
from simulator.prometheus import PrometheusProcess
from tests.metering.jobs import (
    DCGM,
    KSM,
    SCRAPE,
    backfilled_prometheus,
    ingest_command,
    jobs_source,
)
from tests.slow import starts

START = datetime(2026, 10, 10, 10, tzinfo=UTC)
STEP = timedelta(seconds=300)
EVICTED = START + STEP + timedelta(seconds=120)  # a tick inside the second window
LEAD_IN = timedelta(minutes=10)
# (pod, Job, GPU UUID, MIG profile, GPU request resource, created)
PODS = (
    ("gang-0", "gang", "GPU-a", "", "nvidia_com_gpu", START - timedelta(minutes=20)),
    ("gang-1", "gang", "GPU-b", "", "nvidia_com_gpu", START - timedelta(minutes=10)),
    ("tune-0", "tune", "GPU-c", "3g.40gb", "nvidia_com_mig_3g.40gb", START - timedelta(minutes=5)),
)


# A pod evicted before any GPU series named it (two containers asking one GPU each): its
# preemption counts what it requested, summed over its containers.
UNMETERED = ("waiting-0", "waiting", START - timedelta(minutes=15))

A100, H100 = "NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3"


def _device(uuid: str, gpu: int, profile: str, pod: str | None) -> list[str]:
    labels = f'gpu="{gpu}",UUID="{uuid}",device="nvidia{gpu}",{DCGM}'
    if uuid == "GPU-c":
        labels = labels.replace(f'modelName="{A100}"', f'modelName="{H100}"')
    if profile:
        labels += f',GPU_I_PROFILE="{profile}",GPU_I_ID="1"'
    if pod is None:
        return [f"DCGM_FI_DEV_FB_USED{{{labels}}} 0"]
    labels += f',namespace="ml",pod="{pod}",container="main"'
    return [
        f"DCGM_FI_DEV_FB_USED{{{labels}}} 1024",
        f"DCGM_FI_PROF_GR_ENGINE_ACTIVE{{{labels}}} 0.5",
    ]


def _pod(
    pod: str, job: str, resource: str, created: int, evicted: bool, containers: int = 1
) -> list[str]:
    base = f'{KSM},namespace="ml",pod="{pod}",uid="uid-{pod}"'
    return [
        f"kube_pod_created{{{base}}} {created}",
        f"kube_pod_status_scheduled_time{{{base}}} {created + 30}",
        f'kube_pod_info{{{base},node="node-1",priority_class="training-batch"}} 1',
        f'kube_pod_owner{{{base},owner_kind="Job",owner_name="{job}",'
        'owner_is_controller="true"} 1',
        f"kube_pod_labels{{{base}}} 1",
        *(
            f'kube_pod_container_resource_requests{{{base},container="c{n}",'
            f'resource="{resource}",unit="integer"}} 1'
            for n in range(containers)
        ),
        f'kube_pod_status_phase{{{base},phase="{"Failed" if evicted else "Running"}"}} 1',
        f'kube_pod_status_reason{{{base},reason="PreemptionByScheduler"}} {int(evicted)}',
    ]


def series_at() -> dict[int, list[str]]:
    """The pods hold their GPUs until the eviction tick, where kube-state-metrics reports them
    preempted for two ticks and the devices series no longer name them."""
    evicted = int(EVICTED.timestamp())
    lines: dict[int, list[str]] = {}
    for tick in range(
        int((START - LEAD_IN).timestamp()), int((START + 3 * STEP).timestamp()), SCRAPE
    ):
        lines[tick] = []
        for gpu, (pod, job, uuid, profile, resource, created) in enumerate(PODS):
            running = int(created.timestamp()) + 30 <= tick < evicted
            lines[tick] += _device(uuid, gpu, profile, pod if running else None)
            if running or evicted <= tick < evicted + 2 * SCRAPE:
                lines[tick] += _pod(pod, job, resource, int(created.timestamp()), not running)
        pod, job, created = UNMETERED
        if int(created.timestamp()) <= tick < evicted + 2 * SCRAPE:
            running = tick < evicted
            lines[tick] += _pod(
                pod, job, "nvidia_com_gpu", int(created.timestamp()), not running, containers=2
            )
    return lines


@pytest.fixture(scope="module")
@starts("Prometheus")
def evictions_prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusProcess]:
    running = backfilled_prometheus(tmp_path_factory.mktemp("evictions"), series_at())
    yield running
    running.stop()


@pytest.fixture
def evictions(evictions_prometheus: PrometheusProcess) -> dict[str, Preemption]:
    jobs_source(evictions_prometheus.url)
    ingest_command(START, START + 3 * STEP)
    return {p.task.external_id: p for p in Preemption.objects.select_related("task")}


@pytest.mark.slow
@pytest.mark.django_db
def test_it_records_a_gang_evicted_at_once_as_one_preemption(evictions) -> None:
    gang = evictions["gang"]
    assert Preemption.objects.filter(task__external_id="gang").count() == 1
    assert (gang.pod, gang.pods, gang.at) == ("gang-0", 2, EVICTED)
    assert gang.gpus == Decimal("2")  # one whole GPU each
    # The longer-running pod: scheduled 30 s after its creation, 20 minutes before START.
    assert gang.seconds_since_start == (EVICTED - PODS[0][5]).seconds - 30
    assert gang.lost_gpu_seconds is None


@pytest.mark.django_db
@pytest.mark.slow
def test_it_counts_the_metered_slice_of_a_mig_task_not_its_request(evictions) -> None:
    tune = evictions["tune"]
    assert (tune.pod, tune.pods, tune.at) == ("tune-0", 1, EVICTED)
    assert tune.gpus == Decimal("0.428571")  # 3/7 of GPU-c; the request names no nvidia_com_gpu
    assert tune.seconds_since_start == (EVICTED - PODS[2][5]).seconds - 30


@pytest.mark.django_db
@pytest.mark.slow
def test_it_records_the_gpu_model_of_the_metered_allocation(evictions) -> None:
    assert evictions["gang"].gpu_model == A100
    # A MIG slice takes its physical GPU's model (docs/telemetry.md).
    assert evictions["tune"].gpu_model == H100


@pytest.mark.django_db
@pytest.mark.slow
def test_it_counts_the_request_of_a_pod_evicted_before_its_gpus_were_metered(evictions) -> None:
    waiting = evictions["waiting"]
    assert (waiting.pod, waiting.pods, waiting.at) == ("waiting-0", 1, EVICTED)
    assert waiting.gpus == Decimal("2")  # its two containers' requests, summed
