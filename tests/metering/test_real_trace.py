"""A day of a real GPU cluster, not our simulator's: Alibaba's `openb` trace replayed through
the exporters' series into a real Prometheus (tests/metering/real_trace.py), ingested through
`manage.py ingest`, and every stored number compared with what the trace's own times give.
Real arrivals and run lengths, pods of 1 to 8 GPUs, pods sharing a GPU with one or two others,
CPU-only pods beside the GPU ones, pods that waited half an hour and pods that gave up."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from decimal import Decimal

import pytest

from metering.models import CapacityInterval, IngestWindow, PodWait, Task
from tests.metering import real_trace
from tests.metering.real_trace import (  # noqa: F401 (a fixture)
    END,
    START,
    day_ingested,
    in_the_day,
    stored_usage,
    stored_waits,
    trace_day,
)
from tests.slow import starts

INTERVALS = int((END - START).total_seconds()) // real_trace.STEP


@pytest.fixture(scope="module")
@starts("Prometheus")
def ingested_day(
    django_db_setup: None,
    django_db_blocker: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    trace_day: real_trace.Day,  # noqa: F811
) -> Iterator[None]:
    yield from day_ingested(django_db_blocker, tmp_path_factory.mktemp("openb"), trace_day)


def test_it_places_the_day_as_the_trace_has_it(trace_day: real_trace.Day) -> None:  # noqa: F811
    pods, gpus = trace_day
    held = [pod for gpu in gpus for pod, _ in gpu.held]
    assert len(pods) == 366
    assert {pod.gpus for pod in pods} == {0, 1, 2, 8}
    assert sum(1 for pod in pods if pod.shares and pod in held) > 50
    most = max(len(gpu.holders(tick)) for gpu in gpus for tick in real_trace.ticks())
    assert most == 3  # a GPU shared three ways at some tick
    # Every GPU pod the trace schedules is placed, and no GPU is given more than it has.
    scheduled = {pod.name for pod in pods if pod.gpus and pod.scheduled is not None}
    assert {pod.name for pod in held} == scheduled
    for gpu in gpus:
        for tick in real_trace.ticks()[::15]:
            holders = gpu.holders(tick)
            assert len(holders) <= 1 or sum(p.milli for p in holders) <= 1000


@pytest.mark.slow
@pytest.mark.django_db
def test_it_meters_each_pod_of_a_real_day_to_the_micro_gpu_second(
    trace_day: real_trace.Day,  # noqa: F811
    ingested_day: None,
) -> None:
    expected = real_trace.expected_allocation(trace_day[1])
    stored = stored_usage()
    assert len(expected) > 10_000
    assert stored == expected
    assert sum(stored.values()) == Decimal("3769740")  # 1,047.15 GPU-hours


@pytest.mark.slow
@pytest.mark.django_db
def test_it_splits_busy_time_as_allocation_on_the_shared_gpus(
    trace_day: real_trace.Day,  # noqa: F811
    ingested_day: None,
) -> None:
    """Effective utilization's numerator: a shared GPU's engine activity, which every one of
    its pods' series carries, split between the pods holding it at each tick."""
    expected = real_trace.expected_busy(trace_day[1])
    assert stored_usage("busy_gpu_seconds") == expected
    # Each pod is 0.3 busy a tick (the engine 0.3 per holder): on a GPU it shares, more than
    # 0.3 of its allocation, which is a 1/k share.
    allocated = real_trace.expected_allocation(trace_day[1])
    assert sum(1 for key, busy in expected.items() if busy > allocated[key] * 3 / 10) > 100


@pytest.mark.slow
@pytest.mark.django_db
def test_it_counts_the_96_gpus_present_and_every_window_complete(ingested_day: None) -> None:
    capacity: dict = defaultdict(Decimal)
    for start, seconds in CapacityInterval.objects.values_list(
        "interval_start", "capacity_gpu_seconds"
    ):
        capacity[start] += seconds
    assert len(capacity) == INTERVALS
    assert set(capacity.values()) == {Decimal(96 * real_trace.STEP)}
    windows = IngestWindow.objects.filter(start__gte=START, start__lt=END)
    assert windows.count() == INTERVALS
    assert set(windows.values_list("completeness", flat=True)) == {Decimal(1)}


@pytest.mark.slow
@pytest.mark.django_db
def test_it_records_the_wait_of_every_pod_scheduled_or_gone(
    trace_day: real_trace.Day,  # noqa: F811
    ingested_day: None,
) -> None:
    expected = in_the_day(real_trace.expected_waits(trace_day[0]))
    assert stored_waits() == expected
    gave_up = [pod for pod, (_, _, scheduled) in expected.items() if scheduled is None]
    assert len(gave_up) > 20
    assert max(seconds for seconds, _, _ in expected.values()) > 1800  # 2,029 s


@pytest.mark.slow
@pytest.mark.django_db
def test_it_leaves_out_the_pods_that_ask_for_no_gpu(
    trace_day: real_trace.Day,  # noqa: F811
    ingested_day: None,
) -> None:
    """kube-state-metrics and cAdvisor describe every pod of the cluster: the trace's CPU-only
    pods (55 of the day's 366) are none of the GPU pool's tasks, waits or usage. Before, 47 of
    them counted a wait each in the pool's average, and their I/O made them tasks."""
    cpu_only = {pod.name for pod in trace_day[0] if not pod.gpus}
    assert len(cpu_only) == 55
    assert not Task.objects.filter(external_id__in=cpu_only).exists()
    assert not PodWait.objects.filter(pod__in=cpu_only).exists()
    assert Task.objects.filter(usage__isnull=False).distinct().count() > 200
