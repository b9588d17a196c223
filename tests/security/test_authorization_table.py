"""Who may open what: every URL pattern of the URL conf against every kind of caller.

The patterns are walked with `get_resolver`, so a route added anywhere without a row here
fails `test_it_has_a_row_for_every_url_pattern`. Path parameters come from the API tests' pool
(teams alpha and bravo, lead A leads alpha) plus a report run with three files. Objects that
belong to a team are opened twice: lead A's own (alpha's) and another team's (bravo's).

Expectations per group:
- pages (dashboards) need a session and a role: anonymous callers and API tokens go to the
  login page, a user without a role gets 403, a team lead 404 for another team's object;
- reports: the monthly report and starting a run are for finance and platform (404 for others,
  never 403); a lead downloads and explains only their own team's files and lines;
- API (api/v1/): the rules of tests/api/test_boundary.py (401 anonymous, 403 wrong scope or no
  role, 404 another team's object);
- admin: only the platform admin (staff) gets in; everyone else is sent to the admin login.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from django.apps import apps
from django.contrib import admin
from django.contrib.contenttypes.models import ContentType
from django.urls import URLPattern, URLResolver, get_resolver, reverse

from reports.models import ReportRun
from tests.api.test_boundary import RANGE, expected_status
from tests.security.conftest import Objects

CALLERS = [
    "anonymous",
    "no_role",
    "lead_a",
    "finance",
    "platform",
    "platform_admin",
    "token_read",
    "token_quota",
    "token_lead",
    "token_revoked",
]
EVERY_TEAM = {"finance", "platform", "platform_admin"}
TOKENS = {"token_read", "token_quota", "token_lead", "token_revoked"}
LOGIN = "LOGIN"  # a redirect to /accounts/login/
ADMIN_LOGIN = "ADMIN_LOGIN"  # a redirect to /admin/login/
ADMIN_IN = "ADMIN_IN"  # the admin answered for itself: 200, 302 inside the admin, or 403


def url_patterns() -> Iterator[tuple[str, str]]:
    """(route, qualified name) of every pattern, with the routes of their includes prefixed."""

    def walk(patterns, prefix: str, namespace: str) -> Iterator[tuple[str, str]]:
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                inner = ":".join(n for n in (namespace, pattern.namespace) if n)
                yield from walk(pattern.url_patterns, prefix + str(pattern.pattern), inner)
            else:
                assert isinstance(pattern, URLPattern)
                name = ":".join(n for n in (namespace, pattern.name or "") if n)
                yield prefix + str(pattern.pattern), name

    yield from walk(get_resolver().url_patterns, "", "")


# --- Rows: how to call each pattern, and who may --------------------------------------------


@dataclass(frozen=True)
class Call:
    url: str
    expected: dict[str, int | str]  # caller -> status, or LOGIN / ADMIN_LOGIN / ADMIN_IN
    method: str = "get"
    query: dict | None = None
    label: str = ""


def page_expectation(*, own: bool = True, role_needed: int = 403) -> dict[str, int | str]:
    """A dashboards page: login, then a role; a lead sees own objects, 404 for others'."""
    result: dict[str, int | str] = {name: LOGIN for name in ["anonymous", *TOKENS]}
    result["no_role"] = role_needed
    result["lead_a"] = 200 if own else 404
    result.update({name: 200 for name in EVERY_TEAM})
    return result


def every_team_only(success: int = 200) -> dict[str, int | str]:
    result: dict[str, int | str] = {name: LOGIN for name in ["anonymous", *TOKENS]}
    result.update(no_role=404, lead_a=404)
    result.update({name: success for name in EVERY_TEAM})
    return result


def reports_team_object(*, own: bool) -> dict[str, int | str]:
    result = every_team_only()
    result["lead_a"] = 200 if own else 404
    return result


def everyone(status: int) -> dict[str, int | str]:
    return {name: status for name in CALLERS}


