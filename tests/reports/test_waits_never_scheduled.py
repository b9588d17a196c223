"""Pods never scheduled count in the mean wait where their wait ends (docs/telemetry.md,
"Identity, waits and preemptions"). On the pool of tests/metering/pending_pods.py, ingested
from a real Prometheus: the hour before, two pods waited 600 and 120 s (6.0 min); the starved
hour after, one pod waited 120 s and was scheduled, three waited 2,400 s each and were
deleted still Pending (they gave up waiting), and pending-1, Pending at 12:00, counts in
neither hour. The hour after reads (120 + 3 x 2,400) / 4 = 1,830 s, 30.5 min, "worse", with
"3 of 4 pods gave up waiting" beside it; before, it read 2.0 min, "better", from the one
scheduled pod."""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal

import pytest
from django.urls import reverse
from rest_framework.test import APIClient

from access.models import Role
from billing.models import Statement, StatementLineTask
from billing.services import period_close, price_book_ensure_default
from metering import services as metering_services
from metering.models import IngestWindow, Task, Team
from reports import health
from reports import selectors as health_selectors
from reports.cards import health_cards
from reports.period_health import (
    period_health_from_record,
    period_health_read,
    period_health_record,
)
from reports.render_focus import focus_csv
from reports.rows import team_csv_rows
from reports.selectors import usage_rows
from simulator.prometheus import PrometheusProcess
from tests import factories
from tests.factories import windows_complete
from tests.metering.conftest import ingest_span
from tests.metering.jobs import jobs_source
from tests.metering.pending_pods import END, MIDDLE, START, TEAM, pending_prometheus
from tests.slow import starts

BEFORE = health.MeanWait(waits=2, total_seconds=Decimal(720), gave_up=0)
AFTER = health.MeanWait(waits=4, total_seconds=Decimal(7320), gave_up=3)


@pytest.fixture(scope="module")
@starts("Prometheus")
def starved_prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusProcess]:
    running = pending_prometheus(tmp_path_factory.mktemp("pending"))
    yield running
    running.stop()


@pytest.fixture(autouse=True)
def batches_of_a_day(settings) -> None:
    """A source's first batch is TANDEM_INGEST_BATCH_WINDOWS long (12 by default): 24, so
    that "one-batch" is one batch of the two hours."""
    settings.TANDEM_INGEST_BATCH_WINDOWS = 24


def _ingested(url: str, how: str) -> None:
    """The two hours ingested window by window, as one batch, or hourly and then again as
    one batch and window by window (re-ingested: the same rows, none twice)."""
    source = jobs_source(url)
    batches = {"window-by-window": [1], "one-batch": [24], "re-ingested": [12, 24, 1]}[how]
    ids = ingest_span(source, START, END, batch=batches[0])
    for batch in batches[1:]:
        for first in range(0, len(ids), batch):
            metering_services.windows_ingest(window_ids=ids[first : first + batch])
    assert IngestWindow.objects.filter(status="done").count() == 24


@pytest.mark.slow
@pytest.mark.parametrize("how", ["window-by-window", "one-batch", "re-ingested"])
@pytest.mark.django_db
def test_it_reads_a_starved_hour_as_a_longer_wait(starved_prometheus, how: str) -> None:
    _ingested(starved_prometheus.url, how)
    before, after, verdict = health_selectors.health_comparison(
        before=(START, MIDDLE), after=(MIDDLE, END)
    )
    assert before.waits.overall == BEFORE
    assert after.waits.overall == AFTER
    assert after.waits.overall.mean_seconds == 1830
    # No key service here: utilization up (1,020 to 1,260 busy GPU-seconds of 3,600), the
    # wait worse.
    assert (verdict.utilization, verdict.wait) == (health.Direction.BETTER, health.Direction.WORSE)
    card = health_cards(before=before, after=after, verdict=verdict)[2]
    assert (card.shown_previous, card.shown, card.status, card.explanation) == (
        "6.0 min",
        "30.5 min",
        "worse",
        "4 scheduling attempts, 3 of 4 pods gave up waiting",
    )
    # A team lead's numbers say the same.
    teams = Team.objects.filter(name=TEAM)
    _, theirs, their_verdict = health_selectors.health_comparison(
        before=(START, MIDDLE), after=(MIDDLE, END), teams=teams
    )
    assert theirs.waits.overall == AFTER
    assert their_verdict.wait == health.Direction.WORSE


