"""A month finance closed incomplete says so, with the reason, wherever the month is shown."""

from __future__ import annotations

import pytest
from django.urls import reverse

from billing.models import PeriodClose
from billing.services import period_close
from reports import services
from reports.models import ReportFile
from tests.pools import reports as pools
from tests.reports.test_pdf import pdf_text

REASON = "Prometheus kept 15 days; October 1-14 was never scraped (ticket FIN-91)"
# build_pool meters twelve hours of 1 October (03:00 to 15:00 local) and nothing else.
MISSING = [
    "default has no ingest window from 2026-09-30T16:00Z to 2026-09-30T19:00Z (3 h)",
    "default has no ingest window from 2026-10-01T07:00Z to 2026-10-31T16:00Z (30 days 9 h)",
]


@pytest.fixture
def incomplete(db) -> tuple[pools.ReportPool, PeriodClose]:
    report_pool = pools.build_report_pool()
    close = period_close(period=pools.PERIOD, accept_incomplete=REASON).period_close
    return report_pool, close


def flag(html: str) -> str:
    """The flag panel of a page: from its marker to the end of its list."""
    start = html.index('data-flag="incomplete"')
    return html[start : html.index("</ul>", start)]


def test_it_flags_the_month_and_its_statements_with_the_reason(incomplete, finance) -> None:
    report_pool, close = incomplete
    assert [item["message"] for item in close.incomplete_ranges] == MISSING

    period_page = finance.get(reverse("dashboards:statement_period", args=[pools.PERIOD]))
    team = report_pool.teams["search"]
    team_page = finance.get(reverse("dashboards:statement_detail", args=[pools.PERIOD, team.pk]))
    listing = finance.get(reverse("dashboards:statements")).content.decode()

    for response in (period_page, team_page):
        assert response.status_code == 200
        panel = flag(response.content.decode())
        assert "Closed incomplete." in panel and REASON in panel
        assert all(message in panel for message in MISSING)
    assert '<span class="pill incomplete"' in listing and REASON in listing


def test_it_shows_no_flag_on_a_complete_month(report_pool, people) -> None:
    page = people["finance"].get(reverse("dashboards:statement_period", args=[pools.PERIOD]))
    report = people["finance"].get(reverse("reports:page", args=[pools.PERIOD]))

    assert page.status_code == report.status_code == 200
    assert 'data-flag="incomplete"' not in page.content.decode()
    assert 'data-flag="incomplete"' not in report.content.decode()


@pytest.mark.slow
def test_it_flags_the_monthly_report_page_and_its_pdf(incomplete, finance) -> None:
    html = finance.get(reverse("reports:page", args=[pools.PERIOD])).content.decode()
    run = services.report_run_create(period=pools.PERIOD, kind="monthly", enqueue=False)
    run = services.report_run_execute(run_id=run.pk)

    assert "closed incomplete" in html
    panel = flag(html)
    assert REASON in panel and all(message in panel for message in MISSING)
    text = pdf_text(run.files.get(kind=ReportFile.Kind.PDF).path)
    assert "Closed incomplete." in text
    assert " ".join(REASON.split()) in text
    assert all(message in text for message in MISSING)
