"""Statements, price books, the quota export (ETag, 304, scope) and its Prometheus form."""

from __future__ import annotations

import datetime as dt
import subprocess
from decimal import ROUND_HALF_UP, Decimal

import pytest
from django.urls import reverse
from django.utils import timezone

from billing.models import PriceBook
from billing.scenarios import scenario_build, scenario_price
from billing.services import month_to_date_draft_refresh
from metering.models import IngestWindow, UsageInterval
from tests import factories as f
from tests.api import expected
from tests.pools.api import ZONE

# The default price book (docs/pricing.md's example): R = D + F + E*W, R_off = D + E*W.
STANDARD = Decimal("11.50") + Decimal("2.30") + Decimal("0.82") * Decimal("0.70")
OFFPEAK = Decimal("11.50") + Decimal("0.82") * Decimal("0.70")
TRAINING = ("training_interactive", "training_batch", "preprocessing")

# --- Statements and price books ---------------------------------------------------------


def test_it_lists_statements_with_lines_and_the_scenario_hash(api_pool, callers):
    body = callers["finance"].client.get(reverse("api-statements"), {"period": "2026-10"}).json()
    assert [s["team"] for s in body["results"]] == ["alpha", "bravo"]
    alpha = body["results"][0]
    assert alpha["total"] == "30.00"
    assert [(line["kind"], line["amount"]) for line in alpha["lines"]] == [
        ("standard", "25.00"),
        ("baseline", "5.00"),
    ]
    assert alpha["lines"][0]["rate_per_gpu_hour"] == "14.374"
    assert alpha["scenario_sha256"] == "ab" * 32
    assert (alpha["price_book_version"], alpha["currency"]) == (1, "CNY")
    assert alpha["incomplete_reason"] == ""


def test_it_says_why_a_month_was_closed_incomplete(api_pool, callers):
    reason = "Prometheus lost 10-12 August"
    close = f.PeriodCloseFactory(
        period="2026-08",
        incomplete_reason=reason,
        incomplete_ranges=[{"message": "default has no ingest window from ..."}],
    )
    f.StatementFactory(period_close=close, team=api_pool.teams["alpha"], total="0.00")

    body = callers["finance"].client.get(reverse("api-statements"), {"period": "2026-08"}).json()

    assert [s["incomplete_reason"] for s in body["results"]] == [reason]


@pytest.mark.parametrize(
    ("query", "teams"),
    [
        ({"period": "2026-09"}, []),
        ({"team": "bravo"}, ["bravo"]),
        ({"period": "2026-10", "team": "alpha"}, ["alpha"]),
    ],
)
def test_it_filters_statements_by_period_and_team(api_pool, callers, query, teams):
    body = callers["finance"].client.get(reverse("api-statements"), query).json()
    assert [s["team"] for s in body["results"]] == teams


def test_it_lists_price_books_with_decimal_strings(api_pool, callers):
    body = callers["lead_a"].client.get(reverse("api-price-books")).json()
    books = {book["version"]: book for book in body["results"]}
    assert books[1]["status"] == "published"
    assert books[api_pool.draft_book.version]["status"] == "draft"
    assert Decimal(books[1]["depreciation_per_gpu_hour"]) == Decimal("11.50")
    assert isinstance(books[1]["depreciation_per_gpu_hour"], str)


# --- Quota export -----------------------------------------------------------------------


def expected_quota(api_pool, team: str) -> dict:
    """Month to date up to the newest ingested data: GPU-hours and money at book v1's rates."""
    now = timezone.now()
    as_of = max(w.end for w in IngestWindow.objects.filter(status="done", end__lte=now))
    upto = min(as_of, now)
    gpu_seconds, money = Decimal(0), Decimal(0)
    for u in api_pool.usage:
        if api_pool.team_of(u.task) == team and api_pool.month_start <= u.interval < upto:
            offpeak = (
                api_pool.kind_of(u.task) in TRAINING
                and not 9 <= u.interval.astimezone(ZONE).hour < 22
            )
            gpu_seconds += u.alloc
            money += u.alloc * (OFFPEAK if offpeak else STANDARD)
    return {
        "team": team,
        "period": f"{now.astimezone(ZONE):%Y-%m}",
        "used_gpu_hours": expected.hours(gpu_seconds),
        "list_price_estimate": str((money / 3600).quantize(Decimal("0.01"), ROUND_HALF_UP)),
        "currency": "CNY",
        "as_of": as_of.isoformat().replace("+00:00", "Z"),
        "price_book_version": 1,
    }


