"""What a month's metering could not show at its close (inference latency not measured, pods
whose identity was guessed) is stored on the close and shown wherever the month is: its
statement pages and its monthly report. A month without either shows nothing."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.urls import reverse

from billing.models import PeriodClose
from billing.selectors import period_bounds
from billing.services import period_close
from metering.models import IngestWindow, Service
from tests.pools import reports as pools


@pytest.fixture
def blind(db) -> tuple[pools.ReportPool, PeriodClose]:
    report_pool = pools.build_report_pool()
    bounds = period_bounds(pools.PERIOD)
    done = IngestWindow.objects.filter(
        start__gte=bounds.start, end__lte=bounds.end, status=IngestWindow.Status.DONE
    )
    windows = list(done.order_by("start").values_list("pk", flat=True)[:3])
    assert len(windows) == 3
    IngestWindow.objects.filter(pk__in=windows[:2]).update(latency_unseen_pods=1)
    IngestWindow.objects.filter(pk=windows[2]).update(undescribed_gpu_seconds=Decimal("300.5"))
    IngestWindow.objects.filter(pk=windows[2]).update(
        kueue_preempted_workloads=2, kueue_counts_unplaced=1
    )
    IngestWindow.objects.filter(pk=windows[1]).update(unmapped_kind_gpu_seconds=Decimal("42.5"))
    IngestWindow.objects.filter(pk=windows[0]).update(unheld_busy_gpu_seconds=Decimal("12.25"))
    Service.objects.filter(pk=report_pool.services["search/api"].pk).update(slo_stated=None)
    close = period_close(
        period=pools.PERIOD, accept_incomplete="only 1 October was metered (test pool)"
    ).period_close
    return report_pool, close


def panel(html: str) -> str:
    start = html.index('data-flag="blind-spots"')
    return html[start : html.index("</ul>", start)]


def test_it_stores_the_blind_spots_on_the_close(blind) -> None:
    _, close = blind
    assert (close.latency_unseen_windows, close.identity_guessed_windows) == (2, 1)
    assert close.identity_guessed_gpu_seconds == Decimal("300.5")
    assert (close.kueue_preemption_windows, close.kueue_preempted_workloads) == (1, 2)


def test_it_shows_them_on_the_statements_and_the_report(blind, finance) -> None:
    report_pool, _ = blind
    team = report_pool.teams["search"]
    pages = [
        reverse("dashboards:statement_period", args=[pools.PERIOD]),
        reverse("dashboards:statement_detail", args=[pools.PERIOD, team.pk]),
        reverse("reports:page", args=[pools.PERIOD]),
    ]
    for url in pages:
        response = finance.get(url)
        assert response.status_code == 200, url
        shown = panel(response.content.decode())
        assert "2 windows with inference pods" in shown or "2 windows had inference pods" in shown
        assert "300.500000 GPU-seconds in 1 window" in shown
        assert "2 workloads preempted by Kueue in 1 window" in shown
        assert "1 of Kueue's count could not be placed in time" in shown
        assert "0 workloads" not in shown
        assert "42.500000 GPU-seconds in 1 window" in shown
        assert "12.250000 busy GPU-seconds in 1 window" in shown
        assert "1 service had its SLA breaches (pricing rule 4)" in shown
        assert "judged by the default SLO, which nobody stated" in shown


def test_it_shows_none_on_a_month_that_had_none(report_pool, people) -> None:
    page = people["finance"].get(reverse("dashboards:statement_period", args=[pools.PERIOD]))
    report = people["finance"].get(reverse("reports:page", args=[pools.PERIOD]))
    assert 'data-flag="blind-spots"' not in page.content.decode()
    assert 'data-flag="blind-spots"' not in report.content.decode()


def test_it_says_no_workloads_where_kueue_counts_were_only_unplaced(db, finance) -> None:
    pools.build_report_pool()
    bounds = period_bounds(pools.PERIOD)
    window = IngestWindow.objects.filter(
        start__gte=bounds.start, end__lte=bounds.end, status=IngestWindow.Status.DONE
    ).first()
    IngestWindow.objects.filter(pk=window.pk).update(kueue_counts_unplaced=2)
    period_close(period=pools.PERIOD, accept_incomplete="only 1 October was metered (test pool)")
    for url in (
        reverse("dashboards:statement_period", args=[pools.PERIOD]),
        reverse("reports:page", args=[pools.PERIOD]),
    ):
        shown = panel(finance.get(url).content.decode())
        assert "2 of Kueue's counts could not be placed in time" in shown
        assert "preempted by Kueue" not in shown
