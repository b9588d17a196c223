"""Debian's Prometheus for the demo, the tests and the benchmarks: back-fill a TSDB from the
simulator's OpenMetrics with `promtool`, then run `prometheus` on it on a loopback port.

Back-filled blocks carry no staleness markers, so Prometheus runs with `--query.lookback-delta`
just under the scrape interval: a series then ends where its samples end, as it would under
live scraping (docs/telemetry.md, "Series end").
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

# promtool re-reads the whole input once per block, so one block for the whole history is
# fastest; it picks the largest of its block ranges not above this (about 4.5 years).
MAX_BLOCK_DURATION = "87600h"
# Far longer than any back-filled history, or Prometheus would delete old blocks on start.
RETENTION = "36500d"
READY_TIMEOUT_SECONDS = 120.0


class PrometheusError(RuntimeError):
    """promtool or prometheus failed; the message carries the tool's own output."""


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise PrometheusError(f"{name} not found: install Debian's 'prometheus' package")
    return path


def backfill(
    openmetrics_path: Path | str,
    tsdb_dir: Path | str,
    *,
    max_block_duration: str = MAX_BLOCK_DURATION,
) -> None:
    """Write TSDB blocks for `openmetrics_path` into `tsdb_dir` (created if missing).

    One block for everything is fastest but promtool then holds it all in memory (about 5 GB
    for a 16-GPU month at 60 s); a shorter `max_block_duration` (e.g. "162h") trades speed for
    memory, since promtool re-reads the whole input once per block."""
    Path(tsdb_dir).mkdir(parents=True, exist_ok=True)
    command = [
        _tool("promtool"),
        "tsdb",
        "create-blocks-from",
        "openmetrics",
        f"--max-block-duration={max_block_duration}",
        str(openmetrics_path),
        str(tsdb_dir),
    ]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        output = (result.stderr or result.stdout).strip()
        raise PrometheusError(f"promtool backfill of {openmetrics_path} failed: {output}")


def backfill_parts(
    openmetrics_paths: Iterable[Path | str], tsdb_dir: Path | str, *, workers: int = 2
) -> None:
    """Back-fill several OpenMetrics files (consecutive parts of one pool) side by side.

    promtool is single-threaded, so on a machine with `workers` cores the parts finish about
    `workers` times sooner than one file would. Each part is written into a folder of its own,
    then its blocks are moved into `tsdb_dir` (blocks have unique ULID names). Parts may share
    a file name (metrics-01.om of two months): the folders are numbered."""
    tsdb = Path(tsdb_dir)
    staging = tsdb / ".parts"
    paths = [Path(path) for path in openmetrics_paths]
    targets = [staging / f"{index:03d}-{path.stem}" for index, path in enumerate(paths)]
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        list(pool.map(backfill, paths, targets))  # list(): re-raises a part's failure
    for target in targets:
        for block in target.iterdir():
            block.rename(tsdb / block.name)
    shutil.rmtree(staging)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def die_with_parent() -> None:
    """Run in a child before exec (Linux): the kernel sends it SIGTERM when the process that
    started it dies, so a killed test run leaves no server behind."""
    pr_set_pdeathsig = 1
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


def lookback_for(scrape_interval_seconds: int) -> str:
    """Just under one scrape interval: a back-filled series ends where its samples end."""
    return f"{max(1, scrape_interval_seconds - 1)}s"


def write_config(path: Path, *, scrape_targets: Iterable[str] = (), scrape_interval: str = "15s"):
    targets = list(scrape_targets)
    lines = ["global:", f"  scrape_interval: {scrape_interval}", "scrape_configs:"]
    if targets:
        lines += [
            "  - job_name: tandem-simulator",
            "    honor_labels: true",
            "    static_configs:",
            f"      - targets: [{', '.join(repr(t) for t in targets)}]",
        ]
    else:
        lines[-1] = "scrape_configs: []"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


@dataclass
class PrometheusProcess:
    url: str
    process: subprocess.Popen
    log_path: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def stop(self, timeout: float = 30.0) -> None:
        if self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def start_prometheus(
    tsdb_dir: Path | str,
    *,
    port: int | None = None,
    lookback_delta: str = "14s",
    scrape_targets: Iterable[str] = (),
    scrape_interval: str = "15s",
    config_path: Path | str | None = None,
    log_path: Path | str | None = None,
    detached: bool = False,
) -> PrometheusProcess:
    """Start `prometheus` on 127.0.0.1 over `tsdb_dir` and wait until it is ready.

    `detached=True` puts it in its own session so it outlives a Ctrl-C to the caller (the demo
    stops it by pid). The config goes to `config_path` (default: next to the TSDB)."""
    tsdb = Path(tsdb_dir)
    tsdb.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    config = Path(config_path) if config_path else tsdb.parent / f"{tsdb.name}.prometheus.yml"
    write_config(config, scrape_targets=scrape_targets, scrape_interval=scrape_interval)
    log = Path(log_path) if log_path else tsdb.parent / f"{tsdb.name}.prometheus.log"
    command = [
        _tool("prometheus"),
        f"--config.file={config}",
        f"--storage.tsdb.path={tsdb}",
        f"--storage.tsdb.retention.time={RETENTION}",
        f"--web.listen-address=127.0.0.1:{port}",
        f"--query.lookback-delta={lookback_delta}",
        "--web.enable-lifecycle",
    ]
    with open(log, "ab") as log_file:
        process = subprocess.Popen(
            command,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=detached,
            # Attached, it dies with its caller (a test run); detached, the demo stops it by pid.
            preexec_fn=None if detached else die_with_parent,
        )
    running = PrometheusProcess(url=f"http://127.0.0.1:{port}", process=process, log_path=log)
    try:
        wait_ready(running)
    except PrometheusError:
        running.stop()
        raise
    return running


def wait_ready(running: PrometheusProcess, timeout: float = READY_TIMEOUT_SECONDS) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if running.process.poll() is not None:
            tail = running.log_path.read_text(errors="replace")[-2000:]
            raise PrometheusError(f"prometheus exited with {running.process.returncode}: {tail}")
        try:
            with urllib.request.urlopen(f"{running.url}/-/ready", timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.2)
    raise PrometheusError(f"prometheus at {running.url} not ready after {timeout:.0f}s")


@contextmanager
def running_prometheus(
    tsdb_dir: Path | str,
    port: int | None = None,
    lookback_delta: str | None = None,
    scrape_targets: Iterable[str] = (),
    *,
    scrape_interval_seconds: int | None = None,
) -> Iterator[str]:
    """A Prometheus over `tsdb_dir` for the duration of the block; yields its base URL.

    lookback_delta: given, or derived from `scrape_interval_seconds`, else "14s" (15 s scrapes).
    """
    if lookback_delta is None:
        lookback_delta = lookback_for(scrape_interval_seconds) if scrape_interval_seconds else "14s"
    scrape_interval = f"{scrape_interval_seconds or 15}s"
    with tempfile.TemporaryDirectory(prefix="tandem-prometheus-") as scratch:
        running = start_prometheus(
            tsdb_dir,
            port=port,
            lookback_delta=lookback_delta,
            scrape_targets=scrape_targets,
            scrape_interval=scrape_interval,
            config_path=Path(scratch) / "prometheus.yml",
            log_path=Path(scratch) / "prometheus.log",
        )
        try:
            yield running.url
        finally:
            running.stop()


def stop_pid(pid: int, timeout: float = 30.0) -> None:
    """Stop a detached Prometheus started earlier (by the demo), by its pid."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    os.kill(pid, signal.SIGKILL)
