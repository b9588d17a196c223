"""A pool that gets starved: pods that wait and are never scheduled, as kube-state-metrics
reports them, back-filled into a real Prometheus (promtool). The fixture of the known gap
"Pods never scheduled" (docs/telemetry.md): tests/metering/test_waits_never_scheduled.py
(what ingest stores) and tests/reports/test_waits_never_scheduled.py (the health numbers).

One node, one GPU (GPU-a), 60 s scrapes, team `vision`, priority class training-batch:

- 10:00-11:00 UTC (the "before" hour): `before-1` created 10:01, scheduled 10:11 (600 s),
  deleted 10:31; `before-2` created 10:31, scheduled 10:33 (120 s), deleted 10:55.
- 11:00-12:00 (the "after" hour, starved): `after-1` created 11:01, scheduled 11:03 (120 s),
  runs to 11:55; `gave-up-1..3` created 11:02, Pending, deleted at 11:42 (each waited 2,400 s:
  the user gave up, a Job's activeDeadlineSeconds); `pending-1` created 11:21, still Pending
  at 12:00 and after (2,340 s by 12:00).

A pending pod has what kube-state-metrics writes for one: its creation time, info (no node),
owner, labels, phase Pending, `kube_pod_status_unschedulable` and the PodScheduled condition
false, and no `kube_pod_status_scheduled_time`; its series end when it is deleted. The
scheduled pods hold GPU-a (its engine half busy) while they run.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from simulator.prometheus import PrometheusProcess
from tests.metering.jobs import KSM, SCRAPE, backfilled_prometheus

STEP = timedelta(seconds=300)
START = datetime(2026, 10, 14, 10, tzinfo=UTC)
MIDDLE = START + timedelta(hours=1)
END = START + timedelta(hours=2)
LEAD_IN = timedelta(minutes=10)
TEAM = "vision"
DCGM_TARGET = 'job="dcgm-exporter",instance="10.0.0.7:9400"'
DEVICE = (
    'gpu="0",UUID="GPU-a",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="node-1",'
    f"{DCGM_TARGET}"
)


def _at(hour: int, minute: int) -> int:
    return int(START.replace(hour=hour, minute=minute).timestamp())


# (pod, created, scheduled or None, deleted or None: still there after the range)
PODS: tuple[tuple[str, int, int | None, int | None], ...] = (
    ("before-1", _at(10, 1), _at(10, 11), _at(10, 31)),
    ("before-2", _at(10, 31), _at(10, 33), _at(10, 55)),
    ("after-1", _at(11, 1), _at(11, 3), _at(11, 55)),
    ("gave-up-1", _at(11, 2), None, _at(11, 42)),
    ("gave-up-2", _at(11, 2), None, _at(11, 42)),
    ("gave-up-3", _at(11, 2), None, _at(11, 42)),
    ("pending-1", _at(11, 21), None, None),
)


def pod_lines(pod: str, created: int, scheduled: int | None, tick: int) -> list[str]:
    base = f'{KSM},namespace="ml",pod="{pod}",uid="uid-{pod}"'
    lines = [
        f"kube_pod_created{{{base}}} {created}",
        f'kube_pod_owner{{{base},owner_kind="Job",owner_name="{pod}",'
        'owner_is_controller="true"} 1',
        f'kube_pod_labels{{{base},label_team="{TEAM}"}} 1',
        f'kube_pod_container_resource_requests{{{base},container="main",'
        'resource="nvidia_com_gpu",unit="integer"} 1',
    ]
    if scheduled is None or tick < scheduled:
        return [
            *lines,
            f'kube_pod_info{{{base},node="",priority_class="training-batch"}} 1',
            f'kube_pod_status_phase{{{base},phase="Pending"}} 1',
            f"kube_pod_status_unschedulable{{{base}}} 1",
            f'kube_pod_status_condition{{{base},condition="PodScheduled",status="false"}} 1',
        ]
    return [
        *lines,
        f'kube_pod_info{{{base},node="node-1",priority_class="training-batch"}} 1',
        f'kube_pod_status_phase{{{base},phase="Running"}} 1',
        f"kube_pod_status_scheduled_time{{{base}}} {scheduled}",
        f'kube_pod_status_condition{{{base},condition="PodScheduled",status="true"}} 1',
    ]


def series_at() -> dict[int, list[str]]:
    """Every tick's samples from LEAD_IN before START to one step after END. Pods report only
    between window boundaries, as in tests/metering/jobs.py (whether a sample on a boundary
    counts in the window it starts or ends differs between Prometheus versions)."""
    lines: dict[int, list[str]] = {}
    end = int((END + STEP).timestamp())
    for tick in range(int((START - LEAD_IN).timestamp()), end, SCRAPE):
        holder = ""
        lines[tick] = [f"up{{{DCGM_TARGET}}} 1", f"up{{{KSM}}} 1"]
        for pod, created, scheduled, deleted in PODS:
            if created <= tick < (deleted or end) and tick % STEP.seconds:
                lines[tick] += pod_lines(pod, created, scheduled, tick)
                if scheduled is not None and tick >= scheduled:
                    holder = pod
        if holder:
            device = f'{DEVICE},namespace="ml",pod="{holder}",container="main"'
            lines[tick] += [
                f"DCGM_FI_DEV_FB_USED{{{device}}} 1024",
                f"DCGM_FI_PROF_GR_ENGINE_ACTIVE{{{device}}} 0.5",
            ]
        else:
            lines[tick] += [
                f"DCGM_FI_DEV_FB_USED{{{DEVICE}}} 0",
                f"DCGM_FI_PROF_GR_ENGINE_ACTIVE{{{DEVICE}}} 0",
            ]
    return lines


def pending_prometheus(out: Path) -> PrometheusProcess:
    return backfilled_prometheus(out, series_at())
