"""A dcgm-exporter whose target leaves Prometheus altogether (its pod deleted: no samples, no
`up`) while kube-state-metrics still lists its node, in a real Prometheus back-filled from the
simulator: its GPUs count as missing, so the windows come out short and name the node.

Two such outages in one day of a pool whose inference GPUs have nodes of their own: gpu-node-05,
an inference node idle at night, from 02:00 to 04:00; gpu-node-02, a busy training node, from
05:00 to 07:00 (hours from the pool's start). Before (acf96ae) both counted as removed nodes:
the idle node's 24 windows were complete with the pool's capacity a sixth short (43,200
GPU-seconds in all), and with it the inference reservation (30% of capacity) that inference
teams pay; the busy node's came out short only because its pods (kube-state-metrics) held all
8 of its GPUs (0.778, as now), nothing saying its exporter was gone. The rule on hand-made
observations is in tests/metering/test_vanished_exporters.py."""

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

START = date(2026, 10, 6)
BASE = PoolConfig(gpus=24, days=1, start=START, seed=5, scrape_interval_seconds=60)
IDLE, BUSY = "gpu-node-05", "gpu-node-02"
OUTAGES = {
    IDLE: (BASE.start_epoch + 2 * 3600, BASE.start_epoch + 4 * 3600),
    BUSY: (BASE.start_epoch + 5 * 3600, BASE.start_epoch + 7 * 3600),
}
GONE = replace(
    BASE,
    pools="separate",
    silent_exporters=tuple(
        SilentExporter(node=node, start=start, seconds=end - start, gone=True)
        for node, (start, end) in OUTAGES.items()
    ),
)
SPAN = (BASE.start_epoch + 3600, BASE.start_epoch + 8 * 3600)


@pytest.fixture(scope="module")
def gone_pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[dict, PrometheusProcess]]:
    yield from simulated_prometheus(GONE, tmp_path_factory.mktemp("gone-pool"))


def at(epoch: int) -> datetime:
    return datetime.fromtimestamp(epoch, UTC)


def metered(prometheus: PrometheusProcess, name: str, batch: int, shards: list[str]) -> dict:
    """Each window's (completeness, its completeness warnings, stored capacity) over SPAN."""
    source = Source.objects.create(
        name=name,
        url=prometheus.url,
        scrape_interval_seconds=60,
        shard_node_patterns=shards,
    )
    try:
        ingest_span(source, at(SPAN[0]), at(SPAN[1]), batch=batch)
        windows = IngestWindow.objects.filter(source=source).order_by("start")
        assert {w.status for w in windows} == {"done"}
        capacity = {
            c.interval_start: c.capacity_gpu_seconds
            for c in CapacityInterval.objects.filter(source=source)
        }
        return {
            w.start: (
                w.completeness,
                [text for text in w.warnings if text.startswith("completeness:")],
                capacity[w.start],
            )
            for w in windows
        }
    finally:
        source_remove(source.pk)


@pytest.mark.django_db(transaction=True)
def test_it_counts_a_listed_nodes_gpus_missing_while_its_exporter_is_gone(gone_pool) -> None:
    truth, prometheus = gone_pool
    gpus = {node["name"]: len(node["gpus"]) for node in truth["meta"]["nodes"]}
    pool = sum(gpus.values())
    assert (gpus[IDLE], gpus[BUSY], pool) == (6, 8, 36)
    # In batches of 7 windows; one window a batch, as live ingest runs (every batch after the
    # first inside an outage finds the node's GPUs by the look-back); and in shards.
    runs = {
        "batches": metered(prometheus, "gone-batches", 7, []),
        "live": metered(prometheus, "gone-live", 1, []),
        "shards": metered(prometheus, "gone-shards", 7, ["gpu-node-0[12]", IDLE]),
    }
    windows = runs["batches"]
    assert len(windows) == 84
    inside = 0
    idle_short = Decimal(0)  # the capacity the idle node's outage takes from the pool
    for start, (completeness, named, capacity) in windows.items():
        out = [node for node, (s, e) in OUTAGES.items() if s <= start.timestamp() < e]
        if not out:
            assert completeness == 1 and not named, (start, named)
            continue
        inside += 1
        node = out[0]
        # GPUs that fail on their own also count; the node's share is what is missing here.
        share = Decimal(gpus[node]) / pool
        assert abs(Decimal(1) - completeness - share) < Decimal("0.02"), (start, completeness)
        assert len(named) == 1 and f"node {node}" in named[0], named
        assert f"missing {gpus[node]} GPU(s)" in named[0]
        assert "no sample of its exporter, `up` included" in named[0]
        # The capacity stored is what was seen: short, and flagged as short.
        present = Decimal(truth["capacity"][start.strftime("%Y-%m-%dT%H:%M:%SZ")])
        assert capacity < present
        if node == IDLE:
            idle_short += present - capacity
    assert inside == 48
    # The figure docs/telemetry.md quotes: two hours of 6 GPUs, silently short before.
    assert idle_short == 43_200
    assert runs["live"] == windows
    assert runs["shards"] == windows
