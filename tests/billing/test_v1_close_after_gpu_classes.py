"""A period closed by engine 1.0.0, before price books had GPU classes, still verifies.

tests/fixtures/v1-close/2026-10.json is what `period_close` of the version-1 code (commit
0c7670f) stored for the worked example's month: the close, its scenario text and hash,
statements, lines, contributions, platform lines and breaches. The test rolls the database
back to before migration 0003, stores that close with the models of then, applies 0003 and
every later migration, and re-prices the month with today's engine and scenario builder.
"""

from __future__ import annotations

import datetime as dt
import json
import zlib

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from billing.selectors import period_verification
from metering.models import Service, Task, Team
from tests.helpers import command_output

pytestmark = pytest.mark.django_db
BEFORE_GPU_CLASSES = [("billing", "0002_immutable_rows_and_default_price_book")]
DATETIMES = ("period_start", "period_end", "closed_at", "created", "interval_start")


def test_it_verifies_a_period_closed_before_gpu_classes_after_the_migration(
    worked_example, fixtures_dir
):
    stored = json.loads((fixtures_dir / "v1-close/2026-10.json").read_text())
    latest = MigrationExecutor(connection).loader.graph.leaf_nodes()
    old_apps = _migrate(BEFORE_GPU_CLASSES)
    assert "billing_pricebookgpuclass" not in connection.introspection.table_names()
    _store_close(old_apps, stored)
    with connection.cursor() as cursor:
        # Run the stored rows' deferred checks now, as their commit would: PostgreSQL refuses to
        # ALTER a table (migration 0003) that has trigger events pending.
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")

    _migrate(latest)

    assert "billing_pricebookgpuclass" in connection.introspection.table_names()
    verification = period_verification("2026-10")
    assert verification.differences == []
    assert verification.notes == ["closed with engine 1.0.0, re-priced with 2.0.0"]
    assert command_output("verify_period", "--period", "2026-10").endswith(
        "2026-10: no difference\n"
    )
    # The stored input is the version-1 text, and today's builder writes it again.
    exported = command_output("export_scenario", "--period", "2026-10")
    assert exported == stored["scenario"]["text"] + "\n"
    assert "gpu_classes" not in exported


def _migrate(targets: list[tuple[str, str]]):
    """Migrate the test database to `targets`; the models of that state."""
    executor = MigrationExecutor(connection)
    executor.migrate(targets)
    return MigrationExecutor(connection).loader.project_state(targets).apps


def _values(record: dict, *skip: str) -> dict:
    return {
        name: dt.datetime.fromisoformat(value) if name in DATETIMES else value
        for name, value in record.items()
        if name not in skip
    }


def _store_close(apps, stored: dict) -> None:
    """The version-1 close, written with the (historical) models of migration 0002."""
    model = apps.get_model
    book = model("billing", "PriceBook").objects.get(
        version=int(stored["close"]["price_book_version"])
    )
    close = model("billing", "PeriodClose").objects.create(
        price_book=book, **_values(stored["close"])
    )
    scenario = stored["scenario"]
    model("billing", "PeriodScenario").objects.create(
        period=close.period,
        priced_in=close,
        price_book=book,
        scenario_zlib=zlib.compress(scenario["text"].encode(), 1),
        **_values(scenario, "text"),
    )
    for statement in stored["statements"]:
        row = model("billing", "Statement").objects.create(
            period_close=close,
            period=close.period,
            team_id=Team.objects.get(name=statement["team"]).pk,
            **_values(statement, "team", "lines"),
        )
        for line in statement["lines"]:
            line_row = model("billing", "StatementLine").objects.create(
                statement=row, **_values(line, "contributions")
            )
            model("billing", "StatementLineTask").objects.bulk_create(
                model("billing", "StatementLineTask")(
                    line=line_row,
                    task_id=_pk(Task, item["task"]),
                    service_id=_pk(Service, item["service"]),
                    gpu_seconds=item["gpu_seconds"],
                    amount_unrounded=item["amount_unrounded"],
                )
                for item in line["contributions"]
            )
    for line in stored["platform_lines"]:
        model("billing", "PlatformLine").objects.create(period_close=close, **_values(line))
    for breach in stored["sla_breaches"]:
        model("billing", "SlaBreach").objects.create(
            period_close=close,
            service_id=_pk(Service, breach["service"]),
            **_values(breach, "service"),
        )


def _pk(model, external_id: str | None) -> int | None:
    return None if external_id is None else model.objects.get(external_id=external_id).pk
