"""GPU series of two Kubernetes clusters read by one source refuse the batch, on hand-made
observations: a store holding several clusters (a Thanos or Mimir querier), read without a
matcher, would meter them as one pool and their same-named tasks as one task, with every window
complete. A label whose values name Prometheus shards of one cluster (Mimir's HA groups), or
that was renamed, does not. tests/metering/test_two_clusters.py meters real Prometheus data."""

from __future__ import annotations

from typing import Any

import pytest

from metering import measure, shards, sources
from metering.measure import Observation, Observed, SeriesTicks
from metering.models import Source
from tests.metering.conftest import answer

STEP = 300
FIRST = 1_790_000_100  # a multiple of the step
# (job, instance, node, cluster) of each GPU exporter; node names may repeat across clusters.
A_1 = ("dcgm-exporter", "10.42.0.11:9400", "gpu-node-01", "prod-a")
A_2 = ("dcgm-exporter", "10.42.0.12:9400", "gpu-node-02", "prod-a")
B_1 = ("dcgm-exporter", "10.43.0.11:9400", "gpu-node-01", "prod-b")


def plan(**mapping: Any) -> sources.QueryPlan:
    source = Source(
        name="pool", url="http://127.0.0.1:9", scrape_interval_seconds=60, label_mapping=mapping
    )
    return sources.query_plan_for(source, step_seconds=STEP)


def observation(
    exporters: list[tuple[str, str, str, str]],
    listed: dict[str, set[str]] | None = None,
    intervals: int = 2,
) -> Observation:
    """`intervals` intervals after the one before the batch: each exporter answers one GPU
    series with its cluster value; kube-state-metrics lists the nodes under the values given
    (by default, each exporter's node under its own)."""
    if listed is None:
        listed = {}
        for _, _, node, cluster in exporters:
            listed.setdefault(node, set()).add(cluster)
    observed: dict[int, Observed] = {}
    for n in range(intervals + 1):
        interval = observed[FIRST + (n - 1) * STEP] = Observed()
        interval.gpu_node_clusters = {node: set(values) for node, values in listed.items()}
        for job, instance, node, cluster in exporters:
            interval.targets[(job, instance)] = [5, 5]
            interval.series[f"GPU-{cluster}-{instance}", "", "", "ml", "trainer-0"] = SeriesTicks(
                ticks=5, target=(job, instance), node=node, cluster=cluster
            )
    return Observation(observed, set(), [], 0.0)


def derive(found: Observation, the_plan: sources.QueryPlan | None = None) -> measure.Measured:
    return measure.derive(found, the_plan or plan(), FIRST, max(found.observed))


def metered(found: Observation, the_plan: sources.QueryPlan | None = None) -> list[int]:
    return sorted(derive(found, the_plan).intervals)


def test_it_refuses_gpu_series_of_two_clusters_and_says_how_to_pick_one() -> None:
    with pytest.raises(measure.ClustersMixedError) as refused:
        derive(observation([A_1, A_2, B_1]))
    assert str(refused.value) == (
        "clusters: the GPU exporters this source reads are in 2 clusters by their 'cluster'"
        ' label (exporters by cluster: prod-a: 2, e.g. job="dcgm-exporter"'
        ' instance="10.42.0.11:9400"; prod-b: 1, e.g. job="dcgm-exporter"'
        ' instance="10.43.0.11:9400"): a source meters one cluster, and read together the'
        " clusters' GPUs would be one pool and their same-named tasks one task; give the source"
        ' a matcher that picks one (label_mapping.matchers, e.g. {"cluster": "prod-a"}), and a'
        " source for each cluster; if the label names something else (a Prometheus shard or HA"
        " group of one cluster), set label_mapping.cluster_label to the label that names the"
        ' cluster, or to "" to meter everything the source reads as one pool; nothing was'
        " stored"
    )
    assert isinstance(refused.value, sources.SourceConfigurationError)  # windows fail


def test_it_refuses_one_address_shared_by_two_clusters_before_the_scrape_interval_check() -> None:
    # Private ranges reused in each cluster: one (job, instance) in both.
    shared = ("dcgm-exporter", "10.42.0.11:9400", "gpu-node-01", "prod-b")
    found = observation([A_1, shared])
    found.observed[FIRST].targets[A_1[:2]] = [10, 10]  # both clusters' `up`, counted together
    with pytest.raises(measure.ClustersMixedError, match=r"in 2 clusters .* prod-b: 1, e\.g\."):
        derive(found)


def test_it_refuses_where_kube_state_metrics_lists_no_gpu_node() -> None:
    # Nothing tells shards from clusters: the store holds two sets of GPUs apart.
    with pytest.raises(measure.ClustersMixedError):
        derive(observation([A_1, B_1], listed={}))


