"""export_scenario writes the input behind a period; verify_period re-prices and compares."""

from __future__ import annotations

import datetime as dt
import hashlib
import io
import json

import pytest
from django.core.management import CommandError, call_command
from django.db.models import F

from billing.models import PeriodScenario
from billing.pricing import canonical_json, price, result_to_dict, scenario_from_dict, scenario_hash
from billing.selectors import period_verification
from billing.services import period_close
from metering.models import LatencyInterval, UsageInterval
from tests.helpers import command_output

pytestmark = pytest.mark.django_db
SEPTEMBER = "2026-09"


@pytest.fixture
def closed(boundary_pool):
    return period_close(period=SEPTEMBER).period_close


def test_it_exports_the_scenario_to_standard_output(closed):
    exported = json.loads(command_output("export_scenario", "--period", SEPTEMBER))

    assert {task["id"] for task in exported["tasks"]} == {
        "search-api",
        "chat-api",
        "vit-pretrain",
        "llm-sft",
        "nlp-notebook",
    }
    intervals = {row["interval"] for row in exported["capacity"]}
    assert min(intervals) == "2026-09-29T16:00:00Z"  # the pool's first interval
    assert max(intervals) == "2026-09-30T15:55:00Z"  # the last one of September, local time
    result = result_to_dict(price(scenario_from_dict(exported)))
    assert result["pool_cost"] == str(closed.pool_cost)


def test_it_stores_the_canonical_text_whose_hash_the_close_keeps(closed):
    """The close hashes and compresses the text piece by piece, on a thread of its own: what
    it stores is the engine's canonical text, whole, and the hash is that text's."""
    text = PeriodScenario.objects.get(period=SEPTEMBER, revision=0).scenario_text()

    assert text == canonical_json(json.loads(text))
    assert hashlib.sha256(text.encode()).hexdigest() == closed.scenario_sha256
    assert scenario_hash(json.loads(text)) == closed.scenario_sha256


def test_it_refuses_to_export_a_period_that_is_not_closed(default_book):
    with pytest.raises(CommandError, match="period 2026-07 is not closed"):
        call_command("export_scenario", "--period", "2026-07", stdout=io.StringIO())


def test_it_verifies_an_untouched_period(closed):
    verification = period_verification(SEPTEMBER)

    assert verification.ok, verification.differences
    assert (
        command_output("verify_period", "--period", SEPTEMBER)
        .strip()
        .endswith("2026-09: no difference")
    )


def test_it_fails_verification_when_metering_rows_were_edited(closed):
    UsageInterval.objects.filter(
        task__external_id="search-api", interval_start=dt.datetime(2026, 9, 30, 1, tzinfo=dt.UTC)
    ).update(alloc_gpu_seconds=F("alloc_gpu_seconds") / 2)

    verification = period_verification(SEPTEMBER)

    assert len(verification.differences) == 1
    assert (
        "metering rows of 2026-09 no longer match the scenario priced"
        in (verification.differences[0])
    )
    with pytest.raises(CommandError, match="2026-09: 1 difference"):
        call_command("verify_period", "--period", SEPTEMBER, stdout=io.StringIO())


def test_it_fails_verification_when_latency_was_edited(closed):
    LatencyInterval.objects.filter(
        service__external_id="chat-api", interval_start=dt.datetime(2026, 9, 30, 2, tzinfo=dt.UTC)
    ).update(buckets=[["0.05", 500], ["+Inf", 500]])

    assert not period_verification(SEPTEMBER).ok


def test_it_reports_a_period_that_is_not_closed(default_book):
    with pytest.raises(CommandError, match="period 2026-07 is not closed"):
        call_command("verify_period", "--period", "2026-07", stdout=io.StringIO())
