"""An exporter scraped twice, replaced mid-interval, or scraped with its own pod as a label,
changes no stored figure.

Two scrape jobs on one dcgm-exporter (a ServiceMonitor beside a pod-annotation job, one of
them writing the pod as `exported_pod`), two kube-state-metrics replicas, cAdvisor and vLLM
each scraped by a second job: Prometheus then holds every series twice, under two targets.
Before, the GPU meters halved (each tick was split between the two copies as if time-sliced),
I/O, latency counts and GPU requests doubled, and a preempted gang lost three quarters of its
GPUs, with completeness 1 and no warning. An exporter replaced mid-interval (a new pod, a new
address) lost the busy time of one of its two series. A ServiceMonitor's target labels put the
exporter's own pod on free GPUs' series, and the exporter's team paid for every free GPU.

A scrape that fails for a while (cAdvisor's, vLLM's) made each pod's counters count from zero
after the gap: its whole I/O and every request it had served landed on one interval.

A dcgm-exporter with its pod mapping off wrote its GPUs as free while their pods ran: their
GPU-seconds went unbilled, with completeness 1 and no warning.

One Prometheus holds seven copies of six hours of a simulated day, told apart by a `copy`
label (each source reads its own through `label_mapping.matchers`): as scraped, everything
scraped twice (also read in shards), gpu-node-01's exporter replaced at 01:02, the exporters'
own pods on their series (gpu-node-02's exporter also without NODE_NAME, so its `Hostname` is
its pod's name, as dcgm-exporter writes it then), cAdvisor and vLLM silent for 15 minutes,
gpu-node-02's exporter with its pod mapping off (also read in shards), and kube-state-metrics
silent for the same 15 minutes. The next three store exactly the
rows of the first, which are the simulator's truth, and the windows name the second target;
the silent copy counts the same I/O and requests, inside a batch and across a batch's start;
the unmapped copy counts what its node's pods lost as missing samples. The silent copy's
gap windows say that their requests and I/O land on the interval after. Without
kube-state-metrics, every pod it showed again looked newly scheduled (a wait each, a task
for the completed pod) and the waits of the pods scheduled in the gap were lost.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Iterator
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path

import pytest
from django.db.models import Sum

from metering.models import IngestWindow, LatencyInterval, Source, UsageInterval
from simulator.config import PoolConfig
from simulator.pool import simulate
from simulator.prometheus import PrometheusProcess, backfill
from tests.metering.conftest import ingest_span, prometheus_over, source_remove
from tests.metering.stored import stored
from tests.slow import starts

pytestmark = [pytest.mark.slow, pytest.mark.django_db]

ISO = "%Y-%m-%dT%H:%M:%SZ"
# A day whose morning surge (09:00 Asia/Shanghai, 01:00 UTC) preempts a 4-GPU gang and scales
# inference out (new pods, waits), and whose time-sliced GPU is shared from 14:00 UTC; the
# copies hold those two spans of it.
POOL = PoolConfig(gpus=8, days=1, start=date(2026, 9, 28), seed=11, scrape_interval_seconds=60)
SPANS = (
    (datetime(2026, 9, 27, 23, tzinfo=UTC), datetime(2026, 9, 28, 3, tzinfo=UTC)),
    (datetime(2026, 9, 28, 14, tzinfo=UTC), datetime(2026, 9, 28, 16, tzinfo=UTC)),
)
# Each span with the interval before its first, and the look-back.
KEPT = [(int(start.timestamp()) - 600, int(end.timestamp())) for start, end in SPANS]
WINDOWS = sum(int((end - start).total_seconds()) // 300 for start, end in SPANS)
REPLACED_AT = int(datetime(2026, 9, 28, 1, 2, tzinfo=UTC).timestamp())  # mid-interval
OLD_EXPORTER, NEW_EXPORTER = 'instance="10.42.0.11:9400"', 'instance="10.42.0.99:9400"'
KSM_REPLICA = ('instance="10.42.0.5:8080"', 'instance="10.42.0.6:8080"')
JOB = re.compile(r'job="([^"]*)"')
EXPORTED = re.compile(r"\bexported_((?:container|namespace|pod)=)")
POD = re.compile(r"(?<![\w])((?:container|namespace|pod)=)")
COPIES = (
    "as scraped",
    "scraped twice",
    "exporter replaced",
    "exporter's own pod",
    "silent",
    "pod mapping off",
    "kube-state-metrics silent",
)
# Copies also read in shards by node (a shard sees its nodes' GPU series, the combiner the rest).
IN_SHARDS = ("scraped twice, in shards", "exporter's own pod, in shards")
UNMAPPED_SOURCES = ("pod mapping off", "pod mapping off, in shards")
# The kubelet's and vLLM's scrapes failing for 15 minutes, across the start of an hourly batch:
# no I/O or latency reading in [00:55, 01:10).
SILENT = (
    int(datetime(2026, 9, 28, 0, 55, tzinfo=UTC).timestamp()),
    int(datetime(2026, 9, 28, 1, 10, tzinfo=UTC).timestamp()),
)
SILENT_JOBS = re.compile(r'job="(kubelet|vllm)"')
# The simulator writes `up` for dcgm-exporter's targets only; Prometheus writes it for every
# target, so the copies get it for the kubelet's, vLLM's and kube-state-metrics' too (0 while
# silent).
SCRAPED_TARGET = re.compile(r'job="(?:kubelet|vllm|kube-state-metrics)",instance="[^"]*"')
# In another copy, kube-state-metrics is silent over the same 15 minutes.
KSM_JOB = 'job="kube-state-metrics"'
# The silent copy read in batches of 48 windows (the gap inside one) and of 12 (an hour: the
# gap covers the interval before the 01:00 batch and its first two), the latter in shards too.
SILENT_SOURCES = {"silent": 48, "silent, in hourly batches": 12, "silent, hourly, in shards": 12}
# Each node's dcgm-exporter pod (a DaemonSet's, at the address Prometheus scrapes), which a
# ServiceMonitor's target labels put on every series as `pod` (see `_own_pod`).
EXPORTER_PODS = {
    "10.42.0.11": ("nvidia-dcgm-exporter-7xk2p", "gpu-node-01"),
    "10.42.0.12": ("nvidia-dcgm-exporter-q9d4w", "gpu-node-02"),
}
INSTANCE = re.compile(r'instance="([^":]*):\d+"')
# gpu-node-02's dcgm-exporter with its Kubernetes pod mapping off (or its pod-resources socket
# not mounted): its series name no pod, so its GPUs look free while their pods run on.
UNMAPPED = 'instance="10.42.0.12:9400"'
POD_LABELS = re.compile(r',?\b(?:exported_)?(?:container|namespace|pod)="[^"]*"')
# A Job's pod that completed a day before and is not deleted yet: kube-state-metrics still
# writes its GPU request (kube-state-metrics#1051), but it holds no GPU. In every copy.
COMPLETED = (
    'job="kube-state-metrics",instance="10.42.0.5:8080",namespace="nlp",'
    'pod="eval-sweep-0001-x7k2p",uid="8c1f0d52-completed"'
)


# In the copy with the mapping off only: a pod running with GPUs on gpu-node-03, whose GPU
# exporter Prometheus does not scrape (none deployed there).
UNEXPORTED = (
    'job="kube-state-metrics",instance="10.42.0.5:8080",namespace="nlp",'
    'pod="asr-finetune-0002-m4q8z",uid="5d2e7a10-unexported"'
)


def _kube_pod(pod: str, job: str, node: str, phase: str, at: int) -> list[str]:
    """kube-state-metrics' series at one tick of a Job's pod scheduled a day before the
    spans, requesting 2 GPUs."""
    started = KEPT[0][0] - 86_400
    lines = [
        f"kube_pod_created{{{pod}}} {started} {at}",
        f'kube_pod_info{{{pod},host_ip="10.0.0.11",pod_ip="10.42.1.77",node="{node}",'
        f'created_by_kind="Job",created_by_name="{job}",'
        f'priority_class="training-batch",host_network="false"}} 1 {at}',
        f'kube_pod_owner{{{pod},owner_kind="Job",owner_name="{job}",'
        f'owner_is_controller="true"}} 1 {at}',
        f'kube_pod_labels{{{pod},label_team="nlp"}} 1 {at}',
        f'kube_pod_container_resource_requests{{{pod},container="main",'
        f'resource="nvidia_com_gpu",unit="integer"}} 2 {at}',
        f"kube_pod_status_scheduled_time{{{pod}}} {started + 5} {at}",
    ]
    phases = ("Pending", "Running", "Succeeded", "Failed", "Unknown")
    return lines + [
        f'kube_pod_status_phase{{{pod},phase="{each}"}} {int(each == phase)} {at}'
        for each in phases
    ]


def _other_spelling(labels: str) -> str:
    """A dcgm-exporter series as the other job stores it: a job honouring the exporter's pod
    labels keeps `pod`, one that does not renames them `exported_pod` and adds the exporter's
    own pod (Prometheus' `honor_labels`)."""
    if "exported_pod=" in labels:
        return EXPORTED.sub(r"\1", labels)
    if POD.search(labels):
        labels = POD.sub(r"exported_\1", labels)
        return labels.replace("}", ',namespace="gpu-operator",pod="dcgm-exporter-7xk2p"}', 1)
    return labels  # a GPU's bare series: no pod


def _own_pod(name: str, labels: str, at: int) -> list[str]:
    """The line as a ServiceMonitor scrape stores it: dcgm-exporter's series carry the
    exporter's own pod where the exporter wrote none (a free GPU), and, on a node whose
    scrape does not honour the exporter's labels (gpu-node-02, `exported_pod`), on every
    series; kube-state-metrics describes the exporter pods, at the addresses scraped."""
    if name.startswith("DCGM_"):
        pod, node = EXPORTER_PODS[INSTANCE.search(labels)[1]]
        if node == "gpu-node-02":  # its exporter without NODE_NAME: its host name, the pod's
            labels = labels.replace(f'Hostname="{node}"', f'Hostname="{pod}"')
        if "exported_pod=" in labels or not POD.search(labels):
            own = f'namespace="gpu-operator",pod="{pod}",container="nvidia-dcgm-exporter"'
            labels = labels.replace("}", f",{own}}}", 1)
        return [f"{name}{{{labels}"]
    if name != "up" or 'job="dcgm-exporter"' not in labels:
        return [f"{name}{{{labels}"]
    address = INSTANCE.search(labels)[1]
    pod, node = EXPORTER_PODS[address]
    ksm = f'job="kube-state-metrics",{KSM_REPLICA[0]},namespace="gpu-operator",pod="{pod}"'
    started = KEPT[0][0] - 86_400  # a day before: no wait of theirs falls in a span
    return [
        f"{name}{{{labels}",
        f'kube_pod_info{{{ksm},pod_ip="{address}",host_ip="{address}",node="{node}",'
        'created_by_kind="DaemonSet",created_by_name="nvidia-dcgm-exporter",'
        f'priority_class="system-node-critical",host_network="false"}} 1 {at}',
        f'kube_pod_owner{{{ksm},owner_kind="DaemonSet",owner_name="nvidia-dcgm-exporter",'
        f'owner_is_controller="true"}} 1 {at}',
        f'kube_pod_labels{{{ksm},label_app="nvidia-dcgm-exporter"}} 1 {at}',
        f"kube_pod_created{{{ksm}}} {started} {at}",
        f"kube_pod_status_scheduled_time{{{ksm}}} {started + 5} {at}",
    ]


def _copies(line: str, at: int) -> list[str]:
    """The line as each copy holds it, `copy` first among its labels."""
    name, rest = line.split("{", 1)
    twice = [rest]
    if 'job="kube-state-metrics"' in rest:
        twice.append(rest.replace(*KSM_REPLICA))  # a second replica
    else:
        again = JOB.sub(lambda job: f'job="{job[1]}-again"', rest, count=1)
        twice.append(_other_spelling(again) if name.startswith("DCGM_") else again)
    replaced = rest.replace(OLD_EXPORTER, NEW_EXPORTER) if at >= REPLACED_AT else rest
    silent = [f"{name}{{{rest}"]
    if SILENT[0] <= at < SILENT[1] and SILENT_JOBS.search(rest):
        silent = [f"up{{{rest.rsplit(' ', 2)[0]} 0 {at}"] if name == "up" else []
    unmapped = [f"{name}{{{rest}"]
    if name.startswith("DCGM_") and UNMAPPED in rest:
        unmapped = [f"{name}{{{POD_LABELS.sub('', rest)}"]
    ksm_silent = [f"{name}{{{rest}"]
    if SILENT[0] <= at < SILENT[1] and KSM_JOB in rest:
        ksm_silent = [f"up{{{rest.rsplit(' ', 2)[0]} 0 {at}"] if name == "up" else []
    held = {
        "as scraped": [f"{name}{{{rest}"],
        "kube-state-metrics silent": ksm_silent,
        "pod mapping off": unmapped,
        "silent": silent,
        "scraped twice": [f"{name}{{{labels}" for labels in twice],
        "exporter replaced": [f"{name}{{{replaced}"],
        "exporter's own pod": _own_pod(name, rest, at),
    }
    return [line.replace("{", f'{{copy="{copy}",', 1) for copy in COPIES for line in held[copy]]


HOLDER = re.compile(r'\b(?:exported_)?pod="([^"]*)"')
RUNNING = re.compile(r'^kube_pod_status_phase\{.*\bpod="([^"]*)".*phase="Running"\} 1 ')


@pytest.fixture(scope="module")
def copies_pool(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path, dict]:
    """The simulator's truth, the TSDB of the copies, and at each tick, as scraped, the pods
    gpu-node-02's exporter named and the pods kube-state-metrics saw Running."""
    out = tmp_path_factory.mktemp("scrape-targets")
    holders: dict[int, set[str]] = defaultdict(set)
    running: dict[int, set[str]] = defaultdict(set)
    scraped_targets: dict[int, set[str]] = defaultdict(set)
    simulate(POOL, out)
    ticks: set[int] = set()
    # Without pods, a time-sliced GPU's series and its pods' ones are one: written once a tick.
    unmapped: set[str] = set()
    with open(out / "metrics.om") as lines, open(out / "copies.om", "w") as copies:
        for line in lines:
            if line.startswith("#"):
                continue
            at = int(line.rsplit(" ", 1)[1])
            if not any(first <= at < end for first, end in KEPT):
                continue
            if line.startswith("DCGM_FI_DEV_FB_USED{") and UNMAPPED in line:
                holders[at].update(HOLDER.findall(line))
            elif found := RUNNING.match(line):
                running[at].add(found[1])
            elif found := SCRAPED_TARGET.search(line):
                scraped_targets[at].add(found[0])
            written = [line.rstrip("\n")]
            if at not in ticks:
                ticks.add(at)
                written += _kube_pod(COMPLETED, "eval-sweep-0001", "gpu-node-01", "Succeeded", at)
                copies.writelines(
                    line.replace("{", '{copy="pod mapping off",', 1) + "\n"
                    for line in _kube_pod(
                        UNEXPORTED, "asr-finetune-0002", "gpu-node-03", "Running", at
                    )
                )
            for copy in (copy for written_line in written for copy in _copies(written_line, at)):
                if (
                    copy.startswith("DCGM_")
                    and UNMAPPED in copy
                    and 'copy="pod mapping off"' in copy
                ):
                    series_at = f"{copy.rsplit(' ', 2)[0]} {at}"
                    if series_at in unmapped:
                        continue
                    unmapped.add(series_at)
                copies.write(f"{copy}\n")
        for at, targets in sorted(scraped_targets.items()):
            for target in sorted(targets):
                copies.writelines(f"{copy}\n" for copy in _copies(f"up{{{target}}} 1 {at}", at))
        copies.write("# EOF\n")
    (out / "metrics.om").unlink()
    backfill(out / "copies.om", out / "tsdb")
    (out / "copies.om").unlink()
    return json.loads((out / "truth.json").read_text()), out / "tsdb", (holders, running)


@pytest.fixture(scope="module")
@starts("Prometheus")
def copies_prometheus(copies_pool: tuple[dict, Path, dict]) -> Iterator[PrometheusProcess]:
    running = prometheus_over(copies_pool[1], POOL.scrape_interval_seconds)
    yield running
    running.stop()


@pytest.fixture(scope="module")
def copy_sources(
    django_db_setup: None,
    django_db_blocker: pytest.FixtureRequest,
    copies_prometheus: PrometheusProcess,
) -> Iterator[dict[str, int]]:
    """Each copy ingested (committed) by a source of its own; four of them in shards too."""
    with django_db_blocker.unblock():
        made = {}
        for copy in dict.fromkeys((*COPIES, *IN_SHARDS, *SILENT_SOURCES, *UNMAPPED_SOURCES)):
            made[copy] = Source.objects.create(
                name=copy,
                url=copies_prometheus.url,
                scrape_interval_seconds=POOL.scrape_interval_seconds,
                label_mapping={"matchers": {"copy": copy.split(",")[0]}},
                shard_node_patterns=["gpu-node-01", "gpu-node-02"] if "shards" in copy else [],
            )
            for span in SPANS:
                ingest_span(made[copy], *span, batch=SILENT_SOURCES.get(copy, 48))
        yield {copy: source.pk for copy, source in made.items()}
        for source in made.values():
            source_remove(source.pk)


def test_it_meters_the_copy_as_scraped_as_the_truth(copy_sources, copies_pool) -> None:
    truth = copies_pool[0]
    spans = [(first.strftime(ISO), last.strftime(ISO)) for first, last in SPANS]
    expected = {
        (task_id, interval): Decimal(str(amount))
        for task_id, task in truth["tasks"].items()
        for interval, amount in task["alloc_gpu_seconds"].items()
        if amount and any(first <= interval < last for first, last in spans)
    }
    found = {
        (external_id, start.strftime(ISO)): alloc
        for external_id, start, alloc in UsageInterval.objects.filter(
            task__source_id=copy_sources["as scraped"], alloc_gpu_seconds__gt=0
        ).values_list("task__external_id", "interval_start", "alloc_gpu_seconds")
    }
    assert found == expected
    windows = IngestWindow.objects.filter(source_id=copy_sources["as scraped"])
    assert {window.status for window in windows} == {IngestWindow.Status.DONE}
    assert not [warning for window in windows for warning in window.warnings]


@pytest.mark.parametrize("copy", [*COPIES[1:4], *IN_SHARDS])
def test_it_stores_exactly_the_rows_of_the_copy_as_scraped(copy_sources, copy: str) -> None:
    """Every figure: GPU and busy seconds, memory, I/O, latency buckets, preemptions with
    their GPUs, waits, tasks, capacity and completeness."""
    expected = stored(copy_sources["as scraped"])
    assert expected["preemptions"] and expected["waits"] and expected["latency"]
    found = stored(copy_sources[copy])
    for table, rows in expected.items():
        assert found[table] == rows, table


def test_it_finds_no_unrequested_work_in_any_copy(copy_sources) -> None:
    """The free GPUs' bare series of a pod mapping turned off (its pods' work on them), or of
    the exporter's own pod, are no work outside a pod's request: left to their own counts."""
    for copy, source_id in copy_sources.items():
        windows = IngestWindow.objects.filter(source_id=source_id)
        assert windows.exists(), copy
        assert not windows.filter(unheld_busy_gpu_seconds__gt=0).exists(), copy


def _warnings(source_id: int) -> list[str]:
    return [
        warning
        for warnings in IngestWindow.objects.filter(source_id=source_id).values_list(
            "warnings", flat=True
        )
        for warning in warnings
    ]


def test_it_names_the_second_target_in_the_windows_warnings(copy_sources) -> None:
    doubled = _warnings(copy_sources["scraped twice"])
    devices = [w for w in doubled if w.startswith("devices:")]
    # One per window, naming every GPU of the pool (the interval before the span aside).
    assert len(devices) == WINDOWS
    assert {w.split(", e.g.")[0] for w in devices} == {
        "devices: 8 GPU(s) answered for by two scrape targets"
    }
    assert 'and job="dcgm-exporter-again" instance="10.42.0.12:9400"' in devices[0]
    meters = {w.split(":", 1)[0] for w in doubled}
    assert meters == {"devices", "identity", "io", "latency", "pod_details"}
    assert any('job="vllm-again"' in w for w in doubled if w.startswith("latency:"))
    assert any('instance="10.42.0.6:8080"' in w for w in doubled if w.startswith("pod_details:"))
    replaced = _warnings(copy_sources["exporter replaced"])
    assert len(replaced) == 1
    assert f'and job="dcgm-exporter" {NEW_EXPORTER}' in replaced[0]
    assert replaced[0].startswith("devices: 4 GPU(s) answered for by two scrape targets")


def _counted(source_id: int) -> tuple[dict, dict]:
    """Per task, its I/O over the spans; per service and bucket, its requests."""
    io: dict[str, list[int]] = {}
    for task, *values in UsageInterval.objects.filter(task__source_id=source_id).values_list(
        "task__external_id", "read_operations", "write_operations", "read_bytes", "write_bytes"
    ):
        io[task] = [a + b for a, b in zip(io.get(task, [0, 0, 0, 0]), values, strict=True)]
    requests: dict[tuple[str, str], int] = {}
    for service, buckets in LatencyInterval.objects.filter(
        service__source_id=source_id
    ).values_list("service__external_id", "buckets"):
        for bound, count in buckets:
            requests[service, bound] = requests.get((service, bound), 0) + count
    return io, requests


def _ended_in_the_gap(source_id: int) -> set[str]:
    """Tasks with usage in the interval before the gap and none in the one after it: their
    pods ended unseen, and what they counted since their last reading is lost."""
    before, after = (
        set(
            UsageInterval.objects.filter(
                task__source_id=source_id, interval_start=datetime.fromtimestamp(at, UTC)
            ).values_list("task__external_id", flat=True)
        )
        for at in (SILENT[0] - 300, SILENT[1])
    )
    return before - after


@pytest.mark.parametrize("copy", list(SILENT_SOURCES))
def test_it_counts_io_and_requests_across_a_silent_scrape_once(copy_sources, copy: str) -> None:
    """The readings after the gap count from the last ones before it (inside a batch, and
    across a batch's start, looked up), not from zero: no count lands twice. A gang that
    was preempted in the gap lost its last readings (and only it)."""
    (io, requests), (io_scraped, requests_scraped) = (
        _counted(copy_sources[name]) for name in (copy, "as scraped")
    )
    ended = _ended_in_the_gap(copy_sources["as scraped"])
    assert ended == {"recsys-sft-0005"}
    assert {task: io[task] for task in io if task not in ended} == {
        task: io_scraped[task] for task in io_scraped if task not in ended
    }
    assert io["recsys-sft-0005"] < io_scraped["recsys-sft-0005"]
    assert requests == requests_scraped
    after = datetime.fromtimestamp(SILENT[1], UTC)
    resumed, scraped = (
        UsageInterval.objects.filter(
            task__source_id=copy_sources[name], interval_start=after
        ).aggregate(reads=Sum("read_operations"))["reads"]
        for name in (copy, "as scraped")
    )
    assert resumed > scraped  # the gap's reads land on the interval after it


def _windows(source_id: int) -> dict[datetime, IngestWindow]:
    return {window.start: window for window in IngestWindow.objects.filter(source_id=source_id)}


def _allocated(source_id: int) -> dict[datetime, Decimal]:
    return {
        start: alloc
        for start, alloc in UsageInterval.objects.filter(task__source_id=source_id)
        .values_list("interval_start")
        .annotate(alloc=Sum("alloc_gpu_seconds"))
    }


@pytest.mark.parametrize("copy", UNMAPPED_SOURCES)
def test_it_counts_the_gpus_of_pods_no_series_names_as_missing(
    copy_sources, copies_pool, copy: str
) -> None:
    """gpu-node-02's exporter names no pod: its pods' GPU-seconds are lost to billing (their
    GPUs look free). Where the same pods held the node's GPUs at every tick of a window and
    kube-state-metrics saw them Running at its start and its end (they ran through it),
    those GPU-seconds count as missing samples and the window names the node: it is
    incomplete, so the month does not close on it unnoticed. Where a pod started, ended or
    was preempted inside the window, less is counted, never more. The completed pod that
    still requests GPUs in kube-state-metrics (every copy) is not counted: the copy as
    scraped is complete."""
    holders, running = copies_pool[2]
    scraped, unmapped = (_allocated(copy_sources[name]) for name in ("as scraped", copy))
    windows = _windows(copy_sources[copy])
    assert {w.completeness for w in _windows(copy_sources["as scraped"]).values()} == {1}
    steady = 0
    unexported = []
    for start, window in windows.items():
        lost = scraped.get(start, Decimal(0)) - unmapped.get(start, Decimal(0))
        counted = (window.samples_expected - window.samples_seen) * POOL.scrape_interval_seconds
        # The pod on a node no exporter reports: its 2 GPUs over the window, counted missing.
        elsewhere = [w for w in window.warnings if w.startswith("attribution: node gpu-node-03")]
        if elsewhere:
            assert elsewhere == [
                "attribution: node gpu-node-03: 1 pod(s) ran the whole interval with GPUs"
                " that no GPU series names, e.g. nlp/asr-finetune-0002-m4q8z requesting 2"
                " GPU(s) (no GPU exporter reports the node); 600 GPU-seconds counted missing"
            ]
            unexported.append(start)
            counted -= 600
        first = int(start.timestamp())
        named = [holders.get(at, set()) for at in range(first, first + 300, 60)]
        through = named[0] <= running[first] & running[first + 300]
        attribution = [w for w in window.warnings if w.startswith("attribution: node gpu-node-02")]
        if lost and through and all(pods == named[0] for pods in named):
            steady += 1
            assert counted == lost, start
            assert window.completeness < 1
            assert len(attribution) == 1
            assert f"{counted} GPU-seconds counted missing" in attribution[0]
        else:
            assert counted <= lost, start
    assert steady >= WINDOWS * 3 // 4  # most windows: the check is not vacuous
    # The pod on a node no exporter reports: counted in every window (Running at both ends of
    # each but the spans' last); the completed pod: never.
    assert len(unexported) == WINDOWS - len(SPANS)
    assert "eval-sweep" not in str([window.warnings for window in windows.values()])


@pytest.mark.parametrize("copy", list(SILENT_SOURCES))
def test_it_says_which_windows_a_silent_scrape_moved_counts_from(copy_sources, copy: str) -> None:
    """What the pods counted while the kubelet's and vLLM's scrapes failed lands on the
    interval after the gap: the gap's windows say so, per meter, naming a target (of every
    replica, those that scaled out at 01:00 too), so a reader of their P99, SLA test or I/O
    knows it is short. Completeness, a GPU measure, stays 1."""
    gap = {datetime.fromtimestamp(at, UTC) for at in range(SILENT[0], SILENT[1], 300)}
    said: dict[str, set[datetime]] = defaultdict(set)
    for start, window in _windows(copy_sources[copy]).items():
        assert window.completeness == 1
        for warning in window.warnings:
            meter = warning.split(":", 1)[0]
            said[meter].add(start)
            assert " scrape target(s) missed scrapes, e.g. " in warning
            assert ('job="kubelet"' if meter == "io" else 'job="vllm"') in warning
            assert "answered 0 of 5" in warning
    assert said == {"io": gap, "latency": gap}
    scaled_out = next(
        w for w in _windows(copy_sources[copy])[max(gap)].warnings if w.startswith("latency:")
    )
    assert scaled_out.startswith("latency: 4 scrape target(s)")


def test_it_meters_through_a_silent_kube_state_metrics_and_names_what_it_missed(
    copy_sources,
) -> None:
    """kube-state-metrics silent for 15 minutes: every pod is known again when it answers,
    as it was before (not newly scheduled, so no wait, task or details for pods that never
    held a GPU, like the completed one), the pods scheduled in the gap get their waits
    (creation time read where it answers again), and usage, capacity and latency are those
    of the copy as scraped. The gang preempted at 01:01 is not seen (kube-state-metrics
    says so only while scraped): the gap's windows say that a preemption may go unseen."""
    scraped, silent = (
        stored(copy_sources[name]) for name in ("as scraped", "kube-state-metrics silent")
    )
    for table in ("usage", "capacity", "latency", "waits"):
        assert silent[table] == scraped[table], table
    assert [row[3] for row in scraped["preemptions"]] == ["llama3-8b-sft-0005-svj67"]
    assert silent["preemptions"] == []
    # Only the preempted task's row differs (its end and creation came with the preemption).
    differing = {row[1] for row in set(scraped["tasks"]) ^ set(silent["tasks"])}
    assert differing == {"recsys-sft-0005"}
    gap = {datetime.fromtimestamp(at, UTC) for at in range(SILENT[0], SILENT[1], 300)}
    said = {
        start
        for start, window in _windows(copy_sources["kube-state-metrics silent"]).items()
        for warning in window.warnings
        if warning.startswith('identity: 1 scrape target(s) missed scrapes, e.g. job="kube-')
        and "answered 0 of 5; a pod preempted meanwhile may go unseen" in warning
    }
    assert said == gap
