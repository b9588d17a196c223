"""HTML pages for people: thin views over selectors, figures from `reports.charts`.

Every page needs a login and a Tandem role, and reads only the teams `visible_teams` returns:
a team lead asking for another team's page gets 404, as from the API. Filters come from the
query string (see `dashboards.filters`); a bad filter shows the page with defaults, a message
naming the field, and status 400. Any chart's table downloads as CSV from the same address
with `csv=<chart>` added, so the CSV always matches the filters on screen.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from decimal import Decimal

from django.conf import settings
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.urls import NoReverseMatch, reverse
from django.utils import timezone

from access.decorators import role_required
from access.selectors import sees_every_team, user_role, visible_teams
from billing import selectors as billing_selectors
from billing.models import PeriodClose, PriceBook, Statement
from dashboards import selectors as pages
from dashboards.cache import remembered
from dashboards.filters import DateRange, Filters, parse_filters, previous_month
from dashboards.tables import (
    Chart,
    amount,
    find_charts,
    make_chart,
    moment,
    quantity,
    seconds,
    share,
    text,
)
from kernel.lost_work import lost_gpu_seconds
from kernel.money import exact_total
from kernel.numbers import whole_number
from kernel.period import period_of_day
from kernel.tasks import TASK_KIND_CHOICES, TASK_KINDS
from metering.models import Preemption, Service, Task, Team
from reports import charts, health
from reports import selectors as report_selectors
from reports.cards import health_cards
from reports.formatting import DASH, kind_label
from reports.models import ReportFile

View = Callable[..., HttpResponse]
ZONE = settings.TANDEM_TIMEZONE

# --- Plumbing ---------------------------------------------------------------------------

BREACHES_LISTED = 50  # breached intervals listed on the SLA page (with who was training)


def page(
    request: HttpRequest,
    template: str,
    *,
    nav: str,
    title: str,
    filters: Filters | None = None,
    status: int | None = None,
    **context: object,
) -> HttpResponse:
    """Render a page, or, with `csv=<chart>` in the query, that chart's table as CSV."""
    found = find_charts(context)
    for slug, chart in found.items():
        params = request.GET.copy()
        params["csv"] = slug
        chart.csv_url = f"{request.path}?{params.urlencode()}"
    errors = filters.errors if filters else []
    if wanted := request.GET.get("csv"):
        if wanted not in found:
            raise Http404(f"no chart {wanted!r} on this page")
        if errors:  # a CSV of the default range under a mistyped one would mislead
            return HttpResponse("\n".join(errors), status=400, content_type="text/plain")
        return found[wanted].csv_response(f"tandem-{slugify_path(request.path)}-{wanted}.csv")
    role = user_role(request.user)
    administrator = "Administrator" if request.user.is_superuser else ""
    context.update(
        nav=nav,
        title=title,
        filters=filters,
        filter_errors=errors,
        pool_timezone=ZONE,
        role_label=role.get_name_display() if role else administrator,
        sees_every_team=sees_every_team(request.user),
        kinds=TASK_KIND_CHOICES,
    )
    return render(
        request, f"dashboards/{template}", context, status=status or (400 if errors else 200)
    )


def slugify_path(path: str) -> str:
    return "-".join(part for part in path.split("/") if part) or "overview"


def team_scope(request: HttpRequest) -> QuerySet[Team] | None:
    """None (every team, no filter) for finance and platform; the lead's teams otherwise."""
    return None if sees_every_team(request.user) else visible_teams(request.user)


def preceding_range(current: DateRange) -> DateRange:
    """The month before a whole month; otherwise the same number of days just before."""
    if current.is_whole_month:
        return DateRange.month_of(previous_month(current.first_day))
    length = dt.timedelta(days=current.days)
    return DateRange(current.first_day - length, current.last_day - length)


def download_url(name: str, *args: object) -> str | None:
    """A link into the reports app, or None where it is not routed (a trimmed deployment)."""
    try:
        return reverse(name, args=args)
    except NoReverseMatch:
        return None


