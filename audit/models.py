"""The audit log: who changed what, when. Append-only.

Rows are only ever inserted: the model refuses saving an existing row and deleting, its
queryset refuses `update()` and `delete()`, and a PostgreSQL trigger (migration 0001) refuses
UPDATE and DELETE from anywhere else, raw SQL included. The actor is kept as an id and a
username rather than a foreign key, so deleting a user never has to touch the log.
"""

from __future__ import annotations

from django.core.serializers.json import DjangoJSONEncoder
from django.db import models
from django.utils import timezone


class AuditLogIsAppendOnly(Exception):
    """Raised on any attempt to change or delete an audit entry."""


class AuditEntryQuerySet(models.QuerySet):
    def update(self, **kwargs: object) -> int:
        raise AuditLogIsAppendOnly("audit entries are never updated")

    def delete(self) -> tuple[int, dict[str, int]]:
        raise AuditLogIsAppendOnly("audit entries are never deleted")


class AuditEntry(models.Model):
    class Action(models.TextChoices):
        CREATE = "create"
        CHANGE = "change"
        DELETE = "delete"
        PUBLISH = "publish"
        REVOKE = "revoke"
        CLOSE = "close"

    at = models.DateTimeField(default=timezone.now, db_index=True)
    # Null for the system itself (Celery beat, a management command without a user).
    actor_id = models.BigIntegerField(null=True, blank=True)
    actor = models.CharField(max_length=150, help_text="username, or 'system'")
    action = models.CharField(max_length=16, choices=Action.choices)
    object_type = models.CharField(max_length=100, help_text="app_label.model")
    object_id = models.CharField(max_length=64)
    object_repr = models.CharField(max_length=200)
    # {field: [before, after]} for changes; {field: value} for creations and deletions.
    changes = models.JSONField(default=dict, blank=True, encoder=DjangoJSONEncoder)

    objects = AuditEntryQuerySet.as_manager()

    class Meta:
        ordering = ["-at", "-id"]
        verbose_name_plural = "audit entries"
        indexes = [models.Index(fields=["object_type", "object_id"])]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.actor} {self.action} {self.object_repr}"

    def save(self, *args: object, **kwargs: object) -> None:
        if not self._state.adding:
            raise AuditLogIsAppendOnly(f"audit entry {self.pk} is never changed")
        super().save(*args, **kwargs)

    def delete(self, *args: object, **kwargs: object) -> tuple[int, dict[str, int]]:
        raise AuditLogIsAppendOnly(f"audit entry {self.pk} is never deleted")
