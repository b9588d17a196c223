"""DCGM's profiling paused on a GPU for part of a window: `dcgmi profile --pause`, which NVIDIA
asks for before Nsight Systems or Nsight Compute profiles a job on a GPU DCGM watches. While
paused, DCGM answers blank for the profiling fields and dcgm-exporter skips them, so the GPU's
`DCGM_FI_PROF_GR_ENGINE_ACTIVE` series has no sample at those scrapes; `DCGM_FI_DEV_GPU_UTIL`
goes on.

Back-filled into a real Prometheus (promtool), 60 s scrapes: Job `train` holds GPU-a through
three windows at 80% (engine activity 0.8, utilization 80) at every scrape, but for the five
scrapes from 10:07 to 10:11, at which profiling is paused. Its busy time is 240 GPU-seconds a
window.

The fallback to utilization is taken per series and window (`active or utilization / 100`,
as the busy meter's PromQL reads): a window with any engine-activity sample sums those alone.
The 10:05 window counted 96 GPU-seconds (2 ticks), the 10:10 one 144 (3 ticks): 480 of 720 in
all, effective utilization two thirds of the truth there, every window complete and nothing
said. Known and left (docs/telemetry.md, "Known gaps"); the per-tick query of time-sliced GPUs
falls back tick by tick."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from metering.models import IngestWindow, UsageInterval
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
PAUSED = range(int((START + STEP).timestamp()) + 120, int((START + STEP).timestamp()) + 420)
LEAD_IN = timedelta(minutes=10)
TARGET = 'job="dcgm-exporter",instance="10.0.0.7:9400"'
DEVICE = (
    'gpu="0",UUID="GPU-a",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="node-1",'
    f'{TARGET},namespace="ml",pod="train-0",container="main"'
)


def _pod() -> list[str]:
    base = f'{KSM},namespace="ml",pod="train-0",uid="uid-train-0"'
    created = int((START - timedelta(minutes=15)).timestamp())
    return [
        f"kube_pod_created{{{base}}} {created}",
        f"kube_pod_status_scheduled_time{{{base}}} {created + 30}",
        f'kube_pod_info{{{base},node="node-1",priority_class="training-batch"}} 1',
        f'kube_pod_owner{{{base},owner_kind="Job",owner_name="train",'
        'owner_is_controller="true"} 1',
        f"kube_pod_labels{{{base}}} 1",
        f'kube_pod_container_resource_requests{{{base},container="main",'
        'resource="nvidia_com_gpu",unit="integer"} 1',
        f'kube_pod_status_phase{{{base},phase="Running"}} 1',
    ]


def series_at() -> dict[int, list[str]]:
    lines: dict[int, list[str]] = {}
    for tick in range(int((START - LEAD_IN).timestamp()), int(END.timestamp()), SCRAPE):
        lines[tick] = [
            f"DCGM_FI_DEV_FB_USED{{{DEVICE}}} 1024",
            f"DCGM_FI_DEV_GPU_UTIL{{{DEVICE}}} 80",
            f"up{{{TARGET}}} 1",
            f"up{{{KSM}}} 1",
            *_pod(),
        ]
        if tick not in PAUSED:
            lines[tick].append(f"DCGM_FI_PROF_GR_ENGINE_ACTIVE{{{DEVICE}}} 0.8")
    return lines


@pytest.fixture(scope="module")
@starts("Prometheus")
def paused_prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusProcess]:
    running = backfilled_prometheus(tmp_path_factory.mktemp("paused"), series_at())
    yield running
    running.stop()


@pytest.fixture
def windows(paused_prometheus: PrometheusProcess) -> list[IngestWindow]:
    return ingested_windows(paused_prometheus.url, START, END)


@pytest.mark.slow
@pytest.mark.django_db
def test_it_undercounts_the_paused_windows_silently(windows) -> None:
    busy = dict(
        UsageInterval.objects.filter(task__external_id="train").values_list(
            "interval_start", "busy_gpu_seconds"
        )
    )
    # The gap as it stands, to be turned round when it is closed.
    assert busy == {START: Decimal(240), START + STEP: Decimal(96), START + 2 * STEP: Decimal(144)}
    assert [(w.status, w.completeness, w.warnings) for w in windows] == [
        ("done", Decimal(1), [])
    ] * 3
