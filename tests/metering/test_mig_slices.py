"""A MIG instance's share of its GPU is its compute slices over the slices ITS model has: seven
on an A100 or H100, four on an A30 (NVIDIA's MIG user guide, "Supported MIG Profiles": the
A30's `1g.6gb` is 1/4 of its SMs, `2g.12gb` 2/4, `4g.24gb` the full GPU).

A three-GPU node, back-filled into a real Prometheus (promtool), as dcgm-exporter writes MIG
instances (`GPU_I_PROFILE`, `GPU_I_ID`, the parent GPU's `UUID` and `modelName`):

- GPU-a, an A30 in one `4g.24gb` instance, held by Job `whole` through the three windows;
- GPU-b, an A30 in a `2g.12gb` instance held by Job `half` and two `1g.6gb` ones, one held by
  Job `tune` until it is preempted in the second window, the other free;
- GPU-c, an H100 in a `3g.40gb` instance held by Job `h100` (3/7, as before).

Read as sevenths of a GPU, as the metering did before, every A30 slice came out at 4/7 of its
share, silently (every window complete, no warning): `whole` was billed 514.285713
GPU-seconds (three windows of 171.428571) of the 900 it held the whole A30 for, `half`
257.142858 of 450, `tune` 60 of 105, and `tune`'s preemption held 0.142857 GPUs instead of
0.25, which rule 5's credit multiplies.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.db.models import Sum

from metering.measure import mig_slices
from metering.models import CapacityInterval, IngestWindow, Preemption, UsageInterval
from simulator.prometheus import PrometheusProcess
from tests.metering.jobs import KSM, SCRAPE, backfilled_prometheus, ingest_command, jobs_source
from tests.slow import starts

START = datetime(2026, 10, 12, 10, tzinfo=UTC)
STEP = timedelta(seconds=300)
END = START + 3 * STEP
EVICTED = START + STEP + timedelta(seconds=120)  # a tick inside the second window
LEAD_IN = timedelta(minutes=10)
CREATED = START - timedelta(minutes=15)

A30, H100 = "NVIDIA A30", "NVIDIA H100 80GB HBM3"
DCGM = 'Hostname="node-1",job="dcgm-exporter",instance="10.0.0.7:9400"'
# (GPU index, UUID, model, GPU_I_ID, profile, holding pod or None, preempted)
DEVICES = (
    (0, "GPU-a", A30, "1", "4g.24gb", "whole-0", False),
    (1, "GPU-b", A30, "1", "2g.12gb", "half-0", False),
    (1, "GPU-b", A30, "2", "1g.6gb", "tune-0", True),
    (1, "GPU-b", A30, "3", "1g.6gb", None, False),
    (2, "GPU-c", H100, "1", "3g.40gb", "h100-0", False),
)


def _device(gpu: int, uuid: str, model: str, instance: str, profile: str, pod: str | None) -> str:
    labels = (
        f'gpu="{gpu}",UUID="{uuid}",device="nvidia{gpu}",modelName="{model}",{DCGM},'
        f'GPU_I_PROFILE="{profile}",GPU_I_ID="{instance}"'
    )
    if pod is None:
        return f"DCGM_FI_DEV_FB_USED{{{labels}}} 0"
    return f'DCGM_FI_DEV_FB_USED{{{labels},namespace="ml",pod="{pod}",container="main"}} 1024'


def _pod(pod: str, profile: str, evicted: bool) -> list[str]:
    base = f'{KSM},namespace="ml",pod="{pod}",uid="uid-{pod}"'
    created = int(CREATED.timestamp())
    return [
        f"kube_pod_created{{{base}}} {created}",
        f"kube_pod_status_scheduled_time{{{base}}} {created + 30}",
        f'kube_pod_info{{{base},node="node-1",priority_class="training-batch"}} 1',
        f'kube_pod_owner{{{base},owner_kind="Job",owner_name="{pod[:-2]}",'
        'owner_is_controller="true"} 1',
        f"kube_pod_labels{{{base}}} 1",
        # As kube-state-metrics reports a MIG request: under the instance's own resource.
        f'kube_pod_container_resource_requests{{{base},container="main",'
        f'resource="nvidia_com_mig_{profile}",unit="integer"}} 1',
        f'kube_pod_status_phase{{{base},phase="{"Failed" if evicted else "Running"}"}} 1',
        f'kube_pod_status_reason{{{base},reason="PreemptionByScheduler"}} {int(evicted)}',
    ]


def series_at() -> dict[int, list[str]]:
    """Each tick's samples from LEAD_IN before the first window to the end of the last; the
    preempted pod shows Failed with the reason for two ticks, its instance free from then."""
    evicted = int(EVICTED.timestamp())
    lines: dict[int, list[str]] = {}
    for tick in range(int((START - LEAD_IN).timestamp()), int(END.timestamp()), SCRAPE):
        lines[tick] = []
        for gpu, uuid, model, instance, profile, pod, preempted in DEVICES:
            running = pod is not None and not (preempted and tick >= evicted)
            holder = pod if running else None
            lines[tick].append(_device(gpu, uuid, model, instance, profile, holder))
            if pod is not None and (running or tick < evicted + 2 * SCRAPE):
                lines[tick] += _pod(pod, profile, not running)
    return lines


@pytest.fixture(scope="module")
@starts("Prometheus")
def mig_prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusProcess]:
    running = backfilled_prometheus(tmp_path_factory.mktemp("mig"), series_at())
    yield running
    running.stop()


@pytest.fixture
def ingested(mig_prometheus: PrometheusProcess) -> dict[str, Decimal]:
    """Each task's allocated GPU-seconds over the three windows."""
    jobs_source(mig_prometheus.url)
    ingest_command(START, END)
    rows = UsageInterval.objects.values("task__external_id").annotate(
        seconds=Sum("alloc_gpu_seconds")
    )
    return {row["task__external_id"]: row["seconds"] for row in rows}