def file_url(report_file: ReportFile | None) -> str | None:
    if report_file is None:
        return None
    return download_url("reports:file", report_file.run_id, report_file.name)


def hours_label(window: Sequence[int] | None) -> str:
    if not window:
        return DASH
    return f"{window[0] % 24:02d}:00\u2013{window[1] % 24:02d}:00"


def lost_work_cap(at: dt.date | dt.datetime) -> int:
    try:
        return billing_selectors.price_book_in_force(at).starvation_lost_work_cap_seconds
    except billing_selectors.PriceBookNotFound:
        return report_selectors.DEFAULT_LOST_WORK_CAP_SECONDS


def with_lost_work(preemptions: Sequence[Preemption], *, at: dt.date | dt.datetime) -> list:
    """Each preemption with its lost work: as reported, else min(cap, run time) x GPUs."""
    cap = lost_work_cap(at)
    return [
        (
            p,
            lost_gpu_seconds(
                reported=p.lost_gpu_seconds,
                seconds_since_start=p.seconds_since_start,
                gpus=p.gpus,
                cap_seconds=cap,
            ),
        )
        for p in preemptions
    ]


# --- Charts shared by pages ---------------------------------------------------------------


def capacity_chart(
    *, current: DateRange, teams: QuerySet[Team] | None = None, kind: str | None = None
) -> Chart:
    bucket = pages.bucket_for(current.start, current.end)
    timeline = remembered(
        "pool_timeline",
        lambda: pages.pool_timeline(
            start=current.start, end=current.end, bucket=bucket, teams=teams, kind=kind
        ),
        current.start,
        current.end,
        bucket,
        teams,
        kind,
    )
    kinds = list(TASK_KINDS)
    return make_chart(
        "capacity",
        charts.capacity_chart(timeline, timezone=ZONE, bucket_label=bucket),
        [
            moment(f"{bucket.title()} starting ({ZONE})"),
            quantity("Capacity (GPUs)"),
            *(quantity(f"{kind_label(k)} (GPUs)") for k in kinds),
            quantity("Busy (GPUs)"),
        ],
        [
            [
                row["time"],
                row["capacity_gpus"],
                *(row["allocated_gpus"].get(k, Decimal(0)) for k in kinds),
                row["busy_gpus"],
            ]
            for row in timeline
        ],
    )


# --- Overview ---------------------------------------------------------------------------

VERDICT_LABELS = {
    health.VerdictCode.SHARING_WORKS: "Sharing works",
    health.VerdictCode.ISOLATION_INSUFFICIENT: "Isolation is insufficient",
    health.VerdictCode.NOT_COMPLEMENTARY: "Not complementary",
    health.VerdictCode.MIXED: "Mixed",
    health.VerdictCode.INSUFFICIENT_DATA: "Not enough data",
}


@role_required
def overview(request: HttpRequest) -> HttpResponse:
    filters = parse_filters(request.GET, teams=visible_teams(request.user))
    current = filters.range
    previous = preceding_range(current)
    scope = team_scope(request)
    before, after, verdict = remembered(
        "health_comparison",
        lambda: report_selectors.health_comparison(
            before=(previous.start, previous.end), after=(current.start, current.end), teams=scope
        ),
        previous.start,
        previous.end,
        current.start,
        current.end,
        scope,
    )
    days = pages.completeness_by_day(start=current.start, end=current.end)
    completeness = make_chart(
        "completeness",
        charts.completeness_chart(days, timezone=ZONE),
        [text(f"Day ({ZONE})"), share("Samples received (%)")],
        [[row["day"], row["completeness"]] for row in days],
    )
    previous_by_id = {s.service_id: s for s in before.services}
    return page(
        request,
        "overview.html",
        nav="overview",
        title="Overview",
        filters=filters,
        current=current,
        previous=previous,
        cards=health_cards(before=before, after=after, verdict=verdict),
        verdict=verdict,
        verdict_label=VERDICT_LABELS[verdict.code],
        services=[(s, previous_by_id.get(s.service_id)) for s in after.services],
        waits_after=after.waits,
        capacity=capacity_chart(current=current),
        completeness=completeness,
        overall_completeness=report_selectors.data_completeness(
            start=current.start, end=current.end
        ),
        problems=pages.window_problems(
            start=current.start,
            end=current.end,
            min_requests=report_selectors.price_book_terms(current.start).sla_min_requests,
        ),
    )


