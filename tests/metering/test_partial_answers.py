"""A querier that answers with part of the data missing, in front of the simulated pool in a
real Prometheus: the windows wait, pending, and are metered exactly once it answers whole.

The querier passes every request to the real Prometheus and, while one of its stores is
"down", drops that store's series from the answers: gpu-node-02's dcgm-exporter, its GPU
series and its `up`, as if a second Prometheus scraped that node and its Thanos sidecar were
unreachable. Thanos' querier then answers 200 with a warning (partial responses are its
default); VictoriaMetrics with `"isPartial": true`. Tandem read such answers as whole: a
node that never shows is expected nowhere, so every window was complete, and over these two
hours the pool's allocation was 15,257 GPU-seconds of 43,817; the only word was, in some
windows, that a pod ran on a node no GPU exporter reports. PromQL's own notes on a query
("PromQL info: ...") say nothing of the data and pass.

The querier is a small http.server, as tests/security/test_hostile_prometheus.py's is; the
data behind it is the real Prometheus'.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timedelta
from decimal import Decimal
from http.server import BaseHTTPRequestHandler

import pytest
import requests

from metering import services, sources
from metering.models import CapacityInterval, IngestWindow, Source, UsageInterval
from simulator.prometheus import PrometheusProcess
from tests.helpers import http_served
from tests.metering.conftest import pool_span, source_remove
from tests.metering.test_faults import stored_alloc, truth_alloc

pytestmark = pytest.mark.slow

DOWN_STORE = "10.42.0.12:9400"  # gpu-node-02's dcgm-exporter
THANOS_WARNING = (
    'fetch series for {replica="b"} Addr: prometheus-b-sidecar:10901 LabelSets:'
    ' {replica="b"}: rpc error: code = Unavailable desc = connection refused'
)
NOTE = 'PromQL info: metric might not be a counter, name does not end in _total: "up"'


class Querier(BaseHTTPRequestHandler):
    upstream = ""
    mode = "whole"  # whole | thanos | victoriametrics | silent | notes

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        answer = requests.post(
            self.upstream + self.path,
            data=body,
            headers={"Content-Type": self.headers.get("Content-Type", "")},
            timeout=60,
        )
        payload = answer.json()
        dropping = ("thanos", "victoriametrics", "silent")
        if self.mode in dropping and payload.get("status") == "success":
            data = payload["data"]
            data["result"] = [
                series
                for series in data["result"]
                if series["metric"].get("instance") != DOWN_STORE
            ]
            if self.mode == "thanos":
                payload["warnings"] = [THANOS_WARNING]
            elif self.mode == "victoriametrics":
                payload["isPartial"] = True
        if self.mode == "notes":
            payload["warnings"] = [NOTE]
        sent = json.dumps(payload).encode()
        self.send_response(answer.status_code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(sent)))
        self.end_headers()
        self.wfile.write(sent)

    do_GET = do_POST

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def querier(pool_prometheus: PrometheusProcess) -> Iterator[type[Querier]]:
    handler = type("QuerierHandler", (Querier,), {"upstream": pool_prometheus.url})
    with http_served(handler) as url:
        handler.url = url
        yield handler


@pytest.fixture
def source(querier: type[Querier]) -> Iterator[Source]:
    found = Source.objects.create(
        name="behind-a-querier", url=querier.url, scrape_interval_seconds=60
    )
    yield found
    source_remove(found.pk)


def first_hours(source: Source, truth: dict, hours: int) -> tuple[datetime, datetime, list[int]]:
    """The pool's first `hours`, and the source's windows over them."""
    start, _ = pool_span(truth)
    end = start + timedelta(hours=hours)
    return start, end, [w.pk for w in services.windows_create(source=source, start=start, end=end)]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("mode", ["thanos", "victoriametrics"])
def test_it_waits_for_a_whole_answer_and_then_meters_exactly(
    querier, source, pool_truth, mode
) -> None:
    start, end, ids = first_hours(source, pool_truth, 2)

    querier.mode = mode
    with pytest.raises(sources.PrometheusPartialAnswer):
        services.windows_ingest(window_ids=ids)
    windows = IngestWindow.objects.filter(pk__in=ids)
    assert {window.status for window in windows} == {"pending"}
    said = THANOS_WARNING if mode == "thanos" else "isPartial: true"
    for window in windows:
        assert window.error == (
            "Prometheus answered with part of the data missing, retrying until it answers"
            f" whole: {said}"
        )
    assert not UsageInterval.objects.filter(task__source=source).exists()
    assert not CapacityInterval.objects.filter(source=source).exists()

    querier.mode = "whole"
    services.windows_ingest(window_ids=ids)
    assert {(w.status, w.completeness, w.error) for w in windows.all()} == {("done", 1, "")}
    assert stored_alloc(start, end) == truth_alloc(pool_truth, start, end)


@pytest.mark.django_db(transaction=True)
def test_it_meters_answers_whose_only_warnings_are_promqls_notes(
    querier, source, pool_truth
) -> None:
    start, end, ids = first_hours(source, pool_truth, 1)
    querier.mode = "notes"
    services.windows_ingest(window_ids=ids)
    windows = IngestWindow.objects.filter(pk__in=ids)
    assert {(w.status, w.completeness) for w in windows} == {("done", 1)}
    assert stored_alloc(start, end) == truth_alloc(pool_truth, start, end)


@pytest.mark.django_db(transaction=True)
def test_it_counts_a_store_gone_without_a_word_short_where_its_pods_run(
    querier, source, pool_truth
) -> None:
    """The same store gone with no warning (an agent's samples, `up` included, not there):
    its GPUs count as gone, as a removed node's do, but the pods kube-state-metrics shows
    running on gpu-node-02 with GPUs count as missing, so the windows come out short. The
    figures docs/telemetry.md quotes (Known gaps, Talking to Prometheus)."""
    start, end, ids = first_hours(source, pool_truth, 2)
    querier.mode = "silent"
    services.windows_ingest(window_ids=ids)
    windows = IngestWindow.objects.filter(pk__in=ids)
    assert sorted(w.completeness for w in windows) == [Decimal("0.5")] * 23 + [1]
    assert sum(stored_alloc(start, end).values()) == Decimal("15257.142859")
    assert sum(truth_alloc(pool_truth, start, end).values()) == Decimal("43817.142859")
