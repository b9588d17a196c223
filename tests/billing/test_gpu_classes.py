"""GPU classes of a price book: drafted, validated, immutable once published (ORM and
database), edited inline in the admin, listed by the API and the price-book page, and written
into the scenarios a close prices and `export_scenario` writes."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal

import pytest
from django.db import IntegrityError, transaction
from django.urls import reverse

from audit.models import AuditEntry
from billing.models import ImmutableRecordError, PriceBook, PriceBookGpuClass
from billing.pricing import price, result_to_dict, scenario_from_dict
from billing.selectors import engine_price_book, period_verification, rates_per_gpu_class
from billing.services import (
    PriceBookInvalid,
    period_close,
    price_book_create_draft,
    price_book_publish,
    price_book_set_gpu_classes,
)
from tests.helpers import command_output, run_sql
from tests.pricing.builders import H100, L40S

pytestmark = pytest.mark.django_db


def drafted(*classes: dict, **changes) -> PriceBook:
    return price_book_create_draft(
        effective_from=dt.date(2026, 9, 1), gpu_classes=list(classes), **changes
    )


def test_it_drafts_a_book_with_classes_and_writes_them_into_its_scenario(default_book):
    book = drafted(L40S, H100)

    # By name, amounts as docs/pricing.md writes them; the worked example's classes exactly.
    assert book.to_scenario_dict()["gpu_classes"] == [H100, L40S]
    assert [item.name for item in engine_price_book(book).gpu_classes] == ["H100", "L40S"]
    assert rates_per_gpu_class(book) == {
        "H100": (Decimal("42.674"), Decimal("38.574")),
        "L40S": (Decimal("11.437"), Decimal("9.537")),
        "default": (Decimal("14.374"), Decimal("12.074")),
    }
    # A book without classes writes none: its scenarios keep their text and hash.
    assert "gpu_classes" not in default_book.to_scenario_dict()


def test_it_copies_the_classes_of_the_book_a_draft_is_based_on(default_book):
    first = drafted(H100)

    copy = price_book_create_draft(effective_from=dt.date(2027, 1, 1), based_on=first)

    assert copy.to_scenario_dict()["gpu_classes"] == [H100]
    assert PriceBookGpuClass.objects.filter(price_book=copy).count() == 1
    # The copy's classes are its own: editing them leaves the first draft's alone.
    price_book_set_gpu_classes(price_book_id=copy.pk, gpu_classes=[L40S])
    assert first.to_scenario_dict()["gpu_classes"] == [H100]


@pytest.mark.parametrize(
    ("classes", "message"),
    [
        (
            [H100, L40S | {"models": ["NVIDIA L40S", "NVIDIA H100 80GB HBM3"]}],
            "gpu_classes[1]: model 'NVIDIA H100 80GB HBM3' of class 'L40S' is already in class "
            "'H100'; a model belongs to one class",
        ),
        (
            [H100 | {"name": "default"}],
            "gpu_classes[0]: name: 'default' is the class of the book's own figures",
        ),
        (
            [H100, L40S | {"name": "H100"}],
            "gpu_classes[1]: duplicate class name 'H100'",
        ),
        (
            [H100 | {"facility_per_gpu_hour": 4.1}],
            "gpu_classes[0] ('H100'): facility_per_gpu_hour: give a decimal string such as "
            "'4.1', not a float",
        ),
        (
            [H100 | {"gpu_average_power_kw": "-0.7"}],
            "gpu_classes[0]: gpu_average_power_kw must not be negative, got '-0.70'",
        ),
        ([H100 | {"tariff": "1"}], "gpu_classes[0]: unknown field 'tariff'"),
        (
            [{key: value for key, value in H100.items() if key != "models"}],
            "gpu_classes[0]: missing field 'models'",
        ),
        (
            [H100 | {"models": "NVIDIA H100 80GB HBM3"}],
            "gpu_classes[0]: models must be a list of GPU model names",
        ),
    ],
)
def test_it_refuses_bad_classes_naming_the_class_and_field(default_book, classes, message):
    with pytest.raises(PriceBookInvalid) as refused:
        drafted(*classes)

    assert message in str(refused.value)
    assert PriceBook.objects.count() == 1  # nothing half-stored
    assert not PriceBookGpuClass.objects.exists()


def test_it_replaces_a_drafts_classes_all_or_nothing(default_book):
    book = drafted(H100)

    with pytest.raises(PriceBookInvalid, match="duplicate class name 'L40S'"):
        price_book_set_gpu_classes(price_book_id=book.pk, gpu_classes=[L40S, L40S])
    assert [item.name for item in book.gpu_classes.all()] == ["H100"]

    price_book_set_gpu_classes(price_book_id=book.pk, gpu_classes=[L40S])
    assert [item.name for item in book.gpu_classes.all()] == ["L40S"]


def test_it_never_changes_the_classes_of_a_published_book(default_book):
    book = price_book_publish(price_book_id=drafted(H100).pk)
    h100 = book.gpu_classes.get()

    with pytest.raises(PriceBookInvalid, match=r"v2 is published: its GPU classes never change"):
        price_book_set_gpu_classes(price_book_id=book.pk, gpu_classes=[L40S])
    h100.facility_per_gpu_hour = Decimal("9.99")
    with pytest.raises(ImmutableRecordError, match="v2 is published: its GPU classes"):
        h100.save()
    with pytest.raises(ImmutableRecordError):
        h100.delete()
    with pytest.raises(ImmutableRecordError):
        PriceBookGpuClass(price_book=book, name="L40S", **_amounts(L40S)).save()
    assert book.to_scenario_dict()["gpu_classes"] == [H100]


@pytest.mark.parametrize(
    "sql",
    [
        "UPDATE billing_pricebookgpuclass SET facility_per_gpu_hour = 9 WHERE price_book_id = %s",
        "DELETE FROM billing_pricebookgpuclass WHERE price_book_id = %s",
        "INSERT INTO billing_pricebookgpuclass (price_book_id, name, models,"
        " depreciation_per_gpu_hour, facility_per_gpu_hour, gpu_average_power_kw)"
        " VALUES (%s, 'L40S', '[\"NVIDIA L40S\"]', 9.25, 1.90, 0.35)",
    ],
    ids=["update", "delete", "insert"],
)
def test_it_refuses_raw_sql_changes_of_a_published_books_classes(default_book, sql):
    book = price_book_publish(price_book_id=drafted(H100).pk)

    with pytest.raises(IntegrityError, match="price book v2 is published"):
        with transaction.atomic():
            run_sql(sql, [book.pk])

    assert book.to_scenario_dict()["gpu_classes"] == [H100]


def test_it_refuses_a_model_in_two_classes_in_the_database(default_book):
    book = drafted(H100)

    with pytest.raises(IntegrityError, match="model NVIDIA H100 80GB HBM3 is in two classes"):
        with transaction.atomic():
            run_sql(
                "INSERT INTO billing_pricebookgpuclass (price_book_id, name, models,"
                " depreciation_per_gpu_hour, facility_per_gpu_hour, gpu_average_power_kw)"
                " VALUES (%s, 'H100-SXM', '[\"NVIDIA H100 80GB HBM3\"]', 40, 4, 0.7)",
                [book.pk],
            )
            # Checked at commit (a save may move a model between classes): check now.
            run_sql("SET CONSTRAINTS ALL IMMEDIATE")


def test_it_edits_a_drafts_classes_inline_in_the_admin(admin_client, default_book):
    book = drafted(H100)
    url = reverse("admin:billing_pricebook_change", args=[book.pk])
    form = _admin_form(book, [H100, L40S])

    response = admin_client.post(url, form)

    assert response.status_code == 302
    assert book.to_scenario_dict()["gpu_classes"] == [H100, L40S]
    entry = AuditEntry.objects.filter(object_type="billing.pricebook", action="change").get()
    assert entry.actor == "admin"
    assert entry.changes == {"gpu_classes": [[H100], [H100, L40S]]}


def test_it_shows_the_classes_error_in_the_admin_and_stores_nothing(admin_client, default_book):
    book = drafted(H100)
    url = reverse("admin:billing_pricebook_change", args=[book.pk])
    twice = L40S | {"models": ["NVIDIA L40S", "NVIDIA H100 80GB HBM3"]}

    response = admin_client.post(url, _admin_form(book, [H100, twice]))

    assert response.status_code == 200
    assert "model &#x27;NVIDIA H100 80GB HBM3&#x27; of class &#x27;L40S&#x27; is already in" in (
        response.content.decode()
    )
    assert book.to_scenario_dict()["gpu_classes"] == [H100]


def test_it_shows_a_published_books_classes_read_only_in_the_admin(admin_client, default_book):
    book = price_book_publish(price_book_id=drafted(H100).pk)

    page = admin_client.get(reverse("admin:billing_pricebook_change", args=[book.pk]))

    html = page.content.decode()
    assert page.status_code == 200 and "NVIDIA H100 80GB HBM3" in html
    assert 'name="gpu_classes-0-facility_per_gpu_hour"' not in html


def test_it_lists_the_classes_in_the_price_book_api_and_page(admin_client, default_book):
    book = drafted(H100, L40S)

    listed = admin_client.get(reverse("api-price-books")).json()["results"]
    one = admin_client.get(reverse("api-price-book", args=[book.pk])).json()
    page = admin_client.get(reverse("dashboards:price_books")).content.decode()

    by_version = {item["version"]: item for item in listed}
    assert by_version[1]["gpu_classes"] == []
    assert [item["name"] for item in by_version[2]["gpu_classes"]] == ["H100", "L40S"]
    assert one["gpu_classes"][1] == {
        "name": "L40S",
        "models": ["NVIDIA L40S"],
        "depreciation_per_gpu_hour": "9.250000",
        "facility_per_gpu_hour": "1.900000",
        "gpu_average_power_kw": "0.350000",
        "reserved_inference_share": "0.500000",
    }
    assert one["gpu_classes"][0]["reserved_inference_share"] is None  # the book's share
    assert "42.6740" in page and "11.4370" in page  # each class's own R
    assert "NVIDIA L40S" in page and "none (one class: default)" in page


def test_it_closes_and_exports_a_period_priced_with_classes(boundary_pool):
    # A book with classes for September: metering records no GPU model yet, so all usage
    # is the class `default` and prices as before; the book's classes travel in the scenario.
    book = price_book_publish(price_book_id=drafted(H100, L40S).pk)
    close = period_close(period="2026-09").period_close

    exported = json.loads(command_output("export_scenario", "--period", "2026-09"))

    assert close.price_book == book
    assert exported["price_book"]["gpu_classes"] == [H100, L40S]
    repriced = result_to_dict(price(scenario_from_dict(exported)))
    assert repriced["pool_cost"] == str(close.pool_cost)
    assert set(repriced["capacity_gpu_hours_by_class"]) == {"H100", "L40S", "default"}
    assert period_verification("2026-09").ok, period_verification("2026-09").differences


def _amounts(record: dict) -> dict:
    return {key: value for key, value in record.items() if key != "name"}


def _admin_form(book: PriceBook, classes: list[dict]) -> dict:
    """The change form of a draft as the admin posts it, with the classes inline."""
    existing = list(book.gpu_classes.order_by("pk"))
    form = {
        "effective_from": book.effective_from.isoformat(),
        "currency": book.currency,
        "timezone": book.timezone,
        "depreciation_per_gpu_hour": str(book.depreciation_per_gpu_hour),
        "facility_per_gpu_hour": str(book.facility_per_gpu_hour),
        "electricity_per_kwh": str(book.electricity_per_kwh),
        "gpu_average_power_kw": str(book.gpu_average_power_kw),
        "reserved_inference_share": str(book.reserved_inference_share),
        "peak_hours": json.dumps(book.peak_hours),
        "sla_penalty_per_interval": str(book.sla_penalty_per_interval),
        "sla_min_requests": str(book.sla_min_requests),
        "starvation_preemption_threshold": str(book.starvation_preemption_threshold),
        "starvation_lost_work_cap_seconds": str(book.starvation_lost_work_cap_seconds),
        "notes": book.notes,
        "gpu_classes-TOTAL_FORMS": str(len(classes)),
        "gpu_classes-INITIAL_FORMS": str(len(existing)),
        "gpu_classes-MIN_NUM_FORMS": "0",
        "gpu_classes-MAX_NUM_FORMS": "1000",
    }
    for number, record in enumerate(classes):
        prefix = f"gpu_classes-{number}-"
        if number < len(existing):
            form[prefix + "id"] = str(existing[number].pk)
        form[prefix + "price_book"] = str(book.pk)
        for key, value in record.items():
            form[prefix + key] = json.dumps(value) if key == "models" else value
    return form