# --- Utilization curves -----------------------------------------------------------------


@role_required
def utilization(request: HttpRequest) -> HttpResponse:
    teams = visible_teams(request.user)
    filters = parse_filters(request.GET, teams=teams)
    current = filters.range
    scope = team_scope(request)
    analytics = remembered(
        "sharing_analytics",
        lambda: report_selectors.sharing_analytics(
            start=current.start, end=current.end, teams=scope
        ),
        current.start,
        current.end,
        scope,
    )
    try:
        book = billing_selectors.price_book_in_force(current.first_day)
    except billing_selectors.PriceBookNotFound:
        book = None
    peak = list(book.peak_hours) if book else list(pages.DEFAULT_PEAK_HOURS)
    length = (peak[1] - peak[0]) % 24
    suggested = pages.suggested_peak_hours(analytics.profile, length=length)
    # Average GPUs held in each local hour: its GPU-seconds over the time the range showed that
    # hour, up to now (a day of 25 hours shows 02:00 twice; today's evening is still to come).
    shown = health.hour_of_day_seconds(
        current.start,
        min(current.end, timezone.now()),
        billing_selectors.pool_timezone(),
        settings.TANDEM_STEP_SECONDS,
    )
    profile_rows = [
        {
            "hour": hour.hour,
            "inference_gpus": health.average_gpus(hour.inference_gpu_seconds, shown[hour.hour]),
            "training_gpus": health.average_gpus(hour.training_gpu_seconds, shown[hour.hour]),
            "inference_share": hour.inference_share,
            "training_share": hour.training_share,
        }
        for hour in analytics.profile
    ]
    profile = make_chart(
        "profile",
        charts.daily_profile_chart(
            profile_rows, timezone=ZONE, peak_hours=peak, suggested_peak_hours=suggested
        ),
        [
            text(f"Hour ({ZONE})"),
            quantity("Inference (GPUs)"),
            quantity("Training (GPUs)"),
            share("Inference (% of capacity)"),
            share("Training (% of capacity)"),
        ],
        [
            [f"{r['hour']:02d}:00", r["inference_gpus"], r["training_gpus"],
             r["inference_share"], r["training_share"]]
            for r in profile_rows
        ],
    )  # fmt: skip
    chosen = Team.objects.filter(pk=filters.team.pk) if filters.team else team_scope(request)
    return page(
        request,
        "utilization.html",
        nav="utilization",
        title="Utilization curves",
        filters=filters,
        current=current,
        analytics=analytics,
        book=book,
        peak_label=hours_label(peak),
        peak_length=length,
        suggested_label=hours_label(suggested),
        suggested_matches=suggested is not None
        and [h % 24 for h in suggested] == [h % 24 for h in peak],
        profile=profile,
        timeline=capacity_chart(current=current, teams=chosen, kind=filters.kind),
        teams=teams,
        show_team_filter=True,
        show_kind_filter=True,
    )


# --- Teams ------------------------------------------------------------------------------


@role_required
def team_list(request: HttpRequest) -> HttpResponse:
    teams = visible_teams(request.user)
    filters = parse_filters(request.GET, teams=teams)
    current = filters.range
    rows = remembered(
        "usage_rows_by_team",
        lambda: report_selectors.usage_rows(
            start=current.start, end=current.end, group_by="team", teams=teams
        ),
        current.start,
        current.end,
        teams,
    )
    usage = {row.team: row for row in rows}
    period = period_of_day(current.first_day)
    totals = pages.statement_totals(teams=teams, period=period)
    quotas = {q.team: q for q in quota_statuses(list(teams))}
    rows = []
    for team in teams:
        used = usage.get(team.name)
        busy = used and health.ratio(used.busy_gpu_seconds, used.allocated_gpu_seconds)
        rows.append(
            {
                "team": team,
                "usage": used,
                "busy_share": busy,
                "total": totals.get(team.pk),
                "quota": quotas.get(team.name),
            }
        )
    return page(
        request,
        "team_list.html",
        nav="teams",
        title="Teams",
        filters=filters,
        current=current,
        period=period,
        rows=rows,
        currency=next((q.currency for q in quotas.values() if q.currency), None),
    )