def test_it_exports_each_teams_quota_as_the_records_give(api_pool, callers):
    body = callers["token_quota"].client.get(reverse("api-quota-export")).json()
    teams = {row["team"]: row for row in body["teams"]}
    assert set(teams) == {"alpha", "bravo"}  # charlie has no quota
    for name, row in teams.items():
        wanted = expected_quota(api_pool, name)
        assert {k: row[k] for k in wanted} == wanted
        assert Decimal(row["used_gpu_hours"]) > 0
    alpha, bravo = teams["alpha"], teams["bravo"]
    assert alpha["remaining_gpu_hours"] == str(Decimal("100.00") - Decimal(alpha["used_gpu_hours"]))
    # No draft priced yet: the money allowance is counted against the list estimate, and the
    # draft's fields say there is none.
    assert alpha["remaining_money"] == str(
        Decimal("1000.00") - Decimal(alpha["list_price_estimate"])
    )
    assert alpha["remaining_money_basis"] == "list_price_estimate"
    assert (alpha["month_to_date_amount"], alpha["month_to_date_as_of"]) == (None, None)
    assert alpha["month_to_date_stale"] is True and alpha["month_to_date_lines"] == {}
    assert (alpha["over_quota"], bravo["over_quota"]) == (False, True)
    assert (bravo["allowance_money"], bravo["concurrent_gpu_cap"]) == (None, "16.000")
    assert bravo["io_caps"] == {"training_batch": "5000", "preprocessing": "250.5"}
    assert isinstance(alpha["lag_seconds"], int) and alpha["lag_seconds"] >= 0


def engine_totals(start: dt.datetime, end: dt.datetime) -> dict[str, dict]:
    """Each team's statement lines and total for `[start, end)`, as a close builds and prices
    that range (the book in force, the same scenario builder and engine)."""
    book = PriceBook.objects.get(version=1)
    result = scenario_price(scenario_build(start=start, end=end, price_book=book)).result
    return {
        team.team: {
            "total": str(team.total),
            "lines": {line.kind: str(line.rounded) for line in team.lines},
        }
        for team in result.teams
    }


def exported(client, **query) -> dict[str, dict]:
    response = client.get(reverse("api-quota-export"), query)
    assert response.status_code == 200, response.content[:300]
    return {row["team"]: row for row in response.json()["teams"]}


def test_it_exports_the_month_to_date_draft_beside_the_list_estimate(api_pool, callers):
    month_to_date_draft_refresh()

    teams = exported(callers["token_quota"].client)

    as_of = dt.datetime.fromisoformat(teams["alpha"]["month_to_date_as_of"])
    assert as_of == api_pool.month_start + dt.timedelta(hours=1)  # the month's window
    priced = engine_totals(api_pool.month_start, as_of)
    assert sorted(priced) == ["alpha", "bravo"]
    for name, wanted in priced.items():
        row = teams[name]
        assert row["month_to_date_amount"] == wanted["total"], name
        assert row["month_to_date_lines"] == wanted["lines"], name
        assert row["month_to_date_stale"] is False and row["month_to_date_error"] is None
    alpha = teams["alpha"]  # inference: its statement carries the reserve's baseline
    assert Decimal(alpha["month_to_date_lines"]["baseline"]) > 0
    assert alpha["month_to_date_amount"] != alpha["list_price_estimate"]
    assert alpha["remaining_money_basis"] == "month_to_date_amount"
    assert alpha["remaining_money"] == str(
        Decimal("1000.00") - Decimal(alpha["month_to_date_amount"])
    )


def test_it_lists_a_team_with_usage_this_month_and_no_quota(api_pool, callers):
    UsageInterval.objects.create(
        task=api_pool.tasks["charlie-chat"],
        interval_start=api_pool.month_start,
        alloc_gpu_seconds=Decimal("100"),
    )
    month_to_date_draft_refresh()
    client = callers["token_quota"].client

    teams = exported(client)

    assert sorted(teams) == ["alpha", "bravo", "charlie"]
    charlie = teams["charlie"]
    assert charlie["used_gpu_hours"] == "0.03"  # 100 GPU-seconds
    assert Decimal(charlie["month_to_date_amount"]) > 0
    for field in (
        "allowance_gpu_hours",
        "remaining_gpu_hours",
        "allowance_money",
        "remaining_money",
        "remaining_money_basis",
        "concurrent_gpu_cap",
    ):
        assert charlie[field] is None, field
    assert charlie["over_quota"] is False and charlie["io_caps"] == {}
    assert sorted(exported(client, quota_only="true")) == ["alpha", "bravo"]
    assert sorted(exported(client, team="charlie")) == ["charlie"]


def test_it_exports_only_a_team_leads_own_quota(api_pool, callers):
    body = callers["token_lead"].client.get(reverse("api-quota-export")).json()
    assert [row["team"] for row in body["teams"]] == ["alpha"]


