"""Corrections subtract what was billed from the re-priced month exactly.

Stored unrounded amounts have 30 decimal places (a line of 210.82 CNY is 33 significant
digits), more than Python's default context of 28 keeps. Summed there, what was billed loses
its last digits, and every line of every team becomes "changed": late data about one task
booked correction lines of 0.00 with amounts like -3.3333E-26 on the statements of teams it
never touched. The explain file and the statement line page summed a line's contributions
the same way, so they did not add up to the line they explain.
"""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal, localcontext

import pytest
from django.db.models import F, Q
from django.test import Client
from django.urls import reverse

from access.models import Role
from billing.models import PlatformLine, StatementLine, StatementLineTask
from billing.pricing import price, scenario_from_dict
from billing.pricing.money import CONTEXT
from billing.selectors import period_scenario_text
from billing.services import period_close
from reports.explain import statement_line_explain
from tests.factories import RoleFactory
from tests.pools.boundary import usage_changed_late

pytestmark = pytest.mark.django_db
SEPTEMBER, OCTOBER = "2026-09", "2026-10"


def late_chat_data_for_september(boundary_pool) -> None:
    """One re-ingested September hour: chat-api held 75 GPU-seconds less in each interval."""
    start = dt.datetime(2026, 9, 30, 2, tzinfo=dt.UTC)
    end = start + dt.timedelta(hours=1)
    usage_changed_late(
        boundary_pool, "chat-api", start, end, F("alloc_gpu_seconds") - 75, alloc_gpu_seconds__gt=75
    )


def test_it_corrects_only_the_teams_the_late_data_changed(boundary_pool):
    period_close(period=SEPTEMBER)
    late_chat_data_for_september(boundary_pool)

    period_close(period=OCTOBER)

    corrections = StatementLine.objects.filter(is_correction=True, corrects_period=SEPTEMBER)
    # chat-api's usage fell: chat's share of the reserve and its usage beyond it fell, and
    # search (the other inference team) carries more of the baseline. Training is untouched:
    # T(i), its usage, its penalties and its compensation are the same as billed.
    assert sorted(corrections.values_list("statement__team__name", "kind", "amount")) == [
        ("chat", "baseline", Decimal("-2.23")),
        ("chat", "standard", Decimal("-0.66")),
        ("search", "baseline", Decimal("2.23")),
        ("search", "standard", Decimal("-0.66")),
    ]
    assert not corrections.filter(amount=0).exists()
    assert not StatementLineTask.objects.filter(line__in=corrections, amount_unrounded=0).exists()


def test_it_adds_up_what_was_billed_to_the_re_priced_month_to_the_last_digit(boundary_pool):
    period_close(period=SEPTEMBER)
    late_chat_data_for_september(boundary_pool)

    period_close(period=OCTOBER)

    # Original + corrections, unrounded, is revision 1's exact amount, line by line: e.g.
    # nlp's standard line stays 210.818666666666666666666666666667 (not ...6666667).
    text = period_scenario_text(SEPTEMBER, 1)
    repriced = price(scenario_from_dict(json.loads(text)))
    billed: dict[tuple[str, str], Decimal] = {}
    lines = StatementLine.objects.filter(
        Q(statement__period=SEPTEMBER, is_correction=False) | Q(corrects_period=SEPTEMBER)
    )
    with localcontext(CONTEXT):
        for team, kind, amount in lines.values_list(
            "statement__team__name", "kind", "amount_unrounded"
        ):
            billed[(team, kind)] = billed.get((team, kind), Decimal(0)) + amount
        platform: dict[str, Decimal] = {}
        rows = PlatformLine.objects.filter(
            Q(period_close__period=SEPTEMBER, is_correction=False) | Q(corrects_period=SEPTEMBER)
        )
        for name, amount in rows.values_list("name", "amount_unrounded"):
            platform[name] = platform.get(name, Decimal(0)) + amount
    expected = {
        (team.team, line.kind): line.amount for team in repriced.teams for line in team.lines
    }
    assert billed == expected
    assert platform == {line.kind: line.amount for line in repriced.platform.lines}


def _nlp_standard_line() -> StatementLine:
    return StatementLine.objects.get(
        statement__period=SEPTEMBER, statement__team__name="nlp", kind="standard"
    )


def test_it_explains_a_line_with_contributions_that_sum_to_it_exactly(boundary_pool):
    period_close(period=SEPTEMBER)
    line = _nlp_standard_line()
    # llm-sft 162.306416666666666666666666666667 + nlp-notebook 48.5122500…: 33 digits.
    assert line.amount_unrounded == Decimal("210.818666666666666666666666666667")

    explanation = statement_line_explain(line=line)

    assert explanation.contributions_sum == line.amount_unrounded
    assert explanation.as_json()["contributions_sum"] == "210.818666666666666666666666666667"


def test_it_shows_the_contributions_of_a_statement_line_match_it(boundary_pool):
    period_close(period=SEPTEMBER)
    line = _nlp_standard_line()
    client = Client()
    client.force_login(RoleFactory(user__username="fiona", name=Role.Name.FINANCE).user)

    response = client.get(reverse("dashboards:statement_line", args=[line.pk]))

    assert response.status_code == 200
    assert response.context["contributions_sum"] == line.amount_unrounded
    assert response.context["contributions_match"] is True
