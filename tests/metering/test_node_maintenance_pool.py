"""A node whose GPU software is stopped without cordoning it, as NVIDIA's mig-manager does to
apply a MIG layout: dcgm-exporter and the device plugin go together, and kube-state-metrics
lists the node with its GPUs allocatable 0 at once and in capacity for the kubelet's 5-minute
grace (then 0), in a real Prometheus back-filled from the simulator (`--silent-exporter
NODE,START,SECONDS,maintenance`).

The GPUs are out of use, not unmetered: the windows are complete and store the truth's
capacity. Read from `kube_node_status_capacity` (before), the grace's first window counted the
node's 6 GPUs missing, so it came out short and its month would not close unaccepted; a MIG
layout changed on a schedule does that every day. The exporter gone alone, the device plugin
still there, is tests/metering/test_vanished_exporters_pool.py."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, date, datetime
from decimal import Decimal

import pytest

from metering.models import CapacityInterval, IngestWindow, Source
from simulator.config import PoolConfig, SilentExporter
from simulator.prometheus import PrometheusProcess
from tests.metering.conftest import ingest_span, simulated_prometheus, source_remove

pytestmark = pytest.mark.slow

BASE = PoolConfig(gpus=24, days=1, start=date(2026, 10, 6), seed=5, scrape_interval_seconds=60)
NODE = "gpu-node-05"  # an inference node of 6 GPUs, idle at night
START = BASE.start_epoch + 2 * 3600  # on a window's start: the first window has no `up` at all
SECONDS = 1800
MAINTAINED = replace(
    BASE,
    pools="separate",
    silent_exporters=(SilentExporter(NODE, START, SECONDS, gone=True, maintenance=True),),
)
SPAN = (START - 3600, START + SECONDS + 3600)


@pytest.fixture(scope="module")
def maintained_pool(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[dict, PrometheusProcess]]:
    yield from simulated_prometheus(MAINTAINED, tmp_path_factory.mktemp("maintained-pool"))


@pytest.mark.django_db(transaction=True)
def test_it_counts_a_node_without_allocatable_gpus_gone_not_missing(maintained_pool) -> None:
    truth, prometheus = maintained_pool
    gpus = {node["name"]: len(node["gpus"]) for node in truth["meta"]["nodes"]}
    assert gpus[NODE] == 6
    source = Source.objects.create(
        name="maintained", url=prometheus.url, scrape_interval_seconds=60
    )
    try:
        ingest_span(
            source, datetime.fromtimestamp(SPAN[0], UTC), datetime.fromtimestamp(SPAN[1], UTC), 12
        )
        windows = list(IngestWindow.objects.filter(source=source).order_by("start"))
        capacity = {
            c.interval_start: c.capacity_gpu_seconds
            for c in CapacityInterval.objects.filter(source=source)
        }
        assert len(windows) == 30
        for window in windows:
            assert window.status == "done"
            assert window.completeness == 1, (window.start, window.warnings)
            expected = Decimal(truth["capacity"][window.start.strftime("%Y-%m-%dT%H:%M:%SZ")])
            assert capacity[window.start] == expected, window.start
        inside = [w for w in windows if START <= w.start.timestamp() < START + SECONDS]
        assert len(inside) == 6
        assert {capacity[w.start] for w in inside} == {(sum(gpus.values()) - 6) * 300}
    finally:
        source_remove(source.pk)