@pytest.mark.slow
@pytest.mark.django_db
def test_it_says_how_many_gave_up_in_the_health_api(starved_prometheus) -> None:
    _ingested(starved_prometheus.url, "one-batch")
    client = APIClient()
    client.force_login(factories.RoleFactory(name=Role.Name.PLATFORM).user)
    body = client.get(
        reverse("api-health"), {"start": MIDDLE.isoformat(), "end": END.isoformat()}
    ).json()
    assert body["wait_overall"] == {"waits": 4, "mean_seconds": "1830.000", "gave_up": 3}
    (kind,) = body["wait_per_kind"]
    assert (kind["kind"], kind["waits"], kind["gave_up"]) == ("training_batch", 4, 3)


@pytest.mark.slow
@pytest.mark.django_db
def test_it_keeps_a_month_closed_before_as_it_was_closed(starved_prometheus) -> None:
    # A snapshot stored before waits of pods that gave up were stored: three items a kind,
    # the scheduled pods only (the starved hour read 2.0 min then), no count of those that
    # gave up. It reads back as stored, says it did not count them, and is not compared
    # with a period that did.
    _ingested(starved_prometheus.url, "one-batch")
    numbers = period_health_read(period=(MIDDLE, END), previous=(START, MIDDLE), cap_seconds=3600)
    record = period_health_record(numbers)
    assert record["after"]["waits"] == [["training_batch", 4, "7320", 3]]
    record["after"]["waits"] = [["training_batch", 1, "120"]]
    record["before"]["waits"] = [["training_batch", 2, "720"]]
    for row in record["wait_rows"]:
        del row["gave_up"]
    closed = period_health_from_record(record)
    assert closed.after.waits.overall == health.MeanWait(
        waits=1, total_seconds=Decimal(120), gave_up=None
    )
    verdict = health.verdict(closed.before, closed.after)
    card = health_cards(before=closed.before, after=closed.after, verdict=verdict)[2]
    assert (card.shown, card.explanation) == (
        "2.0 min",
        "1 scheduling attempts (closed before pods that gave up waiting were counted)",
    )
    assert [row["gave_up"] for row in closed.wait_rows] == [None]
    # Against the live hour, where three gave up: not compared.
    live = health_selectors.health_numbers(start=MIDDLE, end=END)
    assert health.verdict(closed.after, live).wait == health.Direction.UNKNOWN


@pytest.mark.slow
@pytest.mark.django_db
def test_it_bills_nothing_for_the_tasks_of_pods_that_only_waited(starved_prometheus) -> None:
    # gave-up-1..3 each have a task (their Jobs) that never held a GPU: no statement line,
    # contribution, team CSV or FOCUS row names them; the usage rows by task show them with
    # no GPU-seconds and the one wait each.
    _ingested(starved_prometheus.url, "one-batch")
    price_book_ensure_default()
    windows_complete(periods=["2026-10"])
    close = period_close(period="2026-10").period_close
    waited_only = Task.objects.filter(external_id__startswith="gave-up-")
    assert waited_only.count() == 3
    assert not StatementLineTask.objects.filter(task__in=waited_only).exists()
    assert Statement.objects.filter(period="2026-10").count() == 1  # vision's, for after-1
    for statement in Statement.objects.filter(period="2026-10"):
        assert "gave-up" not in repr(team_csv_rows(statement))
    assert b"gave-up" not in focus_csv(close)
    rows = {
        row.task: row
        for row in usage_rows(start=START, end=END, group_by="task")
        if row.task and row.task.startswith("gave-up-")
    }
    assert sorted(rows) == ["gave-up-1", "gave-up-2", "gave-up-3"]
    assert {
        (row.allocated_gpu_seconds, row.waits, row.mean_wait_seconds) for row in rows.values()
    } == {(0, 1, 2400)}


@pytest.mark.slow
@pytest.mark.django_db
def test_it_shows_the_pods_that_gave_up_on_the_pages(starved_prometheus, client) -> None:
    _ingested(starved_prometheus.url, "one-batch")
    client.force_login(factories.RoleFactory(name=Role.Name.FINANCE).user)
    overview = client.get("/?month=2026-10").content.decode()
    # October holds both hours: six waits, three of which gave up.
    assert "6 scheduling attempts, 3 of 6 pods gave up waiting" in overview
    table = overview.split('data-table="waits"', 1)[1].split("</table>", 1)[0]
    row = table.split('data-kind="training_batch"', 1)[1].split("</tr>", 1)[0]
    assert '<td class="num">6</td><td class="num">3</td>' in row
    team = Team.objects.get(name=TEAM)
    page = client.get(f"/teams/{team.pk}/?month=2026-10").content.decode()
    assert "Gave up waiting" in page
    task = Task.objects.get(external_id="gave-up-1")
    page = client.get(f"/tasks/{task.pk}/").content.decode()
    assert "gave up waiting: gone, never scheduled, last seen Pending" in page
