"""Report runs: one row per monthly (or on-demand) report, with the files it wrote.

A run renders, for one closed period, a CSV per team, a FOCUS CSV of all charges and the
management PDF. The files live on disk under `reports_dir()/<run id>/`; their SHA-256 and size
are stored here, so a file handed to finance can be checked against the run that wrote it.
"""

from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.db import models

from billing.models import ImmutableModel, PeriodClose
from kernel.period import PERIOD_REGEX


def reports_dir() -> Path:
    """Where run files are written: TANDEM_REPORTS_DIR, else var/reports/."""
    return Path(settings.TANDEM_REPORTS_DIR)


class ReportRun(models.Model):
    class Kind(models.TextChoices):
        MONTHLY = "monthly"
        ON_DEMAND = "on_demand"

    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        DONE = "done"
        FAILED = "failed"

    period = models.CharField(max_length=7)  # YYYY-MM, a calendar month in the pool's zone
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.ON_DEMAND)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED)
    parameters = models.JSONField(default=dict, blank=True)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created = models.DateTimeField(auto_now_add=True)
    started = models.DateTimeField(null=True, blank=True)
    finished = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True)
    emailed_to = models.JSONField(default=list, blank=True)

    class Meta:
        ordering = ["-created", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(period__regex=PERIOD_REGEX), name="report_run_period_format"
            ),
            models.CheckConstraint(
                condition=models.Q(kind__in=["monthly", "on_demand"]), name="report_run_kind_known"
            ),
            models.CheckConstraint(
                condition=models.Q(status__in=["queued", "running", "done", "failed"]),
                name="report_run_status_known",
            ),
            # The beat schedule may fire twice for a month: there is only one monthly report.
            models.UniqueConstraint(
                fields=["period"],
                condition=models.Q(kind="monthly"),
                name="report_run_one_monthly_per_period",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.period} {self.kind} #{self.pk} ({self.status})"

    @property
    def directory(self) -> Path:
        return reports_dir() / str(self.pk)


class ReportFile(models.Model):
    class Kind(models.TextChoices):
        TEAM_CSV = "team_csv"
        FOCUS_CSV = "focus_csv"
        PDF = "pdf"

    run = models.ForeignKey(ReportRun, on_delete=models.CASCADE, related_name="files")
    name = models.CharField(max_length=200)  # the file name inside the run's directory
    kind = models.CharField(max_length=16, choices=Kind.choices)
    # Set for a team's CSV: a team lead may download their own team's file and nothing else.
    team = models.ForeignKey(
        "metering.Team", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    content_type = models.CharField(max_length=100)
    size_bytes = models.PositiveBigIntegerField()
    sha256 = models.CharField(max_length=64)

    class Meta:
        ordering = ["kind", "name"]
        constraints = [
            models.UniqueConstraint(fields=["run", "name"], name="report_file_name_per_run"),
            models.CheckConstraint(
                condition=models.Q(kind__in=["team_csv", "focus_csv", "pdf"]),
                name="report_file_kind_known",
            ),
            models.CheckConstraint(
                condition=models.Q(sha256__regex=r"^[0-9a-f]{64}$"), name="report_file_sha256_hex"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.run_id}/{self.name}"

    @property
    def path(self) -> Path:
        return self.run.directory / self.name


class HealthSnapshot(ImmutableModel):
    """A closed month's health numbers as the monthly report shows them, stored by the close.

    Written in the close's transaction (reports/period_health.py) and never changed, like the
    statements beside it, so a re-run of the report after late metering data shows the month
    as it was closed. `numbers` is `period_health_record`'s JSON (Decimals as exact text).
    """

    period_close = models.OneToOneField(
        PeriodClose, on_delete=models.PROTECT, related_name="health_snapshot"
    )
    numbers = models.JSONField()

    def __str__(self) -> str:
        return f"health numbers of {self.period_close_id}"
