"""The SLA numbers read the P99 stored at ingest and count breaches in SQL: they must equal
what the pricing engine computes from the buckets themselves (merged buckets for the period
P99, each interval's own buckets for breaches), with or without stored P99s."""

from __future__ import annotations

import datetime as dt
import json
from collections import defaultdict
from decimal import Decimal

import pytest
from django.urls import reverse

from billing.pricing import histogram_quantile
from billing.scenarios import _buckets as engine_buckets
from dashboards import selectors as pages
from kernel.histogram import exceeds_objective
from metering.models import LatencyInterval
from reports import selectors
from tests import factories as f
from tests.pools.api import END, SERVICES, START

P99 = Decimal("0.99")
MIN_REQUESTS = 100
RANGE = {"start": START.isoformat(), "end": END.isoformat()}


def engine_numbers(api_pool, name: str) -> dict:
    """Period P99 (ms) of the merged buckets, requests, intervals and breached intervals, by
    the engine's own quantile and breach test on the buckets as stored."""
    slo = SERVICES[name][1]
    intervals = [
        engine_buckets(json.dumps(b)) for i, b in api_pool.latency[name] if START <= i < END
    ]
    merged: dict[Decimal, Decimal] = defaultdict(Decimal)
    for buckets in intervals:
        for le, count in buckets:
            merged[le] += count
    p99 = histogram_quantile(P99, tuple(sorted(merged.items())))
    breaches = sum(
        b[-1][1] >= MIN_REQUESTS and exceeds_objective(b, Decimal(slo)) for b in intervals
    )
    return {
        "p99_ms": p99 * 1000,
        "requests": sorted(merged.items())[-1][1],
        "intervals": len(intervals),
        "breached_intervals": breaches,
    }


def selector_numbers() -> dict[str, dict]:
    return {
        s.service: {
            "p99_ms": s.p99_ms,
            "requests": s.requests,
            "intervals": s.intervals,
            "breached_intervals": s.breached_intervals,
        }
        for s in selectors.service_latencies(start=START, end=END, min_requests=MIN_REQUESTS)
    }


def expected_numbers(api_pool) -> dict[str, dict]:
    return {name: engine_numbers(api_pool, name) for name, (_, _, key) in SERVICES.items() if key}


def test_it_stores_the_engines_p99_for_every_interval(api_pool) -> None:
    rows = LatencyInterval.objects.select_related("service")
    assert rows.count() == sum(len(r) for r in api_pool.latency.values())
    for row in rows:
        assert row.p99_seconds == histogram_quantile(P99, engine_buckets(json.dumps(row.buckets)))


def test_it_counts_the_breaches_the_engine_counts(api_pool) -> None:
    ours = selector_numbers()
    assert ours == expected_numbers(api_pool)
    # The fixture breaches some intervals, and not all of them: the counts can be wrong.
    counts = [(n["breached_intervals"], n["intervals"]) for n in ours.values()]
    assert any(0 < breached < intervals for breached, intervals in counts)


def test_it_counts_the_same_without_stored_p99s(api_pool) -> None:
    """Rows written by raw SQL (benchmarks, manual loads) have no stored P99: judged from
    their buckets, they count as the stored ones do."""
    stored = selector_numbers()
    every_other = LatencyInterval.objects.order_by("id").values_list("id", flat=True)[::2]
    assert LatencyInterval.objects.filter(pk__in=every_other).update(p99_seconds=None) > 0
    assert selector_numbers() == stored == expected_numbers(api_pool)


def test_it_gives_the_api_the_engines_numbers(api_pool, callers) -> None:
    body = callers["platform"].client.get(reverse("api-health"), RANGE).json()
    expected = expected_numbers(api_pool)
    for service in body["services"]:
        numbers = expected[service["service"]]
        assert service["breached_intervals"] == numbers["breached_intervals"]
        assert service["intervals"] == numbers["intervals"]
        assert Decimal(service["p99_ms"]) == numbers["p99_ms"].quantize(Decimal("0.001"))
    assert {s["service"] for s in body["services"]} == set(expected)


def test_it_marks_each_interval_as_the_engine_does(api_pool) -> None:
    name = "alpha/search"
    slo = SERVICES[name][1]
    rows = pages.service_intervals(
        service=api_pool.services[name], start=START, end=END, min_requests=MIN_REQUESTS
    )
    stored = [(r["time"], r["requests"], r["p99_ms"], r["breached"]) for r in rows]
    records = [(i, engine_buckets(json.dumps(b))) for i, b in api_pool.latency[name]]
    assert stored == [
        (
            i,
            b[-1][1],
            histogram_quantile(P99, b) * 1000,
            b[-1][1] >= MIN_REQUESTS and exceeds_objective(b, Decimal(slo)),
        )
        for i, b in sorted(records)
        if START <= i < END
    ]
    assert any(r["breached"] for r in rows) and not all(r["breached"] for r in rows)
    LatencyInterval.objects.update(p99_seconds=None)  # as raw SQL loads leave them
    assert (
        pages.service_intervals(
            service=api_pool.services[name], start=START, end=END, min_requests=MIN_REQUESTS
        )
        == rows
    )


@pytest.mark.django_db
def test_it_keeps_only_bounds_every_interval_has_when_merging_in_sql() -> None:
    """An exporter upgrade changed the layout mid-period: the merged histogram keeps the
    bounds both layouts share, like `health.merge_buckets`."""
    service = f.ServiceFactory(slo_p99_ms=300)
    t0 = dt.datetime(2026, 11, 2, tzinfo=dt.UTC)
    f.LatencyIntervalFactory(
        service=service, interval_start=t0, buckets=[["0.1", 5], ["0.5", 8], ["+Inf", 10]]
    )
    f.LatencyIntervalFactory(
        service=service,
        interval_start=t0 + dt.timedelta(minutes=5),
        buckets=[["0.1", 1], ["0.25", 2], ["+Inf", 4]],
        request_count=4,
    )
    # This service's only: the module's other tests share the API pool (built once a module).
    (latency,) = [
        row
        for row in selectors.service_latencies(
            start=t0, end=t0 + dt.timedelta(hours=1), min_requests=1
        )
        if row.service_id == service.pk
    ]
    merged = ((Decimal("0.1"), Decimal(6)), (Decimal("Infinity"), Decimal(14)))
    assert latency.p99_ms == histogram_quantile(P99, merged) * 1000 == Decimal(100)
    assert latency.requests == 14 and latency.intervals == 2
    # Own P99s: 500 ms (rank in +Inf, bound 0.5) breaches, 250 ms does not.
    assert latency.breached_intervals == 1
