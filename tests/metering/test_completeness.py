"""Completeness per target: a node whose dcgm-exporter stops answering lowers its windows'
completeness by its share of the pool and is named, in a real Prometheus back-filled from the
simulator (which writes Prometheus' own `up` for each node's exporter)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path

import pytest

from dashboards import selectors as dashboard_selectors
from metering.models import CapacityInterval, IngestWindow, Source
from simulator.config import PoolConfig, SilentExporter
from simulator.pool import simulate
from simulator.prometheus import PrometheusProcess
from tests.metering.conftest import ingest_span, simulated_prometheus

START = date(2026, 10, 6)
SILENT_NODE = "gpu-node-02"
# 24 GPUs on three nodes of eight: one silent node is a third of the pool.
BASE = PoolConfig(gpus=24, days=1, start=START, seed=5, scrape_interval_seconds=60)
SILENT_FROM = BASE.start_epoch + 10 * 3600  # 10:00 local, an hour of the day's peak
SILENT = PoolConfig(
    gpus=24,
    days=1,
    start=START,
    seed=5,
    scrape_interval_seconds=60,
    silent_exporters=(SilentExporter(node=SILENT_NODE, start=SILENT_FROM, seconds=3600),),
)


@pytest.fixture(scope="module")
def silent_pool(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[dict, PrometheusProcess]]:
    yield from simulated_prometheus(SILENT, tmp_path_factory.mktemp("silent-pool"))


def at(epoch: int) -> datetime:
    return datetime.fromtimestamp(epoch, UTC)


@pytest.mark.slow
@pytest.mark.django_db
def test_it_lowers_completeness_by_a_silent_nodes_share_and_names_it(silent_pool) -> None:
    truth, prometheus = silent_pool
    nodes = {node["name"]: node for node in truth["meta"]["nodes"]}
    share = Decimal(len(nodes[SILENT_NODE]["gpus"])) / Decimal(truth["meta"]["gpus"])
    assert share == Decimal(1) / 3
    source = Source.objects.create(name="silent", url=prometheus.url, scrape_interval_seconds=60)
    # An hour before, the silent hour (ingested in batches that start inside it), an hour after.
    ingest_span(source, at(SILENT_FROM - 3600), at(SILENT_FROM + 7200), batch=7)
    windows = {w.start: w for w in IngestWindow.objects.filter(source=source)}
    assert len(windows) == 36 and {w.status for w in windows.values()} == {"done"}
    silent = [
        w for start, w in windows.items() if SILENT_FROM <= start.timestamp() < SILENT_FROM + 3600
    ]
    others = [w for w in windows.values() if w not in silent]
    assert len(silent) == 12
    for window in silent:
        # GPUs that fail on their own also count; the node's share is what is missing here.
        assert abs(Decimal(1) - window.completeness - share) < Decimal("0.05"), window.start
        named = [w for w in window.warnings if w.startswith("completeness:")]
        assert len(named) == 1 and f"node {SILENT_NODE}" in named[0], window.warnings
        assert "missing 8 GPU(s)" in named[0] and "300 s" in named[0]
        assert "answered 0 of 5 scrapes" in named[0]
        # Its capacity dropped out of the meter: flagged now, not silently.
        capacity = CapacityInterval.objects.get(source=source, interval_start=window.start)
        expected = Decimal(truth["capacity"][window.start.strftime("%Y-%m-%dT%H:%M:%SZ")])
        assert capacity.capacity_gpu_seconds < expected
    for window in others:
        assert window.completeness == 1, (window.start, window.warnings)
    # The overview's list of incomplete windows names the node.
    problems = dashboard_selectors.window_problems(
        start=at(SILENT_FROM - 3600), end=at(SILENT_FROM + 7200)
    )
    assert problems.incomplete == 12
    assert SILENT_NODE in problems.examples[0].completeness_warnings[0]


def test_it_refuses_a_silent_exporter_on_an_unknown_node(tmp_path: Path) -> None:
    from simulator.config import SimulatorConfigError

    config = PoolConfig(
        gpus=8,
        days=1,
        start=START,
        silent_exporters=(SilentExporter(node="gpu-node-99", start=0, seconds=60),),
    )
    with pytest.raises(SimulatorConfigError, match="gpu-node-99"):
        simulate(config, tmp_path)


def test_it_keeps_the_truth_when_an_exporter_is_silent(tmp_path: Path) -> None:
    """The silent exporter hides telemetry, not work: truth.json counts the node's GPUs."""
    quiet = PoolConfig(
        gpus=8,
        days=1,
        start=START,
        seed=5,
        scrape_interval_seconds=300,
        silent_exporters=(
            SilentExporter(node="gpu-node-02", start=BASE.start_epoch + 3600, seconds=3600),
        ),
    )
    loud = PoolConfig(gpus=8, days=1, start=START, seed=5, scrape_interval_seconds=300)
    silent_truth = json.loads(simulate(quiet, tmp_path / "quiet").truth_path.read_text())
    loud_truth = json.loads(simulate(loud, tmp_path / "loud").truth_path.read_text())
    assert silent_truth["capacity"] == loud_truth["capacity"]
    assert silent_truth["meta"]["samples_written"] < loud_truth["meta"]["samples_written"]
    assert silent_truth["meta"]["silent_exporters"] == [
        {
            "node": "gpu-node-02",
            "start": "2026-10-05T17:00:00Z",
            "seconds": 3600,
            "gone": False,
            "maintenance": False,
        }
    ]
