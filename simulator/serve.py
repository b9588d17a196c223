"""The same pool, live: `/metrics` in the Prometheus text format, for a scraping Prometheus.

A background thread advances the pool one scrape tick at a time as simulated time passes
(`speed` simulated seconds per real second); each request returns the newest tick's series,
grouped by metric family with `# TYPE` lines and without timestamps, as real exporters do.
"""

from __future__ import annotations

import signal
import threading
import time
from collections import defaultdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from simulator.config import PoolConfig
from simulator.pool import Pool

HISTOGRAM_FAMILIES = ("vllm:e2e_request_latency_seconds", "kueue_admission_wait_time_seconds")
COUNTER_FAMILIES = {
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
    "container_fs_reads_total",
    "container_fs_writes_total",
    "container_fs_reads_bytes_total",
    "container_fs_writes_bytes_total",
    "kueue_evicted_workloads_total",
}
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def family_of(sample_name: str) -> str:
    for family in HISTOGRAM_FAMILIES:
        if sample_name.startswith(family):
            return family
    return sample_name


def render_text(lines: list[str]) -> str:
    """One tick's sample lines as the Prometheus text exposition format, families grouped."""
    families: dict[str, list[str]] = defaultdict(list)
    for line in lines:
        families[family_of(line.split("{", 1)[0])].append(line)
    out = []
    for family, samples in families.items():
        kind = "gauge"
        if family in HISTOGRAM_FAMILIES:
            kind = "histogram"
        elif family in COUNTER_FAMILIES:
            kind = "counter"
        out.append(f"# TYPE {family} {kind}")
        out.extend(samples)
    return "\n".join(out) + "\n"


class LivePool:
    """A pool whose clock follows the wall clock, `speed` times faster, from `start_epoch`."""

    def __init__(self, config: PoolConfig, *, start_epoch: int, speed: float = 1.0) -> None:
        if speed <= 0:
            raise ValueError(f"--speed must be positive, got {speed}")
        self.pool = Pool(config)
        self.speed = speed
        self.scrape = config.scrape_interval_seconds
        self.tick = start_epoch // self.scrape * self.scrape
        self.body = render_text([])
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        self._advance(self.tick + self.scrape)

    def _advance(self, until: int) -> None:
        lines = None
        while self.tick < until:
            self.tick += self.scrape
            lines = self.pool.step(self.tick)
            if self.tick % 3600 < self.scrape:
                self.pool.forget_history()  # no truth.json here: keep memory flat
        if lines is not None:  # at high speed many ticks pass between scrapes: show the last
            body = render_text(lines)
            with self.lock:
                self.body = body

    def run(self) -> None:
        began_real, began_sim = time.monotonic(), self.tick
        while not self.stopped.wait(min(1.0, self.scrape / self.speed / 2)):
            simulated = began_sim + (time.monotonic() - began_real) * self.speed
            self._advance(int(simulated) // self.scrape * self.scrape)

    def metrics(self) -> bytes:
        with self.lock:
            return self.body.encode("utf-8")


def make_server(live: LivePool, port: int, host: str = "127.0.0.1") -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?", 1)[0] != "/metrics":
                self.send_error(404, "only /metrics is served")
                return
            body = live.metrics()
            self.send_response(200)
            self.send_header("Content-Type", CONTENT_TYPE)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            return  # scrapes every few seconds would flood the console

    return ThreadingHTTPServer((host, port), Handler)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def serve(
    config: PoolConfig,
    *,
    port: int,
    speed: float = 1.0,
    host: str = "127.0.0.1",
    start_epoch: int | None = None,
) -> None:
    """Serve until interrupted. The pool's clock starts at `start_epoch` (default: local
    midnight of `config.start`)."""
    start = config.start_epoch if start_epoch is None else start_epoch
    live = LivePool(config, start_epoch=start, speed=speed)
    server = make_server(live, port, host)
    clock = threading.Thread(target=live.run, name="pool-clock", daemon=True)
    clock.start()
    if threading.current_thread() is threading.main_thread():
        # In a container this process is PID 1, which gets no default SIGTERM action.
        signal.signal(signal.SIGTERM, _interrupt)
    try:
        server.serve_forever()
    finally:
        live.stopped.set()
        server.server_close()
