from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from access import models, services
from access.selectors import user_role
from audit.admin import AuditedModelAdmin, AuditEntryAdmin
from audit.models import AuditEntry


@admin.register(models.Role)
class RoleAdmin(AuditedModelAdmin):
    list_display = ["user", "name"]
    list_filter = ["name"]
    filter_horizontal = ["teams"]


@admin.register(models.ApiToken)
class ApiTokenAdmin(AuditedModelAdmin):
    list_display = ["name", "owner", "prefix", "scopes", "created", "last_used", "revoked_at"]
    list_filter = ["revoked_at"]
    readonly_fields = ["prefix", "created", "last_used", "revoked_at"]
    fields = ["name", "owner", "scopes", *readonly_fields]
    actions = ["revoke"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        # Tokens are created with `manage.py api_token_create`, which prints the plain token once.
        return False

    @admin.action(description="Revoke selected tokens")
    def revoke(self, request: HttpRequest, queryset: QuerySet[models.ApiToken]) -> None:
        for token in queryset:
            services.api_token_revoke(token=token)
        messages.success(request, f"Revoked {queryset.count()} token(s).")


@admin.register(AuditEntry)
class PlatformAuditEntryAdmin(AuditEntryAdmin):
    """The audit log, for superusers and staff with the platform role only."""

    def is_platform_admin(self, request: HttpRequest) -> bool:
        if super().is_platform_admin(request):
            return True
        user = request.user
        role = user_role(user) if user.is_active and user.is_staff else None
        return role is not None and role.name == "platform"
