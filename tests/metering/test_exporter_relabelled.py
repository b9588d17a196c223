"""A dcgm-exporter upgraded in place: the same scrape target (`job`, `instance`: an exporter on
its host's network, or an `instance` relabelled to the node), whose new build writes a label
the old one did not (`pci_bus_id`), so each GPU's series changes its label set mid-window.

A two-GPU node back-filled into a real Prometheus (promtool): Job `train` holds GPU-a through
three windows, GPU-b is free. The exporter is replaced between the 10:06 and 10:07 scrapes,
missing none (a restart within the 60 s scrape interval).

Before, a GPU's two series of one target were merged by their max: the 10:05 window counted
the longer of the two parts, 3 of its 5 ticks. `train` was billed 180 GPU-seconds of 300 for
it and capacity was 360 of 600 (the inference reserve, 30% of it, with it), with every window
complete and no warning."""

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
UPGRADED = START + STEP + timedelta(seconds=120)  # 10:07, inside the second window
LEAD_IN = timedelta(minutes=10)
TARGET = 'job="dcgm-exporter",instance="10.0.0.7:9400"'
OLD = 'DCGM_FI_DRIVER_VERSION="550.54.15"'
NEW = f'{OLD},pci_bus_id="00000000:3B:00.0"'


def _device(gpu: int, uuid: str, build: str, pod: str | None) -> str:
    labels = (
        f'gpu="{gpu}",UUID="{uuid}",device="nvidia{gpu}",modelName="NVIDIA H100 80GB HBM3",'
        f'Hostname="node-1",{build},{TARGET}'
    )
    if pod is not None:
        labels += f',namespace="ml",pod="{pod}",container="main"'
    return f"DCGM_FI_DEV_FB_USED{{{labels}}} {1024 if pod else 0}"


def _pod(pod: str) -> list[str]:
    base = f'{KSM},namespace="ml",pod="{pod}",uid="uid-{pod}"'
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
        build = NEW if tick >= UPGRADED.timestamp() else OLD
        lines[tick] = [
            _device(0, "GPU-a", build, "train-0"),
            _device(1, "GPU-b", build, None),
            f"up{{{TARGET}}} 1",
            f"up{{{KSM}}} 1",
            *_pod("train-0"),
        ]
    return lines


@pytest.fixture(scope="module")
@starts("Prometheus")
def upgraded_prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusProcess]:
    running = backfilled_prometheus(tmp_path_factory.mktemp("upgraded"), series_at())
    yield running
    running.stop()


@pytest.fixture
def windows(upgraded_prometheus: PrometheusProcess) -> list[IngestWindow]:
    return ingested_windows(upgraded_prometheus.url, START, END)


@pytest.mark.slow
@pytest.mark.django_db
def test_it_bills_the_gpu_across_the_exporters_new_label_set(windows) -> None:
    alloc = dict(
        UsageInterval.objects.filter(task__external_id="train").values_list(
            "interval_start", "alloc_gpu_seconds"
        )
    )
    assert alloc == {START + n * STEP: Decimal(300) for n in range(3)}


@pytest.mark.slow
@pytest.mark.django_db
def test_it_counts_both_gpus_present_through_the_upgrade(windows) -> None:
    capacity = dict(CapacityInterval.objects.values_list("interval_start", "capacity_gpu_seconds"))
    assert capacity == {START + n * STEP: Decimal(600) for n in range(3)}
    # No scrape was missed: the windows are complete, as they were when they were short.
    assert [(w.status, w.completeness) for w in windows] == [("done", Decimal(1))] * 3
