"""Admin: price books (draft, edit drafts, publish), quotas, closed periods (read-only)."""

from __future__ import annotations

import datetime as dt

from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.forms.models import BaseInlineFormSet
from django.http import HttpRequest

from audit.admin import AuditedAdminMixin, AuditedModelAdmin
from audit.services import audit_record
from billing import models, services
from kernel.price_book_fields import GPU_CLASS_FIELDS, PRICE_BOOK_FIELDS


class GpuClassFormSet(BaseInlineFormSet):
    """Checks the book's classes together, as the engine will: names unique and not
    `default`, no GPU model in two classes (one message naming the class and field)."""

    def clean(self) -> None:
        super().clean()
        if any(self.errors):
            return
        classes = [
            form.instance
            for form in self.forms
            if form.cleaned_data and not form.cleaned_data.get("DELETE")
        ]
        try:
            services.price_book_validate_gpu_classes(price_book=self.instance, gpu_classes=classes)
        except services.PriceBookInvalid as error:
            raise ValidationError(str(error)) from None


class GpuClassInline(admin.TabularInline):
    """A draft's GPU classes, edited with it; a published book's are shown read-only."""

    model = models.PriceBookGpuClass
    formset = GpuClassFormSet
    extra = 0
    fields = list(GPU_CLASS_FIELDS)

    def has_add_permission(self, request: HttpRequest, obj: models.PriceBook | None = None):
        return not (obj is not None and obj.is_published) and super().has_add_permission(
            request, obj
        )

    def has_change_permission(self, request: HttpRequest, obj: models.PriceBook | None = None):
        return not (obj is not None and obj.is_published) and super().has_change_permission(
            request, obj
        )

    def has_delete_permission(self, request: HttpRequest, obj: models.PriceBook | None = None):
        return not (obj is not None and obj.is_published) and super().has_delete_permission(
            request, obj
        )


class PriceBookAdmin(admin.ModelAdmin):
    list_display = ["version", "effective_from", "status", "currency", "timezone", "published_at"]
    list_filter = ["status"]
    readonly_fields = ["version", "status", "published_at", "created"]
    actions = ["publish", "new_draft_from"]

    def save_related(self, request: HttpRequest, form, formsets: list, change: bool) -> None:
        """Saves the inline GPU classes, and records their change in the audit log (the
        book's own entry lists its fields only)."""
        book = form.instance
        before = [item.to_scenario_dict() for item in book.gpu_classes.all()] if change else []
        super().save_related(request, form, formsets, change)
        after = [item.to_scenario_dict() for item in book.gpu_classes.all()]
        if after != before:
            audit_record(
                action="change",
                obj=book,
                changes={"gpu_classes": [before, after]},
                actor=request.user,
                force=True,
            )

    def get_inlines(self, request: HttpRequest, obj: models.PriceBook | None):
        # A new draft is created first (from the book's fields); its GPU classes are then
        # added on its page, while it is a draft.
        return [GpuClassInline] if obj is not None else []

    def has_change_permission(self, request: HttpRequest, obj: models.PriceBook | None = None):
        if obj is not None and obj.is_published:
            return False  # shown read-only: a published book never changes (nor in the DB)
        return super().has_change_permission(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj: models.PriceBook | None = None):
        if obj is not None and obj.is_published:
            return False
        return super().has_delete_permission(request, obj)

    def save_model(self, request, obj: models.PriceBook, form, change: bool) -> None:
        if change:
            super().save_model(request, obj, form, change)  # a draft: freely editable
            return
        fields = {name: getattr(obj, name) for name in PRICE_BOOK_FIELDS}
        # No classes yet: they are added on the draft's own page (see get_inlines).
        created = services.price_book_create_draft(
            effective_from=obj.effective_from, notes=obj.notes, gpu_classes=[], **fields
        )
        obj.pk, obj.version = created.pk, created.version

    @admin.action(description="Publish the selected drafts (they can never change again)")
    def publish(self, request: HttpRequest, queryset: QuerySet[models.PriceBook]) -> None:
        for book in queryset.filter(status=models.PriceBook.Status.DRAFT):
            try:
                services.price_book_publish(price_book_id=book.pk)
            except services.PriceBookInvalid as error:
                self.message_user(request, f"v{book.version}: {error}", messages.ERROR)
            else:
                self.message_user(request, f"published v{book.version}")

    @admin.action(description="Create a new draft from the selected book")
    def new_draft_from(self, request: HttpRequest, queryset: QuerySet[models.PriceBook]) -> None:
        for book in queryset:
            draft = services.price_book_create_draft(
                effective_from=max(book.effective_from, dt.date.today()), based_on=book
            )
            self.message_user(request, f"draft v{draft.version} created from v{book.version}")


@admin.register(models.PriceBook)
class AuditedPriceBookAdmin(AuditedAdminMixin, PriceBookAdmin):
    """The audit hook in front of PriceBookAdmin, so that it wraps the admin's own saves: a new
    draft made through the service is recorded once, by the hook."""


@admin.register(models.Quota)
class QuotaAdmin(AuditedModelAdmin):
    list_display = [
        "team",
        "allowance_gpu_hours",
        "allowance_money",
        "concurrent_gpu_cap",
        "io_caps",
        "updated",
    ]
    search_fields = ["team__name"]


class ReadOnlyAdmin(admin.ModelAdmin):
    """Closed periods are looked at, never edited."""

    def has_add_permission(self, request: HttpRequest, obj=None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj=None) -> bool:
        return False


class ReadOnlyInline(admin.TabularInline):
    extra = 0
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj=None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return False


class StatementLineInline(ReadOnlyInline):
    model = models.StatementLine
    fields = [
        "kind",
        "quantity_gpu_hours",
        "rate_per_gpu_hour",
        "amount",
        "description",
        "is_correction",
        "corrects_period",
    ]


class PlatformLineInline(ReadOnlyInline):
    model = models.PlatformLine
    fields = ["name", "amount", "description", "is_correction", "corrects_period"]


@admin.register(models.PeriodClose)
class PeriodCloseAdmin(AuditedAdminMixin, ReadOnlyAdmin):
    list_display = [
        "period",
        "pool_cost",
        "teams_total",
        "platform_total",
        "currency",
        "price_book_version",
        "engine_version",
        "closed_at",
    ]
    exclude = []
    inlines = [PlatformLineInline]


@admin.register(models.Statement)
class StatementAdmin(ReadOnlyAdmin):
    list_display = ["period", "team", "total", "currency"]
    list_filter = ["period", "team"]
    inlines = [StatementLineInline]


@admin.register(models.SlaBreach)
class SlaBreachAdmin(ReadOnlyAdmin):
    list_display = ["period_close", "service", "interval_start", "is_peak", "penalized"]
    list_filter = ["penalized", "service"]
