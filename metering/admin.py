from typing import Any

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.db import transaction
from django.db.models import QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.utils import timezone

from audit.admin import AuditedModelAdmin
from audit.services import audit_record
from metering import models, services, sources, tasks
from metering.selectors import BLIND_SPOT_CONDITIONS

# Windows one confirmation replaces, in this request: a day of 5-minute windows.
MAX_WINDOWS_REPLACED_AT_ONCE = 288


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
            "shard_node_patterns",
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
            sources.shard_patterns_validate(cleaned.get("shard_node_patterns") or [])
        except sources.SourceConfigurationError as error:
            raise forms.ValidationError(str(error)) from None
        return cleaned


@admin.register(models.Source)
class SourceAdmin(AuditedModelAdmin):
    form = SourceForm
    list_display = ["name", "url", "scrape_interval_seconds", "max_concurrent_queries", "enabled"]


@admin.register(models.Team)
class TeamAdmin(AuditedModelAdmin):
    list_display = ["name", "created"]
    search_fields = ["name"]


@admin.register(models.Task)
class TaskAdmin(admin.ModelAdmin):
    list_display = [
        "external_id",
        "namespace",
        "team",
        "kind",
        "fault_domain",
        "first_seen",
        "last_seen",
        "ended",
    ]
    list_filter = ["kind", "team", "source"]
    search_fields = ["external_id", "namespace"]
    list_select_related = ["team"]
    # A task row's team is the team its intervals were metered under: changing it here would
    # move closed months' usage to another team. A relabel gets a row of its own at ingest.
    readonly_fields = ["source", "namespace", "external_id", "team", "first_seen", "last_seen"]


class SloStatedFilter(admin.SimpleListFilter):
    title = "SLO"
    parameter_name = "slo_stated"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin) -> list[tuple]:
        return [("yes", "stated"), ("no", "the default, stated by nobody")]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        if self.value() in ("yes", "no"):
            return queryset.filter(slo_stated__isnull=self.value() == "no")
        return queryset


def _services_state(request: HttpRequest, queryset: QuerySet, stated_field: str, field: str) -> int:
    """Marks `stated_field` now on the selected services that have none, each audited with
    the `field` it confirms (unchanged); returns how many."""
    stated = timezone.now()
    unstated = list(queryset.filter(**{f"{stated_field}__isnull": True}).select_related("team"))
    with transaction.atomic():
        for service in unstated:
            setattr(service, stated_field, stated)
            service.save(update_fields=[stated_field])
            value = service.team.name if field == "team" else getattr(service, field)
            audit_record(
                action="change",
                obj=service,
                changes={stated_field: [None, stated], field: [value, value]},
                actor=request.user,
                force=True,
            )
    return len(unstated)


@admin.action(description="State the selected services' SLOs as they are", permissions=["change"])
def slos_state(modeladmin, request, queryset) -> None:
    """An operator confirms an SLO that is already right (the default included)."""
    stated = _services_state(request, queryset, "slo_stated", "slo_p99_ms")
    modeladmin.message_user(request, f"stated {stated} SLOs", messages.SUCCESS)


@admin.action(description="State the selected services' teams as they are", permissions=["change"])
def teams_state(modeladmin, request, queryset) -> None:
    """An operator confirms that a service's SLA credits go to the right team, though its
    namespace's pods now run as another (metering.selectors.services_team_moved)."""
    stated = _services_state(request, queryset, "team_stated", "team")
    modeladmin.message_user(request, f"stated {stated} teams", messages.SUCCESS)


@admin.register(models.Service)
class ServiceAdmin(AuditedModelAdmin):
    list_display = ["external_id", "team", "team_stated", "slo_p99_ms", "slo_stated", "is_key"]
    list_editable = ["slo_p99_ms", "is_key"]
    list_filter = [SloStatedFilter]
    list_select_related = ["team"]
    readonly_fields = ["slo_stated", "team_stated"]
    actions = [slos_state, teams_state]

    def save_model(
        self, request: HttpRequest, obj: Any, form: forms.ModelForm, change: bool
    ) -> None:
        # An operator states it by adding the service or editing its SLO (even to the
        # default); one already right is stated by the action above. The same for its team.
        if not change or "slo_p99_ms" in form.changed_data:
            obj.slo_stated = timezone.now()
        if not change or "team" in form.changed_data:
            obj.team_stated = timezone.now()
        super().save_model(request, obj, form, change)


