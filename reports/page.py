"""The monthly report page, rendered: one template for the browser and for the PDF.

`report_page_html` renders it without a request for Chromium to print (reports.render_pdf,
called by reports.services); `reports.views.report_page` renders the same context for a
browser. Kept out of the views so that the services can print the page without importing
them (the views import the services for the run button).
"""

from __future__ import annotations

from decimal import Decimal

from django.template import TemplateDoesNotExist
from django.template.loader import get_template, render_to_string
from django.urls import NoReverseMatch, reverse

from billing.models import LineKind
from kernel.period import time_zone
from reports import charts, rows

FALLBACK_BASE = "reports/base.html"
DASHBOARD_BASE = "dashboards/base.html"


def base_template() -> str:
    """The dashboards' layout when it is installed and routed, else a self-contained one."""
    try:
        get_template(DASHBOARD_BASE)
        reverse("dashboards:overview")
    except (TemplateDoesNotExist, NoReverseMatch):
        return FALLBACK_BASE
    return DASHBOARD_BASE


def _month_name(period: rows.Period) -> str:
    return period.start.astimezone(time_zone(period.timezone)).strftime("%B %Y")


def _charts(page: rows.ReportPage) -> dict[str, str]:
    timezone = page.period.timezone
    return {
        "reconciliation": charts.to_html(
            charts.reconciliation_chart(page.reconciliation_rows, currency=page.currency)
        ),
        "profile": charts.to_html(
            charts.daily_profile_chart(
                page.profile_rows,
                timezone=timezone,
                peak_hours=list(page.close.price_book.peak_hours),
            )
        ),
        "waits": charts.to_html(charts.waits_chart(page.wait_rows)),
    }


# Management reads cost in three parts; the line-by-line detail is in each team's CSV.
COST_COLUMNS = [
    ("Usage", (LineKind.BASELINE, LineKind.STANDARD, LineKind.OFFPEAK)),
    ("SLA penalties and credits", (LineKind.SLA_PENALTY, LineKind.SLA_CREDIT)),
    ("Preemption compensation", (LineKind.COMPENSATION,)),
]


def _team_rows(page: rows.ReportPage) -> tuple[list[str], list[dict]]:
    table = []
    for team in page.teams:
        parts = [
            sum((team.lines[kind] for kind in kinds if kind in team.lines), Decimal("0.00"))
            for _, kinds in COST_COLUMNS
        ]
        change = None if team.previous_total is None else team.total - team.previous_total
        table.append(
            {
                "team": team.team,
                "amounts": parts,
                "total": team.total,
                "previous_total": team.previous_total,
                "change": change,
            }
        )
    return [heading for heading, _ in COST_COLUMNS], table


def report_page_context(page: rows.ReportPage, *, for_print: bool) -> dict:
    zone = time_zone(page.period.timezone)
    cost_columns, team_rows = _team_rows(page)
    return {
        "base_template": base_template(),
        "title": f"Monthly report {page.period.label}",
        "nav": "statements",
        "pool_timezone": page.period.timezone,
        "page": page,
        "for_print": for_print,
        "period_name": _month_name(page.period),
        "previous_name": _month_name(page.previous),
        "previous_short": page.previous.label,
        "period_local_start": f"{page.period.start.astimezone(zone):%Y-%m-%d %H:%M}",
        "period_local_end": f"{page.period.end.astimezone(zone):%Y-%m-%d %H:%M}",
        "cost_columns": cost_columns,
        "team_rows": team_rows,
        "charts": _charts(page),
    }


def report_page_html(period: str) -> str:
    """The whole report page as a string, for printing (no request, no user, no links)."""
    page = rows.report_page(period)
    return render_to_string("reports/report.html", report_page_context(page, for_print=True))
