"""Every page through Django's test client: logins, the role boundary, filters, the numbers."""

from __future__ import annotations

import csv
import datetime as dt
import html
import io
from decimal import Decimal

import pytest
from django.db.models import Max
from django.test import override_settings
from django.urls import reverse

from billing.models import PeriodClose, Statement, StatementLine
from metering.models import IngestWindow, Service, Task, Team
from tests.factories import SourceFactory, gpu_sighting, window_split
from tests.helpers import off_site_urls
from tests.pools.pages import MONTH

PAGES = [
    ("dashboards:overview", []),
    ("dashboards:utilization", []),
    ("dashboards:teams", []),
    ("dashboards:team", ["team"]),
    ("dashboards:task", ["task"]),
    ("dashboards:sla", []),
    ("dashboards:statements", []),
    ("dashboards:statement_period", ["period"]),
    ("dashboards:statement_detail", ["period", "team"]),
    ("dashboards:statement_line", ["line"]),
    ("dashboards:price_books", []),
]


def url_of(name: str, args: list[str], *, team: Team) -> str:
    task = Task.objects.filter(team=team).order_by("pk").first()
    line = StatementLine.objects.filter(statement__team=team, statement__period=MONTH).first()
    values = {"team": team.pk, "task": task.pk, "period": MONTH, "line": line.pk}
    return reverse(name, args=[values[a] for a in args])


@pytest.mark.parametrize(("name", "args"), PAGES, ids=[name for name, _ in PAGES])
def test_it_sends_anonymous_people_to_the_login_page(client, closed_pool, name, args) -> None:
    url = url_of(name, args, team=closed_pool.teams["vision"])
    response = client.get(url)
    assert response.status_code == 302
    assert response["Location"] == f"{reverse('login')}?next={url}"


@pytest.mark.parametrize(("name", "args"), PAGES, ids=[name for name, _ in PAGES])
def test_it_shows_every_page_to_finance_with_its_charts(client, people, name, args) -> None:
    client.force_login(people.finance)
    response = client.get(url_of(name, args, team=Team.objects.get(name="vision")))
    assert response.status_code == 200
    html = response.content.decode()
    assert "/static/plotly/plotly.min.js" in html
    assert off_site_urls(html) == []
    if 'class="chart"' in html:
        assert "plotly-graph-div" in html and "Data behind this chart" in html


def test_it_serves_plotly_from_its_own_static_files(client) -> None:
    """What every page's script tag names is served by Tandem itself (WhiteNoise, from the
    collected static files): the pages draw their charts with no network beyond Tandem."""
    response = client.get("/static/plotly/plotly.min.js")
    assert response.status_code == 200
    assert "javascript" in response["Content-Type"]
    assert b"plotly.js v" in b"".join(response.streaming_content)[:2000]


@pytest.mark.parametrize(
    ("name", "args"),
    [page for page in PAGES if "team" in page[1] or "task" in page[1] or "line" in page[1]],
)
def test_it_answers_404_for_another_teams_page(client, people, name, args) -> None:
    client.force_login(people.vision_lead)
    own = client.get(url_of(name, args, team=Team.objects.get(name="vision")))
    other = client.get(url_of(name, args, team=Team.objects.get(name="search")))
    assert own.status_code == 200
    assert other.status_code == 404


@pytest.mark.parametrize(
    ("name", "args"), [page for page in PAGES if not page[1] or page[1] == ["period"]]
)
def test_it_shows_the_pool_wide_pages_to_a_team_lead(client, people, name, args) -> None:
    client.force_login(people.vision_lead)
    response = client.get(url_of(name, args, team=Team.objects.get(name="vision")))
    assert response.status_code == 200


def test_it_logs_out_back_to_the_login_page(client, people) -> None:
    client.force_login(people.finance)
    response = client.post(reverse("logout"))
    assert response.status_code == 302 and response["Location"] == reverse("login")
    assert client.get("/").status_code == 302