@admin.action(description="Ingest the selected windows again")
def ingest_again(modeladmin, request, queryset) -> None:
    for window_id in queryset.values_list("pk", flat=True):
        tasks.ingest_window.delay_on_commit(window_id)
    modeladmin.message_user(request, f"queued {queryset.count()} windows", messages.SUCCESS)


class LossAcceptanceForm(forms.Form):
    reason = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3, "cols": 80}),
        help_text="Why these windows' samples, or their pods' descriptions, are gone for good"
        " (kept in the audit log).",
    )


@admin.action(description="Replace with less data (accept the loss)")
def replace_accepting_loss(
    modeladmin: admin.ModelAdmin, request: HttpRequest, queryset: QuerySet
) -> TemplateResponse | None:
    """Ingest again, replacing stored rows even with fewer samples, after a confirmation
    page that asks why; the audit log names the user and the reason."""
    windows = list(queryset.select_related("source").order_by("source_id", "start"))
    if len(windows) > MAX_WINDOWS_REPLACED_AT_ONCE:
        modeladmin.message_user(
            request,
            f"select at most {MAX_WINDOWS_REPLACED_AT_ONCE} windows, or use"
            " `manage.py ingest --accept-loss --reason ...` for longer spans",
            messages.ERROR,
        )
        return None
    confirmed = request.POST.get("confirm") == "yes"
    form = LossAcceptanceForm(request.POST if confirmed else None)
    if not (confirmed and form.is_valid()):
        context = {**modeladmin.admin_site.each_context(request), "windows": windows, "form": form}
        context["title"] = "Replace with less data"
        return TemplateResponse(request, "admin/metering/ingestwindow/accept_loss.html", context)
    acceptance = services.LossAcceptance(
        operator=request.user.get_username(), reason=form.cleaned_data["reason"].strip()
    )
    try:
        services.windows_ingest(window_ids=[w.pk for w in windows], accept_loss=acceptance)
    except sources.PrometheusUnavailable as error:
        modeladmin.message_user(request, f"Prometheus unavailable: {error}", messages.ERROR)
        return None
    modeladmin.message_user(request, f"replaced {len(windows)} windows", messages.SUCCESS)
    return None


class _BlindSpotFilter(admin.SimpleListFilter):
    """The done windows of one kind of metering.selectors.BlindSpots (`blind_spot`), or the
    others: what the month's close counts, one window at a time."""

    blind_spot: str
    answers: tuple[str, str]  # what "yes" and "no" read as

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin) -> list[tuple]:
        return [("yes", self.answers[0]), ("no", self.answers[1])]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        condition = BLIND_SPOT_CONDITIONS[self.blind_spot]
        if self.value() == "yes":
            return queryset.filter(condition)
        if self.value() == "no":
            return queryset.exclude(condition)
        return queryset


class LatencyUnseenFilter(_BlindSpotFilter):
    title = "inference latency"
    parameter_name = "latency_unseen"
    blind_spot = "latency_unseen_windows"
    answers = ("not measured for some pods", "measured for every pod")


class KueuePreemptionsFilter(_BlindSpotFilter):
    title = "Kueue preemptions"
    parameter_name = "kueue_preemptions"
    blind_spot = "kueue_preemption_windows"
    answers = ("Kueue preempted workloads", "none")


class UnmappedKindsFilter(_BlindSpotFilter):
    title = "priority classes"
    parameter_name = "unmapped_kinds"
    blind_spot = "kind_guessed_windows"
    answers = ("some not mapped", "all mapped")


class UnheldBusyFilter(_BlindSpotFilter):
    title = "unrequested GPU work"
    parameter_name = "unheld_busy"
    blind_spot = "unheld_busy_windows"
    answers = ("GPUs no pod held were busy", "none")


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
    list_filter = [
        "status",
        "source",
        "preemptions_unreadable",
        LatencyUnseenFilter,
        KueuePreemptionsFilter,
        UnmappedKindsFilter,
        UnheldBusyFilter,
    ]
    date_hierarchy = "start"
    readonly_fields = [*(f.name for f in models.IngestWindow._meta.fields), "recorded_queries"]
    actions = [ingest_again, replace_accepting_loss]
