"""The report page and downloads: finance and platform see them, a team lead gets 404."""

from __future__ import annotations

import hashlib

import pytest
from django.urls import reverse

from access.models import Role
from reports import services
from reports.models import ReportRun
from tests.factories import RoleFactory
from tests.helpers import off_site_urls
from tests.pools import reports as pools


@pytest.fixture
def run(report_pool) -> ReportRun:
    created = services.report_run_create(
        period=pools.PERIOD, parameters={"pdf": False}, enqueue=False
    )
    return services.report_run_execute(run_id=created.pk)


def file_url(run: ReportRun, name: str) -> str:
    return reverse("reports:file", args=[run.pk, name])


@pytest.mark.parametrize("who", ["finance", "platform"])
def test_it_shows_the_report_page_to_finance_and_platform(people, who: str) -> None:
    response = people[who].get(reverse("reports:page", args=[pools.PERIOD]))
    assert response.status_code == 200
    html = response.content.decode()
    for heading in ("Effective utilization", "Cost per team", "Pool reconciliation",
                    "SLA record", "Top preempted tasks"):  # fmt: skip
        assert heading in html
    assert "adds up to the cent" in html
    assert 'src="/static/plotly/plotly.min.js"' in html
    assert off_site_urls(html) == []
    assert html.count('class="plotly-graph-div"') == 3
    assert "=HYPERLINK(&quot;" in html  # the evil team name, HTML-escaped, never markup


def test_it_answers_404_to_a_team_lead_and_to_people_without_a_role(people, run) -> None:
    focus = run.files.get(kind="focus_csv").name
    other_team = run.files.exclude(team__name="search").filter(kind="team_csv").first().name
    urls = [
        reverse("reports:page", args=[pools.PERIOD]),
        file_url(run, focus),
        file_url(run, other_team),
    ]
    for who in ("lead", "nobody"):
        for url in urls:
            assert people[who].get(url).status_code == 404, (who, url)
        response = people[who].post(reverse("reports:run_create", args=[pools.PERIOD]))
        assert response.status_code == 404


@pytest.mark.django_db
@pytest.mark.parametrize("period", ["9999-12", "0000-01", "0001-01", "1969-12"])
def test_it_answers_404_for_a_period_whose_year_is_out_of_range(client, period: str) -> None:
    client.force_login(RoleFactory(user__username="fiona", name=Role.Name.FINANCE).user)
    assert client.get(reverse("reports:page", args=[period])).status_code == 404
    assert client.post(reverse("reports:run_create", args=[period])).status_code == 404
    assert not ReportRun.objects.exists()


def test_it_tells_people_without_a_role_that_they_have_no_access_to_the_run_list(
    people, run
) -> None:
    response = people["nobody"].get(reverse("reports:runs"))
    assert response.status_code == 403
    assert "No access" in response.content.decode()
    assert run.files.first().name not in response.content.decode()


def test_it_lets_a_team_lead_download_only_their_own_team_csv(people, run) -> None:
    own = run.files.get(team__name="search")
    response = people["lead"].get(file_url(run, own.name))
    assert response.status_code == 200
    assert hashlib.sha256(b"".join(response.streaming_content)).hexdigest() == own.sha256
    listing = people["lead"].get(reverse("reports:runs")).content.decode()
    assert own.name in listing
    assert "focus.csv" not in listing and "vision" not in listing


def test_it_sends_anonymous_visitors_to_log_in(people, run) -> None:
    for url in (reverse("reports:page", args=[pools.PERIOD]), file_url(run, "focus.csv")):
        response = people["anonymous"].get(url)
        assert response.status_code == 302 and "/accounts/login/" in response["Location"]


def test_it_serves_finance_the_files_with_their_sha256(people, run) -> None:
    for report_file in run.files.all():
        response = people["finance"].get(file_url(run, report_file.name))
        assert response.status_code == 200
        body = b"".join(response.streaming_content)
        assert body == report_file.path.read_bytes()
        assert response["X-Content-SHA256"] == report_file.sha256
        assert "attachment" in response["Content-Disposition"]


@pytest.mark.parametrize("period", ["2026-13", "2026-08"])
def test_it_answers_404_for_a_bad_or_open_month(people, period: str) -> None:
    assert people["finance"].get(reverse("reports:page", args=[period])).status_code == 404
    response = people["finance"].post(reverse("reports:run_create", args=[period]))
    assert response.status_code == 404
    assert not ReportRun.objects.exists()


def test_it_queues_an_on_demand_run_from_the_page(
    people, django_capture_on_commit_callbacks
) -> None:
    with django_capture_on_commit_callbacks() as callbacks:
        response = people["finance"].post(reverse("reports:run_create", args=[pools.PERIOD]))
    assert response.status_code == 302
    run = ReportRun.objects.get()
    assert (run.kind, run.status, run.requested_by.username) == ("on_demand", "queued", "fiona")
    assert len(callbacks) == 1


def test_it_refuses_a_get_on_the_run_button_and_a_missing_file(people, run) -> None:
    assert (
        people["finance"].get(reverse("reports:run_create", args=[pools.PERIOD])).status_code == 405
    )
    assert people["finance"].get(file_url(run, "nope.csv")).status_code == 404
