"""GPUs that no pod held but that were busy: work outside any pod's GPU request (a container
that sees every GPU through NVIDIA_VISIBLE_DEVICES, a process on the host, a DRA claim
dcgm-exporter cannot map), which no task is billed for. dcgm-exporter writes such a GPU's bare
series, as for a free GPU, and only its busy time tells (measure._unheld_busy).

The rule's cases on hand-made observations, and a simulated pool back-filled into a real
Prometheus with one free GPU made busy for twenty minutes."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterator
from datetime import UTC, date, datetime
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import pytest
from django.db.models import Sum

from metering import measure, sources
from metering.measure import Observation, Observed, PodIdentity, SeriesTicks
from metering.models import IngestWindow, Source, UsageInterval
from metering.selectors import usage_report
from simulator.config import PoolConfig
from simulator.prometheus import PrometheusProcess
from tests.metering.conftest import answer, ingest_span, simulated_prometheus, source_remove

STEP = 300
FIRST = 1_790_000_100  # a multiple of the step
DCGM = ("dcgm-exporter", "10.42.0.11:9400")
FREE = ("GPU-free", "", "", "", "")
HELD = ("GPU-held", "", "", "ml", "trainer-0")


def plan(**mapping: str) -> sources.QueryPlan:
    source = Source(
        name="pool", url="http://127.0.0.1:9", scrape_interval_seconds=60, label_mapping=mapping
    )
    return sources.query_plan_for(source, step_seconds=STEP)


def observation(*intervals: dict[tuple[str, ...], Decimal]) -> Observation:
    """One interval per mapping (the first is the one before the batch): each series key with
    its busy sum (the ratio summed over its 5 ticks), all on node gpu-a."""
    observed: dict[int, Observed] = {}
    for n, busy in enumerate(intervals):
        interval = observed[FIRST + (n - 1) * STEP] = Observed()
        interval.targets[DCGM] = [5, 5]
        for key, value in busy.items():
            interval.series[key] = SeriesTicks(ticks=5, target=DCGM, node="gpu-a", busy=value)
    return Observation(observed, set(), [], 0.0)


def unheld(found: Observation, the_plan: sources.QueryPlan | None = None) -> list[dict]:
    measured = measure.derive(found, the_plan or plan(), FIRST, max(found.observed))
    return [measured.intervals[start].unheld_busy for start in sorted(measured.intervals)]


def warnings(found: Observation) -> list[str]:
    measured = measure.derive(found, plan(), FIRST, max(found.observed))
    return [
        warning
        for facts in measured.intervals.values()
        for warning in facts.warnings
        if warning.startswith("unrequested work")
    ]


def test_it_counts_the_busy_time_of_a_gpu_no_pod_held_and_says_where() -> None:
    found = observation({FREE: Decimal(0)}, {FREE: Decimal("2.5")}, {FREE: Decimal(0)})
    # 2.5 = the busy ratio summed over the interval's five 60 s ticks: 150 GPU-seconds.
    assert unheld(found) == [{"GPU-free": Fraction(150)}, {}]
    assert warnings(found) == [
        "unrequested work: 1 GPU(s) that no pod held were busy 150.000000 GPU-seconds, e.g."
        " GPU-free on node gpu-a (150.000000): work outside any pod's GPU request, which no"
        " task is billed for (a container that sees every GPU through NVIDIA_VISIBLE_DEVICES"
        " or privilege, a process on the host, a pod given the GPU by a DRA ResourceClaim"
        " while dcgm-exporter runs without --kubernetes-enable-dra, or under a resource name it"
        " does not map); find it on the node (nvidia-smi), and have it request its GPUs"
    ]


def test_it_says_nothing_of_free_gpus_that_were_idle() -> None:
    found = observation({FREE: Decimal(0), HELD: Decimal(4)}, {FREE: Decimal(0), HELD: Decimal(5)})
    assert unheld(found) == [{}]
    assert warnings(found) == []


def test_it_leaves_a_pods_last_work_on_the_first_scrape_after_it_left() -> None:
    # DCGM averages activity over its sampling period: a pod's last work shows on the bare
    # series after the pod is gone, in the interval after its last one.
    left = ("GPU-free", "", "", "ml", "trainer-0")
    found = observation({left: Decimal(5)}, {FREE: Decimal("0.4")}, {FREE: Decimal(3)})
    assert unheld(found) == [{}, {"GPU-free": Fraction(180)}]


def test_it_leaves_a_time_sliced_gpus_bare_series_to_its_pods() -> None:
    # A time-sliced GPU's bare series carries its pods' work, beside their series.
    sliced = ("GPU-free", "", "", "ml", "notebook-0")
    found = observation({}, {FREE: Decimal(4), sliced: Decimal(4)})
    assert unheld(found) == [{}]


def test_it_counts_a_mig_instance_at_its_share() -> None:
    instance = ("GPU-mig", "2", "3g.40gb", "", "")
    found = observation({}, {instance: Decimal(7)})
    assert unheld(found) == [{"GPU-mig": Fraction(7 * 60 * 3, 7)}]


def test_it_counts_a_busy_mig_instance_beside_one_a_pod_holds() -> None:
    # MIG instances are isolated: the free instance's activity is no pod's.
    held = ("GPU-mig", "1", "3g.40gb", "ml", "trainer-0")
    free = ("GPU-mig", "2", "4g.40gb", "", "")
    found = observation({held: Decimal(5)}, {held: Decimal(5), free: Decimal(5)})
    assert unheld(found) == [{"GPU-mig": Fraction(5 * 60 * 4, 7)}]


def test_it_leaves_a_node_whose_pods_no_gpu_series_names_to_the_missing_count() -> None:
    # dcgm-exporter's pod mapping off on the node: every GPU there looks free, its pods'
    # work busy on the bare series; _unattributed_missing counts those GPUs missing.
    found = observation({FREE: Decimal(5)}, {FREE: Decimal(5)})
    running = PodIdentity(from_kube=True, node="gpu-a", running=True, gpus_requested=Fraction(1))
    for interval in found.observed.values():
        interval.identity[("ml", "trainer-0")] = running
    assert unheld(found) == [{}]


def test_it_leaves_a_pods_last_work_on_a_node_whose_pod_mapping_is_off() -> None:
    # The pod ran through the interval before the batch and ended on its last tick: its last
    # work shows on the first scrape after, on the bare series (no pod mapping on the node).
    found = observation(
        {FREE: Decimal(5)}, {FREE: Decimal(5)}, {FREE: Decimal("0.4")}, {FREE: Decimal(0)}
    )
    pod = ("ml", "trainer-0")
    views = [found.observed[start] for start in sorted(found.observed)]
    views[0].identity[pod] = PodIdentity(
        from_kube=True, node="gpu-a", running=True, gpus_requested=Fraction(1)
    )
    views[1].identity[pod] = PodIdentity(
        from_kube=True, node="gpu-a", running=False, gpus_requested=Fraction(1)
    )
    assert unheld(found) == [{}, {}, {}]


def test_it_leaves_the_nodes_of_another_source_alone() -> None:
    found = observation({}, {FREE: Decimal(5)})
    assert unheld(found, plan(unmetered_nodes="gpu-.*")) == [{}]


def test_it_reads_the_bare_series_busy_time_without_a_warning() -> None:
    end = FIRST + STEP
    result = answer(
        "busy",
        ({"meter": "active", "UUID": "GPU-free"}, [[end, "2.5"]]),
        ({"meter": "active", "UUID": "GPU-held", "namespace": "ml", "pod": "a-0"}, [[end, "4"]]),
    )
    observed = {FIRST: Observed()}
    measure._parse_busy(result, observed, plan())
    assert {key: s.busy for key, s in observed[FIRST].series.items()} == {
        FREE: Decimal("2.5"),
        ("GPU-held", "", "", "ml", "a-0"): Decimal(4),
    }
    assert observed[FIRST].warnings == []


@pytest.mark.parametrize(
    "labels", [{"UUID": "GPU-free"}, {}], ids=["a-free-gpu", "a-label-less-dummy"]
)
@pytest.mark.parametrize("value", ["0", "NaN"])
def test_it_reads_an_idle_or_unusable_bare_series_as_nothing_and_says_nothing(
    labels: dict, value: str
) -> None:
    # Every free GPU of a pool, every interval: no work, and no warning of its zeros (or of
    # the label-less dummy dcgm-exporter writes, which the devices meter skips silently).
    end = FIRST + STEP
    part = sources.busy_parts(plan())["active"]
    result = measure._grouped(answer("busy", (labels, [[end, value]])), "active", part)
    observed = {FIRST: Observed()}
    measure._parse_busy(result, observed, plan())
    assert observed[FIRST].series == {} and observed[FIRST].warnings == []


# --- A real Prometheus -----------------------------------------------------------------------

BASE = PoolConfig(gpus=16, days=1, start=date(2026, 10, 6), seed=7, scrape_interval_seconds=60)
SPAN = (BASE.start_epoch + 10 * 3600, BASE.start_epoch + 11 * 3600)
# Twenty minutes of work on a GPU no pod holds, well inside the span.
WORK = (BASE.start_epoch + 10 * 3600 + 20 * 60, BASE.start_epoch + 10 * 3600 + 40 * 60)
ISO = "%Y-%m-%dT%H:%M:%SZ"
UUID = re.compile(r'UUID="([^"]+)"')


def free_gpu(lines: list[str]) -> str:
    """A GPU that no pod holds from an interval before the span to its end."""
    held: set[str] = set()
    every: set[str] = set()
    for line in lines:
        if line.startswith("DCGM_FI_DEV_FB_USED{"):
            uuid = UUID.search(line)[1]
            every.add(uuid)
            at = int(line.rsplit(" ", 1)[1])
            if 'pod="' in line and SPAN[0] - STEP <= at < SPAN[1]:
                held.add(uuid)
    free = sorted(every - held)
    assert free, "the simulated pool has no GPU free through the span"
    return free[0]


def make_busy(metrics: Path) -> None:
    """The free GPU's bare series busy at 50% through WORK, as work outside any pod."""
    lines = metrics.read_text().splitlines(keepends=True)
    uuid = free_gpu(lines)
    engine = ("DCGM_FI_PROF_GR_ENGINE_ACTIVE{", "DCGM_FI_DEV_GPU_UTIL{")
    for n, line in enumerate(lines):
        if line.startswith(engine) and f'UUID="{uuid}"' in line and 'pod="' not in line:
            name_labels, _, at = line.rsplit(" ", 2)
            if WORK[0] <= int(at) < WORK[1]:
                value = "0.50" if line.startswith(engine[0]) else "50"
                lines[n] = f"{name_labels} {value} {at}"
    metrics.write_text("".join(lines))