def page_calls(name: str, obj: Objects) -> list[Call]:
    api_pool = obj.pool
    alpha, bravo = api_pool.teams["alpha"], api_pool.teams["bravo"]
    own_line = api_pool.statements["alpha"].lines.first()
    other_line = api_pool.statements["bravo"].lines.first()

    def both(view: str, own_args: tuple, other_args: tuple) -> list[Call]:
        return [
            Call(reverse(view, args=own_args), page_expectation(own=True), label="own"),
            Call(reverse(view, args=other_args), page_expectation(own=False), label="other"),
        ]

    simple = ["overview", "utilization", "teams", "sla", "statements", "price_books"]
    if name in (f"dashboards:{view}" for view in simple):
        return [Call(reverse(name), page_expectation())]
    rows = {
        "dashboards:team": lambda: both(name, (alpha.pk,), (bravo.pk,)),
        "dashboards:task": lambda: both(
            name, (api_pool.tasks["alpha-search"].pk,), (api_pool.tasks["bravo-pretrain"].pk,)
        ),
        "dashboards:statement_period": lambda: [
            Call(reverse(name, args=["2026-10"]), page_expectation())
        ],
        "dashboards:statement_detail": lambda: both(
            name, ("2026-10", alpha.pk), ("2026-10", bravo.pk)
        ),
        "dashboards:statement_line": lambda: both(name, (own_line.pk,), (other_line.pk,)),
        "reports:runs": lambda: [
            Call(reverse(name), {**every_team_only(), "no_role": 403, "lead_a": 200})
        ],
        "reports:page": lambda: [Call(reverse(name, args=["2026-10"]), every_team_only())],
        "reports:run_create": lambda: [
            Call(reverse(name, args=["2026-10"]), every_team_only(302), method="post")
        ],
        "reports:file": lambda: [
            Call(
                reverse(name, args=[obj.run.pk, obj.files["alpha"].name]),
                reports_team_object(own=True),
                label="own",
            ),
            Call(
                reverse(name, args=[obj.run.pk, obj.files["bravo"].name]),
                reports_team_object(own=False),
                label="other",
            ),
            Call(
                reverse(name, args=[obj.run.pk, obj.files["pdf"].name]),
                every_team_only(),
                label="pdf",
            ),
        ],
        "reports:explain": lambda: [
            Call(reverse(name, args=[own_line.pk]), reports_team_object(own=True), label="own"),
            Call(
                reverse(name, args=[other_line.pk]), reports_team_object(own=False), label="other"
            ),
        ],
        "login": lambda: [Call(reverse(name), everyone(200))],
        "logout": lambda: [Call(reverse(name), everyone(LOGIN), method="post", label="last")],
    }
    return rows[name]() if name in rows else []


def api_calls(name: str, obj: Objects) -> list[Call]:
    from tests.api.test_boundary import url_cases

    cases = url_cases(obj.pool)
    if name not in cases:
        return []
    case = cases[name]
    calls = []
    for variant in ("other", "own"):
        if variant not in case:
            continue
        args, query = case[variant]
        expected = {}
        for caller in CALLERS:
            as_api = "platform" if caller == "platform_admin" else caller
            status = expected_status(case, as_api, is_detail=bool(args))
            if variant == "own" and status == 404:
                status = 200  # a lead's own object
            expected[caller] = status
        calls.append(Call(reverse(name, args=args), expected, query=query, label=variant))
    return calls


ADMIN_MODEL_ROUTE = re.compile(
    r"^admin/(?P<app>\w+)/(?P<model>\w+)/"
    r"(?P<rest>|add/|<path:object_id>/(?:history/|delete/|change/)?|<id>/password/)$"
)


def admin_expectation() -> dict[str, int | str]:
    result: dict[str, int | str] = {name: ADMIN_LOGIN for name in CALLERS}
    result["platform_admin"] = ADMIN_IN
    return result


def admin_calls(route: str, name: str) -> list[Call]:
    if not route.startswith("admin/"):
        return []
    site_pages = ("admin:index", "admin:password_change", "admin:password_change_done")
    if name in (*site_pages, "admin:autocomplete", "admin:jsi18n"):
        return [Call(reverse(name), admin_expectation())]
    if match := ADMIN_MODEL_ROUTE.match(route):
        model = apps.get_model(match["app"], match["model"])
        assert admin.site.is_registered(model), route
        stored = model._default_manager.order_by("pk").first()
        object_id = str(stored.pk) if stored is not None else "999999999"
        url = "/" + route.replace("<path:object_id>", object_id).replace("<id>", object_id)
        return [Call(url, admin_expectation(), label=match["rest"] or "changelist")]
    if name == "admin:login":
        result = everyone(200)
        result["platform_admin"] = 302  # already in: on to the index
        return [Call(reverse(name), result)]
    if name == "admin:logout":
        # Logs the caller out, so it runs last (see all_calls).
        # Staff see the "logged out" page; the others are sent on (Django's own behaviour).
        result = {**everyone(302), "platform_admin": 200}
        return [Call(reverse(name), result, method="post", label="last")]
    if name == "admin:app_list":
        return [Call(reverse(name, args=["metering"]), admin_expectation())]
    if name == "admin:view_on_site":
        team_type = ContentType.objects.get_for_model(apps.get_model("metering", "Team"))
        some_team = apps.get_model("metering", "Team").objects.order_by("pk").first()
        url = reverse(name, args=[team_type.pk, some_team.pk])
        # Only for staff; it redirects to an object's page, and a team has none: 404.
        return [Call(url, {**admin_expectation(), "platform_admin": 404})]
    if route == "admin/(?P<url>.*)$":
        # Unknown admin addresses: the login for outsiders (nothing to probe), 404 for staff.
        return [Call("/admin/no/such/page/", {**admin_expectation(), "platform_admin": 404})]
    return []


