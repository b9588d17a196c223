"""The audit hook for the admin, and the read-only audit log's admin (both as base classes).

Audit imports no other app: each audited model's admin, in its own app, subclasses
`AuditedModelAdmin` (or puts `AuditedAdminMixin` in front of its own base), so every save and
delete through the admin writes an entry with the fields before and after. The audited admins
are those of metering's sources, teams and services, billing's price books, quotas and period
closes, and access's roles and API tokens. `AuditEntryAdmin` is registered by access/admin.py,
which knows who the platform admins are.
"""

from __future__ import annotations

from django.contrib import admin
from django.db import models, transaction
from django.db.models import QuerySet
from django.forms import ModelForm
from django.http import HttpRequest

from audit import context
from audit.login import ThrottledAdminAuthenticationForm
from audit.models import AuditEntry
from audit.services import audit_record, object_snapshot, snapshot_diff


class AuditedAdminMixin:
    """Records every add, change and delete made through this ModelAdmin.

    The state before is read in save_model and the entry written in save_related, which Django
    calls right after it (change form and list_editable alike), so that one entry holds the
    object's fields and its many-to-many fields (a team lead's teams) together.
    """

    def save_model(
        self, request: HttpRequest, obj: models.Model, form: ModelForm, change: bool
    ) -> None:
        stored = type(obj)._default_manager.filter(pk=obj.pk).first() if change else None
        obj._audit_before = (
            object_snapshot(stored, reveal_secrets=True) if stored is not None else None
        )
        with context.recorded_by_caller():  # the services it calls record nothing themselves
            super().save_model(request, obj, form, change)

    def save_related(
        self, request: HttpRequest, form: ModelForm, formsets: list, change: bool
    ) -> None:
        super().save_related(request, form, formsets, change)
        obj = form.instance
        before = getattr(obj, "_audit_before", None)
        if before is None:
            audit_record(
                action=AuditEntry.Action.CREATE,
                obj=obj,
                changes=object_snapshot(obj),  # secrets hidden
                actor=request.user,
                force=True,
            )
            return
        # snapshot_diff says only "(changed)" for a secret
        changes = snapshot_diff(before, object_snapshot(obj, reveal_secrets=True))
        if changes:  # "Save" without a change is not a change
            audit_record(
                action=AuditEntry.Action.CHANGE,
                obj=obj,
                changes=changes,
                actor=request.user,
                force=True,
            )

    def delete_model(self, request: HttpRequest, obj: models.Model) -> None:
        before = object_snapshot(obj)
        pk = obj.pk
        with transaction.atomic(), context.recorded_by_caller():
            super().delete_model(request, obj)
            obj.pk = pk  # Django clears it on delete; the entry names what was deleted
            audit_record(
                action=AuditEntry.Action.DELETE,
                obj=obj,
                changes=before,
                actor=request.user,
                force=True,
            )

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet) -> None:
        with transaction.atomic():
            for obj in queryset:
                self.delete_model(request, obj)


class AuditedModelAdmin(AuditedAdminMixin, admin.ModelAdmin):
    """A ModelAdmin whose adds, changes and deletes are written to the audit log."""


class AuditEntryAdmin(admin.ModelAdmin):
    """Read-only, and only for platform admins. Audit knows no roles, so on its own it lets
    active superusers in; access/admin.py registers a subclass that adds staff with the
    platform role."""

    list_display = ["at", "actor", "action", "object_type", "object_repr"]
    list_filter = ["action", "object_type"]
    search_fields = ["actor", "object_repr", "object_id"]
    date_hierarchy = "at"
    readonly_fields = [
        "at",
        "actor_id",
        "actor",
        "action",
        "object_type",
        "object_id",
        "object_repr",
        "changes",
    ]

    def is_platform_admin(self, request: HttpRequest) -> bool:
        user = request.user
        return bool(user.is_active and user.is_staff and user.is_superuser)

    def has_module_permission(self, request: HttpRequest) -> bool:
        return self.is_platform_admin(request)

    def has_view_permission(self, request: HttpRequest, obj: AuditEntry | None = None) -> bool:
        return self.is_platform_admin(request)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: AuditEntry | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: AuditEntry | None = None) -> bool:
        return False


# The admin's own login page counts failures with the main login page's counters.
admin.site.login_form = ThrottledAdminAuthenticationForm
