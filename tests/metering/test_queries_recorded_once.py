"""A run of windows records the PromQL it was measured with once (IngestQueries), not a copy per
window; ingesting windows again records their new run and drops records no window uses. Real
Prometheus over the simulated pool."""

from __future__ import annotations

from datetime import timedelta

import pytest

from metering import services
from metering.models import IngestQueries, IngestWindow, Source
from tests.metering.conftest import POOL, pool_span
from tests.metering.test_faults import stored_alloc, truth_alloc


def runs_of(ids: list[int]) -> list[list[int]]:
    """The windows (by position in `ids`) that share a record, in window order."""
    position = {pk: n for n, pk in enumerate(ids)}
    runs: dict[int, list[int]] = {}
    for pk, run in IngestWindow.objects.filter(pk__in=ids).values_list("pk", "measured_with"):
        runs.setdefault(run, []).append(position[pk])
    return sorted(sorted(windows) for windows in runs.values())


@pytest.mark.slow
@pytest.mark.django_db
def test_it_records_a_runs_queries_once_and_only_the_runs_its_windows_use(
    pool_prometheus, pool_truth, settings
) -> None:
    settings.TANDEM_INGEST_BATCH_WINDOWS = 6  # before the source has a window
    settings.TANDEM_INGEST_BATCH_GPU_WINDOWS = 6 * POOL.gpus  # then 6 windows of 8 GPUs
    source = Source.objects.create(
        name="recorded",
        url=pool_prometheus.url,
        scrape_interval_seconds=POOL.scrape_interval_seconds,
    )
    start = pool_span(pool_truth)[0] + timedelta(hours=2)
    end = start + timedelta(minutes=5 * 12)
    ids = [w.pk for w in services.windows_create(source=source, start=start, end=end)]

    services.windows_ingest(window_ids=ids)

    assert runs_of(ids) == [list(range(6)), list(range(6, 12))]
    first = IngestQueries.objects.get(windows=ids[0])
    windows = IngestWindow.objects.filter(pk__in=ids).order_by("start")
    assert (first.first_start, first.last_start) == (windows[0].start, windows[5].start)
    assert {q["meter"] for q in first.queries} >= {"devices", "identity", "latency"}
    assert all(w.queries == [] for w in windows)  # no copy on the window
    assert all(w.recorded_queries == w.measured_with.queries for w in windows)

    services.windows_ingest(window_ids=ids[3:9])  # across the two runs' boundary

    assert runs_of(ids) == [[0, 1, 2], [3, 4, 5, 6, 7, 8], [9, 10, 11]]
    assert IngestQueries.objects.filter(source=source).count() == 3

    services.windows_ingest(window_ids=ids)

    assert runs_of(ids) == [list(range(6)), list(range(6, 12))]
    assert IngestQueries.objects.filter(source=source).count() == 2  # none left unused
    assert stored_alloc(start, end) == truth_alloc(pool_truth, start, end)
