from django.contrib import admin

from metering import models


@admin.register(models.Source)
class SourceAdmin(admin.ModelAdmin):
    list_display = ["name", "url", "scrape_interval_seconds", "enabled"]
    exclude = []


@admin.register(models.Team)
class TeamAdmin(admin.ModelAdmin):
    list_display = ["name", "created"]
    search_fields = ["name"]


@admin.register(models.Task)
class TaskAdmin(admin.ModelAdmin):
    list_display = ["external_id", "team", "kind", "first_seen", "ended"]
    list_filter = ["kind", "team"]
    search_fields = ["external_id"]


@admin.register(models.Service)
class ServiceAdmin(admin.ModelAdmin):
    list_display = ["external_id", "team", "slo_p99_ms", "is_key"]


@admin.register(models.IngestWindow)
class IngestWindowAdmin(admin.ModelAdmin):
    list_display = ["source", "start", "end", "status", "completeness", "attempts", "rows_written"]
    list_filter = ["status", "source"]
    readonly_fields = [f.name for f in models.IngestWindow._meta.fields]
