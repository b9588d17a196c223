"""close_period: statements from metering, reproducible, idempotent, refusing when not ready."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from decimal import Decimal

import pytest
from django.core.management import CommandError, call_command
from django.db.models import F, Sum

from billing.models import (
    PeriodClose,
    PeriodScenario,
    PlatformLine,
    PriceBook,
    SlaBreach,
    Statement,
    StatementLine,
    StatementLineTask,
)
from billing.pricing import ScenarioError, scenario_hash
from billing.scenarios import scenario_build
from billing.selectors import period_bounds, period_verification
from billing.services import PeriodCloseRefused, period_close
from metering.models import CapacityInterval, IngestWindow, LatencyInterval, UsageInterval
from tests.factories import (
    ServiceFactory,
    SourceFactory,
    TaskFactory,
    UsageIntervalFactory,
)
from tests.helpers import billing_rows, command_output, exported_and_repriced

pytestmark = pytest.mark.django_db
SEPTEMBER = "2026-09"
CENT = Decimal("0.01")


def stored_as_engine_json(close: PeriodClose) -> dict:
    """The stored statements in the shape of price_scenario's output (non-correction lines)."""
    teams = {}
    for statement in close.statements.select_related("team"):
        lines = statement.lines.filter(is_correction=False)
        quantities = {
            line.kind: str(line.quantity_gpu_hours)
            for line in lines.order_by("kind")
            if line.kind in ("baseline", "standard", "offpeak")
        }
        teams[statement.team.name] = {
            "lines": {line.kind: str(line.amount) for line in lines.order_by("kind")},
            "quantities_gpu_hours": quantities,
            # Metering records no GPU model yet: every metered row is the class `default`.
            "quantities_gpu_hours_by_class": {"default": quantities} if quantities else {},
            "total": str(statement.total),
        }
    platform = close.platform_lines.filter(is_correction=False)
    return {
        "pool_cost": str(close.pool_cost),
        "teams": teams,
        "platform": {
            "total": str(close.platform_total),
            "lines": {line.name: str(line.amount) for line in platform},
        },
    }


def test_it_closes_the_worked_example_to_the_cent(worked_example, fixtures_dir, tmp_path):
    expected = json.loads((fixtures_dir / "worked-example/expected.json").read_text())

    close = period_close(period="2026-10").period_close

    stored = stored_as_engine_json(close)
    assert stored["pool_cost"] == expected["pool_cost"] == "2752.62"
    assert stored["teams"] == expected["teams"]
    assert stored["platform"] == expected["platform"]
    breaches = SlaBreach.objects.filter(period_close=close)
    assert breaches.count() == len(expected["sla_breaches"])
    assert close.standard_rate == Decimal("14.374")
    assert close.price_book_version == 1 and close.engine_version == "2.0.0"
    repriced = exported_and_repriced("2026-10", tmp_path)
    assert {key: value for key, value in repriced.items() if key != "rates"} == {
        key: value for key, value in expected.items() if key != "rates"
    }
    # The exported book is canonical text ("11.5"): the same rates, written shorter.
    assert {name: Decimal(rate) for name, rate in repriced["rates"].items()} == {
        name: Decimal(rate) for name, rate in expected["rates"].items()
    }


def test_it_reprices_the_exported_scenario_to_the_stored_amounts(boundary_pool, tmp_path):
    close = period_close(period=SEPTEMBER).period_close

    repriced = exported_and_repriced(SEPTEMBER, tmp_path)

    stored = stored_as_engine_json(close)
    assert repriced["pool_cost"] == stored["pool_cost"]
    assert repriced["teams"] == stored["teams"]
    assert repriced["platform"] == stored["platform"]
    assert len(repriced["sla_breaches"]) == close.sla_breaches.count() > 0
    exported = json.loads((tmp_path / f"{SEPTEMBER}.json").read_text())
    assert scenario_hash(exported) == close.scenario_sha256


def test_it_stores_a_scenario_whose_sha256_is_the_engines_hash(boundary_pool):
    close = period_close(period=SEPTEMBER).period_close

    text = PeriodScenario.objects.get(period=SEPTEMBER, revision=0).scenario_text()

    assert hashlib.sha256(text.encode()).hexdigest() == close.scenario_sha256
    assert scenario_hash(json.loads(text)) == close.scenario_sha256


def test_it_takes_only_the_months_intervals_in_the_pools_time_zone(boundary_pool):
    close = period_close(period=SEPTEMBER).period_close

    september_local = CapacityInterval.objects.filter(
        interval_start__gte=dt.datetime(2026, 8, 31, 16, tzinfo=dt.UTC),
        interval_start__lt=dt.datetime(2026, 9, 30, 16, tzinfo=dt.UTC),
    ).aggregate(total=Sum("capacity_gpu_seconds"))["total"]
    all_capacity = CapacityInterval.objects.aggregate(total=Sum("capacity_gpu_seconds"))["total"]
    assert september_local < all_capacity  # the pool also has October rows
    assert close.pool_cost == (september_local * close.standard_rate / 3600).quantize(CENT)
    assert close.period_start == dt.datetime(2026, 8, 31, 16, tzinfo=dt.UTC)
    assert close.period_end == dt.datetime(2026, 9, 30, 16, tzinfo=dt.UTC)


