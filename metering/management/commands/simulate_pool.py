"""Simulate a GPU pool: metrics.om (OpenMetrics for promtool) and truth.json, or serve it live.

The period starts at 00:00 of --start in the pool's time zone (--timezone, default
Asia/Shanghai) and lasts --days days. With --serve the pool runs until interrupted, from --start
(or from now when --start is omitted), at --speed simulated seconds per real second.
"""

from __future__ import annotations

import datetime as dt
import os
import tempfile
import time
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError, CommandParser

from simulator.config import (
    PREEMPTERS,
    PoolConfig,
    SimulatorConfigError,
    parse_silent_exporter,
    parse_start,
)
from simulator.pool import simulate
from simulator.serve import serve


class Command(BaseCommand):
    help = "Simulate a GPU pool's telemetry (OpenMetrics + truth.json), or serve it live."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--gpus", type=int, required=True)
        parser.add_argument("--days", type=int, default=None)
        parser.add_argument("--start", default=None, help="YYYY-MM-DD, local to --timezone")
        parser.add_argument("--seed", type=int, default=0)
        parser.add_argument("--out", default=None, help="directory for metrics.om, truth.json")
        parser.add_argument("--scrape-interval", type=int, default=15, help="seconds")
        parser.add_argument("--step", type=int, default=300, help="metering step, seconds")
        parser.add_argument("--timezone", default="Asia/Shanghai")
        parser.add_argument(
            "--pools",
            default="shared",
            help="shared (one pool), or separate: inference on GPUs of its own sized for its peak",
        )
        parser.add_argument(
            "--gpu-models",
            default="uniform",
            help="uniform (every GPU an H100), or mixed: nodes of H100, A100 and L40S",
        )
        parser.add_argument(
            "--kube-state-metrics",
            default="",
            metavar="VERSION",
            help="write kube_pod_status_reason as this kube-state-metrics release does: 2.18"
            " (no preemptions), 2.19 (every reason, 0 or 1) or 2.20 (only the reasons set);"
            " by default, only the preemption reason, 0 or 1",
        )
        parser.add_argument(
            "--vllm-without-stats",
            action="append",
            default=[],
            metavar="MODEL",
            help="that served model's vLLM runs with --disable-log-stats: no vllm:* series while"
            " its scrape target answers (then Prometheus' up of every vLLM replica is written)",
        )
        parser.add_argument(
            "--preemptions-by",
            default="scheduler",
            metavar="{" + ",".join(PREEMPTERS) + "}",
            help="who preempts training for inference: scheduler (kube-scheduler: the pod's"
            " kube_pod_status_reason says PreemptionByScheduler) or kueue (Kueue evicts the"
            " workload: no reason on the pod; kueue_evicted_workloads_total per cluster queue"
            " and priority class, and Kueue's up, are written instead)",
        )
        parser.add_argument("--serve", type=int, default=None, metavar="PORT")
        parser.add_argument("--host", default="127.0.0.1", help="address --serve binds to")
        parser.add_argument("--speed", type=float, default=1.0)
        parser.add_argument(
            "--silent-exporter",
            action="append",
            default=[],
            metavar="NODE,START,SECONDS[,gone|maintenance]",
            help="that node's dcgm-exporter answers no scrape for SECONDS from START (ISO 8601);"
            " gone: its target is gone too (no up), the node still listed; maintenance: gone,"
            " and the device plugin stopped too (GPUs out of the pool, allocatable 0)",
        )
        parser.add_argument(
            "--part-days",
            type=int,
            default=0,
            help="cut metrics.om into metrics-NN.om files of this many days (parallel back-fill)",
        )

    def handle(self, *args: object, **options: object) -> None:
        try:
            if options["serve"] is not None:
                self._serve(options)
            else:
                self._simulate(options)
        except SimulatorConfigError as error:
            raise CommandError(str(error)) from None

    def _config(self, options: dict, *, days: int, start: dt.date) -> PoolConfig:
        return PoolConfig(
            gpus=options["gpus"],
            days=days,
            start=start,
            seed=options["seed"],
            scrape_interval_seconds=options["scrape_interval"],
            step_seconds=options["step"],
            timezone=options["timezone"],
            pools=options["pools"],
            gpu_models=options["gpu_models"],
            kube_state_metrics=options["kube_state_metrics"],
            vllm_without_stats=tuple(options["vllm_without_stats"]),
            preemptions_by=options["preemptions_by"],
            silent_exporters=tuple(
                parse_silent_exporter(text) for text in options["silent_exporter"]
            ),
        )

    def _simulate(self, options: dict) -> None:
        for name in ("days", "start", "out"):
            if options[name] is None:
                raise CommandError(f"--{name} is required (unless --serve)")
        config = self._config(options, days=options["days"], start=parse_start(options["start"]))
        out = _writable_directory(options["out"])
        if options["part_days"] < 0:
            raise CommandError(f"--part-days must be 0 or more, got {options['part_days']}")
        result = simulate(config, out, part_days=options["part_days"])
        rate = result.samples_written / result.seconds if result.seconds else 0.0
        files = ", ".join(path.name for path in result.metrics_paths)
        self.stdout.write(
            f"wrote {result.samples_written:,} samples to {out}/{{{files}}} and "
            f"{result.truth_path.name} in {result.seconds:.1f}s ({rate:,.0f} samples/s)"
        )

    def _serve(self, options: dict) -> None:
        port, speed = options["serve"], options["speed"]
        if not 1 <= port <= 65535:
            raise CommandError(f"--serve must be a TCP port 1-65535, got {port}")
        if not speed > 0:
            raise CommandError(f"--speed must be positive, got {speed}")
        start_epoch = None
        if options["start"] is None:
            start_epoch = int(time.time())  # live mode follows the wall clock
            start = dt.date.today()
        else:
            start = parse_start(options["start"])
        config = self._config(options, days=options["days"] or 1, start=start)
        self.stdout.write(f"serving the pool at http://{options['host']}:{port}/metrics")
        try:
            serve(config, port=port, speed=speed, host=options["host"], start_epoch=start_epoch)
        except OSError as error:
            raise CommandError(f"--serve {port}: {error.strerror or error}") from None
        except KeyboardInterrupt:
            self.stdout.write("stopped")


def _writable_directory(path: str) -> Path:
    out = Path(path)
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out, prefix=".write-check-"):
            pass
    except OSError as error:
        raise CommandError(f"--out {path} is not a writable directory: {error.strerror}") from None
    if not os.access(out, os.W_OK):
        raise CommandError(f"--out {path} is not a writable directory")
    return out
