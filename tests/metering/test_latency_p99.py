"""Each latency interval's own P99 is stored at ingest, and by the migration for rows already
there, and it is the pricing engine's `histogram_quantile` of the interval's buckets."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from billing.pricing import histogram_quantile
from billing.scenarios import _buckets as engine_buckets
from metering.models import LatencyInterval, Service, Source, Team
from metering.services import latency_p99
from tests.metering.conftest import ingest_span, pool_span

P99 = Decimal("0.99")


def engine_p99(buckets: list) -> Decimal | None:
    """What the pricing engine computes from the same stored buckets (as billing reads them)."""
    return histogram_quantile(P99, engine_buckets(json.dumps(buckets)))


@pytest.mark.parametrize(
    ("buckets", "expected"),
    [
        ([["0.1", 10], ["+Inf", 10]], Decimal("0.099")),
        # Interpolated inside (2.5, 5]: 2.5 + 2.5 * (168.3 - 165) / 5.
        ([["0.25", 100], ["0.5", 140], ["1", 160], ["2.5", 165], ["5", 170], ["+Inf", 170]], None),
        # The rank falls in +Inf: the upper bound of the last finite bucket.
        ([["0.5", 10], ["1", 20], ["+Inf", 1000]], Decimal("1")),
        # Numbers as le, "Inf" spelling, unsorted, non-monotonic counts (scrape races).
        ([[1, 50], ["Inf", 100], [0.5, 60]], None),
    ],
)
def test_it_computes_the_engines_p99(buckets: list, expected: Decimal | None) -> None:
    ours = latency_p99(buckets)
    assert ours == engine_p99(buckets)
    assert ours is not None
    if expected is not None:
        assert ours == expected


@pytest.mark.parametrize(
    "buckets",
    [
        [["0.1", 0], ["+Inf", 0]],  # no requests
        [["+Inf", 7]],  # no finite bucket
        [["0.1", 3], ["1", 7]],  # no +Inf bucket
        [],
    ],
)
def test_it_has_no_p99_where_prometheus_gives_nan(buckets: list) -> None:
    assert latency_p99(buckets) is None


@pytest.mark.slow
@pytest.mark.django_db
def test_it_stores_the_engines_p99_for_every_ingested_interval(pool_prometheus, pool_truth) -> None:
    source = Source.objects.create(name="p99", url=pool_prometheus.url, scrape_interval_seconds=60)
    start, _ = pool_span(pool_truth)
    ingest_span(source, start, start + dt.timedelta(hours=6))
    rows = list(LatencyInterval.objects.all())
    assert len(rows) > 10
    assert any(row.p99_seconds is not None for row in rows)
    for row in rows:
        assert row.p99_seconds == engine_p99(row.buckets), (row.service_id, row.interval_start)


@pytest.mark.django_db(transaction=True)
def test_it_fills_the_p99_of_rows_written_before_the_column() -> None:
    source = Source.objects.create(name="old", url="http://127.0.0.1:9")
    team = Team.objects.create(name="search")
    service = Service.objects.create(source=source, external_id="search/api", team=team)
    histograms = [
        [["0.25", 100], ["0.5", 140], ["1", 160], ["2.5", 165], ["5", 170], ["+Inf", 170]],
        [["0.25", 100], ["0.5", 140], ["1", 160], ["2.5", 165], ["5", 170], ["+Inf", 170]],
        [["0.1", 0], ["+Inf", 0]],
        [["0.1", 3], ["1", 9], ["+Inf", 10]],
    ]
    executor = MigrationExecutor(connection)
    executor.migrate([("metering", "0001_initial")])
    try:
        with connection.cursor() as cursor:
            for n, buckets in enumerate(histograms):
                cursor.execute(
                    "INSERT INTO metering_latencyinterval"
                    " (service_id, interval_start, buckets, request_count)"
                    " VALUES (%s, %s, %s::jsonb, %s)",
                    [
                        service.pk,
                        dt.datetime(2026, 10, 1, tzinfo=dt.UTC) + dt.timedelta(minutes=5 * n),
                        json.dumps(buckets),
                        buckets[-1][1],
                    ],
                )
    finally:
        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate(executor.loader.graph.leaf_nodes())
    stored = list(
        LatencyInterval.objects.order_by("interval_start").values_list("buckets", "p99_seconds")
    )
    assert [p99 for _, p99 in stored] == [engine_p99(b) for b in histograms]
    assert stored[0][1] == Decimal("4.15") and stored[2][1] is None
