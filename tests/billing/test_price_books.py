"""Price books: versioned, effective-dated, immutable once published (ORM and database)."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal

import pytest
from django.db import IntegrityError, transaction

from billing.models import ImmutableRecordError, PriceBook
from billing.selectors import PriceBookNotFound, price_book_in_force, rates_per_gpu_hour
from billing.services import (
    PriceBookInvalid,
    price_book_create_draft,
    price_book_ensure_default,
    price_book_publish,
)
from tests.helpers import run_sql

pytestmark = pytest.mark.django_db


def test_it_creates_the_default_book_from_pricing_md(default_book, fixtures_dir):
    scenario = json.loads((fixtures_dir / "worked-example/scenario.json").read_text())

    assert default_book.is_published
    assert default_book.to_scenario_dict() == scenario["price_book"]
    assert rates_per_gpu_hour(default_book) == (Decimal("14.374"), Decimal("12.074"))
    assert price_book_ensure_default() is None  # a book exists: nothing new


def test_it_numbers_drafts_and_copies_the_newest_book(default_book):
    draft = price_book_create_draft(
        effective_from=dt.date(2027, 1, 1), facility_per_gpu_hour="2.80", notes="new racks"
    )

    assert draft.version == 2 and draft.status == "draft" and draft.published_at is None
    assert draft.facility_per_gpu_hour == Decimal("2.80")
    assert draft.depreciation_per_gpu_hour == default_book.depreciation_per_gpu_hour
    assert price_book_create_draft(effective_from=dt.date(2027, 2, 1)).version == 3


def test_it_applies_the_published_book_effective_at_the_periods_start(default_book):
    later = price_book_create_draft(effective_from=dt.date(2026, 10, 1), facility_per_gpu_hour=3)
    draft = price_book_create_draft(effective_from=dt.date(2026, 9, 1), facility_per_gpu_hour=4)

    assert price_book_in_force(dt.date(2026, 10, 1)) == default_book  # drafts never apply
    price_book_publish(price_book_id=later.pk)
    assert price_book_in_force(dt.date(2026, 9, 30)) == default_book
    assert price_book_in_force(dt.date(2026, 10, 1)).version == later.version
    # 2026-10-01 00:00 in Asia/Shanghai is 2026-09-30 16:00 UTC
    assert price_book_in_force(dt.datetime(2026, 9, 30, 16, tzinfo=dt.UTC)) == later
    assert price_book_in_force(dt.date(2026, 9, 15)) == default_book
    assert draft.status == "draft"


def test_it_refuses_a_period_before_any_book():
    with pytest.raises(PriceBookNotFound, match="no published price book is in force on 1999"):
        price_book_in_force(dt.date(1999, 12, 31))


def test_it_refuses_to_save_or_delete_a_published_book_through_the_orm(default_book):
    default_book.facility_per_gpu_hour = Decimal("9.99")

    with pytest.raises(ImmutableRecordError, match="v1 is published and cannot change"):
        default_book.save()
    with pytest.raises(ImmutableRecordError):
        default_book.delete()
    with pytest.raises(IntegrityError, match="published and cannot be changed"):
        with transaction.atomic():
            PriceBook.objects.filter(pk=default_book.pk).update(facility_per_gpu_hour=9)
    default_book.refresh_from_db()
    assert default_book.facility_per_gpu_hour == Decimal("2.30")


def test_it_refuses_raw_sql_updates_and_deletes_of_a_published_book(default_book):
    with pytest.raises(IntegrityError, match="price book v1 is published"):
        with transaction.atomic():
            run_sql(
                "UPDATE billing_pricebook SET currency = 'USD' WHERE id = %s", [default_book.pk]
            )
    with pytest.raises(IntegrityError, match="price book v1 is published"):
        with transaction.atomic():
            run_sql("DELETE FROM billing_pricebook WHERE id = %s", [default_book.pk])
    assert PriceBook.objects.get(pk=default_book.pk).currency == "CNY"


def test_it_lets_a_draft_change_until_it_is_published(default_book):
    draft = price_book_create_draft(effective_from=dt.date(2027, 1, 1))
    draft.sla_penalty_per_interval = Decimal("25.00")
    draft.save()
    run_sql("UPDATE billing_pricebook SET notes = 'checked' WHERE id = %s", [draft.pk])

    published = price_book_publish(price_book_id=draft.pk)

    assert published.is_published and published.sla_penalty_per_interval == Decimal("25.00")
    with pytest.raises(PriceBookInvalid, match="already published"):
        price_book_publish(price_book_id=draft.pk)
    with pytest.raises(IntegrityError):
        with transaction.atomic():
            run_sql("UPDATE billing_pricebook SET notes = 'again' WHERE id = %s", [draft.pk])


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"facility_per_gpu_hour": 2.3}, "facility_per_gpu_hour: give a decimal string"),
        ({"electricity_per_kwh": "cheap"}, "electricity_per_kwh: not a decimal number"),
        ({"timezone": "Mars/Olympus"}, "timezone: unknown time zone 'Mars/Olympus'"),
        ({"currency": "yuan"}, "currency must be an ISO 4217 code"),
        ({"currency": "BHD"}, "currency BHD: statements store two decimals"),
        ({"reserved_inference_share": "1.5"}, "reserved_inference_share must be at most 1"),
        ({"peak_hours": [9]}, "peak_hours must be [start, end)"),
        ({"peak_hours": [9, 25]}, "peak_hours must be between 0 and 24"),
        ({"depreciation_per_gpu_hour": "-1"}, "depreciation_per_gpu_hour must not be negative"),
        ({"discount": "5"}, "unknown price book field 'discount'"),
    ],
)
def test_it_refuses_an_invalid_draft_naming_the_field(default_book, changes, message):
    with pytest.raises(PriceBookInvalid) as refused:
        price_book_create_draft(effective_from=dt.date(2027, 1, 1), **changes)

    assert message in str(refused.value)
    assert PriceBook.objects.count() == 1