def test_it_lists_only_the_leads_own_team(client, people) -> None:
    client.force_login(people.vision_lead)
    teams = client.get(reverse("dashboards:teams")).content.decode()
    period = client.get(reverse("dashboards:statement_period", args=[MONTH])).content.decode()
    assert ">vision</a>" in teams
    assert ">search</a>" not in teams and ">speech</a>" not in teams
    assert ">vision</a>" in period and ">search</a>" not in period
    # The pool reconciliation and the what-if name every team: finance and platform only.
    assert 'data-panel="reconciliation"' not in period
    assert 'data-panel="whatif"' not in period


def test_it_hides_other_teams_training_behind_a_breach_from_a_lead(client, people) -> None:
    client.force_login(people.search_lead)
    html = client.get(reverse("dashboards:sla")).content.decode()
    assert "breached interval" in html
    assert "other teams" in html
    assert "vision " not in html.split("Who was training", 1)[1]


def test_it_refuses_a_person_without_a_role(client, people) -> None:
    client.force_login(people.nobody)
    response = client.get(reverse("dashboards:overview"))
    assert response.status_code == 403
    assert b"no Tandem role" in response.content


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("start=2026-13-01", "'start'"),
        ("start=2026-10-05&end=2026-10-01", "'end'"),
        ("month=October", "'month'"),
        ("team=999999", "'team'"),
        ("team=%27%3B--", "'team'"),
        ("kind=gaming", "'kind'"),
        ("start=2020-01-01&end=2026-01-01", "'end'"),
        ("start=0001-01-01", "'start'"),
        ("end=9999-12-31", "'end'"),
        ("month=0001-01", "'month'"),
    ],
)
def test_it_names_the_bad_filter_and_answers_400(client, people, query, field) -> None:
    client.force_login(people.finance)
    response = client.get(f"{reverse('dashboards:utilization')}?{query}")
    assert response.status_code == 400
    assert f"Filter {field}" in html.unescape(response.content.decode())


def test_it_does_not_let_a_lead_filter_on_another_team(client, people) -> None:
    client.force_login(people.vision_lead)
    search = Team.objects.get(name="search")
    response = client.get(f"{reverse('dashboards:utilization')}?team={search.pk}")
    assert response.status_code == 400
    assert "no team" in response.content.decode()


def test_it_keeps_filters_in_the_address(client, people) -> None:
    client.force_login(people.finance)
    vision = Team.objects.get(name="vision")
    url = reverse("dashboards:team", args=[vision.pk])
    html = client.get(f"{url}?start=2026-10-01&end=2026-10-01&kind=preprocessing").content.decode()
    assert 'value="2026-10-01"' in html
    assert '<option value="preprocessing" selected>' in html
    assert "csv=usage" in html and "kind=preprocessing" in html


def test_it_exports_a_charts_table_as_csv_for_the_same_filters(client, people) -> None:
    client.force_login(people.finance)
    vision = Team.objects.get(name="vision")
    url = reverse("dashboards:team", args=[vision.pk])
    response = client.get(f"{url}?start=2026-10-01&end=2026-10-01&csv=usage")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert {row["Day (Asia/Shanghai)"] for row in rows} == {"2026-10-01"}
    assert {row["Kind"] for row in rows} == {"training_batch", "preprocessing"}
    # vision-resnet-train holds 1 GPU in the day (09-22 h) and 4 at night: 13 + 4 x 11 GPU-hours.
    batch = next(row for row in rows if row["Kind"] == "training_batch")
    assert batch["Allocated (GPU-hours)"] == "57.00"


def test_it_exports_credits_as_negative_numbers_that_sum(client, people) -> None:
    client.force_login(people.finance)
    credit = StatementLine.objects.filter(amount__lt=0).select_related("statement").first()
    assert credit is not None, "the pool has a credit to export"
    team = credit.statement.team
    response = client.get(f"{reverse('dashboards:team', args=[team.pk])}?csv=cost")
    assert response.status_code == 200
    rows = list(csv.reader(io.StringIO(response.content.decode())))[1:]
    amounts = [row[2] for row in rows]
    assert f"{credit.amount:f}" in amounts
    assert not [amount for amount in amounts if amount.startswith("'")]
    lines = StatementLine.objects.filter(statement__team=team)
    assert sum(Decimal(a) for a in amounts) == sum(line.amount for line in lines)


