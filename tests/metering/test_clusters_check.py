"""GPU exporters of two clusters read by one source refuse the batch, on hand-made
observations: a store holding several clusters (a Thanos or Mimir querier), read without a
matcher, would meter them as one pool and their same-named tasks as one task, with every window
complete. tests/metering/test_two_clusters.py meters two clusters in a real Prometheus."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from metering import measure, shards, sources
from metering.measure import Observation, Observed, SeriesTicks
from metering.models import Source

STEP = 300
FIRST = 1_790_000_100  # a multiple of the step
DCGM_A = ("dcgm-exporter", "10.42.0.11:9400")
DCGM_B = ("dcgm-exporter", "10.43.0.11:9400")
DCGM_A2 = ("dcgm-exporter", "10.42.0.12:9400")
KSM = ("kube-state-metrics", "10.42.0.5:8080")
DATABASE = ("cassandra", "10.42.0.30:9500")


def plan(**mapping: Any) -> sources.QueryPlan:
    source = Source(
        name="pool", url="http://127.0.0.1:9", scrape_interval_seconds=60, label_mapping=mapping
    )
    return sources.query_plan_for(source, step_seconds=STEP)


def observation(clusters: dict[tuple[str, str], set[str]], intervals: int = 2) -> Observation:
    """`intervals` intervals after the one before the batch, each target scraped 5 times and
    carrying those values of the cluster label; the dcgm-exporter targets answer a GPU series."""
    observed: dict[int, Observed] = {}
    for n in range(intervals + 1):
        interval = observed[FIRST + (n - 1) * STEP] = Observed()
        for target, values in clusters.items():
            interval.targets[target] = [5, 5]
            if values:
                interval.target_clusters[target] = set(values)
            if target[0] == "dcgm-exporter":
                uuid = f"GPU-{target[1]}"
                interval.series[uuid, "", "", "ml", "trainer-0"] = SeriesTicks(
                    ticks=5, target=target, node=f"gpu-{target[1]}"
                )
    return Observation(observed, set(), [], 0.0)


def derive(found: Observation, the_plan: sources.QueryPlan | None = None) -> measure.Measured:
    return measure.derive(found, the_plan or plan(), FIRST, max(found.observed))


def test_it_refuses_gpu_exporters_of_two_clusters_and_says_how_to_pick_one() -> None:
    found = observation({DCGM_A: {"prod-a"}, DCGM_A2: {"prod-a"}, DCGM_B: {"prod-b"}})
    with pytest.raises(measure.ClustersMixedError) as refused:
        derive(found)
    assert str(refused.value) == (
        "clusters: the GPU exporters this source reads are in 2 clusters by their 'cluster'"
        ' label (exporters by cluster: prod-a: 2, e.g. job="dcgm-exporter"'
        ' instance="10.42.0.11:9400"; prod-b: 1, e.g. job="dcgm-exporter"'
        ' instance="10.43.0.11:9400"): a source meters one cluster, and read together the'
        " clusters' GPUs would be one pool and their same-named tasks one task; give the source"
        ' a matcher that picks one (label_mapping.matchers, e.g. {"cluster": "prod-a"}), and a'
        " source for each cluster; to meter them as one pool on purpose, set"
        ' label_mapping.cluster_label to ""; nothing was stored'
    )
    assert isinstance(refused.value, sources.SourceConfigurationError)  # windows fail


def test_it_refuses_one_address_shared_by_two_clusters_before_the_scrape_interval_check() -> None:
    # Private ranges reused in each cluster: one (job, instance), two clusters' `up`.
    found = observation({DCGM_A: {"prod-a", "prod-b"}})
    found.observed[FIRST].targets[DCGM_A] = [10, 10]  # each `up` counted: as the parse adds
    with pytest.raises(measure.ClustersMixedError, match=r"in 2 clusters .* prod-b: 1, e\.g\."):
        derive(found)


def test_it_reads_the_label_the_source_names() -> None:
    found = observation({DCGM_A: {"eu"}, DCGM_B: {"us"}})
    with pytest.raises(measure.ClustersMixedError, match=r"by their 'k8s_cluster' label"):
        derive(found, plan(cluster_label="k8s_cluster"))


def test_it_meters_several_clusters_as_one_pool_where_the_source_turns_the_check_off() -> None:
    found = observation({DCGM_A: {"prod-a"}, DCGM_B: {"prod-b"}})
    measured = derive(found, plan(cluster_label=""))
    assert sorted(measured.intervals) == [FIRST, FIRST + STEP]


@pytest.mark.parametrize(
    "clusters",
    [
        # Other jobs may carry the label with a meaning of their own.
        {DCGM_A: {"prod-a"}, KSM: {"prod-a"}, DATABASE: {"ring-1"}},
        # A store that labels one cluster: nothing says there is a second.
        {DCGM_A: {"prod-a"}, DCGM_B: set()},
        # No label anywhere: a Prometheus of one cluster.
        {DCGM_A: set(), DCGM_B: set(), KSM: set()},
    ],
    ids=["another-jobs-label", "one-labelled", "unlabelled"],
)
def test_it_meters_gpu_exporters_of_one_cluster(clusters) -> None:
    measured = derive(observation(clusters))
    assert sorted(measured.intervals) == [FIRST, FIRST + STEP]


def test_it_looks_only_at_the_batchs_own_intervals() -> None:
    # The interval before the batch is another batch's, metered (or refused) there.
    found = observation({DCGM_A: {"prod-a"}, DCGM_B: set()})
    found.observed[FIRST - STEP].target_clusters[DCGM_B] = {"prod-b"}
    measured = derive(found)
    assert sorted(measured.intervals) == [FIRST, FIRST + STEP]


def test_it_groups_up_by_the_cluster_label_and_adds_each_targets_scrapes() -> None:
    the_plan = plan()
    assert sources.targets_parts(the_plan)["attempted"].by == ("job", "instance", "cluster")
    assert sources.targets_parts(plan(cluster_label=""))["attempted"].by == ("job", "instance")
    end = FIRST + STEP
    result = sources.QueryRun(
        name="targets",
        promql="",
        start=datetime.fromtimestamp(FIRST, UTC),
        end=datetime.fromtimestamp(end, UTC),
        seconds=0.0,
        evaluation_seconds=0.0,
        series=[
            sources.Series(
                labels={"meter": meter, "job": "dcgm-exporter", "instance": "10.42.0.11:9400"}
                | ({"cluster": cluster} if cluster else {}),
                values=[[end, count]],
            )
            for meter, cluster, count in [
                ("attempted", "prod-a", "5"),
                ("attempted", "prod-b", "5"),
                ("answered", "prod-a", "5"),
                ("answered", "", "4"),
            ]
        ],
    )
    observed = {FIRST: Observed()}
    measure._parse_targets(result, observed, the_plan)
    assert observed[FIRST].targets == {DCGM_A: [10, 9]}
    assert observed[FIRST].target_clusters == {DCGM_A: {"prod-a", "prod-b"}}


def test_it_keeps_the_combiners_clusters_when_shards_merge() -> None:
    combiner = observation({DCGM_A: {"prod-a"}})
    shard = Observation({FIRST: Observed()}, set(), [], 0.0)
    merged = shards.observations_merge([combiner, shard])
    assert merged.observed[FIRST].target_clusters == {DCGM_A: {"prod-a"}}


@pytest.mark.parametrize("value", ["prod cluster", 7])
def test_it_refuses_a_cluster_label_that_is_not_a_label_name(value) -> None:
    with pytest.raises(
        sources.SourceConfigurationError, match=r"label_mapping\.cluster_label must be a label name"
    ):
        plan(cluster_label=value)
