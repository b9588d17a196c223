"""A closed month keeps the SLOs it judged its SLA breaches by (rule 4): an SLO stated after
the close (as the close's note asks of a service judged by the default, which nobody stated)
moves no closed month's money, neither when late data re-prices it as corrections nor when
its close is checked again."""

from __future__ import annotations

from decimal import Decimal

from django.core.management import call_command

from billing.models import PeriodClose, StatementLine
from billing.services import period_close
from metering.models import Service
from tests.billing.test_corrections import late_data_for_september


def september_closed_then_chat_api_stated() -> PeriodClose:
    """chat-api judged by the default (nobody stated it), September closed, then its SLO
    stated, far above its P99s: by it, no interval would have breached."""
    Service.objects.filter(external_id="chat-api").update(slo_stated=None, slo_p99_ms=1000)
    september = period_close(period="2026-09").period_close
    assert september.slo_unstated_services == 1
    chat_api = Service.objects.get(external_id="chat-api")
    assert september.judged_slos[chat_api.pk] == 1000
    call_command("set_slo", "--service", "chat-api", "--p99-ms", "5000")
    return september


def test_it_keeps_a_closed_months_data_unchanged_when_an_slo_is_stated(boundary_pool) -> None:
    september_closed_then_chat_api_stated()
    assert not period_close(period="2026-09").data_changed


def test_it_books_no_sla_correction_for_an_slo_stated_after_the_close(boundary_pool) -> None:
    september = september_closed_then_chat_api_stated()
    breaches = september.statements.filter(lines__kind__in=["sla_penalty", "sla_credit"])
    assert breaches.exists()  # September's breaches moved money, by the default SLO
    late_data_for_september(boundary_pool, hours=(2, 4))  # usage only: no latency changed
    period_close(period="2026-10")
    corrections = StatementLine.objects.filter(is_correction=True, corrects_period="2026-09")
    assert corrections.exists()  # the late usage is corrected
    sla = corrections.filter(kind__in=["sla_penalty", "sla_credit"])
    # chat-api's breaches stand as September judged them (by the SLO stated since, none would
    # have, and chat's credit of 320.00 would be taken back); the late usage only re-splits
    # the penalty between the training teams that held GPUs then.
    credit = sla.get(kind="sla_credit", statement__team__name="chat")
    assert credit.amount == Decimal("0.00")
    assert sum(line.amount for line in sla) == Decimal("0.00")
