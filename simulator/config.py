"""What to simulate: a pool size, a period, a seed and the scrape/step clocks, validated up front.

The period starts at 00:00 of `start` in the pool's own time zone (`timezone`, default
Asia/Shanghai), because that is where the daytime peak and the calendar month live; it is
stored and written in UTC.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from simulator.workload import KSM_VERSIONS

MAX_GPUS = 10_000
MAX_DAYS = 400
# shared: training and inference on one pool; separate: the same workloads, with inference on
# GPUs of its own sized for its peak and training alone on the pool's GPUs (the "before").
POOL_MODES = ("shared", "separate")
# uniform: every GPU an H100; mixed: nodes cycle through H100, A100 and L40S (see layout).
GPU_MODEL_MIXES = ("uniform", "mixed")
# Who preempts training for inference: kube-scheduler (each pod says so in kube-state-metrics'
# `kube_pod_status_reason`), or Kueue, which evicts the workload itself and counts it in its
# own `kueue_evicted_workloads_total` while the pods carry no preemption reason.
PREEMPTERS = ("scheduler", "kueue")


class SimulatorConfigError(ValueError):
    """A nonsense simulator argument. The message is one line and names the argument."""


def parse_start(text: str) -> dt.date:
    try:
        return dt.date.fromisoformat(text)
    except (TypeError, ValueError):
        raise SimulatorConfigError(f"--start must be a date YYYY-MM-DD, got {text!r}") from None


def parse_timezone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise SimulatorConfigError(f"--timezone {name!r} is not a known IANA time zone") from None


@dataclass(frozen=True)
class SilentExporter:
    """One node's dcgm-exporter answers no scrape during [start, start + seconds) (Unix
    seconds): Prometheus records `up` 0 for it and none of its GPUs' series, while the GPUs and
    their pods carry on (truth.json counts them: the pool did that work). `gone`: its target
    is gone from Prometheus' service discovery (the exporter's pod deleted), so there is no
    `up` either, while kube-state-metrics still lists the node.

    `maintenance` (gone too): the node's GPU software is stopped without cordoning it, as
    NVIDIA's mig-manager does to apply a MIG layout: the device plugin goes with the exporter,
    so the GPUs leave the pool (truth.json does not count them; pods on them fail, as on a
    lost node) while kube-state-metrics lists the node, its GPUs allocatable 0 at once and in
    capacity for the kubelet's 5-minute grace (then 0), as the kubelet's device manager does."""

    node: str  # e.g. "gpu-node-02"
    start: int
    seconds: int
    gone: bool = False
    maintenance: bool = False

    def __post_init__(self) -> None:
        if self.maintenance and not self.gone:
            raise SimulatorConfigError("a silent exporter in maintenance is gone too")
        _check_whole("silent exporter start", self.start, 0, 2**40)
        _check_whole("silent exporter seconds", self.seconds, 1, MAX_DAYS * 86400)

    def covers(self, t: int) -> bool:
        return self.start <= t < self.start + self.seconds


def parse_silent_exporter(text: str) -> SilentExporter:
    """`NODE,START,SECONDS[,gone|maintenance]` (START in ISO 8601 with a zone), e.g.
    `gpu-node-02,2026-10-06T02:00:00Z,3600` (`gone`: no `up` either; `maintenance`: the
    device plugin stopped too; see SilentExporter)."""
    parts = [part.strip() for part in text.split(",")]
    kind = parts[3] if len(parts) == 4 else ""
    if not (len(parts) == 3 or (len(parts) == 4 and kind in ("gone", "maintenance"))):
        raise SimulatorConfigError(
            f"--silent-exporter must be NODE,START,SECONDS[,gone|maintenance], got {text!r}"
        )
    node, start, seconds = parts[:3]
    try:
        moment = dt.datetime.fromisoformat(start.replace("Z", "+00:00"))
    except ValueError:
        moment = None
    if moment is None or moment.tzinfo is None:
        raise SimulatorConfigError(
            f"--silent-exporter start must be ISO 8601 with a zone, got {start!r}"
        )
    if not (seconds.isascii() and seconds.isdigit()):
        raise SimulatorConfigError(f"--silent-exporter seconds must be whole, got {seconds!r}")
    return SilentExporter(
        node=node,
        start=int(moment.timestamp()),
        seconds=int(seconds),
        gone=kind != "",
        maintenance=kind == "maintenance",
    )


@dataclass(frozen=True)
class PoolConfig:
    gpus: int
    days: int
    start: dt.date
    seed: int = 0
    scrape_interval_seconds: int = 15
    step_seconds: int = 300
    timezone: str = "Asia/Shanghai"
    pools: str = "shared"
    silent_exporters: tuple[SilentExporter, ...] = ()
    gpu_models: str = "uniform"
    # Multi-node training Jobs submitted at the start: each runs one pod per node on two
    # different nodes at once (a gang), so one task's pods sit on several nodes.
    gang_jobs: int = 0
    # Prometheus scrapes each target at an offset of its own within the scrape interval (a
    # hash of its labels), and stores its samples at that time, between the ticks. True:
    # each target's samples are written so, at 1 s to one interval after their tick (a test
    # Prometheus' look-back is just under an interval, see prometheus.lookback_for); False:
    # on the tick. The truth is the same: a sample stays in its tick's interval.
    scrape_offsets: bool = False
    # The kube-state-metrics release whose `kube_pod_status_reason` series are written
    # (workload.KSM_STATUS_REASONS): "2.18" writes no preemption at all.
    kube_state_metrics: str = ""
    # Served models whose vLLM runs with --disable-log-stats: it writes no `vllm:*` series
    # while its scrape target answers. With any, Prometheus' `up` of every vLLM replica is
    # written too (by default none is, so the default output stays as it was).
    vllm_without_stats: tuple[str, ...] = ()
    # PREEMPTERS: "kueue" writes Kueue's eviction counter and its `up` instead of the pods'
    # PreemptionByScheduler reason (the default writes no Kueue series, so it stays as it was).
    preemptions_by: str = "scheduler"

    def __post_init__(self) -> None:
        _check_whole("--gpus", self.gpus, 1, MAX_GPUS)
        _check_whole("--days", self.days, 1, MAX_DAYS)
        _check_whole("--scrape-interval", self.scrape_interval_seconds, 1, 3600)
        _check_whole("--step", self.step_seconds, 1, 86400)
        _check_whole("gang_jobs", self.gang_jobs, 0, 1000)
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise SimulatorConfigError(f"--seed must be a whole number, got {self.seed!r}")
        if self.step_seconds % self.scrape_interval_seconds:
            raise SimulatorConfigError(
                f"--step ({self.step_seconds}) must be a multiple of --scrape-interval "
                f"({self.scrape_interval_seconds})"
            )
        if not isinstance(self.start, dt.date):
            raise SimulatorConfigError(f"--start must be a date, got {self.start!r}")
        parse_timezone(self.timezone)
        if self.pools not in POOL_MODES:
            raise SimulatorConfigError(
                f"--pools must be one of {', '.join(POOL_MODES)}, got {self.pools!r}"
            )
        if self.gpu_models not in GPU_MODEL_MIXES:
            raise SimulatorConfigError(
                f"--gpu-models must be one of {', '.join(GPU_MODEL_MIXES)}, got {self.gpu_models!r}"
            )
        if self.scrape_offsets and self.scrape_interval_seconds < 2:
            raise SimulatorConfigError("scrape offsets need a scrape interval of 2 s or more")
        if self.kube_state_metrics not in ("", *KSM_VERSIONS):
            raise SimulatorConfigError(
                f"--kube-state-metrics must be one of {', '.join(KSM_VERSIONS)}, "
                f"got {self.kube_state_metrics!r}"
            )
        if self.preemptions_by not in PREEMPTERS:
            raise SimulatorConfigError(
                f"--preemptions-by must be one of {', '.join(PREEMPTERS)}, "
                f"got {self.preemptions_by!r}"
            )
        if not isinstance(self.vllm_without_stats, tuple) or not all(
            isinstance(model, str) and model for model in self.vllm_without_stats
        ):
            raise SimulatorConfigError("--vllm-without-stats must name served models")
        if not all(isinstance(silent, SilentExporter) for silent in self.silent_exporters):
            raise SimulatorConfigError("silent_exporters must hold SilentExporter values")

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)

    @property
    def start_epoch(self) -> int:
        """00:00 of the start date in the pool's time zone, as Unix seconds."""
        midnight = dt.datetime.combine(self.start, dt.time(0), tzinfo=self.zone)
        return int(midnight.timestamp())

    @property
    def end_epoch(self) -> int:
        """00:00 of the day after the last simulated day, local time (DST-safe)."""
        last = self.start + dt.timedelta(days=self.days)
        return int(dt.datetime.combine(last, dt.time(0), tzinfo=self.zone).timestamp())

    def ticks(self) -> range:
        """Scrape instants: exact multiples of the scrape interval in [start, end) (a sample at
        `t` stands for [t, t + s), so the period's first sample is taken at its start)."""
        s = self.scrape_interval_seconds
        first = -(-self.start_epoch // s) * s
        return range(first, self.end_epoch, s)


def previous_calendar_month(today: dt.date) -> tuple[dt.date, int]:
    """(first day, number of days) of the month before `today`'s, as the demo simulates."""
    last = today.replace(day=1) - dt.timedelta(days=1)
    first = last.replace(day=1)
    return first, (last - first).days + 1


def _check_whole(argument: str, value: object, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise SimulatorConfigError(f"{argument} must be a whole number, got {value!r}")
    if not low <= value <= high:
        raise SimulatorConfigError(f"{argument} must be between {low} and {high}, got {value}")
