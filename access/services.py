"""Writes for access control: roles and API tokens."""

from __future__ import annotations

import secrets
from collections.abc import Iterable

from django.contrib.auth.base_user import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from access.models import TOKEN_SCOPES, ApiToken, Role, token_digest
from audit.services import audit_record
from metering.models import Team

# "tdm_" tells a leaked token apart in logs and secret scanners.
TOKEN_PREFIX = "tdm_"
PREFIX_SHOWN = 8


@transaction.atomic
def role_assign(*, user: AbstractBaseUser, name: str, teams: Iterable[Team] = ()) -> Role:
    """Give `user` a role (replacing any previous one). Teams matter for team leads only."""
    if name not in Role.Name.values:
        raise ValidationError({"name": f"unknown role {name!r}; one of {Role.Name.values}"})
    role, _ = Role.objects.update_or_create(user=user, defaults={"name": name})
    role.teams.set(list(teams) if name == Role.Name.TEAM_LEAD else [])
    audit_record(action="change", obj=role)
    return role


def api_token_create(
    *, owner: AbstractBaseUser, name: str, scopes: Iterable[str]
) -> tuple[ApiToken, str]:
    """Create a token and return it with its plain text, which is never available again."""
    scopes = sorted(set(scopes))
    known = {code for code, _ in TOKEN_SCOPES}
    unknown = [scope for scope in scopes if scope not in known]
    if unknown or not scopes:
        raise ValidationError({"scopes": f"choose from {sorted(known)}; got {list(scopes)}"})
    if not name.strip():
        raise ValidationError({"name": "a token needs a name"})
    if ApiToken.objects.filter(owner=owner, name=name).exists():
        raise ValidationError({"name": f"{owner} already has a token named {name!r}"})
    plain = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = ApiToken.objects.create(
        owner=owner,
        name=name,
        scopes=scopes,
        token_hash=token_digest(plain),
        prefix=plain[: len(TOKEN_PREFIX) + PREFIX_SHOWN],
    )
    audit_record(action="create", obj=token)
    return token, plain


def api_token_revoke(*, token: ApiToken) -> ApiToken:
    """Revoke at once; revoking twice keeps the first revocation time."""
    if token.revoked_at is None:
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at"])
        audit_record(action="revoke", obj=token, changes={"revoked_at": token.revoked_at})
    return token


def api_token_mark_used(*, token: ApiToken, minimum_gap_seconds: int = 60) -> None:
    """Record use, at most once a minute, so a polling scheduler does not write on every call."""
    now = timezone.now()
    if token.last_used and (now - token.last_used).total_seconds() < minimum_gap_seconds:
        return
    ApiToken.objects.filter(pk=token.pk).update(last_used=now)
    token.last_used = now