def test_it_refuses_the_export_to_a_token_without_quota_read(api_pool, callers):
    for name in ("api-quota-export", "api-quota-metrics"):
        response = callers["token_read"].client.get(reverse(name))
        assert response.status_code == 403
        assert "quota:read" in response.content.decode()


def test_it_answers_304_while_the_quota_numbers_stay_the_same(api_pool, callers):
    client = callers["token_quota"].client
    first = client.get(reverse("api-quota-export"))
    etag = first.headers["ETag"]
    assert etag.startswith('W/"')
    again = client.get(reverse("api-quota-export"), HTTP_IF_NONE_MATCH=etag)
    assert again.status_code == 304
    assert again.content == b""
    assert again.headers["ETag"] == etag
    listed = client.get(reverse("api-quota-export"), HTTP_IF_NONE_MATCH=f'"x", {etag}')
    assert listed.status_code == 304
    assert client.get(reverse("api-quota-export"), HTTP_IF_NONE_MATCH="*").status_code == 304
    stale = client.get(reverse("api-quota-export"), HTTP_IF_NONE_MATCH='W/"something-else"')
    assert stale.status_code == 200


def test_it_changes_the_etag_when_the_draft_is_refreshed(api_pool, callers):
    client = callers["token_quota"].client
    url = reverse("api-quota-export")
    before = client.get(url).headers["ETag"]

    month_to_date_draft_refresh()
    drafted = client.get(url, HTTP_IF_NONE_MATCH=before)

    assert drafted.status_code == 200 and drafted.headers["ETag"] != before
    etag = drafted.headers["ETag"]
    assert client.get(url, HTTP_IF_NONE_MATCH=etag).status_code == 304
    # New data for the month: the draft is served stale (a new ETag) until a refresh.
    UsageInterval.objects.filter(
        task=api_pool.tasks["bravo-pretrain"], interval_start__gte=api_pool.month_start
    ).update(alloc_gpu_seconds=Decimal("1"))
    IngestWindow.objects.filter(start=api_pool.month_start).update(updated=timezone.now())
    stale = client.get(url, HTTP_IF_NONE_MATCH=etag)
    assert stale.status_code == 200 and stale.headers["ETag"] != etag
    drafted_bravo = bravo_of(drafted)
    assert bravo_of(stale)["month_to_date_stale"] is True
    assert bravo_of(stale)["month_to_date_amount"] == drafted_bravo["month_to_date_amount"]
    month_to_date_draft_refresh()
    fresh = client.get(url, HTTP_IF_NONE_MATCH=stale.headers["ETag"])
    assert fresh.status_code == 200
    assert bravo_of(fresh)["month_to_date_stale"] is False
    assert bravo_of(fresh)["month_to_date_amount"] != drafted_bravo["month_to_date_amount"]


def bravo_of(response) -> dict:
    return {row["team"]: row for row in response.json()["teams"]}["bravo"]


def test_it_answers_400_naming_a_bad_quota_parameter_in_prometheus_text(api_pool, callers):
    response = callers["token_quota"].client.get(
        reverse("api-quota-metrics"), {"quota_only": "perhaps"}
    )
    assert response.status_code == 400
    assert response.content.decode().startswith('# error: {"quota_only": ')


def test_it_changes_the_etag_when_usage_changes(api_pool, callers):
    client = callers["token_quota"].client
    etag = client.get(reverse("api-quota-export")).headers["ETag"]
    UsageInterval.objects.create(
        task=api_pool.tasks["alpha-notebook"],
        interval_start=api_pool.month_start + dt.timedelta(minutes=5),
        alloc_gpu_seconds=Decimal("0"),
    )  # a zero row changes no number: same validator
    assert client.get(reverse("api-quota-export"), HTTP_IF_NONE_MATCH=etag).status_code == 304
    UsageInterval.objects.filter(task=api_pool.tasks["alpha-search"]).update(
        alloc_gpu_seconds=Decimal("299")
    )
    response = client.get(reverse("api-quota-export"), HTTP_IF_NONE_MATCH=etag)
    assert response.status_code == 200
    assert response.headers["ETag"] != etag