def test_it_meters_one_cluster_whose_label_names_prometheus_shards() -> None:
    # Mimir's `cluster` is a Prometheus HA group, one per shard: kube-state-metrics, scraped
    # by one shard, lists every node under that shard's value.
    shard_0 = ("dcgm-exporter", "10.42.0.12:9400", "gpu-node-02", "shard-0")
    shard_1 = ("dcgm-exporter", "10.42.0.11:9400", "gpu-node-01", "shard-1")
    listed = {"gpu-node-01": {"shard-1"}, "gpu-node-02": {"shard-1"}}
    assert metered(observation([shard_0, shard_1], listed)) == [FIRST, FIRST + STEP]


def test_it_meters_a_gpu_relabelled_within_an_interval() -> None:
    # An external label renamed: the same GPU's series under both values in one interval.
    found = observation([A_1, B_1])
    for interval in found.observed.values():
        interval.cluster_relabelled = True
    assert metered(found) == [FIRST, FIRST + STEP]


def test_it_reads_the_label_the_source_names() -> None:
    with pytest.raises(measure.ClustersMixedError, match=r"by their 'k8s_cluster' label"):
        derive(observation([A_1, B_1]), plan(cluster_label="k8s_cluster"))


def test_it_meters_several_clusters_as_one_pool_where_the_source_turns_the_check_off() -> None:
    assert metered(observation([A_1, B_1]), plan(cluster_label="")) == [FIRST, FIRST + STEP]


@pytest.mark.parametrize(
    "exporters",
    [
        [A_1, A_2],
        # A store that labels one cluster: nothing says there is a second.
        [A_1, ("dcgm-exporter", "10.43.0.11:9400", "gpu-node-01", "")],
        # No label anywhere: a Prometheus of one cluster.
        [(*A_1[:3], ""), (*A_2[:3], "")],
    ],
    ids=["one-value", "one-labelled", "unlabelled"],
)
def test_it_meters_gpu_series_of_one_cluster(exporters) -> None:
    assert metered(observation(exporters)) == [FIRST, FIRST + STEP]


def test_it_looks_only_at_the_batchs_own_intervals() -> None:
    # The interval before the batch is another batch's, metered (or refused) there.
    found = observation([A_1, A_2])
    before = found.observed[FIRST - STEP]
    before.series["GPU-b", "", "", "ml", "trainer-0"] = SeriesTicks(
        ticks=5, target=B_1[:2], node="gpu-node-01", cluster="prod-b"
    )
    before.gpu_node_clusters["gpu-node-01"].add("prod-b")
    assert metered(found) == [FIRST, FIRST + STEP]


def test_it_reads_the_label_on_the_gpu_series_and_kube_state_metrics_nodes() -> None:
    the_plan = plan()
    assert sources.devices_parts(the_plan)["ticks"].by[-1] == "cluster"
    assert sources.targets_parts(the_plan)["gpu_nodes"].by == ("node", "cluster")
    assert sources.targets_parts(plan(cluster_label=""))["gpu_nodes"].by == ("node",)
    end = FIRST + STEP
    gpu = {"meter": "ticks", "UUID": "GPU-1", "job": "dcgm-exporter", "instance": "10.42.0.11:9400"}
    observed = {FIRST: Observed()}
    measure._parse_devices(
        answer("devices", (gpu | {"cluster": "prod-a"}, [[end, "5"]])), observed, the_plan
    )
    nodes = [
        ({"meter": "gpu_nodes", "node": "gpu-node-01", "cluster": cluster}, [[end, "8"]])
        for cluster in ("prod-a", "prod-b")
    ]
    measure._parse_targets(answer("targets", *nodes), observed, the_plan)
    interval = observed[FIRST]
    assert interval.series["GPU-1", "", "", "", ""].cluster == "prod-a"
    assert not interval.cluster_relabelled
    assert interval.gpu_node_clusters == {"gpu-node-01": {"prod-a", "prod-b"}}
    assert interval.gpu_nodes == {"gpu-node-01"}
    # The same GPU under a second value in the interval: a relabel, told at the parse.
    measure._parse_devices(
        answer("devices", (gpu | {"cluster": "prod-eu"}, [[end, "5"]])), observed, the_plan
    )
    assert interval.cluster_relabelled
    assert interval.series["GPU-1", "", "", "", ""].ticks == 10


def test_it_keeps_what_the_combiner_and_the_shards_read_when_they_merge() -> None:
    combiner = observation([])
    combiner.observed[FIRST].gpu_node_clusters = {"gpu-node-01": {"prod-a"}}
    shard = Observation({FIRST: Observed(cluster_relabelled=True)}, set(), [], 0.0)
    merged = shards.observations_merge([combiner, shard]).observed[FIRST]
    assert merged.gpu_node_clusters == {"gpu-node-01": {"prod-a"}}
    assert merged.cluster_relabelled


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("prod cluster", "must be a label name"),
        (7, "must be a label name"),
        ("instance", "'instance' names no cluster"),
        ("Hostname", "'Hostname' names no cluster"),
    ],
)
def test_it_refuses_a_cluster_label_that_names_no_cluster(value, said: str) -> None:
    with pytest.raises(
        sources.SourceConfigurationError, match=f"label_mapping.cluster_label.*{said}"
    ):
        plan(cluster_label=value)
