"""Helpers shared by the billing tests (not fixtures)."""

from __future__ import annotations

import io
import json
from pathlib import Path

from django.core.management import call_command
from django.db import connection

from billing import models

# Every model a close writes, for "nothing changed" and "nothing stored" comparisons.
CLOSE_MODELS = [
    models.PeriodClose,
    models.PeriodScenario,
    models.Statement,
    models.StatementLine,
    models.StatementLineTask,
    models.StatementLineClass,
    models.StatementLineTaskClass,
    models.PlatformLine,
    models.PlatformLineClass,
    models.SlaBreach,
]


def billing_rows() -> dict[str, list[tuple]]:
    """Every row a close writes, as text values, per model."""
    return {
        model.__name__: sorted(
            tuple(str(value) for value in row) for row in model.objects.values_list()
        )
        for model in CLOSE_MODELS
    }


def run_sql(sql: str, params: list | None = None) -> None:
    with connection.cursor() as cursor:
        cursor.execute(sql, params or [])


def command_output(*args: str) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def exported_and_repriced(period: str, tmp_path: Path) -> dict:
    """export_scenario --period, then price_scenario on the file: the engine's JSON output."""
    scenario_file = tmp_path / f"{period}.json"
    call_command("export_scenario", "--period", period, "--out", str(scenario_file),
                 stderr=io.StringIO())  # fmt: skip
    return json.loads(command_output("price_scenario", str(scenario_file)))
