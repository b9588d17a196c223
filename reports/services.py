"""Report runs: create one, execute it (write the files, record their SHA-256), e-mail the PDF.

Executing is idempotent and safe to repeat after a crash: files are written into a fresh
temporary directory and moved into place only when all of them exist, and the run's file rows
are replaced in one transaction; a run already done is left alone.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
import shutil
import tempfile
import traceback
from dataclasses import dataclass
from pathlib import Path

from celery import current_app
from django.conf import settings
from django.core.mail import EmailMessage
from django.db import IntegrityError, transaction
from django.utils import timezone

from billing.models import PeriodClose, Statement
from kernel.period import time_zone
from reports.models import ReportFile, ReportRun, reports_dir
from reports.page import report_page_html
from reports.render_csv import csv_bytes
from reports.render_focus import focus_csv
from reports.render_pdf import html_to_pdf
from reports.rows import (
    TEAM_CSV_HEADER,
    ReportInputError,
    closed_period,
    period_bounds,
    team_csv_rows,
    team_statements,
)

logger = logging.getLogger(__name__)

FOCUS_FILE_NAME = "focus.csv"
PDF_CONTENT_TYPE = "application/pdf"
CSV_CONTENT_TYPE = "text/csv; charset=utf-8"


# Queued by name once the run is committed: reports.tasks calls these services (a task is a
# thin wrapper around one), so this module cannot import it back (as metering.tasks queues
# billing's month-to-date refresh).
REPORT_RUN_EXECUTE = "reports.tasks.report_run_execute"


@dataclass(frozen=True)
class RenderedFile:
    name: str
    kind: str
    content: bytes
    content_type: str
    team_id: int | None = None

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.content).hexdigest()


def team_file_name(period: str, statement: Statement) -> str:
    """A file name safe on any file system, unique per team (the id breaks ties)."""
    slug = "".join(c if c.isalnum() or c in "-_" else "_" for c in statement.team.name)[:60]
    return f"team-{slug}-{statement.team_id}-{period}.csv"


def report_run_create(
    *,
    period: str,
    kind: str = ReportRun.Kind.ON_DEMAND,
    parameters: dict | None = None,
    requested_by=None,
    enqueue: bool = True,
) -> ReportRun:
    """A queued run for `period` (YYYY-MM). A monthly run exists once per period: asking again
    returns it (re-queued if it had failed). With `enqueue`, the Celery task is sent on commit.
    """
    period_bounds(period)  # a clear error for a bad label, before anything is stored
    if kind not in ReportRun.Kind.values:
        raise ReportInputError(f"kind must be one of {ReportRun.Kind.values}, got {kind!r}")
    with transaction.atomic():
        run = None
        if kind == ReportRun.Kind.MONTHLY:
            run = ReportRun.objects.select_for_update().filter(period=period, kind=kind).first()
        if run is None:
            try:
                with transaction.atomic():
                    run = ReportRun.objects.create(
                        period=period,
                        kind=kind,
                        parameters=parameters or {},
                        requested_by=requested_by,
                    )
            except IntegrityError:  # a concurrent beat tick created the monthly run first
                run = ReportRun.objects.get(period=period, kind=kind)
        elif run.status == ReportRun.Status.FAILED:
            run.status, run.error = ReportRun.Status.QUEUED, ""
            run.save(update_fields=["status", "error"])
        if enqueue and run.status == ReportRun.Status.QUEUED:
            execute = current_app.signature(REPORT_RUN_EXECUTE, args=(run.pk,))
            transaction.on_commit(execute.delay)
    return run


def _claim(run_id: int) -> ReportRun | None:
    """Mark the run running (one more attempt), or None when it is already done."""
    with transaction.atomic():
        run = ReportRun.objects.select_for_update().get(pk=run_id)
        if run.status == ReportRun.Status.DONE:
            return None
        run.status = ReportRun.Status.RUNNING
        run.started = timezone.now()
        run.attempts += 1
        run.error = ""
        run.save(update_fields=["status", "started", "attempts", "error"])
    return run


def render_files(run: ReportRun, close: PeriodClose) -> list[RenderedFile]:
    """Every file of a run: a CSV per team, the FOCUS CSV, and the PDF."""
    files = [
        RenderedFile(
            name=team_file_name(run.period, statement),
            kind=ReportFile.Kind.TEAM_CSV,
            content=csv_bytes(TEAM_CSV_HEADER, team_csv_rows(statement)),
            content_type=CSV_CONTENT_TYPE,
            team_id=statement.team_id,
        )
        for statement in team_statements(close)
    ]
    files.append(
        RenderedFile(
            name=FOCUS_FILE_NAME,
            kind=ReportFile.Kind.FOCUS_CSV,
            content=focus_csv(close),
            content_type=CSV_CONTENT_TYPE,
        )
    )
    if run.parameters.get("pdf", True):
        files.append(
            RenderedFile(
                name=f"report-{run.period}.pdf",
                kind=ReportFile.Kind.PDF,
                content=report_pdf(run.period),
                content_type=PDF_CONTENT_TYPE,
            )
        )
    return files


def report_pdf(period: str) -> bytes:
    """The management page of `period` printed by Chromium."""
    return html_to_pdf(report_page_html(period), page_path=f"/reports/{period}/")


def _write_files(run: ReportRun, files: list[RenderedFile]) -> None:
    """Write into a temporary sibling directory, then swap it in: never a half-written run."""
    root = reports_dir()
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{run.pk}-", dir=root))
    for rendered in files:
        (staging / rendered.name).write_bytes(rendered.content)
    final = run.directory
    if final.exists():
        shutil.rmtree(final)
    staging.rename(final)


def _record_files(run: ReportRun, files: list[RenderedFile]) -> None:
    with transaction.atomic():
        run.files.all().delete()
        ReportFile.objects.bulk_create(
            ReportFile(
                run=run,
                name=rendered.name,
                kind=rendered.kind,
                team_id=rendered.team_id,
                content_type=rendered.content_type,
                size_bytes=len(rendered.content),
                sha256=rendered.sha256,
            )
            for rendered in files
        )
        run.status = ReportRun.Status.DONE
        run.finished = timezone.now()
        run.save(update_fields=["status", "finished"])


def _fail(run: ReportRun, message: str) -> None:
    ReportRun.objects.filter(pk=run.pk).update(
        status=ReportRun.Status.FAILED, error=message[:5000], finished=timezone.now()
    )


def report_run_execute(*, run_id: int) -> ReportRun:
    """Write a run's files and record them. Safe to call twice; a done run is returned as is.

    A period that is not closed fails the run with that message (ReportInputError is raised
    to the caller); any other error fails the run with its traceback and is raised too, so the
    Celery task can retry.
    """
    run = _claim(run_id)
    if run is None:  # done already: only the e-mail may be outstanding (it failed last time)
        run = ReportRun.objects.get(pk=run_id)
        report_run_email(run=run)
        return run
    try:
        close = closed_period(run.period)
        files = render_files(run, close)
        _write_files(run, files)
        _record_files(run, files)
    except ReportInputError as error:
        _fail(run, str(error))
        raise
    except Exception:
        _fail(run, traceback.format_exc())
        raise
    run.refresh_from_db()
    report_run_email(run=run)
    return run


def report_recipients() -> list[str]:
    return list(settings.TANDEM_REPORT_EMAILS)


def report_run_email(*, run: ReportRun) -> list[str]:
    """Send a monthly run's PDF to TANDEM_REPORT_EMAILS once; returns who got it."""
    recipients = report_recipients()
    pdf = run.files.filter(kind=ReportFile.Kind.PDF).first()
    if not recipients or pdf is None or run.emailed_to or run.kind != ReportRun.Kind.MONTHLY:
        return []
    message = EmailMessage(
        subject=f"Tandem GPU pool report {run.period}",
        body=(
            f"The monthly report for {run.period} is attached "
            f"(SHA-256 {pdf.sha256}).\nFiles of run #{run.pk}: "
            + ", ".join(f.name for f in run.files.all())
        ),
        to=recipients,
    )
    message.attach(pdf.name, pdf.path.read_bytes(), PDF_CONTENT_TYPE)
    message.send()
    ReportRun.objects.filter(pk=run.pk).update(emailed_to=recipients)
    return recipients


def previous_period_label(now: dt.datetime) -> str:
    """The calendar month before `now`, in the pool's time zone."""
    local = timezone.localtime(now, timezone=time_zone(settings.TANDEM_TIMEZONE))
    year, month = (local.year - 1, 12) if local.month == 1 else (local.year, local.month - 1)
    return f"{year:04d}-{month:02d}"


def report_run_create_due(*, now: dt.datetime | None = None) -> ReportRun | None:
    """Beat: once last month is closed, queue its monthly report (once; later ticks no-op)."""
    period = previous_period_label(now or timezone.now())
    if not PeriodClose.objects.filter(period=period).exists():
        return None
    if ReportRun.objects.filter(period=period, kind=ReportRun.Kind.MONTHLY).exists():
        return None
    return report_run_create(period=period, kind=ReportRun.Kind.MONTHLY)
