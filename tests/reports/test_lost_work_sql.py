"""The lost-work sums are the kernel's rule evaluated by the database (docs/pricing.md rule 6)."""

from __future__ import annotations

from decimal import Decimal

from django.db.models import F, Value
from django.db.models.functions import Coalesce, Least

from kernel.lost_work import lost_gpu_seconds
from metering.models import Preemption
from reports.selectors import GPU_SECONDS, lost_gpu_seconds_expression


def test_it_builds_the_same_sql_as_the_formula_written_out(db):
    written_out = Coalesce(
        "lost_gpu_seconds",
        Least(Value(1800), F("seconds_since_start")) * F("gpus"),
        output_field=GPU_SECONDS,
    )
    ours = Preemption.objects.annotate(lost=lost_gpu_seconds_expression(1800)).query
    theirs = Preemption.objects.annotate(lost=written_out).query
    assert str(ours) == str(theirs)


def test_it_evaluates_the_same_rule_in_python():
    assumed = lost_gpu_seconds(
        reported=None, seconds_since_start=2400, gpus=Decimal("0.5"), cap_seconds=1800
    )
    assert assumed == Decimal("900.0")
    reported = lost_gpu_seconds(
        reported=Decimal("12"), seconds_since_start=2400, gpus=Decimal(2), cap_seconds=1800
    )
    assert reported == Decimal("12")
