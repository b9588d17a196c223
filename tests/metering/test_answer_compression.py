"""Prometheus' answers come uncompressed unless a source is told otherwise: gzip costs
Prometheus about 30% of its CPU for a large batch, and saves only bandwidth.

The Prometheus is a tiny http.server on 127.0.0.1 that records what the client accepts and
compresses as a real one does when asked (Content-Encoding: gzip)."""

from __future__ import annotations

import gzip
import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from metering import sources
from metering.models import Source

AT = datetime(2026, 10, 1, tzinfo=UTC)
ANSWER = {
    "status": "success",
    "data": {
        "resultType": "matrix",
        "result": [{"metric": {"pod": "p"}, "values": [[AT.timestamp(), "1.5"]]}],
    },
}


class Recording(BaseHTTPRequestHandler):
    accepted: list[str]

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        accepts = self.headers.get("Accept-Encoding", "")
        self.accepted.append(accepts)
        body = json.dumps(ANSWER).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        if "gzip" in accepts:
            body = gzip.compress(body)
            self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def prometheus() -> Iterator[type[Recording]]:
    handler = type("RecordingHandler", (Recording,), {"accepted": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    handler.url = f"http://127.0.0.1:{server.server_port}"
    yield handler
    server.shutdown()
    server.server_close()


def values_of(client: sources.PrometheusClient) -> list:
    try:
        run = client.query_range("m", "up", start=AT, end=AT, step_seconds=300)
    finally:
        client.close()
    return [series.values for series in run.series]


def test_it_asks_for_uncompressed_answers_by_default(prometheus) -> None:
    assert values_of(sources.PrometheusClient(url=prometheus.url)) == [[[AT.timestamp(), "1.5"]]]
    assert prometheus.accepted == ["identity"]


def test_it_reads_a_gzip_answer_when_told_to_ask_for_one(prometheus) -> None:
    client = sources.PrometheusClient(url=prometheus.url, compressed=True)
    assert values_of(client) == [[[AT.timestamp(), "1.5"]]]
    assert "gzip" in prometheus.accepted[0]


@pytest.mark.parametrize("compressed", [False, True])
def test_it_takes_the_choice_from_the_settings(prometheus, settings, compressed) -> None:
    settings.TANDEM_PROMETHEUS_COMPRESSED = compressed
    client = sources.PrometheusClient.for_source(Source(name="s", url=prometheus.url))
    values_of(client)
    assert ("gzip" in prometheus.accepted[0]) is compressed
