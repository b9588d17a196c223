from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from access import models, services


@admin.register(models.Role)
class RoleAdmin(admin.ModelAdmin):
    list_display = ["user", "name"]
    list_filter = ["name"]
    filter_horizontal = ["teams"]


@admin.register(models.ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
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
