"""`manage.py usage_report --format csv` writes through the one CSV writer: a team name that
could start a spreadsheet formula is inert, and the figures stay numbers."""

from __future__ import annotations

import csv
import io
from decimal import Decimal

import pytest
from django.core.management import call_command

from tests.factories import T0, TaskFactory, TeamFactory, UsageIntervalFactory

pytestmark = pytest.mark.django_db

EVIL_TEAM = '=HYPERLINK("http://evil.example/","click me")'


def test_it_writes_usage_as_csv_with_hostile_names_inert_and_numbers_plain() -> None:
    task = TaskFactory(team=TeamFactory(name=EVIL_TEAM))
    UsageIntervalFactory(task=task, interval_start=T0, alloc_gpu_seconds=Decimal("5400"))
    out = io.StringIO()
    start = T0.isoformat()
    end = T0.replace(hour=T0.hour + 1).isoformat()
    call_command(
        "usage_report", "--start", start, "--end", end, "--group-by", "team", "--format", "csv",
        stdout=out,
    )  # fmt: skip

    (row,) = list(csv.DictReader(io.StringIO(out.getvalue())))
    assert row["group"] == "'" + EVIL_TEAM
    assert row["alloc_gpu_hours"] == "1.500000"
    assert row["tasks"] == "1"
    assert row["mean_wait_seconds"] == ""
