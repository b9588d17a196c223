"""Read a simulated metrics.om back the way metering will read Prometheus, without the
simulator's code: the tests compare what this finds with truth.json.

Streams the file once (ticks are contiguous), so it stays cheap for a few days of a small pool.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

SAMPLE = re.compile(r"^([^{ ]+)\{(.*)\} (\S+) (\d+)$")
LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="([^"]*)"')
SHARE_UNITS = 84  # shares in 84ths of a GPU, as the truth contract allows (lcm(7, 1..4))


def labels_of(text: str) -> dict[str, str]:
    return dict(LABEL.findall(text))


def pod_of(labels: dict[str, str]) -> tuple[str, str] | None:
    """(namespace, pod) of a dcgm-exporter series, whichever spelling the node uses."""
    pod = labels.get("pod") or labels.get("exported_pod")
    if not pod:
        return None
    return (labels.get("namespace") or labels.get("exported_namespace", ""), pod)


@dataclass
class PodFacts:
    created: int | None = None
    scheduled: int | None = None
    owner: str = ""
    label_task: str | None = None
    label_team: str | None = None
    request: str = ""
    pending_ticks: set[int] = field(default_factory=set)
    preempted_at: int | None = None
    first_device_tick: int | None = None
    device_ticks: set[int] = field(default_factory=set)


@dataclass
class Readback:
    step: int
    scrape: int = 0
    ticks: list[int] = field(default_factory=list)
    capacity_units: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    alloc_units: dict = field(default_factory=lambda: defaultdict(lambda: defaultdict(int)))
    busy_units: dict = field(default_factory=lambda: defaultdict(lambda: defaultdict(int)))
    memory_peak_mib: dict = field(default_factory=lambda: defaultdict(int))
    io_operations: dict = field(default_factory=lambda: defaultdict(lambda: defaultdict(int)))
    latency: dict = field(default_factory=dict)
    pods: dict[tuple[str, str], PodFacts] = field(default_factory=lambda: defaultdict(PodFacts))
    label_keys: dict[str, set[frozenset[str]]] = field(default_factory=lambda: defaultdict(set))
    timesliced_ticks_with_pods: int = 0
    # UUID -> hour (Unix seconds) -> how the GPU was used in its ticks: whole, sliced, free
    uses_by_hour: dict = field(default_factory=lambda: defaultdict(lambda: defaultdict(set)))
    cadvisor_levels: dict = field(default_factory=lambda: defaultdict(set))

    def interval(self, tick: int) -> int:
        return tick // self.step * self.step


def read_back(path: Path, *, step: int, scrape: int) -> Readback:
    result = Readback(step=step, scrape=scrape)
    counters: dict[tuple, float] = {}
    tick_lines: list[tuple[str, dict[str, str], str]] = []
    current = None
    with open(path, encoding="utf-8") as source:
        for line in source:
            if line.startswith("# EOF"):
                break
            match = SAMPLE.match(line.rstrip("\n"))
            assert match, f"not an OpenMetrics sample line: {line!r}"
            name, label_text, value, tick = match.groups()
            tick = int(tick)
            if tick != current:
                if current is not None:
                    _close_tick(result, current, tick_lines, counters)
                current, tick_lines = tick, []
            tick_lines.append((name, labels_of(label_text), value))
    if current is not None:
        _close_tick(result, current, tick_lines, counters)
    return result


def _close_tick(result: Readback, tick: int, lines: list, counters: dict) -> None:
    result.ticks.append(tick)
    interval = result.interval(tick)
    devices: dict[tuple[str, str], dict] = defaultdict(lambda: {"pods": {}, "bare": False})
    for name, labels, value in lines:
        result.label_keys[name].add(frozenset(labels))
        if name in ("DCGM_FI_DEV_FB_USED", "DCGM_FI_PROF_GR_ENGINE_ACTIVE"):
            device = devices[(labels["UUID"], labels.get("GPU_I_ID", ""))]
            device["uuid"] = labels["UUID"]
            device["profile"] = labels.get("GPU_I_PROFILE")
            owner = pod_of(labels)
            if owner:
                device["pods"].setdefault(owner, {})[name] = value
            else:
                device["bare"] = True
        elif name.startswith("kube_pod_"):
            _kube(result, tick, name, labels, value)
        elif name in ("container_fs_reads_total", "container_fs_writes_total"):
            result.cadvisor_levels[(labels["namespace"], labels["pod"])].add(labels["container"])
            if not labels["container"]:
                key = (name, labels["namespace"], labels["pod"])
                increment = int(value) - counters.get(key, 0)
                counters[key] = int(value)
                result.io_operations[(labels["namespace"], labels["pod"])][interval] += increment
        elif name == "vllm:e2e_request_latency_seconds_bucket":
            key = (labels["namespace"], labels["pod"], labels["le"])
            increment = int(value) - counters.get(key, 0)
            counters[key] = int(value)
            service = result.latency.setdefault(
                f"{labels['namespace']}/{labels['model_name']}", defaultdict(dict)
            )
            service[interval][labels["le"]] = service[interval].get(labels["le"], 0) + increment
    for device in devices.values():
        _attribute(result, tick, interval, device)


def _attribute(result: Readback, tick: int, interval: int, device: dict) -> None:
    profile, pods = device.get("profile"), device["pods"]
    if not profile:
        use = "free" if not pods else ("sliced" if device["bare"] else "whole")
        result.uses_by_hour[device["uuid"]][tick // 3600 * 3600].add(use)
    if profile:
        share = int(profile.split("g.")[0]) * SHARE_UNITS // 7
    else:
        share = SHARE_UNITS
    result.capacity_units[interval] += share * result.scrape
    if not pods:
        return
    if not profile and device["bare"]:  # a time-sliced GPU: bare series plus one per pod
        share = SHARE_UNITS // len(pods)
        result.timesliced_ticks_with_pods += len(pods) > 1
    for owner, values in pods.items():
        engine_hundredths = round(float(values["DCGM_FI_PROF_GR_ENGINE_ACTIVE"]) * 100)
        result.alloc_units[owner][interval] += share * result.scrape
        result.busy_units[owner][interval] += engine_hundredths * share * result.scrape
        used = int(values["DCGM_FI_DEV_FB_USED"])
        result.memory_peak_mib[owner] = max(result.memory_peak_mib[owner], used)
        facts = result.pods[owner]
        facts.device_ticks.add(tick)
        if facts.first_device_tick is None:
            facts.first_device_tick = tick


def _kube(result: Readback, tick: int, name: str, labels: dict[str, str], value: str) -> None:
    facts = result.pods[(labels["namespace"], labels["pod"])]
    if name == "kube_pod_created":
        facts.created = int(value)
    elif name == "kube_pod_status_scheduled_time":
        facts.scheduled = int(value)
    elif name == "kube_pod_owner":
        facts.owner = labels["owner_name"]
    elif name == "kube_pod_labels":
        facts.label_task = labels.get("label_task")
        facts.label_team = labels.get("label_team")
    elif name == "kube_pod_container_resource_requests":
        facts.request = value
    elif name == "kube_pod_status_phase" and labels["phase"] == "Pending" and value == "1":
        facts.pending_ticks.add(tick)
    elif name == "kube_pod_status_reason" and value == "1" and facts.preempted_at is None:
        facts.preempted_at = tick
