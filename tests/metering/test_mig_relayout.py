"""A node's GPUs re-laid into MIG instances within one window, as NVIDIA's mig-manager does on a
schedule (whole GPUs for training at night, slices for inference by day): it stops
dcgm-exporter and the device plugin, applies the layout, and starts them again. The new
exporter writes each GPU as its instances (`GPU_I_ID`, `GPU_I_PROFILE`), no longer as a whole
device (dcgm-exporter monitors a GPU's instances where it has some, else the GPU).

Back-filled into a real Prometheus (promtool), 60 s scrapes: node-1's two H100s are whole up to
the 10:06 scrape; its exporter is gone at 10:07 (the device plugin with it: allocatable 0); a
new exporter pod (a new address) writes each GPU as two `3g.40gb` instances from 10:08. node-2's
two GPUs answer throughout. In the 10:05 window each of node-1's GPUs was present at 4 of its
5 ticks (10:05, 10:06, 10:08, 10:09): 240 GPU-seconds each, 1,080 for the pool.

Before, a GPU's presence was the most ticks any one of its devices had (its whole series, or
one instance): 2 ticks, 120 GPU-seconds each, 840 for the pool (the inference reserve, 30% of
it, 72 GPU-seconds short, and effective utilization overstated by 1,080/840), with every window
complete and no warning: the ticks between were node-1's GPUs away, as they were."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from metering.models import CapacityInterval, IngestWindow, UsageInterval
from simulator.prometheus import PrometheusProcess
from tests.metering.jobs import (
    KSM,
    SCRAPE,
    backfilled_prometheus,
    ingested_windows,
)
from tests.slow import starts

START = datetime(2026, 10, 14, 10, tzinfo=UTC)
STEP = timedelta(seconds=300)
END = START + 3 * STEP
STOPPED = START + STEP + timedelta(seconds=120)  # 10:07: no exporter on node-1
RELAID = STOPPED + timedelta(seconds=SCRAPE)  # 10:08: the new exporter writes instances
LEAD_IN = timedelta(minutes=10)
MODEL = 'modelName="NVIDIA H100 80GB HBM3"'
OLD = 'job="dcgm-exporter",instance="10.0.0.7:9400"'
NEW = 'job="dcgm-exporter",instance="10.0.0.8:9400"'
OTHER = 'job="dcgm-exporter",instance="10.0.0.9:9400"'
CREATED = int((START - timedelta(days=30)).timestamp())
HELD = ("GPU-a", 1)  # the instance an inference pod holds from the re-layout on


def _whole(node: str, gpu: int, uuid: str, target: str) -> str:
    return (
        f'DCGM_FI_DEV_FB_USED{{gpu="{gpu}",UUID="{uuid}",device="nvidia{gpu}",{MODEL},'
        f'Hostname="{node}",{target}}} 0'
    )


def _instance(gpu: int, uuid: str, instance: int) -> list[str]:
    labels = (
        f'gpu="{gpu}",UUID="{uuid}",device="nvidia{gpu}",{MODEL},GPU_I_ID="{instance}",'
        f'GPU_I_PROFILE="3g.40gb",Hostname="node-1",{NEW}'
    )
    if (uuid, instance) != HELD:
        return [f"DCGM_FI_DEV_FB_USED{{{labels}}} 0"]
    labels += ',namespace="search",pod="serve-0",container="vllm"'
    return [
        f"DCGM_FI_DEV_FB_USED{{{labels}}} 30000",
        f"DCGM_FI_PROF_GR_ENGINE_ACTIVE{{{labels}}} 0.5",
    ]


def _pod() -> list[str]:
    base = f'{KSM},namespace="search",pod="serve-0",uid="uid-serve-0"'
    created = int(RELAID.timestamp()) - 30
    return [
        f"kube_pod_created{{{base}}} {created}",
        f"kube_pod_status_scheduled_time{{{base}}} {created}",
        f'kube_pod_info{{{base},node="node-1",priority_class="inference-critical"}} 1',
        f'kube_pod_owner{{{base},owner_kind="ReplicaSet",owner_name="serve",'
        'owner_is_controller="true"} 1',
        f'kube_pod_labels{{{base},label_team="search"}} 1',
        f'kube_pod_container_resource_requests{{{base},container="vllm",'
        'resource="nvidia_com_mig_3g_40gb",unit="integer"} 1',
        f'kube_pod_status_phase{{{base},phase="Running"}} 1',
    ]


def _node(node: str, resource: str, count: int) -> str:
    return (
        f'kube_node_status_allocatable{{{KSM},node="{node}",resource="{resource}",'
        f'unit="integer"}} {count}'
    )


def series_at() -> dict[int, list[str]]:
    lines: dict[int, list[str]] = {}
    for tick in range(int((START - LEAD_IN).timestamp()), int(END.timestamp()), SCRAPE):
        at = [
            _whole("node-2", 0, "GPU-c", OTHER),
            _whole("node-2", 1, "GPU-d", OTHER),
            f"up{{{OTHER}}} 1",
            f"up{{{KSM}}} 1",
            _node("node-2", "nvidia_com_gpu", 2),
            *(f'kube_node_created{{{KSM},node="{n}"}} {CREATED}' for n in ("node-1", "node-2")),
        ]
        if tick < STOPPED.timestamp():
            at += [
                _whole("node-1", 0, "GPU-a", OLD),
                _whole("node-1", 1, "GPU-b", OLD),
                f"up{{{OLD}}} 1",
                _node("node-1", "nvidia_com_gpu", 2),
            ]
        elif tick < RELAID.timestamp():  # mig-manager at work: no exporter, no device plugin
            at.append(_node("node-1", "nvidia_com_gpu", 0))
        else:
            for gpu, uuid in ((0, "GPU-a"), (1, "GPU-b")):
                at += [*_instance(gpu, uuid, 1), *_instance(gpu, uuid, 2)]
            at += [
                f"up{{{NEW}}} 1",
                _node("node-1", "nvidia_com_gpu", 0),
                _node("node-1", "nvidia_com_mig_3g_40gb", 4),
                *_pod(),
            ]
        lines[tick] = at
    return lines


@pytest.fixture(scope="module")
@starts("Prometheus")
def relaid_prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusProcess]:
    running = backfilled_prometheus(tmp_path_factory.mktemp("relaid"), series_at())
    yield running
    running.stop()


@pytest.fixture
def windows(relaid_prometheus: PrometheusProcess) -> list[IngestWindow]:
    return ingested_windows(relaid_prometheus.url, START, END)


@pytest.mark.slow
@pytest.mark.django_db
def test_it_counts_a_gpu_present_before_and_after_its_mig_relayout(windows) -> None:
    capacity = dict(CapacityInterval.objects.values_list("interval_start", "capacity_gpu_seconds"))
    # node-1's two GPUs at 4 ticks of 60 s each in the 10:05 window, node-2's two at 5.
    assert capacity == {
        START: Decimal(1200),
        START + STEP: Decimal(2 * 240 + 2 * 300),
        START + 2 * STEP: Decimal(1200),
    }


@pytest.mark.slow
@pytest.mark.django_db
def test_it_bills_the_pod_on_a_new_instance_its_share_of_the_ticks_it_held(windows) -> None:
    usage = {
        row.interval_start: (row.alloc_gpu_seconds, row.busy_gpu_seconds)
        for row in UsageInterval.objects.filter(task__external_id="serve")
    }
    # 3/7 of an H100 from 10:08: 2 ticks in the 10:05 window, 5 in the 10:10 one; half busy.
    assert usage == {
        START + STEP: (Decimal("51.428571"), Decimal("25.714286")),
        START + 2 * STEP: (Decimal("128.571429"), Decimal("64.285714")),
    }


@pytest.mark.slow
@pytest.mark.django_db
def test_it_keeps_the_relayout_window_complete_and_says_nothing(windows) -> None:
    # Nothing was missed: the minute between the exporters was node-1's GPUs away (the device
    # plugin stopped, allocatable 0), so every window stays complete, as it did when short.
    assert [(w.status, w.completeness, w.warnings) for w in windows] == [
        ("done", Decimal(1), [])
    ] * 3
