"""Samples that reach Prometheus after their window was ingested (remote write catching up
after a network cut): beat looks again at a recent window that came out incomplete, and it
is metered whole. Before, such a window stayed incomplete until an operator ingested it
again, and the month's close refused it.

A simulated day back-filled twice into real Prometheus TSDBs: whole, and without the last
two minutes of the hour ingested (what Prometheus held when the window was ingested).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest

from metering import services
from metering.models import IngestWindow, Source
from simulator.config import PoolConfig
from simulator.pool import simulate
from simulator.prometheus import backfill
from tests.metering.conftest import ingest_span, prometheus_over, source_remove
from tests.metering.test_faults import stored_alloc, truth_alloc
from tests.slow import starts

pytestmark = pytest.mark.slow

DAY = PoolConfig(gpus=8, days=1, start=date(2026, 9, 28), seed=11, scrape_interval_seconds=60)
CUT = DAY.start_epoch + 6 * 3600  # the end of the hour ingested
LATE = 120  # its last two minutes reach Prometheus late


@pytest.fixture(scope="module")
@starts("Prometheus")
def tsdbs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path, dict]]:
    out = tmp_path_factory.mktemp("late")
    simulate(DAY, out)
    whole = out / "metrics.om"
    early = out / "early.om"
    with open(whole, encoding="utf-8") as lines, open(early, "w", encoding="utf-8") as kept:
        for line in lines:
            if line.startswith("#") or int(line.rsplit(" ", 1)[1]) < CUT - LATE:
                kept.write(line)
    backfill(whole, out / "whole")
    backfill(early, out / "early")
    yield out / "early", out / "whole", json.loads((out / "truth.json").read_text())


@pytest.fixture
def source() -> Iterator[Source]:
    found = Source.objects.create(name="late", url="http://127.0.0.1:9", scrape_interval_seconds=60)
    yield found
    source_remove(found.pk)


@pytest.mark.django_db(transaction=True)
def test_it_meters_a_window_whole_once_its_late_samples_arrive(tsdbs, source) -> None:
    early, whole, truth = tsdbs
    start, end = (datetime.fromtimestamp(at, UTC) for at in (CUT - 3600, CUT))
    prometheus = prometheus_over(early, DAY.scrape_interval_seconds)
    try:
        source.url = prometheus.url
        source.save()
        ids = ingest_span(source, start, end)
    finally:
        prometheus.stop()
    last = IngestWindow.objects.get(pk=ids[-1])
    assert (last.status, last.completeness) == ("done", Decimal("0.6"))  # 3 ticks of 5
    assert {w.completeness for w in IngestWindow.objects.filter(pk__in=ids[:-1])} == {1}
    assert stored_alloc(start, end) != truth_alloc(truth, start, end)

    # Beat's tick 25 minutes on, the window last touched 25 minutes before it.
    now = end + timedelta(minutes=25)
    IngestWindow.objects.filter(pk__in=ids).update(updated=now - timedelta(minutes=25))
    prometheus = prometheus_over(whole, DAY.scrape_interval_seconds)
    try:
        source.url = prometheus.url
        source.save()
        _, *backlog = services.windows_due_create(source=source, now=now)
        queued = [window.pk for batch in backlog for window in batch]
        assert last.pk in queued and not set(ids[:-1]) & set(queued)
        services.windows_ingest(window_ids=[last.pk])
    finally:
        prometheus.stop()
    last.refresh_from_db()
    assert (last.status, last.completeness) == ("done", 1)
    assert stored_alloc(start, end) == truth_alloc(truth, start, end)
    # Touched by the look: the next tick leaves it alone.
    _, *again = services.windows_due_create(source=source, now=now + timedelta(minutes=5))
    assert last.pk not in [window.pk for batch in again for window in batch]
