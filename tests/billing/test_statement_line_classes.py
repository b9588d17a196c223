"""A close stores each GPU-time line's parts per GPU class (docs/pricing.md "GPU classes"):
exact, summing to the line, immutable with it."""

from __future__ import annotations

import json
from collections import defaultdict
from decimal import Decimal, localcontext
from pathlib import Path

import pytest
from django.db import IntegrityError, transaction

from billing.models import ImmutableRecordError, StatementLine, StatementLineClass
from billing.pricing.money import hours, round_money
from billing.services import period_close
from tests.helpers import run_sql

pytestmark = pytest.mark.django_db


def test_it_stores_each_lines_gpu_hours_per_class_as_the_engine_priced_them(
    classes_close, fixtures_dir: Path
):
    expected = json.loads((fixtures_dir / "worked-example/classes-expected.json").read_text())
    stored: dict[str, dict[str, dict[str, str]]] = defaultdict(lambda: defaultdict(dict))
    parts = StatementLineClass.objects.filter(
        line__statement__period_close=classes_close,
        line__kind__in=["baseline", "standard", "offpeak"],  # what the expected file lists
    )
    for part in parts.select_related("line__statement__team"):
        team = part.line.statement.team.name
        stored[team][part.gpu_class][part.line.kind] = str(part.quantity_gpu_hours)

    for team, figures in expected["teams"].items():
        assert stored[team] == figures["quantities_gpu_hours_by_class"], team
    capacity = {
        name: str(hours(Decimal(seconds)))
        for name, seconds in classes_close.capacity_gpu_seconds_by_class.items()
    }
    assert capacity == expected["capacity_gpu_hours_by_class"]


def test_it_stores_parts_that_sum_to_their_line_which_rounds_once(classes_close):
    lines = StatementLine.objects.filter(statement__period_close=classes_close)
    gpu_time = lines.filter(kind__in=["baseline", "standard", "offpeak", "compensation"])

    assert gpu_time.count() == 11
    for line in gpu_time:
        parts = list(line.classes.all())
        assert parts, line
        with localcontext(prec=60):  # the stored figures have 30 places: sum them exactly
            assert sum(part.amount_unrounded for part in parts) == line.amount_unrounded
            assert sum(part.quantity_gpu_seconds for part in parts) == line.quantity_gpu_seconds
        assert round_money(line.amount_unrounded, "CNY") == line.amount
    # Latency lines have no classes.
    assert not StatementLineClass.objects.filter(line__kind__in=["sla_penalty", "sla_credit"])


def test_it_stores_each_classes_book_rate_on_standard_lines(classes_close):
    rates = {
        part.gpu_class: part.rate_per_gpu_hour
        for part in StatementLineClass.objects.filter(
            line__kind="standard", line__statement__team__name="nlp"
        )
    }

    assert rates == {
        "H100": Decimal("42.674"),
        "L40S": Decimal("11.437"),
        "default": Decimal("14.374"),
    }
    baseline = StatementLineClass.objects.filter(line__kind="baseline")
    assert set(baseline.values_list("rate_per_gpu_hour", flat=True)) == {None}


def test_it_stores_only_the_default_class_for_a_month_without_classes(worked_example):
    close = period_close(period="2026-10").period_close

    parts = StatementLineClass.objects.filter(line__statement__period_close=close)
    assert set(parts.values_list("gpu_class", flat=True)) == {"default"}
    for part in parts:
        assert part.amount_unrounded == part.line.amount_unrounded
        assert part.quantity_gpu_hours == part.line.quantity_gpu_hours


def test_it_never_changes_a_class_part(classes_close):
    part = StatementLineClass.objects.first()
    before = list(StatementLineClass.objects.values_list())

    part.amount_unrounded += 1
    with pytest.raises(ImmutableRecordError):
        part.save()
    with pytest.raises(ImmutableRecordError):
        StatementLineClass.objects.filter(pk=part.pk).delete()
    with pytest.raises(IntegrityError, match="billing_statementlineclass rows belong"):
        with transaction.atomic():
            run_sql("UPDATE billing_statementlineclass SET amount_unrounded = 0")

    assert list(StatementLineClass.objects.values_list()) == before
