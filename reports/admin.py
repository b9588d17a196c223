from django.contrib import admin

from reports import models


class ReportFileInline(admin.TabularInline):
    model = models.ReportFile
    extra = 0
    can_delete = False
    readonly_fields = ["name", "kind", "team", "content_type", "size_bytes", "sha256"]


@admin.register(models.ReportRun)
class ReportRunAdmin(admin.ModelAdmin):
    list_display = ["id", "period", "kind", "status", "created", "finished", "attempts"]
    list_filter = ["kind", "status"]
    readonly_fields = ["created", "started", "finished", "attempts", "error", "emailed_to"]
    inlines = [ReportFileInline]