def test_it_says_when_two_sources_meter_the_same_gpus_this_month(api_pool, callers):
    """A scheduler enforcing `used` would hold a team back for GPU time counted twice: the
    export says so, with the pair, while it lasts."""
    client = callers["token_quota"].client
    first = client.get(reverse("api-quota-export"))
    assert first.json()["metered_twice"] == []
    one, other = f.SourceFactory(name="prom-a"), f.SourceFactory(name="thanos")
    span = (api_pool.month_start, api_pool.month_start + dt.timedelta(hours=2))
    for source in (one, other):
        f.gpu_sighting(source, "GPU-1", span)
    response = client.get(reverse("api-quota-export"), HTTP_IF_NONE_MATCH=first.headers["ETag"])
    assert response.status_code == 200  # the same teams' numbers, but not the same answer
    (twice,) = response.json()["metered_twice"]
    assert twice["sources"] == ["prom-a", "thanos"]
    assert (twice["gpus"], twice["gpu_hours"]) == (1, "2.00")
    assert twice["message"].startswith("sources prom-a and thanos both meter 1 GPU(s)")
    text = client.get(reverse("api-quota-metrics")).content.decode()
    assert 'tandem_quota_gpus_metered_twice{source="prom-a",other_source="thanos"} 1\n' in text
    lint = subprocess.run(
        ["promtool", "check", "metrics"], input=text, capture_output=True, text=True
    )
    assert lint.returncode == 0, lint.stdout + lint.stderr


# --- Prometheus text --------------------------------------------------------------------


def parse_metrics(text: str) -> dict[tuple[str, str], str]:
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#") and 'team="' in line:
            series, value = line.rsplit(" ", 1)
            name, labels = series.split("{", 1)
            team = labels.split('team="', 1)[1].split('"', 1)[0]
            samples[(name, team)] = value
    return samples


def test_it_serves_the_same_numbers_as_valid_prometheus_text(api_pool, callers):
    month_to_date_draft_refresh()
    client = callers["token_quota"].client
    export = {row["team"]: row for row in client.get(reverse("api-quota-export")).json()["teams"]}
    response = client.get(reverse("api-quota-metrics"), HTTP_ACCEPT="application/openmetrics-text")
    assert response.status_code == 200
    assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    text = response.content.decode()
    lint = subprocess.run(
        ["promtool", "check", "metrics"], input=text, capture_output=True, text=True
    )
    assert lint.returncode == 0, lint.stdout + lint.stderr
    samples = parse_metrics(text)
    for team, row in export.items():
        used_gpu_seconds = Decimal(samples[("tandem_quota_used_gpu_seconds", team)])
        assert used_gpu_seconds == Decimal(row["used_gpu_hours"]) * 3600
        estimate = samples[("tandem_quota_list_price_estimate_money", team)]
        assert estimate == row["list_price_estimate"]
        assert samples[("tandem_quota_month_to_date_money", team)] == row["month_to_date_amount"]
        assert samples[("tandem_quota_month_to_date_stale", team)] == "0"
        as_of = dt.datetime.fromisoformat(row["month_to_date_as_of"])
        timestamp = samples[("tandem_quota_month_to_date_as_of_timestamp_seconds", team)]
        assert timestamp == str(int(as_of.timestamp()))
        for kind, amount in row["month_to_date_lines"].items():
            labels = f'team="{team}",period="{row["period"]}",kind="{kind}",currency="CNY"'
            assert f"tandem_quota_month_to_date_line_money{{{labels}}} {amount}\n" in text
        assert samples[("tandem_quota_over", team)] == ("1" if row["over_quota"] else "0")
    assert ("tandem_quota_allowance_money", "bravo") not in samples  # no allowance, no sample
    assert "\ntandem_quota_gpus_metered_twice 0\n" in text  # no two sources meter one GPU
    assert samples[("tandem_quota_io_cap_operations_per_second", "bravo")] in ("5000", "250.5")


def test_it_escapes_label_values_in_prometheus_text(api_pool, callers):
    team = api_pool.teams["alpha"]
    team.name = 'al"pha\\ops'
    team.save()
    text = callers["token_quota"].client.get(reverse("api-quota-metrics")).content.decode()
    assert 'team="al\\"pha\\\\ops"' in text
    lint = subprocess.run(
        ["promtool", "check", "metrics"], input=text, capture_output=True, text=True
    )
    assert lint.returncode == 0, lint.stdout + lint.stderr


def test_it_exports_in_a_fixed_number_of_queries(api_pool, callers, django_assert_num_queries):
    # What a scheduler polls: the same queries however many teams, and never the pricing;
    # one of them asks whether two sources meter the same GPUs, one where the month before
    # ended as it was closed (the month starts there: billing.selectors.period_bounds_to_price).
    for number in range(5):
        UsageInterval.objects.create(
            task=f.TaskFactory(team=f.TeamFactory(name=f"extra{number}"), kind="inference"),
            interval_start=api_pool.month_start,
            alloc_gpu_seconds=Decimal("10"),
        )
    month_to_date_draft_refresh()
    client = callers["token_quota"].client
    with django_assert_num_queries(11):
        response = client.get(reverse("api-quota-export"))
    assert len(response.json()["teams"]) == 7
