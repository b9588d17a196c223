"""Roles, API tokens (hashed, scoped, revocable, throttled) and the visible-teams boundary."""

from __future__ import annotations

import datetime as dt
import hashlib
import io

import pytest
from django.contrib.auth.models import AnonymousUser
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.db import IntegrityError, transaction
from django.urls import reverse
from rest_framework.test import APIClient

from access.models import ApiToken, Role
from access.selectors import visible_teams
from access.services import api_token_create, api_token_revoke, role_assign
from tests import factories as f


def bearer(plain: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {plain}")
    return client


@pytest.fixture
def finance(db):
    return f.RoleFactory(user__username="fiona", name=Role.Name.FINANCE).user


def test_it_stores_only_the_hash_of_a_token(finance):
    token, plain = api_token_create(owner=finance, name="scheduler", scopes=["quota:read"])
    assert plain.startswith("tdm_") and len(plain) > 40
    token.refresh_from_db()
    assert token.token_hash == hashlib.sha256(plain.encode()).hexdigest()
    assert plain.startswith(token.prefix) and len(token.prefix) == 12
    stored = [str(getattr(token, field.attname)) for field in ApiToken._meta.fields]
    assert not any(plain in value for value in stored)
    assert token.scopes == ["quota:read"]


@pytest.mark.parametrize(
    ("name", "scopes", "field"),
    [
        ("x", ["write"], "scopes"),
        ("x", [], "scopes"),
        ("  ", ["read"], "name"),
    ],
)
def test_it_refuses_tokens_with_unknown_scopes_or_no_name(finance, name, scopes, field):
    with pytest.raises(ValidationError) as error:
        api_token_create(owner=finance, name=name, scopes=scopes)
    assert field in error.value.message_dict
    assert not ApiToken.objects.exists()


def test_it_refuses_a_second_token_of_the_same_name(finance):
    api_token_create(owner=finance, name="ci", scopes=["read"])
    with pytest.raises(ValidationError) as error:
        api_token_create(owner=finance, name="ci", scopes=["read"])
    assert "name" in error.value.message_dict


def test_it_keeps_unknown_scopes_out_in_the_database_too(finance):
    with pytest.raises(IntegrityError), transaction.atomic():
        ApiToken.objects.create(
            owner=finance, name="raw", scopes=["admin"], token_hash="0" * 64, prefix="tdm_x"
        )


def test_it_shuts_a_revoked_token_out_at_once(api_pool, finance):
    token, plain = api_token_create(owner=finance, name="ci", scopes=["read"])
    client = bearer(plain)
    assert client.get(reverse("api-teams")).status_code == 200
    api_token_revoke(token=token)
    first_revocation = token.revoked_at
    assert client.get(reverse("api-teams")).status_code == 401
    api_token_revoke(token=token)
    assert token.revoked_at == first_revocation


def test_it_shuts_out_the_token_of_a_disabled_person(api_pool, finance):
    _, plain = api_token_create(owner=finance, name="ci", scopes=["read"])
    finance.is_active = False
    finance.save()
    assert bearer(plain).get(reverse("api-teams")).status_code == 401


def test_it_records_when_a_token_was_last_used_at_most_once_a_minute(api_pool, finance):
    token, plain = api_token_create(owner=finance, name="ci", scopes=["read"])
    assert token.last_used is None
    bearer(plain).get(reverse("api-teams"))
    token.refresh_from_db()
    first = token.last_used
    assert first is not None
    bearer(plain).get(reverse("api-teams"))
    token.refresh_from_db()
    assert token.last_used == first


@pytest.mark.parametrize(
    "header",
    ["Bearer", "Bearer a b", "Bearer tdm_not-a-token", "Bearer tdm_ñ"],
)
def test_it_answers_401_to_malformed_or_unknown_tokens(api_pool, header):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=header)
    response = client.get(reverse("api-teams"))
    assert response.status_code == 401
    assert "detail" in response.json()


def test_it_throttles_each_token_on_its_own(api_pool, finance, settings):
    settings.REST_FRAMEWORK = {
        **settings.REST_FRAMEWORK,
        "DEFAULT_THROTTLE_RATES": {"api_token": "3/min"},
    }
    _, first = api_token_create(owner=finance, name="one", scopes=["read"])
    _, second = api_token_create(owner=finance, name="two", scopes=["read"])
    statuses = [bearer(first).get(reverse("api-teams")).status_code for _ in range(4)]
    assert statuses == [200, 200, 200, 429]
    assert bearer(second).get(reverse("api-teams")).status_code == 200
    session = APIClient()
    session.force_login(finance)
    assert all(session.get(reverse("api-teams")).status_code == 200 for _ in range(5))


def test_it_creates_and_revokes_tokens_from_the_command_line(api_pool, finance):
    out, err = io.StringIO(), io.StringIO()
    call_command(
        "api_token_create", owner="fiona", name="cron", scope=["read"], stdout=out, stderr=err
    )
    plain = out.getvalue().strip()
    assert bearer(plain).get(reverse("api-teams")).status_code == 200
    call_command("api_token_revoke", plain[:12], stdout=io.StringIO())
    assert bearer(plain).get(reverse("api-teams")).status_code == 401


# --- visible_teams ----------------------------------------------------------------------


def test_it_shows_each_role_its_teams(api_pool):
    alpha, bravo = api_pool.teams["alpha"], api_pool.teams["bravo"]
    everyone = set(api_pool.teams.values())
    lead = f.UserFactory(username="lea")
    role_assign(user=lead, name="team_lead", teams=[alpha, bravo])
    superuser = f.UserFactory(username="root", is_superuser=True)
    nobody = f.UserFactory(username="nobody")
    finance = f.UserFactory(username="fin")
    role_assign(user=finance, name="finance", teams=[alpha])  # teams ignored: sees all
    assert set(visible_teams(finance)) == everyone
    assert set(visible_teams(superuser)) == everyone
    assert set(visible_teams(lead)) == {alpha, bravo}
    assert list(visible_teams(nobody)) == []
    assert list(visible_teams(AnonymousUser())) == []
    role_assign(user=lead, name="team_lead", teams=[bravo])
    lead.refresh_from_db()
    assert set(visible_teams(lead)) == {bravo}
    lead.is_active = False
    assert list(visible_teams(lead)) == []


def test_it_refuses_an_unknown_role(api_pool):
    with pytest.raises(ValidationError) as error:
        role_assign(user=f.UserFactory(), name="admin")
    assert "name" in error.value.message_dict


def test_it_lets_a_person_in_once_they_have_a_role(api_pool):
    user = f.UserFactory(username="walker", last_login=dt.datetime(2026, 1, 1, tzinfo=dt.UTC))
    client = APIClient()
    client.force_login(user)
    assert client.get(reverse("api-teams")).status_code == 403
    role_assign(user=user, name="platform")
    assert client.get(reverse("api-teams")).status_code == 200