def test_it_accounts_for_every_cent_of_the_pool(boundary_pool):
    close = period_close(period=SEPTEMBER).period_close

    statements = Statement.objects.filter(period_close=close)
    teams_total = statements.aggregate(total=Sum("total"))["total"]
    platform_total = PlatformLine.objects.filter(period_close=close).aggregate(total=Sum("amount"))[
        "total"
    ]
    assert teams_total + platform_total == close.pool_cost
    for statement in statements:
        assert statement.total == statement.lines.aggregate(total=Sum("amount"))["total"]


def test_it_explains_each_line_by_its_tasks(boundary_pool):
    close = period_close(period=SEPTEMBER).period_close

    lines = StatementLine.objects.filter(statement__period_close=close)
    assert {line.kind for line in lines} == {
        "baseline",
        "standard",
        "offpeak",
        "sla_penalty",
        "sla_credit",
        "compensation",
    }
    for line in lines:
        parts = StatementLineTask.objects.filter(line=line)
        assert parts.exists()
        assert parts.aggregate(total=Sum("amount_unrounded"))["total"] == line.amount_unrounded
        assert line.amount == line.amount_unrounded.quantize(Decimal("0.01"))
        assert line.description
    vision_offpeak = lines.get(statement__team__name="vision", kind="offpeak")
    assert [part.task.external_id for part in vision_offpeak.tasks.all()] == ["vit-pretrain"]
    credit = lines.get(statement__team__name="search", kind="sla_credit")
    assert [part.service.external_id for part in credit.tasks.all()] == ["search-api"]


def test_it_changes_nothing_when_closed_twice(boundary_pool):
    first = period_close(period=SEPTEMBER)
    before = billing_rows()

    second = period_close(period=SEPTEMBER)

    assert first.created and not second.created
    assert not second.data_changed
    assert second.period_close.pk == first.period_close.pk
    assert billing_rows() == before


def test_it_says_when_a_closed_months_data_changed_without_editing_it(boundary_pool):
    period_close(period=SEPTEMBER)
    before = billing_rows()
    UsageInterval.objects.filter(
        task=boundary_pool.tasks["search-api"],
        interval_start=dt.datetime(2026, 9, 30, 3, tzinfo=dt.UTC),
    ).update(alloc_gpu_seconds=F("alloc_gpu_seconds") - 1)

    again = period_close(period=SEPTEMBER)

    assert not again.created and again.data_changed
    assert billing_rows() == before


def test_it_refuses_while_a_window_is_pending_or_failed_naming_them(boundary_pool):
    IngestWindow.objects.filter(start=boundary_pool.start + dt.timedelta(hours=3)).update(
        status="pending"
    )
    IngestWindow.objects.filter(start=boundary_pool.start + dt.timedelta(hours=5)).update(
        status="failed", error="Prometheus answered 503"
    )

    with pytest.raises(PeriodCloseRefused) as refused:
        period_close(period=SEPTEMBER)

    assert refused.value.reasons == [
        "window default 2026-09-29T19:00Z to 2026-09-29T20:00Z is pending",
        "window default 2026-09-29T21:00Z to 2026-09-29T22:00Z is failed",
    ]
    assert not PeriodClose.objects.exists()


def test_it_refuses_a_window_below_the_completeness_threshold(boundary_pool, settings):
    IngestWindow.objects.filter(start=boundary_pool.start).update(completeness=Decimal("0.985"))
    settings.TANDEM_MIN_COMPLETENESS = Decimal("0.99")

    with pytest.raises(PeriodCloseRefused, match=r"98\.50% complete, below the 99\.00% required"):
        period_close(period=SEPTEMBER)

    settings.TANDEM_MIN_COMPLETENESS = Decimal("0.98")
    assert period_close(period=SEPTEMBER).created


def test_it_names_the_missing_node_when_it_refuses_an_incomplete_window(boundary_pool):
    missing = (
        "completeness: node gpu-node-02 (dcgm-exporter 10.42.0.12:9400) missing 4 GPU(s): "
        "GPU-a 300 s, GPU-b 300 s, GPU-c 300 s, GPU-d 300 s; its exporter answered 0 of 5 scrapes"
    )
    IngestWindow.objects.filter(start=boundary_pool.start).update(
        completeness=Decimal("0.5"), warnings=["io: series {} has no pod label", missing]
    )

    with pytest.raises(PeriodCloseRefused) as refused:
        period_close(period=SEPTEMBER)

    (reason,) = refused.value.reasons
    assert reason.endswith(f"50.00% complete, below the 99.00% required ({missing})")


def test_it_ignores_windows_of_other_months(boundary_pool):
    october = IngestWindow.objects.filter(start=dt.datetime(2026, 10, 5, tzinfo=dt.UTC))
    assert october.update(status="pending") == 1

    assert period_close(period=SEPTEMBER).created