def quota_statuses(teams: list[Team]) -> list[billing_selectors.QuotaStatus]:
    """This month so far: changes with the data, when a new month begins, and when the
    month-to-date draft is priced again (which lands after the window that caused it)."""
    this_month = billing_selectors.period_containing(dt.datetime.now(dt.UTC))
    draft = billing_selectors.month_to_date_draft_of(this_month)
    return remembered(
        "quota_statuses",
        lambda: billing_selectors.quota_statuses(teams=teams),
        teams,
        this_month,
        draft.computed_at if draft else None,
    )


def _team_or_404(request: HttpRequest, team_id: int) -> Team:
    # Another team's page is "not found", never "forbidden": nothing to probe.
    return get_object_or_404(visible_teams(request.user), pk=team_id)


def quota_used_percent(quota: billing_selectors.QuotaStatus) -> int:
    """Width of the quota meter: share of the GPU-hour allowance used, 0 to 100."""
    if not quota.allowance_gpu_hours:
        return 100 if quota.used_gpu_hours else 0
    return int(min(Decimal(100), quota.used_gpu_hours * 100 / quota.allowance_gpu_hours))


def team_usage_chart(team: Team, filters: Filters) -> Chart:
    rows = remembered(
        "usage_by_day_and_kind",
        lambda: pages.usage_by_day_and_kind(
            start=filters.range.start,
            end=filters.range.end,
            teams=Team.objects.filter(pk=team.pk),
            kind=filters.kind,
        ),
        filters.range.start,
        filters.range.end,
        team,
        filters.kind,
    )
    return make_chart(
        "usage",
        charts.usage_by_day_chart(rows, timezone=ZONE),
        [
            text(f"Day ({ZONE})"),
            text("Kind"),
            quantity("Allocated (GPU-hours)"),
            quantity("Busy (GPU-hours)"),
        ],
        [[r["day"], r["kind"], r["gpu_hours"], r["busy_gpu_hours"]] for r in rows],
    )


def team_cost_chart(statements: list[Statement]) -> Chart:
    rows = [
        {"period": s.period, "line": line.kind, "amount": line.amount}
        for s in statements
        for line in s.lines.all()
    ]
    currency = statements[-1].currency if statements else ""
    return make_chart(
        "cost",
        charts.cost_by_month_chart(rows, currency=currency or "currency"),
        [text("Month"), text("Line"), amount(f"Amount ({currency})")],
        [[r["period"], charts.LINE_LABELS.get(r["line"], r["line"]), r["amount"]] for r in rows],
    )


def waits_chart(teams: QuerySet[Team], current: DateRange) -> Chart:
    waits = pages.waits_by_kind(teams=teams, start=current.start, end=current.end)
    return make_chart(
        "waits",
        charts.waits_chart(waits),
        [
            text("Kind"),
            quantity("Scheduling attempts", 0),
            quantity("Gave up waiting", 0),
            seconds("Average wait (s)"),
            seconds("Longest wait (s)"),
        ],
        [
            [
                kind_label(w["kind"]),
                w["attempts"],
                w["gave_up"],
                w["average_seconds"],
                w["longest_seconds"],
            ]
            for w in waits
        ],
    )


