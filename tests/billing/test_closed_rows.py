"""A closed period never changes: the ORM and the database both refuse."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.db import IntegrityError, transaction

from billing.models import (
    ImmutableRecordError,
    PeriodClose,
    PeriodScenario,
    PlatformLine,
    SlaBreach,
    Statement,
    StatementLine,
    StatementLineClass,
    StatementLineTask,
)
from billing.services import period_close
from tests.helpers import billing_rows, run_sql

pytestmark = pytest.mark.django_db


@pytest.fixture
def closed(boundary_pool) -> PeriodClose:
    return period_close(period="2026-09").period_close


def test_it_refuses_to_save_a_changed_statement_or_line(closed):
    statement = Statement.objects.filter(period_close=closed).first()
    line = statement.lines.first()
    before = billing_rows()

    statement.total = Decimal("0.00")
    with pytest.raises(ImmutableRecordError, match="belongs to a closed period"):
        statement.save()
    line.amount += 1
    with pytest.raises(ImmutableRecordError):
        line.save()
    closed.pool_cost = Decimal("1.00")
    with pytest.raises(ImmutableRecordError):
        closed.save()

    assert billing_rows() == before


@pytest.mark.parametrize(
    "model",
    [
        PeriodClose,
        PeriodScenario,
        Statement,
        StatementLine,
        StatementLineTask,
        StatementLineClass,
        PlatformLine,
        SlaBreach,
    ],
)
def test_it_refuses_orm_updates_and_deletes_of_closed_rows(closed, model):
    row = model.objects.first()

    with pytest.raises(ImmutableRecordError):
        model.objects.filter(pk=row.pk).update(pk=row.pk)
    with pytest.raises(ImmutableRecordError):
        model.objects.filter(pk=row.pk).delete()
    with pytest.raises(ImmutableRecordError):
        row.delete()
    assert model.objects.filter(pk=row.pk).exists()


@pytest.mark.parametrize(
    ("table", "assignment"),
    [
        ("billing_periodclose", "pool_cost = pool_cost + 1, teams_total = teams_total + 1"),
        ("billing_periodscenario", "scenario_sha256 = 'edited'"),
        ("billing_statement", "total = 0"),
        ("billing_statementline", "amount = amount + 1"),
        ("billing_statementlinetask", "amount_unrounded = 0"),
        ("billing_statementlineclass", "rate_per_gpu_hour = 0"),
        ("billing_platformline", "description = 'edited'"),
        ("billing_slabreach", "penalized = NOT penalized"),
    ],
)
def test_it_refuses_raw_sql_updates_and_deletes_of_closed_rows(closed, table, assignment):
    before = billing_rows()

    with pytest.raises(IntegrityError, match=f"{table} rows belong to a closed period"):
        with transaction.atomic():
            run_sql(f"UPDATE {table} SET {assignment}")
    with pytest.raises(IntegrityError, match=f"{table} rows belong to a closed period"):
        with transaction.atomic():
            run_sql(f"DELETE FROM {table}")

    assert billing_rows() == before
