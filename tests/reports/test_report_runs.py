"""Report runs: files written with their SHA-256, status recorded, safe to run twice."""

from __future__ import annotations

import csv
import datetime as dt
import hashlib
import io
from decimal import Decimal, localcontext

import pytest
from django.core.management import call_command

from billing.models import Statement, StatementLine
from reports import services
from reports.models import ReportFile, ReportRun
from reports.rows import ReportInputError
from tests.pools import reports as pools


def run_without_pdf(period: str = pools.PERIOD, kind: str = ReportRun.Kind.ON_DEMAND) -> ReportRun:
    run = services.report_run_create(
        period=period, kind=kind, parameters={"pdf": False}, enqueue=False
    )
    return services.report_run_execute(run_id=run.pk)


def read_csv(report_file: ReportFile) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(report_file.path.read_text(encoding="utf-8"))))


def test_it_records_status_and_the_sha256_of_every_file(report_pool) -> None:
    run = run_without_pdf()

    assert run.status == ReportRun.Status.DONE
    assert run.attempts == 1 and run.finished is not None and run.error == ""
    files = list(run.files.all())
    assert {file.kind for file in files} == {"team_csv", "focus_csv"}
    assert len([file for file in files if file.kind == "team_csv"]) == 3
    for report_file in files:
        content = report_file.path.read_bytes()
        assert report_file.sha256 == hashlib.sha256(content).hexdigest()
        assert report_file.size_bytes == len(content)


def test_it_leaves_a_done_run_alone_when_executed_again(report_pool) -> None:
    run = run_without_pdf()
    before = {file.name: file.sha256 for file in run.files.all()}

    again = services.report_run_execute(run_id=run.pk)

    assert again.status == ReportRun.Status.DONE and again.attempts == 1
    assert {file.name: file.sha256 for file in again.files.all()} == before


def test_it_writes_the_same_bytes_for_the_same_closed_month(report_pool) -> None:
    first = {file.name: file.sha256 for file in run_without_pdf().files.all()}
    second = {file.name: file.sha256 for file in run_without_pdf().files.all()}
    assert first == second


def test_it_keeps_one_monthly_run_per_period(report_pool) -> None:
    first = services.report_run_create(period=pools.PERIOD, kind="monthly", enqueue=False)
    second = services.report_run_create(period=pools.PERIOD, kind="monthly", enqueue=False)
    assert first.pk == second.pk
    assert ReportRun.objects.filter(kind="monthly").count() == 1


def test_it_fails_a_run_for_a_month_that_is_not_closed_and_names_it(report_pool) -> None:
    run = services.report_run_create(period="2026-08", enqueue=False)

    with pytest.raises(ReportInputError, match="2026-08 is not closed"):
        services.report_run_execute(run_id=run.pk)

    run.refresh_from_db()
    assert run.status == ReportRun.Status.FAILED
    assert "close_period --period 2026-08" in run.error
    assert not run.files.exists()


@pytest.mark.parametrize("period", ["2026-13", "26-10", "", "2026-1"])
def test_it_refuses_a_bad_period_before_storing_anything(db, period: str) -> None:
    with pytest.raises(ReportInputError, match="YYYY-MM"):
        services.report_run_create(period=period, enqueue=False)
    assert not ReportRun.objects.exists()


def test_it_queues_the_monthly_run_once_the_month_is_closed(
    report_pool, django_capture_on_commit_callbacks
) -> None:
    november = dt.datetime(2026, 11, 1, 3, 0, tzinfo=dt.UTC)  # 11:00 on Nov 1st in Shanghai
    with django_capture_on_commit_callbacks() as callbacks:
        run = services.report_run_create_due(now=november)
    assert run is not None and run.period == pools.PERIOD and run.kind == "monthly"
    assert len(callbacks) == 1  # the Celery task, sent when the transaction commits
    assert services.report_run_create_due(now=november) is None
    assert services.report_run_create_due(now=dt.datetime(2026, 10, 20, tzinfo=dt.UTC)) is None


def test_it_escapes_formula_cells_in_the_team_csv(report_pool) -> None:
    run = run_without_pdf()
    evil = run.files.get(team=report_pool.teams[pools.EVIL_TEAM])
    rows = read_csv(evil)

    assert {row["team"] for row in rows} == {"'" + pools.EVIL_TEAM}
    tasks = {row["task"] for row in rows if row["record"] == "contribution"}
    assert tasks == {"'" + pools.EVIL_TASK, "'" + pools.DASH_TASK}
    for row in rows:
        for value in row.values():
            assert not value or value[0] not in "=+@\t\r" or value.startswith("'")
            if value.startswith("-"):  # only typed numbers may begin with a minus sign
                Decimal(value)


def test_it_keeps_credits_numeric_in_the_team_csv(report_pool) -> None:
    run = run_without_pdf()
    vision = read_csv(run.files.get(team=report_pool.teams["vision"]))
    compensation = next(
        row for row in vision if row["record"] == "line" and row["line_kind"] == "compensation"
    )
    assert compensation["amount"].startswith("-")
    assert Decimal(compensation["amount"]) < 0


def test_it_adds_up_each_team_csv_to_its_statement(report_pool) -> None:
    run = run_without_pdf()
    for statement in Statement.objects.filter(period=pools.PERIOD):
        rows = read_csv(run.files.get(team=statement.team))
        lines = [row for row in rows if row["record"] == "line"]
        assert sum(Decimal(row["amount"]) for row in lines) == statement.total
        (total,) = [row for row in rows if row["record"] == "total"]
        assert Decimal(total["amount"]) == statement.total
        for line in StatementLine.objects.filter(statement=statement):
            shares = [
                Decimal(row["amount_unrounded"])
                for row in rows
                if row["record"] == "contribution" and row["line_kind"] == line.kind
            ]
            with localcontext() as context:
                context.prec = 60  # stored unrounded amounts carry 30 decimal places
                if shares:
                    assert sum(shares) == line.amount_unrounded


def test_it_prints_the_files_from_the_command(report_pool) -> None:
    out = io.StringIO()
    call_command("run_report", "--period", pools.PERIOD, "--no-pdf", stdout=out)
    run = ReportRun.objects.get()
    text = out.getvalue()
    assert f"report run #{run.pk}" in text and "done" in text
    for report_file in run.files.all():
        assert f"{report_file.sha256}  {report_file.path}" in text