@role_required
def team_detail(request: HttpRequest, team_id: int) -> HttpResponse:
    team = _team_or_404(request, team_id)
    filters = parse_filters(request.GET, teams=visible_teams(request.user))
    current = filters.range
    just_team = Team.objects.filter(pk=team.pk)
    statements = pages.team_statements(team=team)
    for statement in statements:
        downloads = pages.report_downloads(period=statement.period, teams=just_team)
        statement.csv_url = file_url(downloads.team_csv.get(team.pk))
    period = period_of_day(current.first_day)
    quota = quota_statuses([team])[0]
    return page(
        request,
        "team_detail.html",
        nav="teams",
        title=team.name,
        filters=filters,
        team=team,
        current=current,
        period=period,
        quota=quota,
        quota_used_pct=quota_used_percent(quota),
        usage=team_usage_chart(team, filters),
        cost=team_cost_chart(statements),
        statements=list(reversed(statements)),
        top_by_cost=pages.top_tasks_by_cost(team=team, period=period),
        top_by_usage=remembered(
            "top_tasks_by_usage",
            lambda: pages.top_tasks_by_usage(team=team, start=current.start, end=current.end),
            team,
            current.start,
            current.end,
        ),
        preemptions=with_lost_work(
            pages.team_preemptions(team=team, start=current.start, end=current.end),
            at=current.first_day,
        ),
        compensation=pages.compensation_line(team=team, period=period),
        waits=waits_chart(just_team, current),
        show_kind_filter=True,
    )


# --- Tasks ------------------------------------------------------------------------------


def trajectory_chart(task: Task, summary: dict) -> Chart:
    bucket = "hour" if summary["intervals"] > pages.TRAJECTORY_MAX_POINTS else "interval"
    rows = pages.task_trajectory(
        task=task,
        step_seconds=settings.TANDEM_STEP_SECONDS,
        bucket=bucket,
        first=summary["first"],
        last=summary["last"],
    )
    return make_chart(
        "trajectory",
        charts.task_trajectory_chart(rows, timezone=ZONE, bucket_label=bucket),
        [
            moment(f"{bucket.title()} starting ({ZONE})"),
            quantity("Allocated (GPUs)", 3),
            quantity("Busy (GPUs)", 3),
            quantity("Memory avg (GiB)"),
            quantity("Memory peak (GiB)"),
            quantity("Read (MiB)"),
            quantity("Written (MiB)"),
            quantity("I/O operations", 0),
        ],
        [
            [r["time"], r["alloc_gpus"], r["busy_gpus"], r["memory_avg_gib"],
             r["memory_peak_gib"], r["read_mib"], r["write_mib"], r["operations"]]
            for r in rows
        ],
    )  # fmt: skip


@role_required
def task_detail(request: HttpRequest, task_id: int) -> HttpResponse:
    task = get_object_or_404(pages.tasks_of(teams=visible_teams(request.user)), pk=task_id)
    preemptions = with_lost_work(pages.task_preemptions(task=task), at=task.first_seen)
    summary = pages.task_summary(task)
    charges = pages.task_charges(task)
    return page(
        request,
        "task_detail.html",
        nav="teams",
        title=task.external_id,
        task=task,
        summary=summary,
        busy_share=health.ratio(summary["busy"] or 0, summary["alloc"] or 0),
        trajectory=trajectory_chart(task, summary),
        preemptions=preemptions,
        lost_total=sum((lost for _, lost in preemptions), Decimal(0)),
        waits=pages.task_waits(task=task),
        charges=charges,
        charges_total=exact_total(c.amount_unrounded for c in charges),
        currency=charges[0].line.statement.currency if charges else None,
    )


# --- SLA --------------------------------------------------------------------------------


def training_shares(rows: list[dict], lead_teams: set[str] | None) -> list[dict]:
    """Who was training, as shares; a team lead sees other teams only as one "other teams"."""
    total = sum((row["gpu_seconds"] for row in rows), Decimal(0))
    if not total:
        return []
    shares: dict[str, Decimal] = {}
    for row in rows:
        name = row["team"] if lead_teams is None or row["team"] in lead_teams else "other teams"
        shares[name] = shares.get(name, Decimal(0)) + row["gpu_seconds"]
    return [{"team": name, "share": part / total} for name, part in shares.items()]


