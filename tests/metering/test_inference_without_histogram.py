"""An inference server that serves without its latency histogram, on a pool back-filled into a
real Prometheus from the simulator (`--vllm-without-stats`): vLLM started with
`--disable-log-stats` registers no `vllm:*` metric, while its scrape target answers.

Its requests still happen (the truth counts them), but no breach of its SLO can be seen, so
pricing rule 4 moves nothing for it. Before this check, its windows were complete and said
nothing (a source's P99 simply had one service fewer). Now each window in which one of its
replicas held GPUs through the interval names it, and the other services, which write their
histogram and whose targets answer alike, are measured exactly and never named."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, date, datetime
from decimal import Decimal

import pytest

from metering import measure
from metering.models import IngestWindow, LatencyInterval, Source
from metering.selectors import usage_report
from simulator.config import PoolConfig
from simulator.prometheus import PrometheusProcess
from tests.metering.conftest import (
    ingest_span,
    simulated_prometheus,
    source_remove,
)

pytestmark = pytest.mark.slow

BASE = PoolConfig(gpus=16, days=1, start=date(2026, 10, 6), seed=7, scrape_interval_seconds=60)
SILENT_MODEL = "llama3-8b-chat"  # served by the `ads` team
# 08:00-10:00 in Shanghai: the morning ramp scales every service from one replica to three.
SPAN = (BASE.start_epoch + 8 * 3600, BASE.start_epoch + 10 * 3600)
ISO = "%Y-%m-%dT%H:%M:%SZ"


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[dict, PrometheusProcess]]:
    config = replace(BASE, vllm_without_stats=(SILENT_MODEL,))
    yield from simulated_prometheus(config, tmp_path_factory.mktemp("vllm-without-stats"))


def at(epoch: int) -> datetime:
    return datetime.fromtimestamp(epoch, UTC)


def latency_expected(truth: dict, services: set[str]) -> dict[tuple[str, str], list]:
    """The truth's bucket increments of `services` in SPAN, as LatencyInterval stores them."""
    expected = {}
    for service_id in services:
        service = truth["services"][service_id]
        bounds = [measure.canonical_le(b) for b in service["bucket_bounds"]]
        for interval, counts in service["increments"].items():
            if at(SPAN[0]).strftime(ISO) <= interval < at(SPAN[1]).strftime(ISO):
                expected[(service_id, interval)] = [
                    list(pair) for pair in zip(bounds, counts, strict=True)
                ]
    return expected


@pytest.mark.parametrize("shards", [[], ["gpu-node-0[01]"]], ids=["whole", "sharded"])
@pytest.mark.django_db(transaction=True)
def test_it_names_the_windows_of_an_inference_server_without_its_histogram(
    pool, shards: list[str]
) -> None:
    truth, prometheus = pool
    silent = f"ads/{SILENT_MODEL}"
    assert truth["services"][silent]["increments"], "its requests happen all the same"
    source = Source.objects.create(
        name="vllm-without-stats",
        url=prometheus.url,
        scrape_interval_seconds=60,
        shard_node_patterns=shards,
    )
    try:
        ingest_span(source, at(SPAN[0]), at(SPAN[1]), batch=12)
        windows = list(IngestWindow.objects.filter(source=source).order_by("start"))
        assert len(windows) == 24
        promql = " ".join(q["promql"] for q in windows[0].recorded_queries)
        assert ("gpu-node-0[01]" in promql) == bool(shards)  # the shards' queries, where any
        assert {w.status for w in windows} == {"done"}
        assert all(w.completeness == 1 for w in windows)  # every GPU sample is there
        # Each replica holds one whole GPU; one that started within an interval holds less
        # than the interval (the ramp only adds replicas), so the replicas that held theirs
        # through it are the whole intervals among the task's GPU-seconds.
        alloc = truth["tasks"][SILENT_MODEL]["alloc_gpu_seconds"]
        expected = [int(Decimal(alloc[w.start.strftime(ISO)])) // 300 for w in windows]
        assert [w.latency_unseen_pods for w in windows] == expected
        assert set(expected) == {1, 2, 3}
        pods = truth["tasks"][SILENT_MODEL]["pods"]
        for window in windows:
            # Without the check, nothing at all would be said: it is the only warning.
            (named,) = window.warnings
            assert "without a series of vllm:e2e_request_latency_seconds, e.g. ads/" in named
            assert any(f"ads/{pod} (" in named for pod in pods), named
        # The services that write their histogram, through targets that answer alike, are
        # measured exactly; the one without is not measured at all.
        found = {
            (row.service.external_id, row.interval_start.strftime(ISO)): row.buckets
            for row in LatencyInterval.objects.filter(service__source=source).select_related(
                "service"
            )
        }
        measured = set(truth["services"]) - {silent}
        assert found == latency_expected(truth, measured)
        report = usage_report(start=at(SPAN[0]), end=at(SPAN[1]), group_by="team")
        assert report["windows_without_latency"] == 24
    finally:
        source_remove(source.pk)
