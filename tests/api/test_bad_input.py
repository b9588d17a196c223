"""Bad input answers 400 with a JSON body naming the parameter; nothing answers 500."""

from __future__ import annotations

import pytest
from django.urls import reverse

GOOD = {"start": "2026-10-01", "end": "2026-10-02"}

CASES = [
    # url name, query, the parameter the error must name
    ("api-usage", {"start": "2026-13-01", "end": "2026-10-02"}, "start"),
    ("api-usage", {"start": "yesterday", "end": "2026-10-02"}, "start"),
    ("api-usage", {"start": "2026-10-01T25:00:00Z", "end": "2026-10-02"}, "start"),
    ("api-usage", {"start": "2026-10-01", "end": "2026-02-30"}, "end"),
    ("api-usage", {"start": "2026-10-05", "end": "2026-10-01"}, "end"),
    ("api-usage", {"start": "2026-10-01T10:00:00Z", "end": "2026-10-01T10:00:00Z"}, "end"),
    ("api-usage", {"start": "2025-01-01", "end": "2026-10-01"}, "end"),
    ("api-usage", {"end": "2026-10-01"}, "start"),
    ("api-usage", {"start": "2026-10-01"}, "end"),
    ("api-usage", {**GOOD, "group_by": "week"}, "group_by"),
    ("api-usage", {"start": "2026-10-01 08:00", "end": "2026-10-01 07:00"}, "end"),
    ("api-usage", {**GOOD, "team": "nosuchteam"}, "team"),
    ("api-usage", {**GOOD, "team": "bravo"}, "team"),  # exists, but not lead A's
    ("api-usage", {**GOOD, "team": "99999999999999999999999"}, "team"),
    ("api-usage", {**GOOD, "team": "al\x00pha"}, "team"),
    ("api-usage", {"start": "\x00", "end": "2026-10-02"}, "start"),
    ("api-usage", {"start": "0001-01-01", "end": "2026-10-02"}, "start"),
    ("api-usage", {"start": "9999-12-31T23:00:00-05:00", "end": "2026-10-02"}, "start"),
    ("api-health", {"start": "2026-10-01"}, "end"),
    ("api-health", {**GOOD, "before_start": "2026-09-01"}, "before_end"),
    (
        "api-health",
        {**GOOD, "before_start": "2026-09-10", "before_end": "2026-09-01"},
        "before_end",
    ),
    (
        "api-health",
        {**GOOD, "before_start": "2026/09/01", "before_end": "2026-09-10"},
        "before_start",
    ),
    ("api-sharing", {"start": "garbage", "end": "2026-10-02"}, "start"),
    ("api-tasks", {"kind": "gaming"}, "kind"),
    ("api-tasks", {"period": "2026-13"}, "period"),
    ("api-tasks", {"period": "October"}, "period"),
    ("api-tasks", {"period": "0000-01"}, "period"),
    ("api-tasks", {"period": "9999-12"}, "period"),
    ("api-tasks", {"team": "nosuchteam"}, "team"),
    ("api-tasks", {"team": "charlie"}, "team"),
    ("api-statements", {"period": "2026-1"}, "period"),
    ("api-statements", {"period": "%s %(x)s %"}, "period"),  # found by schemathesis: was a 500
    ("api-statements", {"team": "bravo"}, "team"),
    ("api-quota-export", {"team": "bravo"}, "team"),
    ("api-quota-export", {"team": "al\x00pha"}, "team"),
    ("api-quota-export", {"quota_only": "maybe"}, "quota_only"),
]


@pytest.mark.parametrize(("name", "query", "parameter"), CASES)
def test_it_answers_400_naming_the_parameter(api_pool, callers, name, query, parameter):
    response = callers["lead_a"].client.get(reverse(name), query)
    assert response.status_code == 400, response.content[:300]
    assert response.headers["Content-Type"] == "application/json"
    assert list(response.json()) == [parameter]


def test_it_gives_the_same_400_for_another_teams_name_and_an_unknown_one(api_pool, callers):
    client = callers["lead_a"].client
    other = client.get(reverse("api-usage"), {**GOOD, "team": "bravo"}).json()
    unknown = client.get(reverse("api-usage"), {**GOOD, "team": "zulu"}).json()
    assert other["team"][0].replace("bravo", "zulu") == unknown["team"][0]


def test_it_accepts_an_unencoded_plus_in_a_zone_offset(api_pool, callers):
    # "+08:00" typed into a URL arrives as " 08:00".
    query = "start=2026-10-01T00:00:00+08:00&end=2026-10-02T00:00:00+08:00"
    response = callers["finance"].client.get(f"{reverse('api-usage')}?{query}")
    assert response.status_code == 200
    assert response.json()["start"] == "2026-09-30T16:00:00Z"


@pytest.mark.parametrize(
    "query",
    [
        {**GOOD, "page": "abc"},
        {**GOOD, "page": "99999"},
        {**GOOD, "page_size": "-5"},
        {**GOOD, "page_size": "100000000000000000000"},
    ],
)
def test_it_never_answers_500_to_paging_nonsense(api_pool, callers, query):
    response = callers["finance"].client.get(reverse("api-usage"), query)
    assert response.status_code in (200, 404)
    assert response.headers["Content-Type"] == "application/json"


@pytest.mark.parametrize("path", ["/api/v1/nothing/", "/api/v1/statements/%0A/", "/api/v1/teams"])
def test_it_answers_json_404_for_unknown_api_paths(api_pool, callers, path):
    # The newline was found by schemathesis: it slipped past the catch-all as HTML.
    response = callers["finance"].client.get(path)
    assert response.status_code == 404
    assert response.headers["Content-Type"] == "application/json"
