"""kube-state-metrics' view of the simulated nodes: listed with their GPUs while up, gone while
lost, and listed again as a new node object when back (a lost node left the cluster: the
kubelet registers it anew); in maintenance (SilentExporter.maintenance) still listed, its GPUs
allocatable 0 at once and in capacity for the kubelet's 5-minute grace, as Tandem's check of
a vanished exporter reads them."""

from __future__ import annotations

import datetime as dt
from dataclasses import replace

from simulator.config import PoolConfig, SilentExporter
from simulator.pool import Pool

CONFIG = PoolConfig(gpus=8, days=1, start=dt.date(2026, 10, 1), seed=3, scrape_interval_seconds=60)


def node_lines(lines: list[str], name: str) -> dict[str, str]:
    """The node's kube-state-metrics series of one tick, by metric: their values."""
    found = {}
    for line in lines:
        metric = line.split("{", 1)[0]
        if metric.startswith("kube_node_") and f'node="{name}"' in line:
            found[metric] = line.rsplit(" ", 1)[1]
    return found


def test_it_lists_a_lost_node_again_as_a_new_node_object() -> None:
    pool = Pool(CONFIG)
    first, lost, back = list(CONFIG.ticks())[:3]
    node = pool.nodes[1]
    listed = node_lines(pool.step(first), node.name)
    assert listed == {
        "kube_node_status_capacity": str(len(node.gpus)),
        "kube_node_status_allocatable": str(len(node.gpus)),
        "kube_node_created": str(CONFIG.start_epoch - 86_400),
    }
    pool._lose_node(node, lost, back)
    assert node_lines(pool.step(lost), node.name) == {}
    again = node_lines(pool.step(back), node.name)
    assert again == {
        "kube_node_status_capacity": str(len(node.gpus)),
        "kube_node_status_allocatable": str(len(node.gpus)),
        "kube_node_created": str(back),
    }


def test_it_lists_a_node_in_maintenance_with_no_gpu_allocatable() -> None:
    ticks = list(CONFIG.ticks())
    start = ticks[10]
    config = replace(
        CONFIG,
        silent_exporters=(SilentExporter("gpu-node-02", start, 600, gone=True, maintenance=True),),
    )
    pool = Pool(config)
    node = next(node for node in pool.nodes if node.name == "gpu-node-02")
    gpus, created = str(len(node.gpus)), str(CONFIG.start_epoch - 86_400)
    seen = {}
    for tick in ticks[:22]:
        lines = pool.step(tick)
        up = [
            line
            for line in lines
            if line.startswith(f'up{{job="dcgm-exporter",instance="{node.ip}')
        ]
        seen[tick] = (node_lines(lines, node.name), len(up), node.present)
    assert seen[start - 60] == (
        {"kube_node_status_capacity": gpus, "kube_node_status_allocatable": gpus,
         "kube_node_created": created},
        1,
        True,
    )  # fmt: skip
    # The device plugin stopped: allocatable 0 at once, capacity kept for 5 minutes.
    assert seen[start] == (
        {"kube_node_status_capacity": gpus, "kube_node_status_allocatable": "0",
         "kube_node_created": created},
        0,
        False,
    )  # fmt: skip
    assert seen[start + 300][0]["kube_node_status_capacity"] == "0"
    assert seen[start + 540][0]["kube_node_status_allocatable"] == "0"
    # Back as it was, the same node object: never deleted, it does not register again.
    assert seen[start + 600] == seen[start - 60]
