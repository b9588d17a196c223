"""Rule 5 counts a task's preemptions from its first ever (docs/pricing.md "Preemptions across
periods"): three evictions on the last day of October make the first of November the fourth,
compensated with N = 3. A month closed before the builder wrote `preemptions_before` still
verifies byte for byte: it is re-built as its close built it."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal

import pytest

from billing import services
from billing.models import PeriodClose, StatementLine
from billing.scenarios import SCENARIO_BUILDER_VERSION
from billing.selectors import period_scenario_text, period_verification
from billing.services import period_close
from metering.models import CapacityInterval, Preemption, Task, UsageInterval
from tests.factories import SourceFactory, TaskFactory, TeamFactory, windows_complete
from tests.helpers import command_output, interval_starts

pytestmark = pytest.mark.django_db
OCTOBER, NOVEMBER = "2026-10", "2026-11"
STEP = dt.timedelta(seconds=300)
# 2026-10-31 00:00 to 2026-11-01 06:00 in Asia/Shanghai (UTC+8).
METERED_FROM = dt.datetime(2026, 10, 30, 16, tzinfo=dt.UTC)
METERED_TO = dt.datetime(2026, 10, 31, 22, tzinfo=dt.UTC)
# Local 10:02, 14:02 and 18:02 on 31 October, then 03:02 on 1 November (off-peak).
EVICTIONS = [
    dt.datetime(2026, 10, 31, 2, 2, tzinfo=dt.UTC),
    dt.datetime(2026, 10, 31, 6, 2, tzinfo=dt.UTC),
    dt.datetime(2026, 10, 31, 10, 2, tzinfo=dt.UTC),
    dt.datetime(2026, 10, 31, 19, 2, tzinfo=dt.UTC),
]
AFTER_BOTH_MONTHS = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)


@pytest.fixture
def trainer(default_book) -> Task:
    """A 4-GPU pool whose training task holds two GPUs throughout and is evicted four times."""
    source = SourceFactory(name="default")
    task = TaskFactory(
        source=source, external_id="trainer", team=TeamFactory(name="vision"), kind="training_batch"
    )
    starts = interval_starts(METERED_FROM, METERED_TO, STEP)
    CapacityInterval.objects.bulk_create(
        CapacityInterval(
            source=source,
            interval_start=start,
            gpus_present=4,
            capacity_gpu_seconds=Decimal(4 * 300),
        )
        for start in starts
    )
    UsageInterval.objects.bulk_create(
        UsageInterval(task=task, interval_start=start, alloc_gpu_seconds=Decimal(600))
        for start in starts
    )
    Preemption.objects.bulk_create(
        Preemption(task=task, pod=f"trainer-{n}", at=at, gpus=Decimal(2), seconds_since_start=3600)
        for n, at in enumerate(EVICTIONS)
    )
    windows_complete(periods=[OCTOBER, NOVEMBER])
    return task


def compensation(period: str) -> list[Decimal]:
    return list(
        StatementLine.objects.filter(
            statement__period=period, kind="compensation", is_correction=False
        ).values_list("amount", flat=True)
    )


def test_it_compensates_the_first_preemption_of_a_month_after_three_the_month_before(
    trainer,
) -> None:
    period_close(period=OCTOBER, now=AFTER_BOTH_MONTHS)
    november = period_close(period=NOVEMBER, now=AFTER_BOTH_MONTHS).period_close

    assert compensation(OCTOBER) == []  # the first three are within N = 3
    # The fourth ever, off-peak: min(1800 s cap, 3600 s run) x 2 GPUs x R_off / 3600.
    expected = (Decimal(1800) * 2 * november.offpeak_rate / 3600).quantize(Decimal("0.01"))
    assert expected == Decimal("12.07")
    assert [abs(amount) for amount in compensation(NOVEMBER)] == [expected]
    tasks = json.loads(period_scenario_text(NOVEMBER, 0))["tasks"]
    assert tasks == [
        {"id": "trainer", "team": "vision", "kind": "training_batch", "preemptions_before": 3}
    ]
    assert november.scenario_builder_version == SCENARIO_BUILDER_VERSION
    assert period_verification(NOVEMBER).differences == []


def test_it_counts_a_gang_stored_pod_by_pod_once_per_interval(trainer) -> None:
    # Rows written before ingest recorded one per task: a second pod of the first eviction.
    Preemption.objects.create(
        task=trainer, pod="trainer-0b", at=EVICTIONS[0], gpus=Decimal(2), seconds_since_start=60
    )
    period_close(period=OCTOBER, now=AFTER_BOTH_MONTHS)
    period_close(period=NOVEMBER, now=AFTER_BOTH_MONTHS)

    tasks = json.loads(period_scenario_text(NOVEMBER, 0))["tasks"]
    assert tasks[0]["preemptions_before"] == 3


def test_it_verifies_a_month_closed_before_preemptions_carried_over(trainer, monkeypatch) -> None:
    # November closed by the builder of before: no `preemptions_before`, so no compensation.
    monkeypatch.setattr(services.close, "SCENARIO_BUILDER_VERSION", 1)
    period_close(period=OCTOBER, now=AFTER_BOTH_MONTHS)
    period_close(period=NOVEMBER, now=AFTER_BOTH_MONTHS)
    monkeypatch.undo()
    stored = period_scenario_text(NOVEMBER, 0)

    assert PeriodClose.objects.get(period=NOVEMBER).scenario_builder_version == 1
    assert "preemptions_before" not in stored
    assert compensation(NOVEMBER) == []
    assert period_verification(NOVEMBER).differences == []
    assert command_output("verify_period", "--period", NOVEMBER).endswith(
        f"{NOVEMBER}: no difference\n"
    )
    assert period_close(period=NOVEMBER, now=AFTER_BOTH_MONTHS).data_changed is False
