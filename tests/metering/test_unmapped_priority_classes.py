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

from metering import identity, measure, sources
from metering.measure import IntervalFacts, Observed, PodIdentity
from metering.models import IngestWindow, Source, Task, UsageInterval
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


POD = ("search", "server-0")


def view(priority_class: str, *, informed: bool = True, task: str = "") -> PodIdentity:
    return PodIdentity(
        from_kube=True, priority_class=priority_class, informed=informed, task_label=task
    )


def unmapped_by_interval(
    views: list[dict[tuple[str, str], PodIdentity]],
    *,
    serving: tuple[str, str] | None = None,
    holding: tuple[tuple[str, str], ...] = (POD,),
) -> list[dict[str, Fraction]]:
    """Each interval's unmapped GPU-seconds by class: `holding` hold 600/7 GPU-seconds in
    every interval, kube-state-metrics' views of them are `views`, `serving` writes the
    latency histogram."""
    intervals, observed = {}, {}
    for n, seen in enumerate(views):
        start = 1_790_000_100 + 300 * n
        facts = IntervalFacts(identity=dict(seen))
        for pod in holding:
            facts.alloc[pod] = Fraction(600, 7)
        intervals[start] = facts
        observed[start] = Observed()
        if serving is not None:
            observed[start].latency_last[(serving[0], "qwen", serving[1])]["+Inf"] = Decimal(3)
    measure._kinds_unmapped(measure.Measured(intervals, [], 0.0, PLAN), observed)
    return [intervals[start].unmapped_kinds for start in sorted(intervals)]


def unmapped(priority_class: str, *, serving: bool = False, informed: bool = True) -> dict:
    found = unmapped_by_interval(
        [{POD: view(priority_class, informed=informed)}], serving=POD if serving else None
    )
    return found[0]


def test_it_counts_a_class_the_source_does_not_map() -> None:
    assert unmapped("inference-high") == {"inference-high": Fraction(600, 7)}


def test_it_counts_a_pod_without_a_class_that_serves_the_latency_histogram() -> None:
    assert unmapped("", serving=True) == {"": Fraction(600, 7)}


def test_it_leaves_the_contracts_default_and_the_mapped_classes_alone() -> None:
    assert unmapped("") == {}  # no class, serving nothing: training_batch by the contract
    assert unmapped("inference-critical", serving=True) == {}
    assert unmapped("inference-high", informed=False) == {}  # never described: unknown


def test_it_reads_the_class_where_the_task_kind_is_read_from() -> None:
    # kube-state-metrics missed the first and last intervals (no view, or one without its
    # info): the pod's kind is its nearest informed view's, in each.
    seen = [{POD: view("", informed=False)}, {POD: view("inference-high")}, {}]
    found = unmapped_by_interval(seen)
    assert found == [{"inference-high": Fraction(600, 7)}] * 3


def test_it_counts_the_workers_of_a_task_one_pod_of_which_serves() -> None:
    worker = ("search", "server-0-1")
    seen = {POD: view("", task="qwen"), worker: view("", task="qwen")}
    found = unmapped_by_interval([seen], serving=POD, holding=(POD, worker))
    assert found == [{"": Fraction(1200, 7)}]


def test_it_says_what_to_do_for_a_class_and_for_none() -> None:
    facts = IntervalFacts(identity={POD: view("")})
    facts.alloc[POD] = Fraction(300)
    observed = Observed()
    observed.latency_last[("search", "qwen", "server-0")]["+Inf"] = Decimal(3)
    measured = measure.Measured({1_790_000_100: facts}, [], 0.0, PLAN)
    measure._kinds_unmapped(measured, {1_790_000_100: observed})
    (said,) = facts.warnings
    assert "(GPU-seconds by class: (none, serving): 300.000000)" in said
    assert "give the serving pods under no class a priority class" in said
    assert "map each class to its kind" not in said


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
        total = sum(inference.values(), Decimal(0)) / 3600
        assert report["unmapped_kind_gpu_hours"] == str(total.quantize(Decimal("0.000001")))
    finally:
        source_remove(source.pk)


def task_rows(name: str, views: list[tuple[str, bool]]) -> list[Task]:
    """Each interval's task row of one pod holding a GPU through it, whose kube-state-metrics
    view carries `(team label, info read)`: inference-critical where its info was read."""
    source = Source.objects.create(name=name, url="http://127.0.0.1:9")
    plan = sources.query_plan_for(source, step_seconds=300)
    intervals = {}
    for n, (team, informed) in enumerate(views):
        seen = PodIdentity(
            from_kube=True,
            labelled=True,
            owned=True,
            informed=informed,
            owner_name="server",
            team_label=team,
            priority_class="inference-critical" if informed else "",
        )
        facts = IntervalFacts(identity={POD: seen})
        facts.alloc[POD] = Fraction(300)
        intervals[1_790_000_100 + 300 * n] = facts
    ids = identity._tasks_upsert(source, plan, measure.Measured(intervals, [], 0.0, plan))
    return [Task.objects.get(pk=ids[start][POD]) for start in sorted(intervals)]


@pytest.mark.django_db
def test_it_takes_a_pods_kind_from_its_nearest_view_with_its_info() -> None:
    """kube-state-metrics' info missed in the run's first interval (labels and owner read):
    the task's kind was that view's, the default, training_batch, for the whole run; it is
    now the nearest view's with the info."""
    rows = task_rows("info-missed", [("red", False), ("red", True), ("red", True)])
    assert {row.kind for row in rows} == {"inference"}


@pytest.mark.django_db
def test_it_keeps_a_views_own_team_when_it_borrows_the_class_of_another() -> None:
    """Relabelled to team `blue` in an interval whose info kube-state-metrics missed: that
    interval is blue's (a relabel moves the intervals from then on), its kind the nearest
    informed view's."""
    rows = task_rows("relabelled", [("red", True), ("blue", False)])
    assert [(row.team.name, row.kind) for row in rows] == [
        ("red", "inference"),
        ("blue", "inference"),
    ]
