"""One Prometheus (a Thanos or Mimir store, a federation) holding two clusters, told apart only
by a `cluster` label: two simulated pools back-filled together into a real Prometheus, their
exporters at the same addresses (private ranges reused per cluster) or at distinct ones, or
one cluster's `up` left out of the store. And one cluster whose `cluster` label names its two
Prometheus shards (Mimir's HA groups), which is one pool.

A source without a matcher reads both as one pool, the tasks the two share by name (the same
Deployments in both) as one task: its windows fail (nothing is stored) and say how to pick one
cluster. A source per cluster, with its matcher, meters each cluster exactly as its truth; a
source that turns the check off meters both as one pool, on purpose. Beside a source per
cluster, such a source meters that cluster's GPUs a second time: the two are found, and the
month could not close until one is narrowed."""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path

import pytest
from django.db.models import Sum

from metering import services
from metering.models import CapacityInterval, GpuSighting, IngestWindow, Source, UsageInterval
from metering.selectors import gpus_metered_twice
from simulator.config import PoolConfig
from simulator.pool import simulate
from simulator.prometheus import PrometheusProcess, backfill
from tests.metering.conftest import ingest_span, prometheus_over, source_remove

pytestmark = pytest.mark.slow

BASE = PoolConfig(gpus=16, days=1, start=date(2026, 10, 6), seed=7, scrape_interval_seconds=60)
CLUSTERS = {"a": 7, "b": 8}  # seeds
SPAN = (BASE.start_epoch + 8 * 3600, BASE.start_epoch + 9 * 3600)
ISO = "%Y-%m-%dT%H:%M:%SZ"


def at(epoch: int) -> datetime:
    return datetime.fromtimestamp(epoch, UTC)


# Cluster b's address ranges where the clusters' addresses are apart: nodes (and their
# exporters, kube-state-metrics), pods, services (Kueue).
APART = {"10.42.": "10.43.", "10.244.": "10.245.", "10.96.": "10.97."}
INSTANCE = re.compile(r'instance="([^"]*)"')
# The `cluster` value a pool's line is written with, or None to leave the line out.
Label = Callable[[str, str], str | None]


def one_store(
    out: Path, pools: dict[str, int], label: Label, *, apart: bool
) -> Iterator[tuple[dict[str, dict], PrometheusProcess]]:
    """Simulated pools (name: seed) back-filled into one Prometheus, each line with the
    `cluster` label `label` gives it."""
    truths = {}
    with (out / "all.om").open("w") as written:
        for pool, seed in pools.items():
            simulate(replace(BASE, seed=seed), out / pool)
            truths[pool] = json.loads((out / pool / "truth.json").read_text())
            with (out / pool / "metrics.om").open() as metrics:
                for line in metrics:
                    if line.startswith("#"):
                        continue
                    if apart and pool == "b":
                        for old, new in APART.items():
                            line = line.replace(old, new)
                    value = label(pool, line)
                    if value is not None:  # each line is `name{labels} value time`
                        written.write(re.sub(r"\{", f'{{cluster="{value}",', line, count=1))
        written.write("# EOF\n")
    backfill(out / "all.om", out / "tsdb")
    prometheus = prometheus_over(out / "tsdb", BASE.scrape_interval_seconds)
    try:
        yield truths, prometheus
    finally:
        prometheus.stop()


def by_pool(pool: str, line: str) -> str:
    return pool


def without_b_up(pool: str, line: str) -> str | None:
    """Cluster b reaches the store by a remote write (or a federation) that keeps its DCGM_*
    and kube_* series but not `up`, as write_relabel_configs often do."""
    return None if pool == "b" and line.startswith("up{") else pool


def prometheus_shard(pool: str, line: str) -> str:
    """ONE cluster scraped by two Prometheus shards (a hashmod of the target's address), each
    remote-writing to Mimir with its shard in `cluster`, as Mimir's HA tracker wants: every
    series of a target carries its shard's. The two GPU nodes' exporters fall in different
    shards; kube-state-metrics (10.42.0.5) in the second."""
    found = INSTANCE.search(line)
    return f"prod-shard-{int(found[1].split(':')[0].rsplit('.', 1)[-1]) % 2 if found else 0}"


@pytest.fixture(scope="module")
def clusters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[dict, PrometheusProcess]]:
    yield from one_store(tmp_path_factory.mktemp("two-clusters"), CLUSTERS, by_pool, apart=False)


