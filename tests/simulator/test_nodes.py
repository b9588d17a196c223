"""kube-state-metrics' view of the simulated nodes: listed with their GPUs while up, gone while
lost, and listed again as a new node object when back (a lost node left the cluster: the
kubelet registers it anew), as Tandem's check of a vanished exporter reads them."""

from __future__ import annotations

import datetime as dt

from simulator.config import PoolConfig
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
        "kube_node_created": str(CONFIG.start_epoch - 86_400),
    }
    pool._lose_node(node, lost, back)
    assert node_lines(pool.step(lost), node.name) == {}
    again = node_lines(pool.step(back), node.name)
    assert again == {
        "kube_node_status_capacity": str(len(node.gpus)),
        "kube_node_created": str(back),
    }
