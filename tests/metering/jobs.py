"""A two-GPU node running a few named Jobs, as dcgm-exporter and kube-state-metrics report them,
back-filled into a real Prometheus (promtool), the same without kube-state-metrics' series,
and an empty Prometheus: the fixtures of the task-identity and window-replacement tests.

- Oct 31 (pool zone Asia/Shanghai, UTC+8): namespace `alpha` runs Job `trainer` 23:00-23:10;
  Nov 1 00:00-00:10 namespace `beta` runs a Job also called `trainer` (UTC 15:00 and 16:00).
- Oct 20 10:00-10:30 UTC: Job `etl` of namespace `gamma` runs throughout; its pod is labelled
  team `red` in the windows before 10:15 and team `blue` from then on (a relabel).

GPU-a holds the running pod; GPU-b is idle throughout (capacity is two GPUs). The GPUs report
from ten minutes before each scenario.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from metering.models import (
    DEFAULT_LABEL_MAPPING,
    DEFAULT_PRIORITY_CLASS_KINDS,
    IngestWindow,
    Source,
)
from simulator.prometheus import PrometheusProcess, backfill, lookback_for, start_prometheus
from tests.helpers import command_output
from tests.metering import exposition
from tests.slow import starts

SCRAPE = 60
STEP = timedelta(seconds=300)
ALPHA_START = datetime(2026, 10, 31, 15, tzinfo=UTC)  # 23:00 on the 31st in Asia/Shanghai
BETA_START = datetime(2026, 10, 31, 16, tzinfo=UTC)  # 00:00 on Nov 1st in Asia/Shanghai
NAMESPACES_END = BETA_START + 2 * STEP
RELABEL_START = datetime(2026, 10, 20, 10, tzinfo=UTC)
RELABEL_AT = RELABEL_START + 3 * STEP
RELABEL_END = RELABEL_START + 6 * STEP
JOB_SECONDS = 600
# The GPUs report for a while before the first window ingested, as on a running node.
LEAD_IN = timedelta(minutes=10)  # each Job holds one GPU for two windows

DCGM = (
    'modelName="NVIDIA A100-SXM4-80GB",Hostname="node-1",job="dcgm-exporter",'
    'instance="10.0.0.7:9400"'
)
KSM = 'job="kube-state-metrics",instance="10.42.0.5:8080"'


def device_series(uuid: str, gpu: int, pod: tuple[str, str] | None) -> list[str]:
    """One GPU's dcgm-exporter series at a tick: memory and engine activity where `pod`
    (namespace, name) holds it, a free GPU's memory otherwise."""
    labels = f'gpu="{gpu}",UUID="{uuid}",device="nvidia{gpu}",{DCGM}'
    if pod is None:
        return [f"DCGM_FI_DEV_FB_USED{{{labels}}} 0"]
    labels += f',namespace="{pod[0]}",pod="{pod[1]}",container="main"'
    return [
        f"DCGM_FI_DEV_FB_USED{{{labels}}} 1024",
        f"DCGM_FI_PROF_GR_ENGINE_ACTIVE{{{labels}}} 0.5",
    ]


def _pod(namespace: str, pod: str, job: str, created: int, team: str = "") -> list[str]:
    base = f'{KSM},namespace="{namespace}",pod="{pod}",uid="uid-{namespace}-{pod}"'
    labels = f',label_team="{team}"' if team else ""
    return [
        f"kube_pod_created{{{base}}} {created}",
        f"kube_pod_status_scheduled_time{{{base}}} {created + 30}",
        f'kube_pod_info{{{base},node="node-1",priority_class="training-batch"}} 1',
        f'kube_pod_owner{{{base},owner_kind="Job",owner_name="{job}",'
        'owner_is_controller="true"} 1',
        f"kube_pod_labels{{{base}{labels}}} 1",
        f'kube_pod_status_phase{{{base},phase="Running"}} 1',
    ]


def _ticks(start: datetime, end: datetime) -> range:
    return range(int(start.timestamp()), int(end.timestamp()), SCRAPE)


# (namespace, pod, Job, team label before the relabel tick, after it, first tick, end)
JOBS = (
    ("alpha", "trainer-7fz2k", "trainer", "", "", ALPHA_START, ALPHA_START + 2 * STEP),
    ("beta", "trainer-9xq4m", "trainer", "", "", BETA_START, NAMESPACES_END),
    ("gamma", "etl-b8d4c", "etl", "red", "blue", RELABEL_START, RELABEL_END),
)