def sla_block(service: Service, slo_p99_ms: int, current: DateRange, min_requests: int) -> dict:
    """One service's intervals, breaches and chart, judged by `slo_p99_ms` (its own, or the
    one a closed month was billed by). The intervals and the drawn chart are kept until the
    data changes: drawing a month of five-minute intervals was most of a repeat visit."""

    def intervals_and_chart() -> tuple[list[dict], str]:
        intervals = pages.service_intervals(
            service=service,
            start=current.start,
            end=current.end,
            min_requests=min_requests,
            slo_p99_ms=slo_p99_ms,
        )
        figure = charts.sla_latency_chart(
            intervals, service=service.external_id, slo_ms=slo_p99_ms, timezone=ZONE
        )
        return intervals, charts.to_html(figure)

    intervals, html = remembered(
        "sla_block",
        intervals_and_chart,
        service,
        slo_p99_ms,
        current.start,
        current.end,
        min_requests,
    )
    return {
        "service": service,
        "slo_p99_ms": slo_p99_ms,
        "breached": [row for row in intervals if row["breached"]],
        "intervals": len(intervals),
        "chart": Chart(
            slug="latency",
            html=html,
            columns=[moment(f"Interval ({ZONE})"), quantity("Requests", 0),
                     quantity("P99 (ms)", 0), text("Breached")],
            rows=[[r["time"], r["requests"], r["p99_ms"], "yes" if r["breached"] else "no"]
                  for r in intervals],
        ),
    }  # fmt: skip


def chosen_service(
    raw: str | None, latencies: list[health.ServiceLatency], errors: list[str]
) -> int | None:
    """The service asked for (`service=<id>`), else the one furthest above its SLO."""
    known = {s.service_id for s in latencies}
    if raw:
        if (service_id := whole_number(raw)) in known:
            return service_id
        errors.append(f"Filter 'service': no key service {raw!r} that you can see.")
    measured = [s for s in latencies if s.p99_ms is not None]
    if measured:
        return max(measured, key=lambda s: s.p99_ms / s.slo_p99_ms).service_id
    return latencies[0].service_id if latencies else None


@role_required
def sla(request: HttpRequest) -> HttpResponse:
    teams = visible_teams(request.user)
    filters = parse_filters(request.GET, teams=teams)
    current = filters.range
    scope = Team.objects.filter(pk=filters.team.pk) if filters.team else team_scope(request)
    # A billed month is judged by the terms it was billed by, not by an SLO stated or a book
    # published since.
    terms = report_selectors.sla_terms(current.start, current.end)
    slos, min_requests = terms.slos, terms.min_requests
    latencies = remembered(
        "service_latencies",
        lambda: report_selectors.service_latencies(
            start=current.start, end=current.end, teams=scope, min_requests=min_requests,
            slos=slos,
        ),
        current.start, current.end, scope, min_requests, tuple(sorted(slos.items())),
    )  # fmt: skip
    chosen = chosen_service(request.GET.get("service"), latencies, filters.errors)
    # Not "block": inside a template block that name is Django's own (block.super).
    detail = None
    if chosen is not None:
        service = pages.service(pk=chosen)
        slo = slos.get(service.pk, service.slo_p99_ms)
        detail = sla_block(service, slo, current, min_requests)
        # Only the listed breaches need who was training; the CSV has them all.
        listed = detail["breached"][:BREACHES_LISTED]
        training = pages.training_at(moments=[row["time"] for row in listed])
        lead_teams = None if sees_every_team(request.user) else {t.name for t in teams}
        for row in listed:
            row["training"] = training_shares(training.get(row["time"], []), lead_teams)
    periods = sorted({period_of_day(current.first_day), period_of_day(current.last_day)})
    services = pages.services(pks=[x.service_id for x in latencies])
    return page(
        request,
        "sla.html",
        nav="sla",
        title="SLA",
        filters=filters,
        current=current,
        latencies=latencies,
        chosen=chosen,
        detail=detail,
        min_requests=min_requests,
        breaches_listed=BREACHES_LISTED,
        breaches_slice=f":{BREACHES_LISTED}",
        money_rows=pages.sla_money(teams=teams, periods=periods),
        recorded=pages.breaches(services=services, start=current.start, end=current.end),
        teams=teams,
        show_team_filter=True,
    )


