"""What-if: a closed month priced with a draft book, compared per team; nothing stored."""

from __future__ import annotations

import datetime as dt
import io
import json
from decimal import Decimal

import pytest
from django.core.management import CommandError, call_command

from billing.models import PriceBook
from billing.pricing import price, scenario_from_dict
from billing.selectors import period_scenario_text, period_whatif
from billing.services import period_close, price_book_create_draft
from tests.helpers import billing_rows, command_output

pytestmark = pytest.mark.django_db
SEPTEMBER = "2026-09"


@pytest.fixture
def draft(boundary_pool) -> PriceBook:
    period_close(period=SEPTEMBER)
    return price_book_create_draft(
        effective_from=dt.date(2027, 1, 1),
        facility_per_gpu_hour="3.30",  # +1.00: the standard rate only
        sla_penalty_per_interval="30.00",  # +50 %
    )


def test_it_prices_a_closed_month_with_a_draft_and_stores_nothing(draft):
    before = billing_rows()

    what_if = period_whatif(period=SEPTEMBER, price_book_id=draft.pk)

    assert billing_rows() == before
    assert PriceBook.objects.get(pk=draft.pk).status == "draft"
    assert what_if.statement_price_book_version == 1
    assert what_if.what_if_price_book_version == draft.version
    assert what_if.standard_rate.difference == Decimal("1.00")
    assert what_if.offpeak_rate.difference == 0  # facility is not in the off-peak rate
    teams = {team.team: team for team in what_if.teams}
    assert set(teams) == {"chat", "nlp", "search", "vision"}
    for team in teams.values():
        if "offpeak" in team.lines:
            assert team.lines["offpeak"].difference == 0
        if "sla_credit" in team.lines:
            credit = team.lines["sla_credit"]
            assert credit.what_if == credit.statement * Decimal("1.5")
        assert team.total.difference == sum(
            (line.difference for line in team.lines.values()), Decimal(0)
        )
    assert teams["vision"].lines["standard"].difference > 0


def test_it_matches_the_engine_on_the_stored_scenario_with_the_draft(draft):
    data = json.loads(period_scenario_text(SEPTEMBER))
    data["price_book"] = draft.to_scenario_dict()
    expected = price(scenario_from_dict(data))

    what_if = period_whatif(period=SEPTEMBER, price_book_id=draft.pk)

    assert what_if.pool_cost.what_if == expected.pool_cost_rounded
    assert what_if.platform_total.what_if == expected.platform.total
    for team in what_if.teams:
        engine_team = expected.team(team.team)
        assert team.total.what_if == engine_team.total
        for kind, amount in team.lines.items():
            line = engine_team.line(kind)
            assert amount.what_if == (line.rounded if line else 0)


def test_it_shows_the_differences_through_the_command(draft):
    output = json.loads(
        command_output(
            "whatif_period", "--period", SEPTEMBER, "--price-book", str(draft.version), "--json"
        )
    )

    what_if = period_whatif(period=SEPTEMBER, price_book_id=draft.pk)
    vision = next(team for team in what_if.teams if team.team == "vision")
    assert output["teams"]["vision"]["total"] == {
        "statement": str(vision.total.statement),
        "what_if": str(vision.total.what_if),
        "difference": str(vision.total.difference),
    }
    table = command_output("whatif_period", "--period", SEPTEMBER, "--price-book", "2")
    assert "pool cost" in table and "vision" in table


def test_it_refuses_an_unknown_book_or_period(draft):
    with pytest.raises(CommandError, match="--price-book: no price book version 99"):
        call_command("whatif_period", "--period", SEPTEMBER, "--price-book", "99")
    with pytest.raises(CommandError, match="period 2026-08 is not closed"):
        call_command(
            "whatif_period", "--period", "2026-08", "--price-book", "1", stdout=io.StringIO()
        )