def test_it_refuses_a_csv_for_a_mistyped_range(client, people) -> None:
    client.force_login(people.finance)
    response = client.get(f"{reverse('dashboards:overview')}?start=2026-10-xx&csv=capacity")
    assert response.status_code == 400
    assert response["Content-Type"].startswith("text/plain")
    assert b"Filter 'start'" in response.content


def test_it_answers_404_for_a_chart_the_page_does_not_have(client, people) -> None:
    client.force_login(people.finance)
    response = client.get(f"{reverse('dashboards:overview')}?csv=nothing")
    assert response.status_code == 404


def test_it_shows_the_pool_reconciliation_adding_up(client, people) -> None:
    client.force_login(people.finance)
    html = client.get(reverse("dashboards:statement_period", args=[MONTH])).content.decode()
    close = PeriodClose.objects.get(period=MONTH)
    assert "adds up to the pool cost" in html
    assert f"{close.pool_cost:,.2f}" in html
    for statement in Statement.objects.filter(period=MONTH):
        assert f"{statement.total:,.2f}" in html


def test_it_prices_the_month_with_a_draft_book_per_team(client, people, draft_book) -> None:
    client.force_login(people.finance)
    url = reverse("dashboards:statement_period", args=[MONTH])
    response = client.get(f"{url}?draft={draft_book.pk}")
    assert response.status_code == 200
    html = response.content.decode()
    assert f"Draft v{draft_book.version}" in html
    # A cheaper book lowers the pool cost: the what-if column differs from the statement.
    close = PeriodClose.objects.get(period=MONTH)
    assert 'data-table="whatif"' in html and f"{close.pool_cost:,.2f}" in html
    assert "-" in html.split('data-table="whatif"', 1)[1].split("Pool cost", 1)[1][:400]


def test_it_names_a_bad_draft_book(client, people) -> None:
    client.force_login(people.finance)
    url = reverse("dashboards:statement_period", args=[MONTH])
    response = client.get(f"{url}?draft=abc")
    assert response.status_code == 400
    assert "Filter 'draft'" in html.unescape(response.content.decode())


def test_it_answers_404_for_a_month_that_is_not_a_month(client, people) -> None:
    client.force_login(people.finance)
    response = client.get(reverse("dashboards:statement_period", args=["2026-13"]))
    assert response.status_code == 404


@pytest.mark.parametrize("period", ["9999-12", "0000-01", "0001-01", "1969-12"])
def test_it_answers_404_for_a_month_whose_year_is_out_of_range(
    client, people, closed_pool, period
) -> None:
    client.force_login(people.finance)
    for url in (
        reverse("dashboards:statement_period", args=[period]),
        reverse("dashboards:statement_detail", args=[period, closed_pool.teams["search"].pk]),
    ):
        assert client.get(url).status_code == 404, url


def test_it_leads_from_a_statement_line_to_its_tasks(client, people) -> None:
    client.force_login(people.finance)
    line = StatementLine.objects.get(
        statement__team__name="vision", statement__period=MONTH, kind="offpeak"
    )
    html = client.get(reverse("dashboards:statement_line", args=[line.pk])).content.decode()
    for contribution in line.tasks.all():
        assert reverse("dashboards:task", args=[contribution.task_id]) in html
    assert "= the unrounded line" in html


def test_it_names_on_the_overview_the_services_judged_by_an_slo_nobody_stated(
    client, people, closed_pool
) -> None:
    client.force_login(people.finance)
    assert 'data-banner="slo-unstated"' not in client.get("/").content.decode()
    name = Service.objects.order_by("external_id").values_list("external_id", flat=True)[0]
    Service.objects.filter(external_id=name).update(slo_stated=None)
    html = client.get("/").content.decode()
    assert 'data-banner="slo-unstated"' in html
    assert "1 service had its SLA breaches in" in html and "by the default SLO" in html
    assert f"moves penalties to the inference team by it: {name}." in html