# --- Statements -------------------------------------------------------------------------


@role_required
def statement_list(request: HttpRequest) -> HttpResponse:
    teams = visible_teams(request.user)
    periods = pages.statement_periods(teams=teams, months_with_data=pages.months_with_usage())
    return page(
        request, "statement_list.html", nav="statements", title="Statements", periods=periods
    )


def reconciliation(close: PeriodClose, statements: list[Statement]) -> dict:
    """Teams plus platform lines against the pool cost, as a waterfall and a table."""
    platform_lines = list(close.platform_lines.prefetch_related("classes"))
    parts = [{"label": s.team.name, "amount": s.total} for s in statements]
    for line in platform_lines:
        correction = f" ({line.corrects_period})" if line.is_correction else ""
        parts.append({"label": f"Platform: {line.get_name_display()}{correction}",
                      "amount": line.amount})  # fmt: skip
    teams_sum = sum((s.total for s in statements), Decimal(0))
    platform_sum = sum((line.amount for line in platform_lines), Decimal(0))
    pool = close.pool_cost + close.pool_cost_corrections
    return {
        "platform_lines": platform_lines,
        "teams_sum": teams_sum,
        "platform_sum": platform_sum,
        "pool": pool,
        "adds_up": teams_sum + platform_sum == pool,
        "chart": make_chart(
            "reconciliation",
            charts.reconciliation_chart(parts, currency=close.currency),
            [text("Part"), amount(f"Amount ({close.currency})")],
            [[p["label"], p["amount"]] for p in parts] + [["Pool cost", pool]],
        ),
    }


def whatif(close: PeriodClose, draft: PriceBook) -> dict:
    """Per-team totals if the month were priced with `draft`, next to its statements."""
    result = billing_selectors.period_whatif(period=close.period, price_book_id=draft.pk)
    rows = [
        {
            "team": team.team,
            "actual": team.total.statement,
            "draft": team.total.what_if,
            "difference": team.total.difference,
        }
        for team in result.teams
    ]
    label = f"draft price book v{draft.version}"
    return {
        "draft": draft,
        "result": result,
        "rows": rows,
        "chart": make_chart(
            "whatif",
            charts.whatif_chart(rows, currency=close.currency, draft_label=label),
            [text("Team"), amount("Statement"), amount(f"Draft v{draft.version}"),
             amount("Difference")],
            [[r["team"], r["actual"], r["draft"], r["difference"]] for r in rows],
        ),
    }  # fmt: skip


def period_status(period: str) -> str:
    """closed, or corrected once a later close carried corrections of it."""
    return "corrected" if pages.period_corrected(period=period) else "closed"


def _period_or_404(period: str) -> billing_selectors.PeriodBounds:
    try:
        return billing_selectors.period_bounds(period)
    except ValueError:
        raise Http404(f"no period {period!r}") from None


@role_required
def statement_period(request: HttpRequest, period: str) -> HttpResponse:
    bounds = _period_or_404(period)
    teams = visible_teams(request.user)
    close = pages.period_close(period=period)
    if close is not None:
        # As billed: after a change of the pool's zone, the month on today's clock is hours
        # off the bounds its close priced.
        bounds = billing_selectors.closed_period_bounds(close)
    statements = pages.period_statements(close=close, teams=teams) if close else []
    all_seeing = sees_every_team(request.user)
    files = pages.report_downloads(period=period, teams=teams)
    context: dict[str, object] = {}
    if close and all_seeing:
        context["reconciliation"] = reconciliation(close, statements)
        drafts = pages.draft_price_books()
        context["drafts"] = drafts
        if raw := request.GET.get("draft"):
            draft_id = whole_number(raw)
            draft = drafts.filter(pk=draft_id).first() if draft_id is not None else None
            if draft is None:
                context["draft_error"] = f"Filter 'draft': no draft price book {raw!r}."
            else:
                context["whatif"] = whatif(close, draft)
    return page(
        request,
        "statement_period.html",
        nav="statements",
        title=f"Statements {period}",
        status=400 if "draft_error" in context else None,
        period=period,
        bounds=bounds,
        close=close,
        status_label=period_status(period) if close else "open",
        statements=statements,
        downloads={
            "focus": file_url(files.focus) if all_seeing else None,
            "pdf": file_url(files.pdf) if all_seeing else None,
            "report": download_url("reports:page", period) if all_seeing and close else None,
            "run_create": download_url("reports:run_create", period) if all_seeing else None,
        },
        report_run=files.run,
        team_csv={team_id: file_url(f) for team_id, f in files.team_csv.items()},
        **context,
    )