@pytest.mark.slow
@pytest.mark.django_db
def test_it_bills_an_a30_slice_as_quarters_of_the_gpu(ingested) -> None:
    assert ingested["whole"] == Decimal("900")  # the whole A30, three windows of 300 s
    assert ingested["half"] == Decimal("450")  # 2/4 of it
    # 1/4 of an A30 from the first window's start to the eviction tick (7 ticks of 60 s).
    assert ingested["tune"] == Decimal((EVICTED - START).seconds) / 4
    # An H100's slices are sevenths, as they were.
    assert ingested["h100"] == 3 * Decimal("128.571429")  # 3/7 x 300 a window, each rounded


@pytest.mark.slow
@pytest.mark.django_db
def test_it_credits_the_preempted_a30_slice_as_a_quarter_of_a_gpu(ingested) -> None:
    tune = Preemption.objects.get(task__external_id="tune")
    assert (tune.pod, tune.at, tune.gpu_model) == ("tune-0", EVICTED, A30)
    assert tune.gpus == Decimal("0.25")


@pytest.mark.slow
@pytest.mark.django_db
def test_it_keeps_the_windows_complete_and_the_capacity_whole(ingested) -> None:
    windows = IngestWindow.objects.filter(start__gte=START, start__lt=END).order_by("start")
    assert [(w.status, w.completeness) for w in windows] == [("done", Decimal("1"))] * 3
    assert not any(w.warnings for w in windows)
    capacity = CapacityInterval.objects.aggregate(seconds=Sum("capacity_gpu_seconds"))["seconds"]
    assert capacity == Decimal(3 * 900)  # three GPUs, however cut


def test_it_tells_a_gpus_slices_whatever_the_spelling_of_its_model() -> None:
    # As GPU classes take a model (kernel.gpu_models.gpu_model_key): older drivers drop the
    # "NVIDIA " prefix; case and spaces are not what tells an A30.
    spellings = {
        "NVIDIA A30": 4,
        "A30": 4,
        "nvidia a30": 4,
        "NVIDIA  A30X": 4,
        "NVIDIA RTX PRO 6000 Blackwell Server Edition": 4,
        "NVIDIA RTX PRO 6000  blackwell Max-Q Workstation Edition": 4,
        "RTX PRO 4500 Blackwell": 2,
        "NVIDIA H100 80GB HBM3": 7,
        "": 7,
    }
    assert {model: mig_slices(model) for model in spellings} == spellings
