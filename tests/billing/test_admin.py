"""Admin: draft and publish price books; published books and closed periods are read-only."""

from __future__ import annotations

import pytest
from django.urls import reverse
from django.utils.html import escape

from billing.models import PriceBook, Statement
from billing.services import period_close

pytestmark = pytest.mark.django_db


def book_form(**changes) -> dict:
    form = {
        "effective_from": "2027-01-01",
        "currency": "CNY",
        "timezone": "Asia/Shanghai",
        "depreciation_per_gpu_hour": "11.50",
        "facility_per_gpu_hour": "2.60",
        "electricity_per_kwh": "0.82",
        "gpu_average_power_kw": "0.70",
        "reserved_inference_share": "0.30",
        "peak_hours": "[9, 22]",
        "sla_penalty_per_interval": "20.00",
        "sla_min_requests": "100",
        "starvation_preemption_threshold": "3",
        "starvation_lost_work_cap_seconds": "1800",
        "notes": "",
    }
    return {**form, **changes}


def test_it_drafts_and_publishes_a_book_in_the_admin(admin_client, default_book):
    response = admin_client.post(reverse("admin:billing_pricebook_add"), book_form())
    assert response.status_code == 302
    draft = PriceBook.objects.get(version=2)
    assert draft.status == "draft"

    admin_client.post(
        reverse("admin:billing_pricebook_changelist"),
        {"action": "publish", "_selected_action": [draft.pk]},
    )

    draft.refresh_from_db()
    assert draft.is_published and draft.published_at is not None


def test_it_shows_a_published_book_read_only(admin_client, default_book):
    url = reverse("admin:billing_pricebook_change", args=[default_book.pk])
    page = admin_client.get(url).content.decode()
    assert 'name="facility_per_gpu_hour"' not in page

    assert admin_client.post(url, book_form(facility_per_gpu_hour="9.99")).status_code == 403

    default_book.refresh_from_db()
    assert str(default_book.facility_per_gpu_hour) == "2.300000"
    delete = admin_client.get(reverse("admin:billing_pricebook_delete", args=[default_book.pk]))
    assert delete.status_code == 403


def test_it_shows_statements_without_letting_anyone_edit_them(admin_client, boundary_pool):
    period_close(period="2026-09")
    statement = Statement.objects.get(team__name="vision")

    assert admin_client.get(reverse("admin:billing_statement_changelist")).status_code == 200
    page = admin_client.get(reverse("admin:billing_statement_change", args=[statement.pk]))
    assert page.status_code == 200
    line = statement.lines.get(kind="offpeak")
    assert escape(line.description) in page.content.decode()
    assert 'name="total"' not in page.content.decode()
    assert admin_client.get(reverse("admin:billing_periodclose_changelist")).status_code == 200
    assert admin_client.get(reverse("admin:billing_statement_add")).status_code == 403
