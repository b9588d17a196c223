"""HTML for people: the monthly report page, report runs and their files, explain a charge.

The report page and the PDF are one template, rendered by `reports.page` for both. Finance and
platform see every page; a team lead sees only their own team's CSV files and the lines of
their own statements, and gets 404 (never 403) for anything else.
"""

from __future__ import annotations

import datetime as dt

from django.contrib.auth.decorators import login_required
from django.http import FileResponse, Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_POST

from access.decorators import role_required
from access.selectors import sees_every_team, visible_teams
from billing.models import StatementLine
from kernel.numbers import whole_number
from kernel.period import time_zone
from reports import rows, services
from reports.explain import statement_line_explain
from reports.models import ReportFile, ReportRun
from reports.page import base_template, report_page_context


def _require_every_team(request: HttpRequest) -> None:
    if not sees_every_team(request.user):
        raise Http404("No such report.")


@login_required
@require_GET
def report_page(request: HttpRequest, period: str) -> HttpResponse:
    _require_every_team(request)
    try:
        page = rows.report_page(period)
    except rows.ReportInputError as error:
        raise Http404(str(error)) from None
    context = report_page_context(page, for_print=False)
    context["latest_run"] = (
        ReportRun.objects.filter(period=period, status=ReportRun.Status.DONE)
        .prefetch_related("files")
        .first()
    )
    return render(request, "reports/report.html", context)


@role_required
@require_GET
def run_list(request: HttpRequest) -> HttpResponse:
    """Report runs; a team lead sees only the runs' CSV files of their own teams."""
    every_team = sees_every_team(request.user)
    files = ReportFile.objects.select_related("team").order_by("kind", "name")
    if not every_team:
        files = files.filter(team__in=visible_teams(request.user))
    runs = list(ReportRun.objects.order_by("-created", "-id")[:100])
    by_run: dict[int, list[ReportFile]] = {}
    for report_file in files.filter(run__in=runs):
        by_run.setdefault(report_file.run_id, []).append(report_file)
    if not every_team:
        runs = [run for run in runs if run.pk in by_run]
    return render(
        request,
        "reports/runs.html",
        {
            "base_template": base_template(),
            "title": "Report runs",
            "nav": "statements",
            "runs": [(run, by_run.get(run.pk, [])) for run in runs],
            "every_team": every_team,
        },
    )


@login_required
@require_POST
def run_create(request: HttpRequest, period: str) -> HttpResponse:
    _require_every_team(request)
    try:
        rows.closed_period(period)
    except rows.ReportInputError as error:
        raise Http404(str(error)) from None
    services.report_run_create(
        period=period, kind=ReportRun.Kind.ON_DEMAND, requested_by=request.user
    )
    return redirect("reports:runs")


@login_required
@require_GET
def file_download(request: HttpRequest, run_id: int, name: str) -> FileResponse:
    report_file = get_object_or_404(
        ReportFile.objects.select_related("run", "team"), run_id=run_id, name=name
    )
    if report_file.team is None:
        _require_every_team(request)
    elif not visible_teams(request.user).filter(pk=report_file.team_id).exists():
        raise Http404("No such file.")
    path = report_file.path
    if not path.is_file():
        raise Http404("The file is no longer on disk; run the report again.")
    response = FileResponse(
        path.open("rb"), as_attachment=True, filename=name, content_type=report_file.content_type
    )
    response["X-Content-SHA256"] = report_file.sha256
    return response


def _task_param(request: HttpRequest) -> int | None:
    return whole_number(request.GET.get("task", ""))


@login_required
@require_GET
def explain_line(request: HttpRequest, line_id: int) -> HttpResponse:
    """A statement line's tasks, their intervals and the PromQL behind them (HTML or JSON)."""
    line = get_object_or_404(
        StatementLine.objects.select_related(
            "statement__team", "statement__period_close__price_book"
        ).filter(statement__team__in=visible_teams(request.user)),
        pk=line_id,
    )
    explanation = statement_line_explain(line=line, task_id=_task_param(request))
    if request.GET.get("format") == "json":
        return JsonResponse(explanation.as_json())
    zone = time_zone(explanation.timezone)
    return render(
        request,
        "reports/explain.html",
        {
            "base_template": base_template(),
            "title": (
                f"Explain: {line.get_kind_display()} · {explanation.team} {explanation.period}"
            ),
            "nav": "statements",
            "pool_timezone": explanation.timezone,
            "x": explanation,
            "line": line,
            "local_start": f"{explanation.range_start.astimezone(zone):%Y-%m-%d %H:%M}",
            "local_end": f"{explanation.range_end.astimezone(zone):%Y-%m-%d %H:%M}",
            "step_minutes": dt.timedelta(seconds=explanation.step_seconds),
        },
    )