def series_at() -> dict[int, list[str]]:
    """Every tick's samples, both scenarios, from LEAD_IN before to one step after each.

    A Job's pod reports only between window boundaries (not at hh:00, hh:05, ...): whether a
    sample on a boundary counts in the window it starts or ends differs between Prometheus
    versions, which is not what these tests are about. The relabel shows from 10:16."""
    relabel_tick = RELABEL_AT.timestamp() + SCRAPE
    lines: dict[int, list[str]] = {}
    for begin, end in ((ALPHA_START, NAMESPACES_END), (RELABEL_START, RELABEL_END)):
        for tick in _ticks(begin - LEAD_IN, end + STEP):
            running = [
                job
                for job in JOBS
                if job[5].timestamp() <= tick < job[6].timestamp() and tick % STEP.seconds
            ]
            holder = (running[0][0], running[0][1]) if running else None
            lines[tick] = [*device_series("GPU-a", 0, holder), *device_series("GPU-b", 1, None)]
            for namespace, pod, job, before, after, start, _ in running:
                team = before if tick < relabel_tick else after
                created = int(start.timestamp()) - 60
                lines[tick] += _pod(namespace, pod, job, created, team=team)
    return lines


@pytest.fixture(scope="session")
def jobs_tsdb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("jobs")
    lines = series_at()
    exposition.write_openmetrics(out / "jobs.om", sorted(lines), lines)
    backfill(out / "jobs.om", out / "tsdb")
    return out / "tsdb"


@pytest.fixture(scope="session")
@starts("Prometheus")
def jobs_prometheus(jobs_tsdb: Path) -> Iterator[PrometheusProcess]:
    running = start_prometheus(
        jobs_tsdb, lookback_delta=lookback_for(SCRAPE), scrape_interval=f"{SCRAPE}s"
    )
    yield running
    running.stop()


@pytest.fixture(scope="session")
@starts("Prometheus")
def empty_prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusProcess]:
    """A Prometheus that lost everything: retention expired, or a new empty TSDB."""
    running = start_prometheus(
        tmp_path_factory.mktemp("empty") / "tsdb",
        lookback_delta=lookback_for(SCRAPE),
        scrape_interval=f"{SCRAPE}s",
    )
    yield running
    running.stop()


def backfilled_prometheus(
    out: Path, lines: dict[int, list[str]], scrape: int = SCRAPE
) -> PrometheusProcess:
    """A Prometheus serving `lines` (tick -> exposition lines), back-filled with promtool into
    `out`, its look-back and scrape interval those of a `scrape`-second scrape."""
    exposition.write_openmetrics(out / "series.om", sorted(lines), lines)
    backfill(out / "series.om", out / "tsdb")
    return start_prometheus(
        out / "tsdb", lookback_delta=lookback_for(scrape), scrape_interval=f"{scrape}s"
    )


def _prometheus_without(out: Path, dropped: str) -> PrometheusProcess:
    """A Prometheus over the same series but those whose line holds `dropped`."""
    lines = {
        tick: [line for line in samples if dropped not in line]
        for tick, samples in series_at().items()
    }
    return backfilled_prometheus(out, lines)


@pytest.fixture(scope="session")
@starts("Prometheus")
def undescribed_prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusProcess]:
    """The same GPU series without any of kube-state-metrics': its series deleted to save
    space, or another Prometheus (a new one, a long-term store) that never scraped it."""
    running = _prometheus_without(
        tmp_path_factory.mktemp("undescribed"), 'job="kube-state-metrics"'
    )
    yield running
    running.stop()


@pytest.fixture(scope="session")
@starts("Prometheus")
def unlabelled_prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusProcess]:
    """The same series without `kube_pod_labels` (deleted to save its cardinality): the pods'
    owners and priority classes are there, their task and team labels are not."""
    running = _prometheus_without(tmp_path_factory.mktemp("unlabelled"), "kube_pod_labels{")
    yield running
    running.stop()


def jobs_source(url: str) -> Source:
    return Source.objects.create(
        name="kube",
        url=url,
        scrape_interval_seconds=SCRAPE,
        label_mapping=dict(DEFAULT_LABEL_MAPPING),
        priority_class_kinds=dict(DEFAULT_PRIORITY_CLASS_KINDS),
    )


def ingested_windows(url: str, start: datetime, end: datetime) -> list[IngestWindow]:
    """The `kube` source on the Prometheus at `url`, ingested over [start, end): its windows,
    in time order."""
    jobs_source(url)
    ingest_command(start, end)
    return list(IngestWindow.objects.filter(start__gte=start, start__lt=end).order_by("start"))


def iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def ingest_command(start: datetime, end: datetime, *extra: str) -> str:
    """`manage.py ingest --now` of the `kube` source over [start, end); its output."""
    return command_output(
        "ingest", "--source", "kube", "--start", iso(start), "--end", iso(end), "--now", *extra
    )
