"""A closed month keeps the SLOs it judged its SLA breaches by (rule 4), revision by revision:
an SLO stated after the close (as the close's note asks of a service judged by the default,
which nobody stated) moves no closed month's money, neither when late data re-prices it as
corrections nor when its close is checked or verified again; a service first priced by a
correction is kept at the SLO that correction judged it by."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

from django.core.management import call_command
from django.db import connection
from django.utils import timezone

from billing.models import PeriodClose, PeriodScenario, StatementLine
from billing.selectors import period_bounds, period_verification
from billing.services import period_close, price_book_create_draft, price_book_publish
from metering.models import CapacityInterval, IngestWindow, LatencyInterval, Service
from reports.selectors import health_comparison
from tests.billing.test_corrections import late_data_for_september
from tests.dashboards.conftest import make_user
from tests.factories import IngestWindowFactory, ServiceFactory, windows_complete

SEPTEMBER_END = dt.datetime(2026, 9, 30, 16, tzinfo=dt.UTC)  # 1 October 00:00, the pool's zone
SLA = ["sla_penalty", "sla_credit"]


def september_closed_then_chat_api_stated() -> PeriodClose:
    """chat-api judged by the default (nobody stated it), September closed, then its SLO
    stated, far above its P99s: by it, no interval would have breached."""
    Service.objects.filter(external_id="chat-api").update(slo_stated=None, slo_p99_ms=1000)
    september = period_close(period="2026-09").period_close
    assert september.slo_unstated_services == 1
    chat_api = Service.objects.get(external_id="chat-api")
    (revision,) = PeriodScenario.objects.filter(period="2026-09")
    assert revision.service_slos[str(chat_api.pk)] == "1000"
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


def late_service_for_september(pool) -> Service:
    """A chat service whose September latency (chat-api's, copied) arrives after September
    closed, judged by the default 1000 ms, which nobody stated."""
    late = ServiceFactory(
        source=pool.source,
        external_id="late-api",
        team=pool.teams["chat"],
        slo_p99_ms=1000,
        slo_stated=None,
    )
    rows = LatencyInterval.objects.filter(
        service=pool.services["chat-api"], interval_start__lt=SEPTEMBER_END
    )
    LatencyInterval.objects.bulk_create(
        LatencyInterval(
            service=late,
            interval_start=row.interval_start,
            buckets=row.buckets,
            request_count=row.request_count,
            p99_seconds=row.p99_seconds,
        )
        for row in rows
    )
    IngestWindow.objects.filter(start__lt=SEPTEMBER_END).update(
        changed_after_first_write=timezone.now()
    )
    return late


def late_api_priced_in_october_then_stated(pool) -> None:
    period_close(period="2026-09")
    late_service_for_september(pool)
    period_close(period="2026-10")  # September's revision 1: late-api judged by 1000 ms
    sla = StatementLine.objects.filter(is_correction=True, corrects_period="2026-09", kind__in=SLA)
    assert sla.filter(statement__team__name="chat").exclude(amount=0).exists()
    call_command("set_slo", "--service", "late-api", "--p99-ms", "5000")


def test_it_keeps_a_corrected_month_unchanged_when_a_late_services_slo_is_stated(
    boundary_pool,
) -> None:
    late_api_priced_in_october_then_stated(boundary_pool)
    assert not period_close(period="2026-09").data_changed
    verification = period_verification("2026-09")
    assert verification.ok, verification.differences


def test_it_books_no_sla_correction_for_an_slo_stated_after_the_correction(boundary_pool) -> None:
    late_api_priced_in_october_then_stated(boundary_pool)
    late_data_for_september(boundary_pool, hours=(2, 4))  # usage only: no latency changed
    at = dt.datetime(2026, 11, 10, tzinfo=dt.UTC)  # November closable
    CapacityInterval.objects.create(
        source=boundary_pool.source, interval_start=at, gpus_present=8, capacity_gpu_seconds=2400
    )
    IngestWindowFactory(source=boundary_pool.source, start=at)
    windows_complete(periods=["2026-11"])
    period_close(period="2026-11", now=dt.datetime(2026, 12, 1, tzinfo=dt.UTC))
    credit = StatementLine.objects.get(
        is_correction=True,
        corrects_period="2026-09",
        kind="sla_credit",
        statement__period="2026-11",
        statement__team__name="chat",
    )
    assert credit.amount == Decimal("0.00")  # late-api's breaches stand as revision 1 judged


def test_it_reads_the_slos_of_a_revision_stored_before_they_were_kept(boundary_pool) -> None:
    september_closed_then_chat_api_stated()
    with connection.cursor() as cursor:  # as a revision stored before migration 0014
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")  # the close's deferred checks first
        cursor.execute("ALTER TABLE billing_periodscenario DISABLE TRIGGER USER")
        cursor.execute("UPDATE billing_periodscenario SET service_slos = '{}'")
        cursor.execute("ALTER TABLE billing_periodscenario ENABLE TRIGGER USER")
    assert PeriodScenario.objects.get(period="2026-09").service_slos == {}
    assert not period_close(period="2026-09").data_changed


def test_it_shows_a_closed_months_sla_by_the_slos_it_billed_by(client, boundary_pool) -> None:
    september = september_closed_then_chat_api_stated()  # billed by 1000 ms, stated 5000
    chat = Service.objects.get(external_id="chat-api")
    billed = september.sla_breaches.filter(service=chat).count()
    assert billed
    client.force_login(make_user("fiona", "finance"))
    html = client.get(f"/sla/?month=2026-09&service={chat.pk}").content.decode()
    heading = " ".join(
        html.split('<h2 style="margin-top: 14px">', 1)[1].split("</h2>", 1)[0].split()
    )
    assert heading.startswith(f"{billed} breached interval")
    assert heading.endswith("SLO 1000 ms")
    # October is open: judged by the SLO stated since.
    html = client.get(f"/sla/?month=2026-10&service={chat.pk}").content.decode()
    assert "SLO 5000 ms</h2>" in " ".join(html.split())


def test_it_shows_a_closed_months_sla_by_the_minimum_it_billed_by(client, boundary_pool) -> None:
    september = september_closed_then_chat_api_stated()
    chat = Service.objects.get(external_id="chat-api")
    billed = september.sla_breaches.filter(service=chat).count()
    # A book published since, in force from September's first day (nothing refuses it): the
    # month keeps its own, as its bill and every rebuild of it do.
    book = price_book_create_draft(effective_from=dt.date(2026, 9, 1), sla_min_requests=10**9)
    price_book_publish(price_book_id=book.pk)
    client.force_login(make_user("fiona", "finance"))
    html = client.get(f"/sla/?month=2026-09&service={chat.pk}").content.decode()
    heading = " ".join(
        html.split('<h2 style="margin-top: 14px">', 1)[1].split("</h2>", 1)[0].split()
    )
    assert heading.startswith(f"{billed} breached interval"), heading


def test_it_judges_a_closed_months_health_numbers_by_the_slos_it_billed_by(boundary_pool) -> None:
    """The overview's comparison and the health API read these numbers: last month, closed,
    shows the breaches its statements billed, not those of the SLO stated since."""
    september = september_closed_then_chat_api_stated()
    chat = Service.objects.get(external_id="chat-api")
    billed = september.sla_breaches.filter(service=chat).count()
    bounds = period_bounds("2026-09")
    before, after, _ = health_comparison(
        before=(bounds.start, bounds.end), after=(bounds.end, period_bounds("2026-10").end)
    )
    (judged,) = [s for s in before.services if s.service_id == chat.pk]
    assert (judged.slo_p99_ms, judged.breached_intervals) == (1000, billed)
    assert not judged.meets_slo
    # October is open: judged by the SLO stated since.
    assert {s.slo_p99_ms for s in after.services if s.service_id == chat.pk} <= {5000}