def test_it_refuses_a_month_that_is_not_over(boundary_pool):
    with pytest.raises(PeriodCloseRefused, match="the month is not over until 2026-09-30T16:00"):
        period_close(period=SEPTEMBER, now=dt.datetime(2026, 9, 30, 12, tzinfo=dt.UTC))


def test_it_refuses_a_month_without_metering_data(default_book):
    with pytest.raises(PeriodCloseRefused, match="metering holds no capacity or usage for 2026-08"):
        period_close(period="2026-08")
    assert not PeriodClose.objects.exists()


def test_it_refuses_bad_metering_data_naming_the_record_and_stores_nothing(boundary_pool):
    interval = dt.datetime(2026, 9, 29, 18, 5, tzinfo=dt.UTC)
    UsageInterval.objects.filter(
        task=boundary_pool.tasks["vit-pretrain"], interval_start=interval
    ).delete()
    UsageIntervalFactory(
        task=boundary_pool.tasks["vit-pretrain"], interval_start=interval, alloc_gpu_seconds=2400
    )

    with pytest.raises(ScenarioError, match=r"usage\[\d+\]: allocations of 2026-09-29T18:05:00Z"):
        period_close(period=SEPTEMBER)

    assert billing_rows() == {name: [] for name in billing_rows()}


def test_it_refuses_a_malformed_period():
    with pytest.raises(ValueError, match="period must be YYYY-MM"):
        period_close(period="2026-13")


def test_it_reports_refusals_through_the_command_without_a_traceback(boundary_pool):
    IngestWindow.objects.filter(start=boundary_pool.start).update(status="running")

    with pytest.raises(CommandError) as refused:
        call_command("close_period", "--period", SEPTEMBER)

    assert "window default 2026-09-29T16:00Z to 2026-09-29T17:00Z is running" in str(refused.value)


def test_it_closes_through_the_command(boundary_pool):
    output = command_output("close_period", "--period", SEPTEMBER)

    close = PeriodClose.objects.get(period=SEPTEMBER)
    assert f"closed {SEPTEMBER}: pool cost {close.pool_cost} CNY" in output
    assert "already closed" in command_output("close_period", "--period", SEPTEMBER)


def test_it_refuses_a_malformed_latency_histogram_naming_it(boundary_pool):
    LatencyInterval.objects.filter(
        service=boundary_pool.services["chat-api"],
        interval_start=dt.datetime(2026, 9, 30, 2, tzinfo=dt.UTC),
    ).update(buckets=[["0.5", 10], ["0.1", 20], ["0.1", 30], ["+Inf", 30]])

    with pytest.raises(ScenarioError, match="latency of 'chat-api' in 2026-09-30T02:00:00Z"):
        period_close(period=SEPTEMBER)
    assert not PeriodClose.objects.exists()


def test_it_names_tasks_of_two_sources_with_the_same_id_apart(boundary_pool):
    other_source = SourceFactory(name="west")
    twin = TaskFactory(
        source=other_source,
        external_id="llm-sft",
        team=boundary_pool.teams["nlp"],
        kind="inference",
    )
    UsageIntervalFactory(
        task=twin, interval_start=dt.datetime(2026, 9, 30, 3, tzinfo=dt.UTC), alloc_gpu_seconds=1
    )

    close = period_close(period=SEPTEMBER).period_close

    exported = json.loads(PeriodScenario.objects.get(period=SEPTEMBER).scenario_text())
    assert {"default/llm-sft", "west/llm-sft"} <= {task["id"] for task in exported["tasks"]}
    twin_lines = StatementLineTask.objects.filter(line__statement__period_close=close, task=twin)
    assert twin_lines.exists()


def test_it_names_services_of_two_sources_apart_only_where_both_served_in_the_month(
    boundary_pool,
):
    """Another cluster's source, added after the close, serves the same model: September's
    services keep the names it was billed under, so its data has not changed. A month in which
    both served names them apart."""
    chat = boundary_pool.services["chat-api"]
    period_close(period=SEPTEMBER)
    twin = ServiceFactory(source=SourceFactory(name="west"), external_id="chat-api", team=chat.team)

    assert not period_close(period=SEPTEMBER).data_changed
    assert period_verification(SEPTEMBER).ok

    LatencyInterval.objects.create(
        service=twin,
        interval_start=dt.datetime(2026, 9, 30, 3, tzinfo=dt.UTC),
        buckets=[["0.5", 10], ["+Inf", 10]],
        request_count=10,
    )
    built = scenario_build(
        start=period_bounds(SEPTEMBER).start,
        end=period_bounds(SEPTEMBER).end,
        price_book=PriceBook.objects.get(version=1),
    )
    assert {"default/chat-api", "west/chat-api"} <= {s.id for s in built.scenario.services}


@pytest.mark.django_db(transaction=True)
def test_it_closes_outside_a_transaction_reading_one_snapshot(boundary_pool):
    """As from the command line or Celery: the reads run in their own REPEATABLE READ
    transaction and the writes in another."""
    outcome = period_close(period=SEPTEMBER)

    assert outcome.created
    assert period_close(period=SEPTEMBER).created is False
    assert PeriodClose.objects.get(period=SEPTEMBER).statements.count() == 4
