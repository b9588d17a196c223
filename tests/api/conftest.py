"""Fixtures of the API tests: the API pool (tests/pools/api.py, built once per module) and the
people and tokens who call the API."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from django.core.cache import cache
from rest_framework.test import APIClient

from access.models import Role
from access.services import api_token_create, api_token_revoke
from tests import factories as f
from tests.pools.api import ApiPool

# --- People and tokens ------------------------------------------------------------------


@dataclass
class Caller:
    name: str
    client: APIClient
    user: object = None


@pytest.fixture
def callers(api_pool: ApiPool) -> dict[str, Caller]:
    """Every kind of caller, each with a ready client."""
    cache.clear()  # throttle history of earlier tests
    finance = f.RoleFactory(user__username="fiona", name=Role.Name.FINANCE).user
    platform = f.RoleFactory(user__username="pat", name=Role.Name.PLATFORM).user
    lead_a = f.RoleFactory(
        user__username="alice", name=Role.Name.TEAM_LEAD, teams=[api_pool.teams["alpha"]]
    ).user
    nobody = f.UserFactory(username="norman")
    result = {"anonymous": Caller("anonymous", APIClient())}
    for name, user in [
        ("finance", finance),
        ("platform", platform),
        ("lead_a", lead_a),
        ("no_role", nobody),
    ]:
        client = APIClient()
        client.force_login(user)
        result[name] = Caller(name, client, user)
    tokens = [
        ("token_read", finance, ["read"]),
        ("token_quota", platform, ["quota:read"]),
        ("token_lead", lead_a, ["read", "quota:read"]),
        ("token_revoked", finance, ["read", "quota:read"]),
    ]
    for name, owner, scopes in tokens:
        token, plain = api_token_create(owner=owner, name=name, scopes=scopes)
        if name == "token_revoked":
            api_token_revoke(token=token)
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {plain}")
        result[name] = Caller(name, client, owner)
    return result