@role_required
def statement_detail(request: HttpRequest, period: str, team_id: int) -> HttpResponse:
    team = _team_or_404(request, team_id)
    statement = get_object_or_404(pages.statements_with_lines(), period=period, team=team)
    files = pages.report_downloads(period=period, teams=Team.objects.filter(pk=team.pk))
    return page(
        request,
        "statement_detail.html",
        nav="statements",
        title=f"{team.name}: statement {period}",
        statement=statement,
        team=team,
        lines=list(statement.lines.all()),
        team_csv=file_url(files.team_csv.get(team.pk)),
    )


@role_required
def statement_line(request: HttpRequest, line_id: int) -> HttpResponse:
    line = get_object_or_404(
        pages.statement_lines_of(teams=visible_teams(request.user)), pk=line_id
    )
    contributions = pages.line_contributions(line=line)
    total = exact_total(c.amount_unrounded for c in contributions)
    for contribution in contributions:
        contribution.share = health.ratio(contribution.amount_unrounded, total)
    return page(
        request,
        "statement_line.html",
        nav="statements",
        title=f"{line.get_kind_display()}: {line.statement.team.name} {line.statement.period}",
        line=line,
        contributions=contributions,
        contributions_sum=total,
        # Contributions are stored to 30 places, summed exactly: they add up to the line.
        contributions_match=bool(contributions) and total == line.amount_unrounded,
        explain_url=download_url("reports:explain", line.pk),
    )


# --- Price books ------------------------------------------------------------------------


@role_required
def price_books(request: HttpRequest) -> HttpResponse:
    books = list(billing_selectors.price_books_with_classes().order_by("effective_from", "version"))
    try:
        in_force = billing_selectors.price_book_in_force(dt.datetime.now(dt.UTC))
    except billing_selectors.PriceBookNotFound:
        in_force = None
    rows = []
    for book in books:
        class_rates = billing_selectors.rates_per_gpu_class(book)
        standard, offpeak = class_rates["default"]
        rows.append(
            {
                "book": book,
                "standard": standard,
                "offpeak": offpeak,
                "peak": hours_label(book.peak_hours),
                "in_force": book == in_force,
                # docs/pricing.md v2: each listed class with its own rates (the book's own
                # figures above are the class `default`).
                "classes": [
                    {
                        "item": item,
                        "standard": class_rates[item.name][0],
                        "offpeak": class_rates[item.name][1],
                    }
                    for item in book.gpu_classes.all()
                ],
            }
        )
    currency = books[-1].currency if books else "currency"
    chart = make_chart(
        "rates",
        charts.price_rates_chart(
            [{"version": f"v{r['book'].version} ({r['book'].effective_from})",
              "standard": r["standard"], "offpeak": r["offpeak"]} for r in rows],
            currency=currency,
        ),
        [text("Version"), text("Effective from"), text("Status"),
         quantity(f"Standard R ({currency}/GPU-h)", 4),
         quantity(f"Off-peak R_off ({currency}/GPU-h)", 4)],
        [[f"v{r['book'].version}", r["book"].effective_from, r["book"].status, r["standard"],
          r["offpeak"]] for r in rows],
    )  # fmt: skip
    return page(
        request,
        "price_books.html",
        nav="price_books",
        title="Price books",
        rows=list(reversed(rows)),
        chart=chart,
    )
