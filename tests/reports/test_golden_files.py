"""The worked example's month, closed, written as team CSVs and a FOCUS file, byte for byte.

The files in tests/fixtures/golden/ are what Tandem writes today; a refactor that changes a
single byte of a report fails here. When a change is meant (a new column, a new wording),
regenerate them and review the diff before committing it:

    TANDEM_REGENERATE_GOLDEN=1 .venv/bin/python -m pytest tests/reports/test_golden_files.py

Statement line ids depend on the database's sequences, so the FOCUS file's x_StatementLineId
is written as the line's position in the close (1, 2, ...), in the files and in the check.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from billing.models import PeriodClose, StatementLine
from billing.services import period_close
from reports.render_csv import csv_bytes
from reports.render_focus import focus_csv
from reports.rows import TEAM_CSV_HEADER, team_csv_rows, team_statements
from tests.billing.conftest import classes_close, default_book, worked_example  # noqa: F401

pytestmark = pytest.mark.django_db

REGENERATE = os.environ.get("TANDEM_REGENERATE_GOLDEN") == "1"
LINE_ID = re.compile(r",([0-9]+)\r\n")  # x_StatementLineId: the last column of a FOCUS row


@pytest.fixture(autouse=True)
def pool_name(settings) -> None:
    settings.TANDEM_POOL_NAME = "tandem-gpu-pool"


def report_files(close: PeriodClose) -> dict[str, bytes]:
    files = {
        f"team-{statement.team.name}.csv": csv_bytes(TEAM_CSV_HEADER, team_csv_rows(statement))
        for statement in team_statements(close)
    }
    positions = {
        str(pk): str(number)
        for number, pk in enumerate(
            StatementLine.objects.filter(statement__period_close=close)
            .order_by("pk")
            .values_list("pk", flat=True),
            start=1,
        )
    }
    focus = focus_csv(close).decode("utf-8")
    files["focus.csv"] = LINE_ID.sub(
        lambda match: f",{positions[match.group(1)]}\r\n", focus
    ).encode("utf-8")
    return files


def compare(directory: Path, files: dict[str, bytes]) -> None:
    if REGENERATE:
        directory.mkdir(parents=True, exist_ok=True)
        for name, data in files.items():
            (directory / name).write_bytes(data)
    assert sorted(path.name for path in directory.iterdir()) == sorted(files)
    for name, data in files.items():
        assert data == (directory / name).read_bytes(), f"{directory.name}/{name} changed"


def test_it_writes_the_classes_example_month_byte_for_byte(
    classes_close,  # noqa: F811
    fixtures_dir: Path,
):
    compare(fixtures_dir / "golden/2026-10-classes", report_files(classes_close))


def test_it_writes_the_worked_example_month_byte_for_byte(
    worked_example,  # noqa: F811
    fixtures_dir: Path,
):
    close = period_close(period="2026-10").period_close

    compare(fixtures_dir / "golden/2026-10", report_files(close))
