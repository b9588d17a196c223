"""A closed month's report is frozen with its statements: late metering data moves the live
dashboard, never the report (its health numbers are stored by the close)."""

from __future__ import annotations

import datetime as dt
import re
from decimal import Decimal

import pytest
from django.db import IntegrityError, connection, transaction

from billing import close_hooks
from billing.models import ImmutableRecordError, PeriodClose
from billing.services import period_close
from metering.models import LatencyInterval, PodWait, Preemption
from metering.services import latency_p99
from reports import rows, services
from reports.models import HealthSnapshot, ReportFile, ReportRun
from reports.page import report_page_html
from reports.period_health import period_health, period_health_read
from tests.factories import ServiceFactory, windows_complete
from tests.pools import reports as pools
from tests.reports.test_pdf import pdf_text

# plotly names each chart's <div> with a fresh uuid4 on every render
PLOTLY_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
LIVE_NOTICE = "Health numbers read live: closed before snapshots were stored."


def add_late_data(pool: pools.ReportPool) -> None:
    """October metering that arrives after the close and moves all three health numbers:
    a long wait, a slow new key service, and a preemption of the training task."""
    late = pools.OCTOBER_START + dt.timedelta(hours=6)
    PodWait.objects.create(
        task=pool.tasks["vit-pretrain"],
        pod="late-pod",
        created=late - dt.timedelta(hours=1),
        scheduled=late,
        ended=late,
        seconds=3600,
    )
    slow = ServiceFactory(
        source=pool.source,
        external_id="vision/api",
        team=pool.teams["vision"],
        slo_p99_ms=100,
    )
    LatencyInterval.objects.bulk_create(
        LatencyInterval(
            service=slow,
            interval_start=at,
            buckets=pools.SLOW,
            request_count=200,
            p99_seconds=latency_p99(pools.SLOW),
        )
        for at in pools.OCTOBER_INTERVALS[:12]
    )
    Preemption.objects.create(
        task=pool.tasks[pools.EVIL_TASK],
        pod="late-preempted",
        at=late,
        gpus=Decimal(1),
        seconds_since_start=60,
        lost_gpu_seconds=None,
    )


def services_within_slo(cards_html: str) -> tuple[int, int]:
    """The latency card's "N of M" (key services within their P99 SLO, of those measured)."""
    found = re.search(r"(\d+) of (\d+)</div>", cards_html)
    assert found, cards_html
    return int(found[1]), int(found[2])


def report_files() -> dict[str, bytes | str]:
    """Every file of a fresh monthly-style run: CSV bytes as written, the PDF as text."""
    run = services.report_run_create(
        period=pools.PERIOD, kind=ReportRun.Kind.ON_DEMAND, enqueue=False
    )
    run = services.report_run_execute(run_id=run.pk)
    assert run.status == ReportRun.Status.DONE, run.error
    return {
        report_file.name: pdf_text(report_file.path)
        if report_file.kind == ReportFile.Kind.PDF
        else report_file.path.read_bytes()
        for report_file in run.files.all()
    }


def report_html() -> str:
    return PLOTLY_ID.sub("<chart-id>", report_page_html(pools.PERIOD))


def overview_cards(client) -> str:
    html = client.get("/?month=2026-10").content.decode()
    return html[html.index('<div class="cards">') : html.index('class="card verdict')]


@pytest.mark.slow  # prints the report's PDF with Chromium
def test_it_keeps_a_closed_months_report_when_late_data_moves_the_live_numbers(
    report_pool, people
) -> None:
    html, files = report_html(), report_files()
    page = rows.report_page(pools.PERIOD)
    dashboard = overview_cards(people["finance"])
    assert HealthSnapshot.objects.filter(period_close__period=pools.PERIOD).count() == 1

    add_late_data(report_pool)

    assert report_html() == html
    assert report_files() == files
    again = rows.report_page(pools.PERIOD)
    assert again.cards == page.cards and again.top_preempted == page.top_preempted
    assert again.services == page.services and again.wait_rows == page.wait_rows
    assert not again.health_read_live and LIVE_NOTICE not in html
    # The live dashboard reads metering as it is now: all three cards moved.
    moved = overview_cards(people["finance"])
    assert moved != dashboard
    # The slow new key service is measured and misses its SLO: one more service, none more met.
    (met, measured), (met_now, measured_now) = (
        services_within_slo(dashboard),
        services_within_slo(moved),
    )
    assert (met_now, measured_now) == (met, measured + 1)
    assert ">5 scheduling attempts<" in moved and ">4 scheduling attempts<" in dashboard


def test_it_renders_the_report_from_the_same_numbers_it_read_at_the_close(report_pool) -> None:
    """The stored numbers read back exactly: the page equals one built from metering now."""
    close = PeriodClose.objects.get(period=pools.PERIOD)
    previous = rows.period_bounds(pools.PREVIOUS_PERIOD)
    stored = period_health(close, previous=(previous.start, previous.end))
    live = period_health_read(
        period=(close.period_start, close.period_end),
        previous=(previous.start, previous.end),
        cap_seconds=close.price_book.starvation_lost_work_cap_seconds,
    )
    assert not stored.read_live
    assert stored == live


def test_it_reads_live_and_says_so_for_a_close_stored_before_snapshots(
    db, monkeypatch: pytest.MonkeyPatch
) -> None:
    pool = pools.build_report_pool()
    windows_complete(periods=[pools.PERIOD])
    monkeypatch.setattr(close_hooks, "_HOOKS", {})  # a close as stored before snapshots
    period_close(period=pools.PERIOD)
    assert not HealthSnapshot.objects.exists()
    before = rows.report_page(pools.PERIOD)

    add_late_data(pool)

    page = rows.report_page(pools.PERIOD)
    assert page.health_read_live
    assert page.cards != before.cards  # read from metering as it is now
    assert LIVE_NOTICE in " ".join(report_page_html(pools.PERIOD).split())


def test_it_stores_nothing_of_a_close_whose_snapshot_fails(
    db, monkeypatch: pytest.MonkeyPatch
) -> None:
    pools.build_report_pool()
    windows_complete(periods=[pools.PERIOD])

    def refuse(close: PeriodClose, record: object) -> None:
        raise RuntimeError("the disk is full")

    failing = close_hooks.PeriodCloseHook(name="failing", read=lambda *_: None, store=refuse)
    monkeypatch.setattr(close_hooks, "_HOOKS", {**close_hooks._HOOKS, "failing": failing})

    with pytest.raises(RuntimeError, match="the disk is full"):
        period_close(period=pools.PERIOD)

    assert not PeriodClose.objects.exists()
    assert not HealthSnapshot.objects.exists()


def test_it_never_changes_a_stored_snapshot(report_pool) -> None:
    snapshot = HealthSnapshot.objects.get(period_close__period=pools.PERIOD)
    snapshot.numbers = {}
    with pytest.raises(ImmutableRecordError):
        snapshot.save()
    with pytest.raises(ImmutableRecordError):
        HealthSnapshot.objects.update(numbers={})
    for statement in (
        "UPDATE reports_healthsnapshot SET numbers = '{}'",
        "DELETE FROM reports_healthsnapshot",
    ):
        with pytest.raises(IntegrityError, match="reports_healthsnapshot rows belong to a closed"):
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute(statement)
    assert HealthSnapshot.objects.filter(pk=snapshot.pk, numbers__version=1).exists()
