"""Pods under priority classes the source does not map to a kind count as training_batch
(the contract's default): training's rates and off-peak discount, none of inference's reserve,
no SLA breach. A cluster whose classes are named otherwise than the defaults, or a class
renamed, moved money so silently. Now each window says how many GPU-seconds, by class
(measure._kinds_unmapped), and the overview and the month's close count them.

A simulated pool back-filled into a real Prometheus, metered by a source whose mapping leaves
out `inference-critical`, and the rule's cases on hand-made facts."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from datetime import UTC, date, datetime
from decimal import Decimal
from fractions import Fraction

import pytest

from metering import measure, sources
from metering.measure import IntervalFacts, Observed, PodIdentity
from metering.models import IngestWindow, Source, UsageInterval
from metering.selectors import usage_report
from simulator.config import PoolConfig
from simulator.prometheus import PrometheusProcess
from tests.metering.conftest import (
    ingest_span,
    simulated_prometheus,
    source_remove,
)

BASE = PoolConfig(gpus=16, days=1, start=date(2026, 10, 6), seed=7, scrape_interval_seconds=60)
SPAN = (BASE.start_epoch + 8 * 3600, BASE.start_epoch + 9 * 3600)
ISO = "%Y-%m-%dT%H:%M:%SZ"
TRAINING_ONLY = {
    "training-interactive": "training_interactive",
    "training-batch": "training_batch",
    "preprocessing": "preprocessing",
}
PLAN = sources.QueryPlan(
    scrape_seconds=60, step_seconds=300, priority_class_kinds={"inference-critical": "inference"}
)


def at(epoch: int) -> datetime:
    return datetime.fromtimestamp(epoch, UTC)


def unmapped(priority_class: str, *, serving: bool = False, informed: bool = True) -> dict:
    pod = ("search", "server-0")
    now = Observed()
    if serving:
        now.latency_last[("search", "qwen", "server-0")]["+Inf"] = Decimal(3)
    facts = IntervalFacts()
    facts.identity[pod] = PodIdentity(
        from_kube=True, priority_class=priority_class, informed=informed
    )
    facts.alloc[pod] = Fraction(600, 7)
    measure._kinds_unmapped(facts, now, PLAN)
    return facts.unmapped_kinds


def test_it_counts_a_class_the_source_does_not_map() -> None:
    assert unmapped("inference-high") == {"inference-high": Fraction(600, 7)}


def test_it_counts_a_pod_without_a_class_that_serves_the_latency_histogram() -> None:
    assert unmapped("", serving=True) == {"": Fraction(600, 7)}


def test_it_leaves_the_contracts_default_and_the_mapped_classes_alone() -> None:
    assert unmapped("") == {}  # no class, serving nothing: training_batch by the contract
    assert unmapped("inference-critical", serving=True) == {}
    assert unmapped("inference-high", informed=False) == {}  # its class is unknown


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[dict, PrometheusProcess]]:
    yield from simulated_prometheus(BASE, tmp_path_factory.mktemp("unmapped-classes"))


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_it_says_how_many_gpu_seconds_a_mapping_without_inference_counts_as_training(
    pool,
) -> None:
    truth, prometheus = pool
    inference: dict[str, Decimal] = defaultdict(Decimal)
    for task in truth["tasks"].values():
        if task["priority_class"] == "inference-critical":
            for interval, seconds in task["alloc_gpu_seconds"].items():
                if at(SPAN[0]).strftime(ISO) <= interval < at(SPAN[1]).strftime(ISO):
                    inference[interval] += Decimal(seconds)
    assert len(inference) == 12 and all(inference.values())
    source = Source.objects.create(
        name="classes-renamed",
        url=prometheus.url,
        scrape_interval_seconds=60,
        priority_class_kinds=TRAINING_ONLY,
    )
    try:
        ingest_span(source, at(SPAN[0]), at(SPAN[1]), batch=12)
        windows = list(IngestWindow.objects.filter(source=source).order_by("start"))
        assert all(w.status == "done" and w.completeness == 1 for w in windows)
        found = {w.start.strftime(ISO): w.unmapped_kind_gpu_seconds for w in windows}
        assert found == dict(inference)
        for window in windows:
            (said,) = [w for w in window.warnings if w.startswith("kind:")]
            assert "(GPU-seconds by class: inference-critical: " in said
        # What the warning says happened: the inference servers' usage is training's.
        kinds = set(
            UsageInterval.objects.filter(
                task__source=source, task__external_id__contains="llama3-8b-chat"
            ).values_list("task__kind", flat=True)
        )
        assert kinds == {"training_batch"}
        report = usage_report(start=at(SPAN[0]), end=at(SPAN[1]), group_by="team")
        assert report["windows_with_unmapped_kinds"] == 12
    finally:
        source_remove(source.pk)
