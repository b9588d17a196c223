"""Hostile input on pages and the API: HTML/JS in names, malformed and oversized parameters.

Names come from exporters' labels (a team is a namespace, a task a pod's owner), so anybody
who can start a pod can name one `<script>…`. Every page renders them escaped. Query strings
and path parameters that are malformed, huge or out of range answer 4xx, never 500 (the
Django test client raises the view's exception instead of answering 500, so a crash fails
the test at the request that caused it).
"""

from __future__ import annotations

import pytest
from django.urls import reverse

from tests.security.conftest import Objects
from tests.security.test_authorization_table import all_calls

TEAM = '<script>alert("team")</script>'
TASK = '<script>alert("task")</script>'
SERVICE = '<img src=x onerror=alert("service")>'
RAW = ["<script>alert(", "<img src=x onerror"]


@pytest.fixture
def hostile_names(objects: Objects) -> Objects:
    api_pool = objects.pool
    bravo = api_pool.teams["bravo"]
    bravo.name = TEAM
    bravo.save()
    task = api_pool.tasks["bravo-pretrain"]
    task.external_id = TASK
    task.save()
    service = api_pool.services["bravo/embed"]
    service.external_id = SERVICE
    service.save()
    return objects


def html_pages(objects: Objects, caller: str) -> list[str]:
    return [
        call.url
        for _, call in all_calls(objects)
        if call.method == "get" and call.expected[caller] == 200 and not call.query
    ]


@pytest.mark.parametrize("caller", ["finance", "platform_admin"])
def test_it_escapes_html_in_team_task_and_service_names_on_every_page(
    hostile_names, page_callers, caller
):
    client = page_callers[caller].client
    pages = [
        *html_pages(hostile_names, caller),
        # pages where the hostile objects themselves are shown, and the admin's own lists
        reverse("dashboards:team", args=[hostile_names.pool.teams["bravo"].pk]),
        reverse("dashboards:task", args=[hostile_names.pool.tasks["bravo-pretrain"].pk]),
        reverse(
            "dashboards:statement_detail", args=["2026-10", hostile_names.pool.teams["bravo"].pk]
        ),
    ]
    if caller == "platform_admin":
        pages += [
            reverse("admin:metering_team_changelist"),
            reverse("admin:metering_task_changelist"),
            reverse("admin:metering_service_changelist"),
            reverse("admin:billing_statement_changelist"),
            reverse("admin:audit_auditentry_changelist"),
        ]
    shown = 0
    for url in pages:
        response = client.get(url)
        if response.status_code != 200 or "text/html" not in response["Content-Type"]:
            continue
        body = response.content.decode()
        for raw in RAW:
            assert raw not in body, (url, body[max(0, body.find(raw) - 200) : body.find(raw) + 200])
        shown += "&lt;script&gt;alert(" in body or "&lt;img src=x onerror" in body
    assert shown >= 5  # the names really were on the pages, escaped


BAD_QUERIES = [
    {"start": "9" * 5000},
    {"start": "2026-13-45", "end": "0000-00-00"},
    {"start": "2026-10-01\x00", "end": "2026-10-02"},
    {"start": "2026-10-02", "end": "2020-01-01"},
    {"start": "0001-01-01", "end": "9999-12-31"},
    {"team": "9" * 40},
    {"team": "-1"},
    {"team": "<script>alert(1)</script>"},
    {"kind": "<script>alert(1)</script>"},
    {"page": "99999999999999999999"},
    {"page": "-1"},
    {"csv": "../../../etc/passwd"},
    {"format": "json", "task": "9" * 40},
    # Unicode digits: str.isdigit() says yes, int() refuses (kernel/numbers.py).
    {"team": "\u00b9"},
    {"task": "\u00b2", "service": "\u00b3", "draft": "\u00b9"},
    {"period": "x" * 3000},
    {"ordering": "'; DROP TABLE metering_team; --"},
    {f"p{n}": "v" * 100 for n in range(200)},
]
RAW_QUERIES = [
    "team=%FF%FE&kind=%C0%AF",  # bytes that are not UTF-8
    "start=%00&end=%00",
    "team=1&team=2&team=3",
    "csv",
    "%",
]


def test_it_never_answers_500_to_malformed_or_oversized_parameters(objects, page_callers):
    client = page_callers["finance"].client
    urls = [
        call.url
        for _, call in all_calls(objects)
        if call.method == "get" and not call.url.startswith("/admin/")
    ]
    seen = 0
    for url in urls:
        for query in BAD_QUERIES:
            response = client.get(url, query)
            assert response.status_code < 500, (url, query)
            seen += 1
        for raw in RAW_QUERIES:
            response = client.get(f"{url}?{raw}")
            assert response.status_code < 500, (url, raw)
    assert seen > 300


def bad_paths(objects: Objects) -> list[str]:
    huge = 10**30
    run = objects.run.pk
    return [
        f"/teams/{huge}/",
        f"/tasks/{huge}/",
        f"/statement-lines/{huge}/",
        f"/statements/2026-10/teams/{huge}/",
        "/statements/%3Cscript%3E/",
        "/statements/9999-99/",
        "/statements/" + "9" * 3000 + "/",
        "/reports/9999-99/",
        f"/reports/statement-lines/{huge}/explain/",
        f"/reports/runs/{huge}/files/x.csv",
        f"/reports/runs/{run}/files/..%2F..%2F..%2Fetc%2Fpasswd",
        f"/reports/runs/{run}/files/%00.csv",
        f"/api/v1/teams/{huge}/",
        f"/api/v1/tasks/{huge}/",
        f"/api/v1/statements/{huge}/",
        f"/api/v1/price-books/{huge}/",
        "/api/v1/" + "x/" * 2000,
    ]


@pytest.mark.parametrize("caller", ["finance", "lead_a"])
def test_it_answers_404_to_out_of_range_and_malformed_path_parameters(
    objects, page_callers, caller
):
    client = page_callers[caller].client
    for path in bad_paths(objects):
        response = client.get(path)
        assert response.status_code in (400, 404), (path, response.status_code)
