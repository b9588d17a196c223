from django import forms
from django.conf import settings
from django.contrib import admin, messages

from metering import models, sources, tasks


class SourceForm(forms.ModelForm):
    """Secrets are write-only here: leave them blank to keep the stored value."""

    url = forms.URLField(max_length=500, assume_scheme="http")
    bearer_token = forms.CharField(required=False, widget=forms.PasswordInput(render_value=False))
    basic_auth_password = forms.CharField(
        required=False, widget=forms.PasswordInput(render_value=False)
    )

    class Meta:
        model = models.Source
        fields = [
            "name",
            "url",
            "bearer_token",
            "basic_auth_user",
            "basic_auth_password",
            "verify_tls",
            "scrape_interval_seconds",
            "label_mapping",
            "priority_class_kinds",
            "max_concurrent_queries",
            "ingest_from",
            "enabled",
        ]

    def clean(self) -> dict:
        cleaned = super().clean()
        for secret in ("bearer_token", "basic_auth_password"):
            if not cleaned.get(secret) and self.instance.pk:
                cleaned[secret] = getattr(self.instance, secret)
        candidate = models.Source(
            scrape_interval_seconds=cleaned.get("scrape_interval_seconds") or 0,
            label_mapping=cleaned.get("label_mapping") or {},
            priority_class_kinds=cleaned.get("priority_class_kinds") or {},
        )
        try:
            sources.query_plan_for(candidate, step_seconds=settings.TANDEM_STEP_SECONDS)
        except sources.SourceConfigurationError as error:
            raise forms.ValidationError(str(error)) from None
        return cleaned


@admin.register(models.Source)
class SourceAdmin(admin.ModelAdmin):
    form = SourceForm
    list_display = ["name", "url", "scrape_interval_seconds", "max_concurrent_queries", "enabled"]


@admin.register(models.Team)
class TeamAdmin(admin.ModelAdmin):
    list_display = ["name", "created"]
    search_fields = ["name"]


@admin.register(models.Task)
class TaskAdmin(admin.ModelAdmin):
    list_display = ["external_id", "team", "kind", "fault_domain", "first_seen", "ended"]
    list_filter = ["kind", "team", "source"]
    search_fields = ["external_id"]
    list_select_related = ["team"]


@admin.register(models.Service)
class ServiceAdmin(admin.ModelAdmin):
    list_display = ["external_id", "team", "slo_p99_ms", "is_key"]
    list_editable = ["slo_p99_ms", "is_key"]
    list_select_related = ["team"]


@admin.action(description="Ingest the selected windows again")
def ingest_again(modeladmin, request, queryset) -> None:
    for window_id in queryset.values_list("pk", flat=True):
        tasks.ingest_window.delay_on_commit(window_id)
    modeladmin.message_user(request, f"queued {queryset.count()} windows", messages.SUCCESS)


@admin.register(models.IngestWindow)
class IngestWindowAdmin(admin.ModelAdmin):
    list_display = [
        "source",
        "start",
        "end",
        "status",
        "completeness",
        "attempts",
        "rows_written",
        "changed_after_first_write",
        "error",
    ]
    list_filter = ["status", "source"]
    date_hierarchy = "start"
    readonly_fields = [f.name for f in models.IngestWindow._meta.fields]
    actions = [ingest_again]