def test_it_names_on_the_overview_a_service_whose_namespace_runs_as_another_team(
    client, people, closed_pool
) -> None:
    client.force_login(people.finance)
    assert 'data-banner="team-moved"' not in client.get("/").content.decode()
    service = Service.objects.select_related("team").get(external_id="search/ranker")
    other = Team.objects.exclude(pk=service.team_id).order_by("name").first()
    # The pool's tasks predate namespaces: its inference task serves the service's namespace.
    Task.objects.filter(external_id="search-ranker").update(namespace="search")
    # Its credits go to another team than the one its namespace's pods run as.
    Service.objects.filter(pk=service.pk).update(team=other)
    html = client.get("/").content.decode()
    assert 'data-banner="team-moved"' in html
    assert (
        f"{service.external_id}: credits to team {other.name}; its namespace's inference pods"
        f" ran as team {service.team.name} in "
    ) in html
    # An operator states that team as right: no longer named.
    Service.objects.filter(pk=service.pk).update(team_stated=dt.datetime.now(dt.UTC))
    assert 'data-banner="team-moved"' not in client.get("/").content.decode()


def test_it_warns_on_the_overview_when_a_window_is_pending(client, people, closed_pool) -> None:
    client.force_login(people.finance)
    assert 'data-banner="completeness"' not in client.get("/").content.decode()
    window = IngestWindow.objects.filter(start__gte=closed_pool.start).order_by("start").first()
    IngestWindow.objects.filter(pk=window.pk).update(status="pending")
    html = client.get("/").content.decode()
    assert 'data-banner="completeness"' in html
    assert "1 window pending" in html


@pytest.mark.parametrize(
    ("banner", "flag", "said"),
    [
        # kube-state-metrics before v2.19 wrote no preemption reason.
        (
            "preemptions",
            {"preemptions_unreadable": True},
            "Preemptions cannot be seen in 3 windows",
        ),
        # kube-state-metrics described none of the GPU pods (not scraped, a shard gone).
        (
            "identity",
            {"undescribed_gpu_seconds": 240},
            "Task, team and kind were guessed for some GPU pods in 3 windows",
        ),
        # Kueue preempted workloads: no pod shows them preempted.
        (
            "kueue-preemptions",
            {"kueue_preempted_workloads": 1},
            "Kueue's preemptions show on no pod in 3 windows",
        ),
        # Pods under priority classes the source does not map: counted as training.
        (
            "unmapped-kinds",
            {"unmapped_kind_gpu_seconds": 300},
            "GPUs were held under priority classes the source does not map in 3 windows",
        ),
        # GPUs no pod held were busy: work outside any pod's request, billed to no task.
        (
            "unheld-busy",
            {"unheld_busy_gpu_seconds": 30},
            "GPUs that no pod held were busy in 3 windows",
        ),
        # Kueue's counts first read from a target never scraped before: when, unknown.
        (
            "kueue-preemptions",
            {"kueue_counts_unplaced": 1},
            "Kueue's preemptions show on no pod in 3 windows",
        ),
        # Inference pods served without the latency histogram (vLLM --disable-log-stats).
        (
            "latency",
            {"latency_unseen_pods": 2},
            "Latency was not measured for some inference pods in 3 windows",
        ),
    ],
)
def test_it_says_on_the_overview_where_windows_are_blind_to_a_rule(
    client, people, closed_pool, banner: str, flag: dict, said: str
) -> None:
    client.force_login(people.finance)
    assert f'data-banner="{banner}"' not in client.get("/").content.decode()
    windows = IngestWindow.objects.filter(start__gte=closed_pool.start).order_by("start")
    IngestWindow.objects.filter(pk__in=[w.pk for w in windows[:3]]).update(**flag)
    html = client.get("/").content.decode()
    assert f'data-banner="{banner}"' in html
    assert said in html
    assert 'data-banner="completeness"' not in html  # their samples are all there


def test_it_says_on_the_overview_which_sources_meter_one_gpu_twice(
    client, people, closed_pool
) -> None:
    client.force_login(people.finance)
    assert 'data-banner="metered-twice"' not in client.get("/").content.decode()
    start = closed_pool.start
    thanos = SourceFactory(name="thanos")
    for source in (closed_pool.source, thanos):
        gpu_sighting(source, "GPU-a", (start, start + (closed_pool.end - start) / 2))
    html = client.get("/").content.decode()
    assert 'data-banner="metered-twice"' in html
    assert "Some GPUs of" in html and "are metered by two sources" in html
    assert f"sources {closed_pool.source.name} and thanos both meter 1 GPU(s) (GPU-a on" in html


