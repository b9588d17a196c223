"""A source whose scrape interval is not the one Prometheus scrapes dcgm-exporter at, against
the simulated pool in a real Prometheus (scraped every 60 s, with Prometheus' `up`).

Every GPU tick is taken to last the source's interval. On 9132e2d, said to be 100 s, the
pool's 60 s ticks were counted as time-sliced GPUs and capacity as capped ticks: windows
complete, no warning, the pool's capacity 80 GPU-seconds more and its allocation about 17
less over 12 hours (150 s: allocation about 724 less). Said to be 30 s, half the ticks
looked missing, with no word of why. tests/metering/test_scrape_interval.py holds the rule
on hand-made observations."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest

from metering.models import CapacityInterval, IngestBatch, IngestWindow, Source, UsageInterval
from simulator.prometheus import PrometheusProcess
from tests.metering.conftest import POOL, ingest_span, pool_span, source_remove
from tests.metering.test_faults import stored_alloc, truth_alloc

pytestmark = pytest.mark.slow

HOURS = 2


@pytest.fixture
def source(pool_prometheus: PrometheusProcess) -> Iterator[Source]:
    found = Source.objects.create(
        name="scraped every 60 s", url=pool_prometheus.url, scrape_interval_seconds=100
    )
    yield found
    source_remove(found.pk)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("shards", [[], ["gpu-node-01", "gpu-node-02"]], ids=["whole", "shards"])
def test_it_fails_every_window_scraped_more_often_and_meters_once_mended(
    source, pool_truth, shards
) -> None:
    source.shard_node_patterns = shards
    source.save()
    start, _ = pool_span(pool_truth)
    end = start + timedelta(hours=HOURS)
    ids = ingest_span(source, start, end, batch=12)

    windows = IngestWindow.objects.filter(pk__in=ids)
    assert {window.status for window in windows} == {"failed"}
    for window in windows:
        assert window.error.startswith(
            f"source {source.name}: scrape interval: Prometheus scraped 2 GPU exporter(s) more"
            " often than the source's scrape_interval_seconds of 100 s allows, e.g."
            ' job="dcgm-exporter" instance="10.42.0.11:9400" 5 times in the 300 s from'
        )
        assert "(every 60 s, where 3 scrapes were expected)" in window.error
    assert not UsageInterval.objects.filter(task__source=source).exists()
    assert not CapacityInterval.objects.filter(source=source).exists()
    assert not IngestBatch.objects.filter(source=source).exists()

    source.scrape_interval_seconds = POOL.scrape_interval_seconds
    source.save()
    assert ingest_span(source, start, end, batch=12) == ids
    assert {(w.status, w.completeness) for w in windows.all()} == {("done", 1)}
    assert stored_alloc(start, end) == truth_alloc(pool_truth, start, end)

    # Set wrong again and ingested again: refused, the windows keep their rows and stay done.
    source.scrape_interval_seconds = 100
    source.save()
    ingest_span(source, start, end, batch=12)
    for window in windows.all():
        assert (window.status, window.completeness) == ("done", 1)
        assert window.error.startswith(
            "ingested again and refused, the rows stored before kept: source"
        )
    assert stored_alloc(start, end) == truth_alloc(pool_truth, start, end)


@pytest.mark.django_db(transaction=True)
def test_it_says_how_many_scrapes_were_expected_where_fewer_came(source, pool_truth) -> None:
    source.scrape_interval_seconds = 30
    source.save()
    start, _ = pool_span(pool_truth)
    ids = ingest_span(source, start, start + timedelta(hours=HOURS), batch=12)

    windows = list(IngestWindow.objects.filter(pk__in=ids))
    assert {window.status for window in windows} == {"done"}
    assert max(window.completeness for window in windows) < 1
    for window in windows:
        said = [w for w in window.warnings if w.startswith("completeness: node")]
        assert said
        assert all(
            w.endswith(
                "; its exporter answered 5 of 5 scrapes, 10 expected at the source's scrape"
                " interval of 30 s"
            )
            for w in said
        ), said
