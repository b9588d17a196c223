"""The explain page picks a line's intervals as the engine priced them: peak hours on the clock
of the book the month was priced with, wrapping past midnight when the book says so."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from django.test import Client
from django.urls import reverse

from billing.models import StatementLine
from billing.services import (
    period_close,
    price_book_create_draft,
    price_book_ensure_default,
    price_book_publish,
)
from tests.factories import windows_complete
from tests.pools import reports as pools

pytestmark = pytest.mark.django_db
VIT_PER_INTERVAL = Decimal(600)  # vit-pretrain's allocation in every October interval


def close_october_with(**book: object) -> None:
    """The report pool's October (03:00 to 15:00 Shanghai), priced with a book of `book`."""
    price_book_ensure_default()
    draft = price_book_create_draft(effective_from=dt.date(2026, 10, 1), **book)
    price_book_publish(price_book_id=draft.pk)
    pools.build_report_pool()
    windows_complete(periods=[pools.PERIOD])
    period_close(period=pools.PERIOD)


def vit_pretrain(finance: Client, kind: str) -> dict:
    line = StatementLine.objects.get(
        statement__team__name="vision", statement__period=pools.PERIOD, kind=kind
    )
    data = finance.get(reverse("reports:explain", args=[line.pk]), {"format": "json"}).json()
    (task,) = [item for item in data["contributors"] if item["task"] == "vit-pretrain"]
    return task


def test_it_explains_training_lines_when_peak_hours_wrap_midnight(finance) -> None:
    # Peak 22:00 to 06:00: October's 03:00-06:00 (36 intervals) is peak, 06:00-15:00 (108) not.
    close_october_with(peak_hours=[22, 6])

    offpeak, standard = vit_pretrain(finance, "offpeak"), vit_pretrain(finance, "standard")

    assert Decimal(offpeak["gpu_seconds"]) == 108 * VIT_PER_INTERVAL  # what the engine billed
    assert offpeak["intervals"] == 108
    assert Decimal(offpeak["alloc_gpu_seconds"]) == Decimal(offpeak["gpu_seconds"])
    assert Decimal(standard["gpu_seconds"]) == 36 * VIT_PER_INTERVAL
    assert standard["intervals"] == 36
    assert Decimal(standard["alloc_gpu_seconds"]) == Decimal(standard["gpu_seconds"])


def test_it_explains_training_lines_on_the_clock_of_the_book_that_priced_them(finance) -> None:
    # The book's zone is Tokyo (+09:00), the pool's setting Shanghai (+08:00): the engine
    # priced peak hours 09:00-22:00 Tokyo, which is 08:00-21:00 Shanghai, so October's
    # 03:00-08:00 Shanghai (60 intervals) is off-peak and 08:00-15:00 (84) peak.
    close_october_with(timezone="Asia/Tokyo")

    offpeak, standard = vit_pretrain(finance, "offpeak"), vit_pretrain(finance, "standard")

    assert Decimal(offpeak["gpu_seconds"]) == 60 * VIT_PER_INTERVAL
    assert offpeak["intervals"] == 60
    assert Decimal(offpeak["alloc_gpu_seconds"]) == Decimal(offpeak["gpu_seconds"])
    assert standard["intervals"] == 84
    assert Decimal(standard["alloc_gpu_seconds"]) == Decimal(standard["gpu_seconds"])
