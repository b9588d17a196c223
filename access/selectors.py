"""Reads for access control. `visible_teams` is the one boundary every API and page uses."""

from __future__ import annotations

from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import AnonymousUser
from django.db.models import QuerySet

from access.models import ApiToken, Role, token_digest
from metering.models import Team


def user_role(user: AbstractBaseUser | AnonymousUser) -> Role | None:
    if not user.is_authenticated:
        return None
    try:
        return user.tandem_role
    except Role.DoesNotExist:
        return None


def sees_every_team(user: AbstractBaseUser | AnonymousUser) -> bool:
    if not user.is_authenticated or not user.is_active:
        return False
    if user.is_superuser:
        return True
    role = user_role(user)
    return role is not None and role.name in (Role.Name.FINANCE, Role.Name.PLATFORM)


def has_any_role(user: AbstractBaseUser | AnonymousUser) -> bool:
    if not user.is_authenticated or not user.is_active:
        return False
    return user.is_superuser or user_role(user) is not None


def visible_teams(user: AbstractBaseUser | AnonymousUser) -> QuerySet[Team]:
    """Teams `user` may see: finance, platform and superusers all; a team lead theirs; else none."""
    if sees_every_team(user):
        return Team.objects.all()
    role = user_role(user)
    if role is not None and role.name == Role.Name.TEAM_LEAD and user.is_active:
        return Team.objects.filter(leads=role)
    return Team.objects.none()


def api_token_by_plain(plain: str) -> ApiToken | None:
    """The active token whose hash matches `plain`, with its owner (and role) loaded."""
    return (
        ApiToken.objects.select_related("owner", "owner__tandem_role")
        .filter(token_hash=token_digest(plain), revoked_at__isnull=True)
        .first()
    )
