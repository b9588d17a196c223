"""The pool's time zone (TANDEM_TIMEZONE) changed after a month was closed.

A real pool does this: it is deployed with the default zone (Asia/Shanghai), September is
closed on that clock, and the operator then sets the zone the pool really runs in
(Europe/Berlin, six hours behind in October). September as closed ends at 2026-09-30
16:00Z; October on Berlin's clock would start at 22:00Z.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
from decimal import Decimal

import pytest
from django.db.models import Sum

from billing.models import PeriodClose, PeriodScenario, StatementLine
from billing.selectors import period_verification
from billing.services import period_close
from metering.models import CapacityInterval, Service
from reports.period_health import period_health
from reports.render_focus import focus_csv
from reports.rows import report_page
from reports.selectors import health_numbers
from tests.billing.test_corrections import late_data_for_september
from tests.billing.test_slo_terms import september_closed_then_chat_api_stated
from tests.dashboards.conftest import make_user
from tests.factories import windows_complete

pytestmark = pytest.mark.django_db
SEPTEMBER, OCTOBER = "2026-09", "2026-10"
DECEMBER_FIRST = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)


def move_pool_to_berlin(settings) -> None:
    settings.TANDEM_TIMEZONE = "Europe/Berlin"
    windows_complete(periods=[OCTOBER])  # October's last hours on Berlin's clock


def test_it_starts_the_next_month_where_the_closed_one_ended(boundary_pool, settings):
    september = period_close(period=SEPTEMBER, now=DECEMBER_FIRST).period_close
    move_pool_to_berlin(settings)

    october = period_close(period=OCTOBER, now=DECEMBER_FIRST).period_close

    # Every metered GPU-second is priced by exactly one month: none between the two closes
    # (Berlin's October would start six hours after September as closed ended).
    assert october.period_start == september.period_end
    metered = CapacityInterval.objects.aggregate(total=Sum("capacity_gpu_seconds"))["total"]
    priced = sum(
        (
            Decimal(close.capacity_gpu_seconds_by_class["default"])
            for close in PeriodClose.objects.all()
        ),
        Decimal(0),
    )
    assert priced == metered


def test_it_verifies_a_closed_month_on_the_bounds_it_was_closed_with(boundary_pool, settings):
    period_close(period=SEPTEMBER, now=DECEMBER_FIRST)
    move_pool_to_berlin(settings)

    verification = period_verification(SEPTEMBER)

    assert verification.ok, verification.differences


def test_it_adds_no_corrections_for_a_zone_change_alone(boundary_pool, settings):
    period_close(period=SEPTEMBER, now=DECEMBER_FIRST)
    move_pool_to_berlin(settings)

    outcome = period_close(period=OCTOBER, recheck=[SEPTEMBER], now=DECEMBER_FIRST)

    assert outcome.corrected_periods == ()
    assert not StatementLine.objects.filter(is_correction=True).exists()
    assert not PeriodScenario.objects.filter(period=SEPTEMBER, revision__gt=0).exists()


def test_it_says_a_closed_month_is_unchanged_after_a_zone_change(boundary_pool, settings):
    period_close(period=SEPTEMBER, now=DECEMBER_FIRST)
    move_pool_to_berlin(settings)

    assert period_close(period=SEPTEMBER, now=DECEMBER_FIRST).data_changed is False


def test_it_judges_the_month_before_in_the_report_by_the_slos_it_billed_by(boundary_pool, settings):
    """October's report compares it with September as closed (on its stored bounds, on
    Shanghai's clock); on Berlin's, those bounds start in August, and September was judged by
    the SLO stated since instead of the one it billed by."""
    september = september_closed_then_chat_api_stated()  # billed by 1000 ms, stated 5000
    chat_api = Service.objects.get(external_id="chat-api")
    billed = september.sla_breaches.filter(service=chat_api).count()
    move_pool_to_berlin(settings)
    period_close(period=OCTOBER, now=DECEMBER_FIRST)

    page = report_page(OCTOBER)

    # The stored snapshot's September, and the card the page and the PDF show from it.
    snapshot = period_health(page.close, previous=(page.previous.start, page.previous.end))
    (before,) = [s for s in snapshot.before.services if s.service_id == chat_api.pk]
    assert (before.slo_p99_ms, before.breached_intervals) == (1000, billed)  # before: 5000, 0
    (card,) = [c for c in page.cards if c.title == "Services within P99 SLO"]
    assert card.shown_previous == "0 of 2"  # chat-api missed its SLO, as September billed


def test_it_judges_octobers_first_hours_by_octobers_slos(boundary_pool, settings):
    """On Berlin's clock 30 September 18:00-24:00 is still September, but October billed
    those six hours (it starts where September as closed ended), by the SLO it kept."""
    september_closed_then_chat_api_stated()
    move_pool_to_berlin(settings)
    october = period_close(period=OCTOBER, now=DECEMBER_FIRST).period_close
    chat_api = Service.objects.get(external_id="chat-api")
    first_hours = (october.period_start, october.period_start + dt.timedelta(hours=6))
    billed = october.sla_breaches.filter(
        service=chat_api, interval_start__lt=first_hours[1]
    ).count()

    numbers = health_numbers(start=first_hours[0], end=first_hours[1])

    (judged,) = [s for s in numbers.services if s.service_id == chat_api.pk]
    assert (judged.slo_p99_ms, judged.breached_intervals) == (5000, billed)


def test_it_writes_a_corrections_charge_period_as_the_corrected_month_was_closed(
    boundary_pool, settings
):
    """FOCUS' ChargePeriod of a correction is the corrected month as it was billed (its
    close's stored bounds), not that month on the correcting close's clock."""
    september = period_close(period=SEPTEMBER, now=DECEMBER_FIRST).period_close
    move_pool_to_berlin(settings)
    late_data_for_september(boundary_pool, hours=(2, 4))
    october = period_close(period=OCTOBER, now=DECEMBER_FIRST).period_close

    rows = list(csv.DictReader(io.StringIO(focus_csv(october).decode("utf-8"))))

    corrections = [row for row in rows if row["ChargeClass"] == "Correction"]
    assert corrections
    # Before: 2026-08-31T22:00:00Z to 2026-09-30T22:00:00Z, Berlin's September, whose last
    # six hours October billed (its own rows start at 2026-09-30T16:00:00Z).
    assert {(row["ChargePeriodStart"], row["ChargePeriodEnd"]) for row in corrections} == {
        (instant(september.period_start), instant(september.period_end))
    }
    assert {row["BillingPeriodStart"] for row in rows} == {instant(october.period_start)}


def instant(moment: dt.datetime) -> str:
    return f"{moment.astimezone(dt.UTC):%Y-%m-%dT%H:%M:%SZ}"


def test_it_shows_a_closed_months_statements_on_the_bounds_it_was_closed_with(
    boundary_pool, settings, client
):
    period_close(period=SEPTEMBER, now=DECEMBER_FIRST)
    move_pool_to_berlin(settings)
    period_close(period=OCTOBER, now=DECEMBER_FIRST)
    client.force_login(make_user("fiona", "finance"))

    # In Berlin's time: September as closed ended at 18:00 on the 30th, where October began.
    # Before, both pages showed Berlin's calendar months (September to 2026-10-01 00:00).
    september = client.get(f"/statements/{SEPTEMBER}/").content.decode()
    # (The zone named after them is the one dashboards.views read when first imported.)
    assert "2026-08-31 18:00 to 2026-09-30 18:00 (" in september
    october = client.get(f"/statements/{OCTOBER}/").content.decode()
    assert "2026-09-30 18:00 to 2026-11-01 00:00 (" in october
