"""The time-sliced GPUs' split taken from raw samples (metering.shared_split) answers what
Prometheus answers for `sources.shared_devices_query`, held to a real Prometheus as the oracle:

- hand-made series at the edges, both answers compared point by point: pods that come and go,
  three sharing one GPU, both pod label spellings, a pod's series written by two exporters with
  different readings, two samples in one tick's slot, samples between the ticks and on an
  interval's boundary, a missed scrape, NaN and negative readings, an exporter's own pod, the
  bare utilisation series beside the pods' at some ticks only, a pod without engine activity,
  MIG instances of one GPU shared and not;
- the simulated week and the real cluster's day, every fact of every interval the same with the
  split taken either way.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import pytest

from metering import measure, shared_split, sources
from metering.models import Source
from simulator.prometheus import PrometheusProcess
from tests.metering import real_trace
from tests.metering.conftest import POOL, pool_span
from tests.metering.jobs import backfilled_prometheus
from tests.metering.real_trace import trace_day  # noqa: F401 (a fixture)
from tests.slow import starts

SCRAPE = 60
STEP = 300
START = int(datetime(2026, 10, 21, 10, tzinfo=UTC).timestamp())
WINDOWS = 4
OWN = "dcgm-exporter-7xk2p"  # the exporter's own pod, which a scrape's target labels add
TARGET = 'job="dcgm-exporter",instance="10.0.0.21:9400",Hostname="node-s"'
SECOND_TARGET = 'job="gpu-metrics",instance="10.0.0.21:9401",Hostname="node-s"'
UUIDS = ["GPU-s1", "GPU-s2", "GPU-m"]


def _line(metric: str, labels: str, value: str, at: float) -> tuple[float, str]:
    return at, f"{metric}{{{labels}}} {value}"


def _edge_samples() -> dict[float, list[str]]:
    """(time -> exposition lines) of the hand-made GPUs, from a tick before the first window
    to the end of the last."""
    found: list[tuple[float, str]] = []
    fb, active, util = shared_split.METRICS
    for tick in range(START - STEP, START + WINDOWS * STEP, SCRAPE):
        n = (tick - START) // SCRAPE  # the tick's number from the first window's start
        at = tick + 17  # Prometheus scrapes a target at an offset of its own
        s1 = f'UUID="GPU-s1",gpu="0",modelName="NVIDIA A100-SXM4-80GB",{TARGET}'
        found.append(_line(fb, s1, "6144" if n != 7 else "NaN", at))  # the bare series
        if n % 3:  # the bare utilisation beside the pods' at some ticks only
            found.append(_line(util, s1, "90", at))
        holders = [("train", "a-0", "4096" if n != 4 else "-3", "0.9" if n != 9 else "NaN")]
        if 2 <= n <= 9:
            holders.append(("train", "b-0", "NaN" if n == 6 else "1024", "0.9"))
        for namespace, pod, memory, engine in holders:
            labels = f'{s1},namespace="{namespace}",pod="{pod}",container="main"'
            if pod == "a-0" and n == 11:
                continue  # a missed scrape of its series
            found.append(_line(fb, labels, memory, at))
            found.append(_line(active, labels, engine, at))
            found.append(_line(util, labels, "40" if pod == "a-0" else "-5", at))
        if 5 <= n <= 14:  # a third pod, spelt as `honor_labels: false` stores it, no engine
            labels = f'{s1},exported_namespace="serve",exported_pod="c-0",namespace="gpu-ops"'
            found.append(_line(fb, labels, "512" if n != 7 else "NaN", at))  # 700 beside
            found.append(_line(util, labels, "30", at))
            if n % 2:  # written by a second exporter too, with another reading
                labels = labels.replace(TARGET, SECOND_TARGET)
                found.append(_line(fb, labels, "700", at + 3))
                found.append(_line(util, labels, "35", at + 3))
        own = f'{s1},namespace="gpu-ops",pod="{OWN}"'
        found.append(_line(fb, own, "1", at))  # the exporter's own: the bare series, relabelled
        # GPU-s2: sampled on the tick itself (an interval's boundary), twice in some slots.
        s2 = f'UUID="GPU-s2",gpu="1",modelName="NVIDIA A100-SXM4-80GB",{TARGET}'
        found.append(_line(fb, s2, "0", tick))
        for pod in ("d-0", "e-0") if n % 4 else ("d-0",):
            labels = f'{s2},namespace="infer",pod="{pod}"'
            found.append(_line(fb, labels, "2048", tick))
            found.append(_line(util, labels, "-500" if (pod, n) == ("e-0", 3) else "50", tick))
            if n % 5 == 0:  # scraped again within the slot: the later sample is the tick's
                found.append(_line(fb, labels, "3000", tick + 40))
                found.append(_line(util, labels, "70", tick + 40))
        # GPU-m: instance 1 time-sliced between two pods, instance 2 held by one.
        m = f'UUID="GPU-m",gpu="2",modelName="NVIDIA A100-SXM4-80GB",{TARGET}'
        for instance, profile, pods in (
            ("1", "3g.40gb", ("f-0", "g-0")),
            ("2", "4g.40gb", ("h-0",)),
        ):
            device = f'{m},GPU_I_ID="{instance}",GPU_I_PROFILE="{profile}"'
            for pod in pods if n < 12 else pods[:1]:
                labels = f'{device},namespace="mig",pod="{pod}"'
                found.append(_line(fb, labels, "8000", at))
                found.append(_line(active, labels, "0.6", at))
    lines: dict[float, list[str]] = {}
    for at, line in found:
        lines.setdefault(at, []).append(line)
    return lines


@pytest.fixture(scope="module")
@starts("Prometheus")
def edge_prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusProcess]:
    running = backfilled_prometheus(tmp_path_factory.mktemp("shared-split"), _edge_samples())
    yield running
    running.stop()


def _plan(client: sources.PrometheusClient, **fields: object) -> sources.QueryPlan:
    plan = sources.query_plan_for(Source(scrape_interval_seconds=SCRAPE), step_seconds=STEP)
    return dataclasses.replace(plan, closed_ranges=client.ranges_closed(), **fields)


def _points(run: sources.QueryRun) -> dict[tuple, object]:
    """(labels, evaluated at) -> the value as the ingest reads it (`measure._parse_shared`)."""
    found: dict[tuple, object] = {}
    for series in run.series:
        key = tuple(sorted(series.labels.items()))
        for at, text in series.values:
            if text in ("NaN", "+Inf", "-Inf"):
                value: object = text
            elif series.labels["meter"] == "memory_avg":
                value = round(Decimal(text), 6)
            else:
                value = measure.exact(text)
            found[(key, int(float(at)))] = value
    return found


@pytest.mark.slow
@pytest.mark.parametrize("seen", [False, True], ids=["split", "split, seen and mean"])
def test_it_answers_what_prometheus_answers_for_the_split(
    edge_prometheus: PrometheusProcess, seen: bool
) -> None:
    client = sources.PrometheusClient(url=edge_prometheus.url)
    try:
        plan = _plan(client)
        first, last = START, START + (WINDOWS - 1) * STEP
        query = sources.shared_devices_query(plan, UUIDS, seen=seen, exporters=[OWN])
        asked = measure._Runner(client, plan, first, last).run("shared", query)
        runner = measure._Runner(client, plan, first, last)
        taken = measure._shared_from_samples(runner, query, UUIDS, seen, [OWN])
    finally:
        client.close()
    expected = _points(asked)
    assert _points(taken) == expected
    assert [series.labels for series in taken.series] == [s.labels for s in asked.series]
    # The edges are in the answer, so the comparison covers them.
    alloc = {k: v for k, v in expected.items() if ("meter", "alloc") in k[0]}
    assert "+Inf" in alloc.values()  # a NaN or negative frame buffer
    assert any(isinstance(v, Fraction) and v.denominator == 3 for v in alloc.values())
    busy = {k: v for k, v in expected.items() if ("meter", "busy") in k[0]}
    assert "NaN" in busy.values()
    assert any(isinstance(v, Fraction) and v < 0 for v in busy.values())
    pods = {dict(k[0]).get("pod") for k in expected}
    assert {"a-0", "b-0", "c-0", "d-0", "e-0", "f-0", "g-0", "h-0"} <= pods
    assert OWN not in pods
    assert taken.promql == query  # recorded as the expression it stands for
    assert len({point[1] for point in expected}) == WINDOWS


def _gpus_named(queries: list[dict]) -> list[str]:
    """The GPUs the split's recorded expressions name, in order."""
    named = []
    for query in queries:
        if query["meter"] == "shared":
            found = re.search(r'UUID=~"([^"]+)"', query["promql"])
            assert found, query["promql"]
            named += found[1].split("|")
    return named


