"""`usage`: every grouping's numbers equal those computed from the fixture's records."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from metering.models import UsageInterval
from tests import factories as f
from tests.api import expected
from tests.pools.api import END, START

RANGE = {"start": START.isoformat(), "end": END.isoformat()}


def fetch_all(client, query: dict) -> dict:
    body = client.get(reverse("api-usage"), query).json()
    rows = body["results"]
    while body["next"]:
        body = client.get(body["next"]).json()
        rows += body["results"]
    return {row["key"]: row for row in rows}


@pytest.mark.parametrize("group_by", ["team", "task", "kind", "day", "hour"])
def test_it_sums_usage_per_group_as_the_records_do(api_pool, callers, group_by):
    rows = fetch_all(callers["finance"].client, {**RANGE, "group_by": group_by, "page_size": 5})
    wanted = expected.usage_by(api_pool, group_by)
    assert set(rows) == set(wanted)
    for key, numbers in wanted.items():
        got = {field: rows[key][field] for field in expected.api_row(numbers)}
        assert got == expected.api_row(numbers), key


def test_it_names_the_team_task_and_kind_of_a_task_row(api_pool, callers):
    rows = fetch_all(callers["finance"].client, {**RANGE, "group_by": "task"})
    row = rows["bravo-prep"]
    assert (row["team"], row["kind"], row["task_id"]) == (
        "bravo",
        "preprocessing",
        api_pool.tasks["bravo-prep"].pk,
    )


def test_it_narrows_a_team_leads_usage_to_their_teams(api_pool, callers):
    rows = fetch_all(callers["lead_a"].client, {**RANGE, "group_by": "kind"})
    wanted = expected.usage_by(api_pool, "kind", teams={"alpha"})
    assert set(rows) == {"inference", "training_interactive"}
    assert {k: r["allocated_gpu_seconds"] for k, r in rows.items()} == {
        k: expected.places(v["alloc"], 6) for k, v in wanted.items()
    }


def test_it_filters_on_one_team_by_name_or_id(api_pool, callers):
    client = callers["finance"].client
    by_name = fetch_all(client, {**RANGE, "group_by": "task", "team": "bravo"})
    by_id = fetch_all(client, {**RANGE, "group_by": "task", "team": api_pool.teams["bravo"].pk})
    assert set(by_name) == set(by_id) == {"bravo-pretrain", "bravo-prep"}


def test_it_reads_a_bare_end_date_as_that_whole_local_day(api_pool, callers):
    body = (
        callers["finance"]
        .client.get(reverse("api-usage"), {"start": "2026-10-01", "end": "2026-10-01"})
        .json()
    )
    assert (body["start"], body["end"]) == ("2026-09-30T16:00:00Z", "2026-10-01T16:00:00Z")


def test_it_reports_completeness_with_missing_time_as_zero(api_pool, callers):
    body = callers["finance"].client.get(reverse("api-usage"), RANGE).json()
    # Twelve hourly windows, one of them half complete, over exactly those twelve hours.
    assert body["completeness"]["ratio"] == expected.places((11 + 0.5) / 12, 6)
    assert body["completeness"]["windows"]["done"] == 12
    wider = {"start": START.isoformat(), "end": (END + dt.timedelta(hours=12)).isoformat()}
    body = callers["finance"].client.get(reverse("api-usage"), wider).json()
    assert body["completeness"]["ratio"] == expected.places((11 + 0.5) / 24, 6)


def count_queries(client, query: dict) -> int:
    with CaptureQueriesContext(connection) as captured:
        response = client.get(reverse("api-usage"), query)
    assert response.status_code == 200
    return len(captured)


def test_it_answers_usage_with_a_fixed_number_of_queries(api_pool, callers):
    client = callers["finance"].client
    # session, user, role, price book, usage, preemptions, waits, windows, sources; and for
    # groupings by task, team or kind one more for the tasks' names.
    assert count_queries(client, {**RANGE, "group_by": "hour"}) == 9
    assert count_queries(client, {**RANGE, "group_by": "team"}) == 10
    # Ten times the rows, more tasks and far more groups: still the same queries.
    team = api_pool.teams["charlie"]
    tasks = [f.TaskFactory(team=team, external_id=f"extra-{n}") for n in range(20)]
    UsageInterval.objects.bulk_create(
        UsageInterval(
            task=task,
            interval_start=START - dt.timedelta(days=d, minutes=5 * i),
            alloc_gpu_seconds=1,
        )
        for task in tasks
        for d in range(1, 10)
        for i in range(5)
    )
    wide = {"start": (START - dt.timedelta(days=10)).isoformat(), "end": END.isoformat()}
    assert count_queries(client, {**wide, "group_by": "hour"}) == 9
    assert count_queries(client, {**wide, "group_by": "task"}) == 10


def test_it_costs_a_team_lead_no_extra_query_for_their_teams(api_pool, callers):
    assert count_queries(callers["lead_a"].client, {**RANGE, "group_by": "task"}) == 10
