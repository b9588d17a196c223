"""A hostile or broken Prometheus: garbage, wrong-shaped JSON, a huge body, an answer that
never comes. Each window fails (or stays pending for a retry) with an error naming the
problem, writes no rows, and nothing raises past the service but PrometheusUnavailable.

The Prometheus is a tiny http.server on 127.0.0.1 inside the test. The client's time-out and
size cap are shrunk through the keyword defaults of `PrometheusClient` (120 s and 512 MiB in
production) so the test runs in seconds; the code path is the production one.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from http.server import BaseHTTPRequestHandler

import pytest

from metering import services, sources
from metering.models import CapacityInterval, IngestWindow, Source, UsageInterval
from tests.helpers import http_served

START = datetime.fromisoformat("2026-10-01T00:00:00Z")
HUGE = 3 * 1024 * 1024  # bytes sent; the cap is lowered to 1 MiB below
ANSWERS: dict[str, bytes] = {
    "garbage": b"<html>this is not prometheus</html>",
    "binary": bytes(range(256)) * 4,
    "json-list": b"[1, 2, 3]",
    "error-status": b'{"status": "error", "errorType": "bad_data", "error": "nope"}',
    "no-data": b'{"status": "success"}',
    "null-result": b'{"status": "success", "data": {"resultType": "matrix", "result": null}}',
    "object-result": b'{"status": "success", "data": {"resultType": "matrix", "result": {"a": 1}}}',
}


class Hostile(BaseHTTPRequestHandler):
    mode = "garbage"

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        if self.mode == "hang":
            time.sleep(5)  # longer than the client's time-out
            return
        if self.mode.startswith("trickle"):
            self.trickle()
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        if self.mode == "huge":
            chunk = b'{"status": "success", "data": {"result": [' + b" " * (1 << 16)
            try:
                for _ in range(HUGE // len(chunk)):
                    self.wfile.write(chunk)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client hung up at its cap: that is the point
            return
        self.wfile.write(ANSWERS[self.mode])

    do_GET = do_POST

    def trickle(self) -> None:
        """A byte every 0.2 s for 30 s: each read succeeds, well inside any per-read time-out."""
        if self.mode == "trickle-headers":
            self.wfile.write(b"HTTP/1.1 200 OK\r\nX-Slow: ")
        else:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
        try:
            for _ in range(150):
                self.wfile.write(b" ")
                self.wfile.flush()
                time.sleep(0.2)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up at its deadline: that is the point

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def hostile() -> Iterator[type[Hostile]]:
    handler = type("HostileHandler", (Hostile,), {})
    with http_served(handler) as url:
        handler.url = url
        yield handler


@pytest.fixture
def small_limits(monkeypatch) -> None:
    defaults = sources.PrometheusClient.__init__.__kwdefaults__
    monkeypatch.setitem(defaults, "timeout_seconds", 1.0)
    monkeypatch.setitem(defaults, "max_response_bytes", 1024 * 1024)


def one_window(url: str) -> IngestWindow:
    source = Source.objects.create(name="hostile", url=url, max_concurrent_queries=1)
    (window,) = services.windows_create(
        source=source, start=START, end=START + timedelta(minutes=5)
    )
    return window


def assert_nothing_written() -> None:
    assert not UsageInterval.objects.exists()
    assert not CapacityInterval.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("mode", sorted(ANSWERS))
def test_it_fails_the_window_cleanly_on_a_garbage_answer(hostile, small_limits, mode):
    hostile.mode = mode
    window = one_window(hostile.url)
    services.window_ingest(window_id=window.pk)  # refused queries fail the window, no raise
    window.refresh_from_db()
    assert window.status == IngestWindow.Status.FAILED, (mode, window.error)
    assert window.error, mode
    assert_nothing_written()


@pytest.mark.django_db
def test_it_refuses_a_huge_answer_at_the_size_cap(hostile, small_limits):
    hostile.mode = "huge"
    window = one_window(hostile.url)
    services.window_ingest(window_id=window.pk)
    window.refresh_from_db()
    assert window.status == IngestWindow.Status.FAILED
    assert "exceeds 1048576 bytes" in window.error
    assert_nothing_written()


@pytest.mark.django_db
def test_it_gives_up_on_a_prometheus_that_hangs(hostile, small_limits):
    hostile.mode = "hang"
    window = one_window(hostile.url)
    with pytest.raises(sources.PrometheusUnavailable, match=r"(?i)timed out|timeout"):
        services.window_ingest(window_id=window.pk)
    # Pending with the error: Celery retries it with backoff, as for a Prometheus that is down.
    window.refresh_from_db()
    assert window.status == IngestWindow.Status.PENDING
    assert "unreachable" in window.error
    assert window.attempts == 1
    assert_nothing_written()


@pytest.mark.parametrize("mode", ["trickle-headers", "trickle-body"])
def test_it_gives_up_on_a_prometheus_that_trickles_at_the_deadline(hostile, mode):
    hostile.mode = mode
    client = sources.PrometheusClient(url=hostile.url, deadline_seconds=1)
    began = time.monotonic()
    with pytest.raises(sources.PrometheusUnavailable, match="within the deadline of 1 s"):
        client.query_range(
            "up", "up", start=START, end=START + timedelta(minutes=5), step_seconds=300
        )
    # Far less than the 30 s the trickle lasts, and the 120 s read time-out never fired.
    assert time.monotonic() - began < 10
    client.close()


@pytest.mark.django_db
def test_it_keeps_the_window_pending_when_prometheus_misses_the_deadline(hostile, settings):
    settings.TANDEM_PROMETHEUS_DEADLINE_SECONDS = 1
    hostile.mode = "trickle-body"
    window = one_window(hostile.url)
    with pytest.raises(sources.PrometheusUnavailable, match="deadline of 1 s"):
        services.window_ingest(window_id=window.pk)
    window.refresh_from_db()
    assert window.status == IngestWindow.Status.PENDING  # Celery retries it with backoff
    assert "deadline of 1 s" in window.error
    assert_nothing_written()