@pytest.fixture(scope="module")
def clusters_apart(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[dict, PrometheusProcess]]:
    out = tmp_path_factory.mktemp("two-clusters-apart")
    yield from one_store(out, CLUSTERS, by_pool, apart=True)


@pytest.fixture(scope="module")
def clusters_b_without_up(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[dict, PrometheusProcess]]:
    out = tmp_path_factory.mktemp("two-clusters-b-without-up")
    yield from one_store(out, CLUSTERS, without_b_up, apart=True)


@pytest.fixture(scope="module")
def one_cluster_two_shards(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[dict, PrometheusProcess]]:
    out = tmp_path_factory.mktemp("one-cluster-two-shards")
    yield from one_store(out, {"a": CLUSTERS["a"]}, prometheus_shard, apart=False)


def truth_alloc(truth: dict) -> dict[str, Decimal]:
    """GPU-seconds per task in SPAN, as the simulator's truth has them."""
    found: dict[str, Decimal] = defaultdict(Decimal)
    for name, task in truth["tasks"].items():
        for interval, seconds in task["alloc_gpu_seconds"].items():
            if at(SPAN[0]).strftime(ISO) <= interval < at(SPAN[1]).strftime(ISO):
                found[name] += Decimal(seconds)
    return {name: seconds for name, seconds in found.items() if seconds}


def stored_alloc(source: Source) -> dict[str, Decimal]:
    """GPU-seconds per task (by its name) as the source stored them."""
    return {
        row["task__external_id"].rsplit("/", 1)[-1]: row["alloc"]
        for row in UsageInterval.objects.filter(task__source=source)
        .values("task__external_id")
        .annotate(alloc=Sum("alloc_gpu_seconds"))
    }


@pytest.mark.parametrize("fixture", ["clusters", "clusters_apart", "clusters_b_without_up"])
@pytest.mark.django_db(transaction=True)
def test_it_refuses_two_clusters_read_as_one_and_says_how_to_pick_one(request, fixture) -> None:
    truths, prometheus = request.getfixturevalue(fixture)
    shared = set(truths["a"]["tasks"]) & set(truths["b"]["tasks"])
    assert {"llama3-8b-chat", "qwen2-7b-instruct"} <= shared  # the same Deployments in both
    source = Source.objects.create(name="both", url=prometheus.url, scrape_interval_seconds=60)
    try:
        ingest_span(source, at(SPAN[0]), at(SPAN[1]), batch=12)
        windows = IngestWindow.objects.filter(source=source)
        assert {w.status for w in windows} == {"failed"}
        for window in windows:
            assert window.error.startswith(
                "source both: clusters: the GPU exporters this source reads are in 2 clusters by"
                " their 'cluster' label (exporters by cluster: a: 2, e.g."
            )
            assert (
                "give the source a matcher that picks one (label_mapping.matchers, e.g."
                ' {"cluster": "a"})' in window.error
            )
        assert not UsageInterval.objects.filter(task__source=source).exists()
    finally:
        source_remove(source.pk)


@pytest.mark.django_db(transaction=True)
def test_it_meters_one_cluster_whose_label_names_prometheus_shards(one_cluster_two_shards) -> None:
    """Mimir's `cluster` names a Prometheus HA group, one per shard: two values, one cluster.
    Its kube-state-metrics lists every node under one shard's value, so the values are not
    clusters, and the pool is metered whole."""
    truths, prometheus = one_cluster_two_shards
    source = Source.objects.create(name="one", url=prometheus.url, scrape_interval_seconds=60)
    try:
        ingest_span(source, at(SPAN[0]), at(SPAN[1]), batch=12)
        windows = IngestWindow.objects.filter(source=source)
        assert {w.status for w in windows} == {"done"}
        assert all(w.completeness == 1 for w in windows)
        assert stored_alloc(source) == truth_alloc(truths["a"])
    finally:
        source_remove(source.pk)


