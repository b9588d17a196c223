"""Writes for billing's price books: drafts, their GPU classes, publishing, the default book.

A published book never changes (see models.py); a new version is a new draft. The errors every
billing service raises are defined here, the lowest of billing's service modules.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal, InvalidOperation

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import connection, transaction
from django.utils import timezone

from audit.services import audit_record
from billing.defaults import DEFAULT_EFFECTIVE_FROM, DEFAULT_PRICE_BOOK
from billing.models import (
    PriceBook,
    PriceBookGpuClass,
)
from billing.pricing import ScenarioError
from billing.selectors import (
    engine_price_book,
)
from kernel.gpu_models import gpu_model_key
from kernel.money import minor_unit
from kernel.price_book_fields import (
    GPU_CLASS_DECIMAL_FIELDS,
    GPU_CLASS_FIELDS,
    GPU_CLASS_OPTIONAL_FIELDS,
    PRICE_BOOK_DECIMAL_FIELDS,
    PRICE_BOOK_FIELDS,
)

# One lock for every period close: closes (and the corrections they carry) happen in order.
PERIOD_CLOSE_LOCK = 0x7461_6E64_0001


class BillingError(Exception):
    """A billing operation refused; the message says why, naming the field or record."""


class PriceBookInvalid(BillingError):
    pass


# --- Price books ----------------------------------------------------------------------

# A class's amounts: D, F, W and its optional reserve share s.
CLASS_DECIMAL_FIELDS = (*GPU_CLASS_DECIMAL_FIELDS, *GPU_CLASS_OPTIONAL_FIELDS)


def price_book_create_draft(
    *,
    effective_from: dt.date,
    based_on: PriceBook | None = None,
    notes: str = "",
    gpu_classes: list[dict] | None = None,
    **prices: object,
) -> PriceBook:
    """A new draft version: the fields and GPU classes of `based_on` (default: the newest
    book, else the defaults of docs/pricing.md, without classes) with `prices` changed, and
    `gpu_classes` instead of the base's classes when given (a list of
    `{name, models, depreciation_per_gpu_hour, facility_per_gpu_hour, gpu_average_power_kw,
    reserved_inference_share?}`). Amounts are Decimals, ints or decimal strings; floats are
    refused. The version number is the next free one."""
    unknown = sorted(set(prices) - set(PRICE_BOOK_FIELDS))
    if unknown:
        raise PriceBookInvalid(f"unknown price book field {unknown[0]!r}")
    base = based_on or PriceBook.objects.order_by("-version").first()
    if base is not None:
        values = {name: getattr(base, name) for name in PRICE_BOOK_FIELDS}
    else:
        values = {**DEFAULT_PRICE_BOOK, "timezone": settings.TANDEM_TIMEZONE}
    values.update(prices)
    book = PriceBook(effective_from=effective_from, notes=notes, **_coerced(values))
    if gpu_classes is None:
        gpu_classes = [item.to_scenario_dict() for item in base.gpu_classes.all()] if base else []
    classes = _gpu_classes(book, gpu_classes)
    with transaction.atomic():
        _lock(PERIOD_CLOSE_LOCK + 1)
        book.version = (
            PriceBook.objects.order_by("-version").values_list("version", flat=True).first() or 0
        ) + 1
        _validate_price_book(book, classes)
        book.save()
        for item in classes:
            item.price_book = book
        PriceBookGpuClass.objects.bulk_create(classes)
        audit_record(action="create", obj=book)
    return book


def price_book_set_gpu_classes(*, price_book_id: int, gpu_classes: list[dict]) -> PriceBook:
    """Replace the GPU classes of a draft book (a published book's never change). Each class
    is a dict as for `price_book_create_draft`; the whole set is validated first (names
    unique and not `default`, no GPU model in two classes, amounts not negative, no floats)
    and nothing is stored when any of it is refused."""
    with transaction.atomic():
        book = PriceBook.objects.select_for_update().filter(pk=price_book_id).first()
        if book is None:
            raise PriceBookInvalid(f"price book {price_book_id} does not exist")
        if book.is_published:
            raise PriceBookInvalid(
                f"price book v{book.version} is published: its GPU classes never change; "
                "create a new version"
            )
        before = sorted(item.name for item in book.gpu_classes.all())
        classes = _gpu_classes(book, gpu_classes)
        _validate_price_book(book, classes)
        book.gpu_classes.all().delete()
        PriceBookGpuClass.objects.bulk_create(classes)
        after = sorted(item.name for item in classes)
        audit_record(action="change", obj=book, changes={"gpu_classes": [before, after]})
    return book


def price_book_validate_gpu_classes(*, price_book: PriceBook, gpu_classes: list) -> None:
    """Raise PriceBookInvalid, naming the class and field, unless `gpu_classes` (dicts or
    unsaved PriceBookGpuClass rows) may be the classes of `price_book` (the admin's check of
    its inline before anything is stored)."""
    classes = [
        item if isinstance(item, PriceBookGpuClass) else _gpu_classes(price_book, [item])[0]
        for item in gpu_classes
    ]
    _validate_price_book(price_book, classes, columns=False)


def _gpu_classes(book: PriceBook, records: list[dict]) -> list[PriceBookGpuClass]:
    """Unsaved rows from class dicts; floats and unknown fields refused, naming the class."""
    if not isinstance(records, list):
        raise PriceBookInvalid(f"gpu_classes must be a list of classes, got {records!r}")
    classes = []
    for number, record in enumerate(records):
        where = f"gpu_classes[{number}]"
        if not isinstance(record, dict):
            raise PriceBookInvalid(f"{where}: expected an object, got {record!r}")
        unknown = sorted(set(record) - set(GPU_CLASS_FIELDS))
        if unknown:
            raise PriceBookInvalid(f"{where}: unknown field {unknown[0]!r}")
        missing = [
            name
            for name in GPU_CLASS_FIELDS
            if name not in record and name not in GPU_CLASS_OPTIONAL_FIELDS
        ]
        if missing:
            raise PriceBookInvalid(f"{where}: missing field {missing[0]!r}")
        values = {"reserved_inference_share": None, **record}
        try:
            coerced = _coerced(values, CLASS_DECIMAL_FIELDS, GPU_CLASS_OPTIONAL_FIELDS)
        except PriceBookInvalid as error:
            raise PriceBookInvalid(f"{where} ({record['name']!r}): {error}") from None
        classes.append(PriceBookGpuClass(price_book=book, **coerced))
    return classes


def price_book_publish(*, price_book_id: int, now: dt.datetime | None = None) -> PriceBook:
    """Publish a draft: from now on it is immutable and prices periods from `effective_from`."""
    with transaction.atomic():
        book = PriceBook.objects.select_for_update().filter(pk=price_book_id).first()
        if book is None:
            raise PriceBookInvalid(f"price book {price_book_id} does not exist")
        if book.is_published:
            raise PriceBookInvalid(f"price book v{book.version} is already published")
        _validate_price_book(book)
        PriceBook.objects.filter(pk=book.pk, status=PriceBook.Status.DRAFT).update(
            status=PriceBook.Status.PUBLISHED, published_at=now or timezone.now()
        )
    book.refresh_from_db()
    audit_record(action="publish", obj=book, changes={"status": ["draft", book.status]})
    return book


def price_book_ensure_default() -> PriceBook | None:
    """Create the published default book v1 (docs/pricing.md's example) when there is no book."""
    with transaction.atomic():
        _lock(PERIOD_CLOSE_LOCK + 1)
        if PriceBook.objects.exists():
            return None
        return PriceBook.objects.create(
            version=1,
            effective_from=DEFAULT_EFFECTIVE_FROM,
            status=PriceBook.Status.PUBLISHED,
            published_at=timezone.now(),
            timezone=settings.TANDEM_TIMEZONE,
            notes="Default book: the example values of docs/pricing.md.",
            **_coerced(DEFAULT_PRICE_BOOK),
        )


def _coerced(
    values: dict, names: tuple[str, ...] = PRICE_BOOK_DECIMAL_FIELDS, optional: tuple[str, ...] = ()
) -> dict:
    """`values` with the amounts `names` as Decimals (None allowed for `optional` ones)."""
    coerced = dict(values)
    for name in names:
        value = coerced[name]
        if value is None and name in optional:
            continue
        if isinstance(value, float):
            raise PriceBookInvalid(f"{name}: give a decimal string such as '{value}', not a float")
        try:
            coerced[name] = Decimal(value) if isinstance(value, int | str) else value
        except InvalidOperation:
            raise PriceBookInvalid(f"{name}: not a decimal number: {value!r}") from None
    return coerced


def _refuse_a_model_in_two_classes(classes: list[PriceBookGpuClass]) -> None:
    """Two spellings of one model (`gpu_model_key`: "NVIDIA H100 80GB HBM3" and "H100 80GB
    HBM3") in two classes: a close takes a model by its key, so it would be both classes'.
    Here, not in the engine, which refuses the same name twice: a book published before
    would no longer price the months it closed. Classes numbered as the engine numbers them
    (by name)."""
    owners: dict[str, tuple[str, str]] = {}  # key -> (class, model as listed)
    for number, item in enumerate(sorted(classes, key=lambda item: item.name)):
        for model in item.models:
            owner, listed = owners.setdefault(gpu_model_key(model), (item.name, model))
            if owner != item.name:
                raise PriceBookInvalid(
                    f"gpu_classes[{number}]: model {model!r} of class {item.name!r} is already"
                    f" in class {owner!r} (as {listed!r}); a model belongs to one class"
                )


def _validate_price_book(
    book: PriceBook, classes: list[PriceBookGpuClass] | None = None, *, columns: bool = True
) -> None:
    """The engine's own checks (same messages as for a scenario file), of the book with
    `classes` (default: its stored ones), and the columns'."""
    # The stored classes read once, for the engine's checks and the models' (as
    # `to_scenario_dict` defaults them).
    checked = classes
    if checked is None:
        checked = list(book.gpu_classes.all()) if book.pk is not None else []
    try:
        engine_book = engine_price_book(book, checked)
    except (ScenarioError, TypeError) as error:
        raise PriceBookInvalid(str(error)) from None
    _refuse_a_model_in_two_classes(checked)
    if not columns:
        return
    for item in classes or []:
        try:
            item.full_clean(exclude=["price_book"], validate_unique=False)
        except ValidationError as error:
            field_name, messages = next(iter(error.message_dict.items()))
            raise PriceBookInvalid(
                f"GPU class {item.name!r}: {field_name}: {' '.join(messages)}"
            ) from None
    if minor_unit(engine_book.currency) > 2:
        raise PriceBookInvalid(
            f"currency {engine_book.currency}: statements store two decimals; "
            "currencies with a smaller minor unit are not supported"
        )
    try:
        book.full_clean(exclude=["version"])
    except ValidationError as error:
        field_name, messages = next(iter(error.message_dict.items()))
        raise PriceBookInvalid(f"{field_name}: {' '.join(messages)}") from None


def _lock(key: int) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", [key])