def test_it_says_on_the_overview_that_the_step_changed_under_stored_windows(
    client, people, closed_pool
) -> None:
    client.force_login(people.finance)
    window = IngestWindow.objects.filter(start__gte=closed_pool.start).order_by("start").first()
    window_split(window, 300)
    assert 'data-banner="off-step"' not in client.get("/").content.decode()
    with override_settings(TANDEM_STEP_SECONDS=900):
        html = client.get("/").content.decode()
    assert 'data-banner="off-step"' in html
    assert "The metering step changed under stored windows" in html
    assert f"source {closed_pool.source.name} holds " in html
    assert "window(s) of 300 s between" in html
    assert "off the grid of TANDEM_STEP_SECONDS 900" in html


def test_it_names_the_silent_node_on_the_overview(client, people, closed_pool) -> None:
    client.force_login(people.finance)
    window = IngestWindow.objects.filter(start__gte=closed_pool.start).order_by("start").first()
    missing = "completeness: node gpu-node-02 (dcgm-exporter 10.42.0.12:9400) missing 4 GPU(s)"
    IngestWindow.objects.filter(pk=window.pk).update(
        completeness=Decimal("0.5"), warnings=["io: series {} has no pod label", missing]
    )
    html = client.get("/").content.decode()
    assert "1 done with samples missing" in html
    assert missing in html and "io: series" not in html


def test_it_adds_kueues_queue_to_the_overviews_waits(client, people, closed_pool) -> None:
    client.force_login(people.finance)
    html = client.get("/?month=2026-10").content.decode()
    assert "In Kueue's queue" not in html  # no Kueue read: the table as it was
    window = IngestWindow.objects.filter(start__gte=closed_pool.start).order_by("start").first()
    newest = IngestWindow.objects.aggregate(newest=Max("updated"))["newest"]
    IngestWindow.objects.filter(pk=window.pk).update(
        kueue_admissions={"training_batch": {"workloads": 4, "seconds": "14400.000000"}},
        # Past every window's, as a re-ingest moves it (the pages' cache key holds the newest
        # change: the first window's own plus a second could be older, the page then cached).
        updated=newest + dt.timedelta(seconds=1),
    )
    html = client.get("/?month=2026-10").content.decode()
    table = html.split('data-table="waits"', 1)[1].split("</table>", 1)[0]
    row = table.split('data-kind="training_batch"', 1)[1].split("</tr>", 1)[0]
    assert "In Kueue's queue" in table
    assert '60.0 min</td><td class="num">4</td>' in row  # 14,400 s over 4 workloads
    assert "its pods' wait to be scheduled plus its workloads' wait in Kueue's queue" in html


def test_it_compares_the_month_with_the_one_before(client, people) -> None:
    client.force_login(people.finance)
    html = client.get("/?month=2026-10").content.decode()
    assert "October 2026 compared with September 2026" in html
    assert "Is sharing paying off?" in html
    assert 'class="arrow' in html


def test_it_shows_a_task_with_its_preemptions_and_charges(client, people) -> None:
    client.force_login(people.vision_lead)
    task = Task.objects.get(external_id="vision-resnet-train")
    html = client.get(reverse("dashboards:task", args=[task.pk])).content.decode()
    assert html.count("vision-resnet-train-1001-") == 5 + 3  # 5 preemptions, 3 waits
    assert "Starvation compensation" in html or "Preemption compensation" in html
    assert "est." in html  # preemptions without reported lost work are estimated


def test_it_shows_derived_rates_of_each_price_book(client, people, draft_book) -> None:
    client.force_login(people.vision_lead)
    html = client.get(reverse("dashboards:price_books")).content.decode()
    # docs/pricing.md's example book: R = 11.50 + 2.30 + 0.82 x 0.70 = 14.374; R_off = 12.074.
    assert "14.3740" in html and "12.0740" in html
    # The draft: 9.50 + 2.30 + 0.574 = 12.374.
    assert "12.3740" in html
    assert Decimal("12.374") == draft_book.depreciation_per_gpu_hour + Decimal("2.874")


def test_it_keeps_the_overview_to_a_fixed_number_of_queries(
    client, people, django_assert_max_num_queries
) -> None:
    client.force_login(people.finance)
    with django_assert_max_num_queries(40):
        assert client.get("/").status_code == 200