def calls_for(route: str, name: str, obj: Objects) -> list[Call]:
    if route.startswith("api/v1/"):
        return api_calls(name, obj)
    return admin_calls(route, name) or page_calls(name, obj)


# --- The tests ------------------------------------------------------------------------------


def test_it_has_a_row_for_every_url_pattern(objects):
    missing = [
        (route, name) for route, name in url_patterns() if not calls_for(route, name, objects)
    ]
    assert missing == []
    assert len(list(url_patterns())) > 100  # the walk really went into the includes


def outcome(response) -> int | str:
    location = response.headers.get("Location", "")
    if response.status_code == 302 and location.startswith("/accounts/login/"):
        return LOGIN
    if response.status_code == 302 and location.startswith("/admin/login/"):
        return ADMIN_LOGIN
    return response.status_code


def matches(expected: int | str, response) -> bool:
    got = outcome(response)
    if expected == ADMIN_IN:
        return got in (200, 302, 403) and got not in (LOGIN, ADMIN_LOGIN)
    return got == expected


def all_calls(obj: Objects) -> list[tuple[str, Call]]:
    calls = [
        (name or route, call)
        for route, name in url_patterns()
        for call in calls_for(route, name, obj)
    ]
    return sorted(calls, key=lambda item: item[1].label == "last")


@pytest.mark.parametrize("caller", CALLERS)
def test_it_lets_exactly_the_allowed_callers_in_on_every_url(objects, page_callers, caller):
    client = page_callers[caller].client
    calls = all_calls(objects)
    wrong = []
    for name, call in calls:
        response = getattr(client, call.method)(call.url, call.query or {})
        expected = call.expected[caller]
        if not matches(expected, response):
            wrong.append((name, call.label, call.url, expected, outcome(response)))
        if caller in ("lead_a", "token_lead") and outcome(response) == 200:
            if call.url.startswith(("/admin/", "/accounts/", "/api/v1/schema/")):
                continue
            body = b"".join(response) if response.streaming else response.content
            assert b"bravo" not in body, (call.url, body[:300])  # nothing of another team
    assert wrong == [], "\n".join(map(str, wrong))
    assert len(calls) >= len(list(url_patterns()))  # every pattern called at least once


def test_it_lets_the_platform_admin_use_the_audited_admin_pages(objects, page_callers):
    client = page_callers["platform_admin"].client
    for model in ["metering.Team", "metering.Source", "billing.Quota", "access.ApiToken"]:
        opts = apps.get_model(model)._meta
        stored = apps.get_model(model)._default_manager.order_by("pk").first()
        changelist = reverse(f"admin:{opts.app_label}_{opts.model_name}_changelist")
        change = reverse(f"admin:{opts.app_label}_{opts.model_name}_change", args=[stored.pk])
        assert client.get(changelist).status_code == 200, model
        assert client.get(change).status_code == 200, model


def test_it_keeps_csrf_on_every_form_that_changes_something(objects, platform_admin):
    from django.test import Client

    client = Client(enforce_csrf_checks=True)
    client.force_login(platform_admin)
    team = objects.pool.teams["alpha"]
    for url, data in [
        (reverse("reports:run_create", args=["2026-10"]), {}),
        (reverse("logout"), {}),
        (reverse("admin:metering_team_change", args=[team.pk]), {"name": "renamed"}),
    ]:
        assert client.post(url, data).status_code == 403, url
    team.refresh_from_db()
    assert team.name == "alpha"
    assert not ReportRun.objects.exclude(pk=objects.run.pk).exists()


_ = RANGE  # the API rows use test_boundary's ranges through url_cases