@pytest.mark.django_db(transaction=True)
def test_it_meters_two_clusters_as_one_pool_where_the_source_turns_the_check_off(
    clusters_apart,
) -> None:
    truths, prometheus = clusters_apart
    source = Source.objects.create(
        name="both-on-purpose",
        url=prometheus.url,
        scrape_interval_seconds=60,
        label_mapping={"cluster_label": ""},
    )
    try:
        ingest_span(source, at(SPAN[0]), at(SPAN[1]), batch=12)
        windows = IngestWindow.objects.filter(source=source)
        assert {w.status for w in windows} == {"done"}
        assert all(w.completeness == 1 for w in windows)
        # One pool: the tasks the clusters share by name are one task, billed both's usage.
        expected: dict[str, Decimal] = defaultdict(Decimal)
        for truth in truths.values():
            for task, seconds in truth_alloc(truth).items():
                expected[task] += seconds
        assert stored_alloc(source) == expected
    finally:
        source_remove(source.pk)


@pytest.mark.parametrize("cluster", sorted(CLUSTERS))
@pytest.mark.django_db(transaction=True)
def test_it_meters_each_cluster_exactly_with_its_matcher(clusters, cluster: str) -> None:
    truths, prometheus = clusters
    source = Source.objects.create(
        name=f"cluster-{cluster}",
        url=prometheus.url,
        scrape_interval_seconds=60,
        label_mapping={"matchers": {"cluster": cluster}},
    )
    try:
        ingest_span(source, at(SPAN[0]), at(SPAN[1]), batch=12)
        windows = IngestWindow.objects.filter(source=source)
        assert {w.status for w in windows} == {"done"}
        assert all(w.completeness == 1 for w in windows)
        assert stored_alloc(source) == truth_alloc(truths[cluster])
    finally:
        source_remove(source.pk)


@pytest.mark.django_db(transaction=True)
def test_it_finds_the_gpus_two_sources_meter_and_forgets_them_once_one_is_narrowed(
    clusters_apart,
) -> None:
    """A source for cluster a beside one reading the whole store (the check off, on purpose):
    a's GPUs are in both, their capacity and usage twice in the pool. Narrowed to b and its
    windows ingested again, the store's source no longer counts them."""
    truths, prometheus = clusters_apart
    start, end = at(SPAN[0]), at(SPAN[1])
    cluster_a = Source.objects.create(
        name="cluster-a",
        url=prometheus.url,
        scrape_interval_seconds=60,
        label_mapping={"matchers": {"cluster": "a"}},
    )
    store = Source.objects.create(
        name="store",
        url=prometheus.url,
        scrape_interval_seconds=60,
        label_mapping={"cluster_label": ""},
    )
    try:
        ingest_span(cluster_a, start, end, batch=12)
        assert gpus_metered_twice(start=start, end=end) == []
        ids = ingest_span(store, start, end, batch=5)  # three runs, each GPU one range
        assert GpuSighting.objects.filter(source=store).count() == 2 * BASE.gpus
        assert GpuSighting.objects.filter(source=cluster_a).count() == BASE.gpus

        [twice] = gpus_metered_twice(start=start, end=end)
        capacity = CapacityInterval.objects.filter(source=cluster_a).aggregate(
            total=Sum("capacity_gpu_seconds")
        )["total"]
        assert capacity == BASE.gpus * 3600  # every GPU there throughout
        assert (twice.sources, twice.gpus, twice.gpu_seconds) == (
            ("cluster-a", "store"),
            BASE.gpus,
            capacity,
        )
        assert (twice.first, twice.last) == (start, end)
        assert twice.message.startswith(
            f"sources cluster-a and store both meter {BASE.gpus} GPU(s) (GPU-"
        )
        assert f"between {start:{ISO}} and {end:{ISO}}: 16.00 GPU-hours" in twice.message
        [half] = gpus_metered_twice(start=start, end=start + (end - start) / 2)
        assert half.gpu_seconds == capacity / 2

        store.label_mapping = {"matchers": {"cluster": "b"}}
        store.save()
        # Complete before and after, the windows replace their rows: no loss to accept.
        services.windows_ingest(window_ids=ids[:6])
        [rest] = gpus_metered_twice(start=start, end=end)
        assert (rest.first, rest.last, rest.gpu_seconds) == (
            start + (end - start) / 2,
            end,
            capacity / 2,
        )
        services.windows_ingest(window_ids=ids[6:])
        assert gpus_metered_twice(start=start, end=end) == []
        assert GpuSighting.objects.filter(source=store).count() == BASE.gpus  # b's own
        assert stored_alloc(store) == truth_alloc(truths["b"])
    finally:
        source_remove(store.pk)
        source_remove(cluster_a.pk)
