"""Who may see what: a role per person, and API tokens for machines.

Finance and platform see every team; a team lead sees only the teams listed on their role.
Machines (schedulers, Alertmanager) use API tokens: the plain token is shown once at creation,
only its SHA-256 is stored, and a token acts with its owner's role, narrowed by its scopes.
"""

from __future__ import annotations

import hashlib

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.db import models

SCOPE_READ = "read"
SCOPE_QUOTA_READ = "quota:read"
TOKEN_SCOPES = [
    (SCOPE_READ, "Read teams, tasks, usage, health, statements and price books"),
    (SCOPE_QUOTA_READ, "Read the quota export and its Prometheus metrics"),
]


def token_digest(plain: str) -> str:
    """How a token is stored and looked up: SHA-256 hex of the whole plain token."""
    return hashlib.sha256(plain.encode()).hexdigest()


class Role(models.Model):
    class Name(models.TextChoices):
        FINANCE = "finance"
        PLATFORM = "platform"
        TEAM_LEAD = "team_lead"

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="tandem_role"
    )
    name = models.CharField(max_length=16, choices=Name.choices)
    # Only meaningful for team leads; finance and platform see every team regardless.
    teams = models.ManyToManyField("metering.Team", blank=True, related_name="leads")

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=models.Q(name__in=["finance", "platform", "team_lead"]),
                name="role_name_known",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.user} ({self.name})"


class ApiToken(models.Model):
    name = models.CharField(max_length=200)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    scopes = ArrayField(models.CharField(max_length=32), default=list)
    # SHA-256 hex of the whole plain token; the plain token is never stored.
    token_hash = models.CharField(max_length=64, unique=True, editable=False)
    # The first characters of the plain token, so people can tell their tokens apart.
    prefix = models.CharField(max_length=12, editable=False)
    created = models.DateTimeField(auto_now_add=True)
    last_used = models.DateTimeField(null=True, blank=True, editable=False)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["owner_id", "name"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(scopes__contained_by=[code for code, _ in TOKEN_SCOPES]),
                name="api_token_scopes_known",
            ),
            models.UniqueConstraint(fields=["owner", "name"], name="api_token_name_per_owner"),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None
