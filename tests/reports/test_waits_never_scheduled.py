"""Known gap "Pods never scheduled" (docs/telemetry.md): the mean wait counts only pods that
got scheduled, so a pool that starves can read better the worse it gets. On the pool of
tests/metering/pending_pods.py, ingested from a real Prometheus: the hour before, two pods
waited 600 and 120 s (6.0 min); the starved hour after, one pod waited 120 s while three
waited 2,400 s each and were deleted still Pending and one had waited 2,340 s, Pending, at
the hour's end. Its mean reads 2.0 min, "better", with 1 scheduling attempt said; counting
the pods that waited to the end of the hour (or to their deletion), it is (120 + 3 x 2,400
+ 2,340) / 5 = 1,932 s, 32.2 min. The test asserts today's figures, so a fix must change it."""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal

import pytest

from metering.models import Team
from reports import health
from reports import selectors as health_selectors
from reports.cards import health_cards
from simulator.prometheus import PrometheusProcess
from tests.metering.jobs import ingested_windows
from tests.metering.pending_pods import END, MIDDLE, START, TEAM, pending_prometheus
from tests.slow import starts


@pytest.fixture(scope="module")
@starts("Prometheus")
def starved_prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusProcess]:
    running = pending_prometheus(tmp_path_factory.mktemp("pending"))
    yield running
    running.stop()


@pytest.mark.slow
@pytest.mark.django_db
def test_it_reads_a_starved_hour_as_a_shorter_wait(starved_prometheus) -> None:
    ingested_windows(starved_prometheus.url, START, END)
    before, after, verdict = health_selectors.health_comparison(
        before=(START, MIDDLE), after=(MIDDLE, END)
    )
    # The gap as it stands: only the pods scheduled in each hour count.
    assert before.waits.overall == health.MeanWait(waits=2, total_seconds=Decimal(720))
    assert after.waits.overall == health.MeanWait(waits=1, total_seconds=Decimal(120))
    # No key service here: with utilization up (1,020 to 1,260 busy GPU-seconds of 3,600) and
    # the wait read as better, the verdict is mixed rather than "sharing works".
    assert (verdict.utilization, verdict.wait, verdict.code) == (
        health.Direction.BETTER,
        health.Direction.BETTER,
        health.VerdictCode.MIXED,
    )
    card = health_cards(before=before, after=after, verdict=verdict)[2]
    assert (card.shown_previous, card.shown, card.status, card.explanation) == (
        "6.0 min",
        "2.0 min",
        "better",
        "1 scheduling attempts",
    )
    # A team lead's numbers say the same.
    teams = Team.objects.filter(name=TEAM)
    _, theirs, their_verdict = health_selectors.health_comparison(
        before=(START, MIDDLE), after=(MIDDLE, END), teams=teams
    )
    assert theirs.waits.overall == health.MeanWait(waits=1, total_seconds=Decimal(120))
    assert their_verdict.wait == health.Direction.BETTER
