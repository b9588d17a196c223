"""The real day of tests/metering/test_real_trace.py with kube-state-metrics told not to write
`kube_pod_container_resource_requests` (a common cut to save series): no pod then shows what
it requests, so none can be told CPU-only, and every pod's wait counts, as before Tandem read
the requests for this. No GPU pod loses its wait or its GPU-seconds."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.metering import real_trace
from tests.metering.real_trace import (  # noqa: F401 (a fixture)
    day_ingested,
    in_the_day,
    stored_usage,
    stored_waits,
    trace_day,
)
from tests.slow import starts


@pytest.fixture(scope="module")
@starts("Prometheus")
def unrequested_day(
    django_db_setup: None,
    django_db_blocker: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    trace_day: real_trace.Day,  # noqa: F811
) -> Iterator[None]:
    out = tmp_path_factory.mktemp("openb-unrequested")
    yield from day_ingested(django_db_blocker, out, trace_day, requests=False)


@pytest.mark.slow
@pytest.mark.django_db
def test_it_keeps_every_wait_where_no_pod_shows_its_request(
    trace_day: real_trace.Day,  # noqa: F811
    unrequested_day: None,
) -> None:
    pods, gpus = trace_day
    cpu_only = {pod.name for pod in pods if not pod.gpus}
    stored = stored_waits()
    gpu_pods = {pod: wait for pod, wait in stored.items() if pod not in cpu_only}
    assert gpu_pods == in_the_day(real_trace.expected_waits(pods))
    assert len(set(stored) & cpu_only) == 47  # counted: nothing tells them apart
    assert stored_usage() == real_trace.expected_allocation(gpus)