def _measured_alike(
    client: sources.PrometheusClient, plan: sources.QueryPlan, first: int, last: int
) -> tuple[int, int, int]:
    """Both ways over [first, last]: (intervals compared, the split's requests asked of
    Prometheus, and its groups taken from samples)."""
    asked = measure.measure(
        client, dataclasses.replace(plan, shared_from_samples=False), first, last
    )
    taken = measure.measure(
        client, dataclasses.replace(plan, shared_from_samples=True), first, last
    )
    assert taken.intervals == asked.intervals, datetime.fromtimestamp(first, UTC)
    # The windows' records name the same GPUs' expressions, however they were answered.
    assert _gpus_named(taken.queries) == _gpus_named(asked.queries)
    requests = [sum(1 for q in m.queries if q["meter"] == "shared") for m in (asked, taken)]
    return len(asked.intervals), *requests


@pytest.mark.slow
def test_it_measures_the_simulated_week_alike_either_way(
    pool_prometheus: PrometheusProcess, pool_truth: dict
) -> None:
    start, end = pool_span(pool_truth)
    client = sources.PrometheusClient(url=pool_prometheus.url)
    plan = dataclasses.replace(
        sources.query_plan_for(
            Source(scrape_interval_seconds=POOL.scrape_interval_seconds), step_seconds=STEP
        ),
        closed_ranges=client.ranges_closed(),
    )
    compared = shared = 0
    try:
        at = start
        while at < end:
            first = int(at.timestamp())
            last = int(min(at + timedelta(hours=6), end).timestamp()) - STEP
            intervals, asked, _ = _measured_alike(client, plan, first, last)
            compared, shared = compared + intervals, shared + asked
            at += timedelta(hours=6)
    finally:
        client.close()
    assert compared == POOL.days * 24 * 12
    assert shared > 0