@pytest.fixture(scope="module")
def busy_pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[dict, PrometheusProcess]]:
    yield from simulated_prometheus(BASE, tmp_path_factory.mktemp("unheld-busy"), make_busy)


def truth_alloc(truth: dict) -> dict[str, Decimal]:
    found: dict[str, Decimal] = defaultdict(Decimal)
    for name, task in truth["tasks"].items():
        for interval, seconds in task["alloc_gpu_seconds"].items():
            if (
                datetime.fromtimestamp(SPAN[0], UTC).strftime(ISO)
                <= interval
                < (datetime.fromtimestamp(SPAN[1], UTC).strftime(ISO))
            ):
                found[name] += Decimal(seconds)
    return {name: seconds for name, seconds in found.items() if seconds}


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_it_finds_work_on_a_gpu_no_pod_held_in_a_real_prometheus(busy_pool) -> None:
    truth, prometheus = busy_pool
    source = Source.objects.create(name="busy", url=prometheus.url, scrape_interval_seconds=60)
    try:
        ingest_span(
            source,
            datetime.fromtimestamp(SPAN[0], UTC),
            datetime.fromtimestamp(SPAN[1], UTC),
            batch=12,
        )
        windows = IngestWindow.objects.filter(source=source)
        assert {w.status for w in windows} == {"done"}
        found = {
            w.start.astimezone(UTC).strftime("%H:%M"): w.unheld_busy_gpu_seconds for w in windows
        }
        # Each scrape in WORK: 0.5 of a 60 s tick. Four windows of five ticks each.
        busy = {
            datetime.fromtimestamp(start, UTC).strftime("%H:%M"): Decimal(150)
            for start in range(WORK[0], WORK[1], STEP)
        }
        assert found == {start: busy.get(start, Decimal(0)) for start in found}
        assert len(found) == 12
        assert all(
            any(warning.startswith("unrequested work: 1 GPU(s)") for warning in w.warnings)
            == (w.start.astimezone(UTC).strftime("%H:%M") in busy)
            for w in windows
        )
        # Billing is as before: the work is no task's.
        stored = {
            row["task__external_id"].rsplit("/", 1)[-1]: row["alloc"]
            for row in UsageInterval.objects.filter(task__source=source)
            .values("task__external_id")
            .annotate(alloc=Sum("alloc_gpu_seconds"))
        }
        assert stored == truth_alloc(truth)
        report = usage_report(
            start=datetime.fromtimestamp(SPAN[0], UTC),
            end=datetime.fromtimestamp(SPAN[1], UTC),
            group_by="team",
        )
        assert report["windows_with_unrequested_work"] == 4
        assert report["unrequested_busy_gpu_hours"] == "0.166667"  # 600 GPU-seconds
    finally:
        source_remove(source.pk)
