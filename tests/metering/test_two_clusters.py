"""One Prometheus (a Thanos or Mimir store, a federation) holding two clusters, told apart only
by a `cluster` label, whose exporters share addresses (private ranges reused per cluster):
two simulated pools back-filled together into a real Prometheus.

A source without a matcher reads both as one pool: each GPU exporter's `up` counts twice, so
its windows fail (nothing is stored) and say how to pick one cluster; a source per cluster,
with its matcher, meters each cluster exactly as its truth, the tasks the two share by name
(the same Deployments in both) included."""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, date, datetime
from decimal import Decimal

import pytest
from django.db.models import Sum

from metering.models import IngestWindow, Source, UsageInterval
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


@pytest.fixture(scope="module")
def clusters(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[dict[str, dict], PrometheusProcess]]:
    out = tmp_path_factory.mktemp("two-clusters")
    truths = {}
    with (out / "both.om").open("w") as both:
        for cluster, seed in CLUSTERS.items():
            simulate(replace(BASE, seed=seed), out / cluster)
            truths[cluster] = json.loads((out / cluster / "truth.json").read_text())
            with (out / cluster / "metrics.om").open() as metrics:
                for line in metrics:
                    if not line.startswith("#"):  # each line is `name{labels} value time`
                        both.write(re.sub(r"\{", f'{{cluster="{cluster}",', line, count=1))
        both.write("# EOF\n")
    backfill(out / "both.om", out / "tsdb")
    prometheus = prometheus_over(out / "tsdb", BASE.scrape_interval_seconds)
    try:
        yield truths, prometheus
    finally:
        prometheus.stop()


def truth_alloc(truth: dict) -> dict[str, Decimal]:
    """GPU-seconds per task in SPAN, as the simulator's truth has them."""
    found: dict[str, Decimal] = defaultdict(Decimal)
    for name, task in truth["tasks"].items():
        for interval, seconds in task["alloc_gpu_seconds"].items():
            if at(SPAN[0]).strftime(ISO) <= interval < at(SPAN[1]).strftime(ISO):
                found[name] += Decimal(seconds)
    return {name: seconds for name, seconds in found.items() if seconds}


@pytest.mark.django_db(transaction=True)
def test_it_refuses_two_clusters_read_as_one_and_says_how_to_pick_one(clusters) -> None:
    truths, prometheus = clusters
    shared = set(truths["a"]["tasks"]) & set(truths["b"]["tasks"])
    assert {"llama3-8b-chat", "qwen2-7b-instruct"} <= shared  # the same Deployments in both
    source = Source.objects.create(name="both", url=prometheus.url, scrape_interval_seconds=60)
    try:
        ingest_span(source, at(SPAN[0]), at(SPAN[1]), batch=12)
        windows = IngestWindow.objects.filter(source=source)
        assert {w.status for w in windows} == {"failed"}
        assert all(
            'give the source a matcher that picks one (label_mapping.matchers, e.g. {"cluster"'
            in w.error
            for w in windows
        )
        assert not UsageInterval.objects.filter(task__source=source).exists()
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
        stored = {
            row["task__external_id"]: row["alloc"]
            for row in UsageInterval.objects.filter(task__source=source)
            .values("task__external_id")
            .annotate(alloc=Sum("alloc_gpu_seconds"))
        }
        expected = truth_alloc(truths[cluster])
        assert {task.rsplit("/", 1)[-1]: seconds for task, seconds in stored.items()} == expected
    finally:
        source_remove(source.pk)