@pytest.mark.slow
def test_it_measures_the_real_day_alike_either_way(
    tmp_path: Path,
    trace_day: real_trace.Day,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """In requests of one GPU each too (as a batch of many time-sliced GPUs at a dense scrape
    is cut, `measure._shared_gpus_per_request`): the groups add up to the same facts."""
    monkeypatch.setattr(measure, "SHARED_SAMPLES_PER_REQUEST", 1)
    lines = real_trace.series_at(*trace_day, requests=True)
    prometheus = backfilled_prometheus(tmp_path, lines, real_trace.SCRAPE)
    client = sources.PrometheusClient(url=prometheus.url)
    plan = _plan(client)
    compared = asked = taken = 0
    try:
        first = int(real_trace.START.timestamp())
        end = int(real_trace.END.timestamp())
        while first < end:
            last = min(first + 72 * STEP, end) - STEP
            found = _measured_alike(client, plan, first, last)
            compared, asked, taken = compared + found[0], asked + found[1], taken + found[2]
            first = last + STEP
    finally:
        client.close()
        prometheus.stop()
    assert compared == (end - int(real_trace.START.timestamp())) // STEP
    assert 0 < asked < taken  # one request of each batch's GPUs, against one per GPU


def test_it_names_as_many_time_sliced_gpus_a_request_as_keep_it_near_its_samples() -> None:
    plan = sources.query_plan_for(Source(scrape_interval_seconds=15), step_seconds=STEP)
    first = START
    assert measure._shared_gpus_per_request(plan, first, first + 71 * STEP) == 17  # 1,440 ticks
    sparse = sources.query_plan_for(Source(scrape_interval_seconds=150), step_seconds=STEP)
    assert measure._shared_gpus_per_request(sparse, first, first + 71 * STEP) == 173
    assert measure._shared_gpus_per_request(sparse, first, first) == measure.NARROWED_BATCH
