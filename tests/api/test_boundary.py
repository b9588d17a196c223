"""Who may call what: every URL of the API conf against every kind of caller.

A team lead sees only their teams everywhere: lists hold none of another team's names, and
another team's object answers 404 (never 403, which would confirm it exists). Tokens act as
their owner, narrowed by scope: `read` for everything but the quota export, which needs
`quota:read`. Adding a URL to config/api_urls.py without a row here fails the first test.
"""

from __future__ import annotations

import pytest
from django.urls import reverse

from config import api_urls
from tests.pools.api import ApiPool

RANGE = {"start": "2026-10-01", "end": "2026-10-02"}


def url_cases(api_pool: ApiPool) -> dict[str, dict]:
    """Per URL name: how to call it about another team (bravo) and about lead A's (alpha).

    `other` is what alpha's lead must not see: a detail of bravo's, or a list where bravo
    shows up for finance. `quota` marks the endpoints behind the quota:read scope.
    """
    bravo, alpha = api_pool.teams["bravo"], api_pool.teams["alpha"]
    return {
        "api-teams": {"other": ((), {})},
        "api-team": {"other": ((bravo.pk,), {}), "own": ((alpha.pk,), {})},
        "api-tasks": {"other": ((), {})},
        "api-task": {
            "other": ((api_pool.tasks["bravo-pretrain"].pk,), {}),
            "own": ((api_pool.tasks["alpha-search"].pk,), {}),
        },
        "api-usage": {"other": ((), RANGE)},
        "api-health": {"other": ((), RANGE)},
        "api-sharing": {"other": ((), RANGE)},
        "api-statements": {"other": ((), {})},
        "api-statement": {
            "other": ((api_pool.statements["bravo"].pk,), {}),
            "own": ((api_pool.statements["alpha"].pk,), {}),
        },
        "api-price-books": {"other": ((), {}), "team_free": True},
        "api-price-book": {"other": ((api_pool.draft_book.pk,), {}), "team_free": True},
        "api-quota-export": {"other": ((), {}), "quota": True},
        "api-quota-metrics": {"other": ((), {}), "quota": True},
        "api-schema": {"other": ((), {}), "public": True},
        "api-not-found": {"other": (("teams/abc/",), {}), "public": True, "status": 404},
    }


def expected_status(case: dict, caller: str, is_detail: bool) -> int:
    if case.get("public"):
        return case.get("status", 200)
    if caller in ("anonymous", "token_revoked"):
        return 401
    if caller == "no_role":
        return 403
    if caller == "token_read" and case.get("quota"):
        return 403
    if caller == "token_quota" and not case.get("quota"):
        return 403
    if caller in ("lead_a", "token_lead") and is_detail and not case.get("team_free"):
        return 404
    return 200


CALLERS = [
    "anonymous",
    "no_role",
    "lead_a",
    "token_lead",
    "finance",
    "platform",
    "token_read",
    "token_quota",
    "token_revoked",
]


def test_it_has_a_case_for_every_url_in_the_api_conf(api_pool):
    names = {pattern.name for pattern in api_urls.urlpatterns}
    assert names == set(url_cases(api_pool))


@pytest.mark.parametrize("caller", CALLERS)
def test_it_holds_the_team_boundary_on_every_url(api_pool, callers, caller):
    client = callers[caller].client
    for name, case in url_cases(api_pool).items():
        args, query = case["other"]
        response = client.get(reverse(name, args=args), query)
        expected = expected_status(case, caller, is_detail=bool(args))
        assert response.status_code == expected, (name, caller, response.content[:300])
        body = response.content.decode()
        if caller in ("lead_a", "token_lead") and not case.get("public"):
            # Not a name, a task or a service of another team, in any answer.
            assert "bravo" not in body and "charlie" not in body, (name, body[:300])
        if caller == "finance" and not case.get("team_free") and not case.get("public"):
            assert "bravo" in body, name  # the check above can fail: bravo is there


@pytest.mark.parametrize("caller", ["lead_a", "token_lead"])
def test_it_lets_a_team_lead_read_their_own_objects(api_pool, callers, caller):
    client = callers[caller].client
    for name, case in url_cases(api_pool).items():
        if "own" not in case:
            continue
        args, query = case["own"]
        response = client.get(reverse(name, args=args), query)
        assert response.status_code == 200, name
        assert "alpha" in response.content.decode(), name


def test_it_answers_the_same_404_for_another_teams_object_and_a_missing_one(api_pool, callers):
    client = callers["lead_a"].client
    other = client.get(reverse("api-task", args=[api_pool.tasks["bravo-pretrain"].pk]))
    missing = client.get(reverse("api-task", args=[10**9]))
    assert other.status_code == missing.status_code == 404
    assert other.json() == missing.json()


def test_it_challenges_anonymous_callers_with_bearer(api_pool, callers):
    response = callers["anonymous"].client.get(reverse("api-teams"))
    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"] == "Bearer"
