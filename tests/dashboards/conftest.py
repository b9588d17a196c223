"""Fixtures for the page tests: a small pool over two months, closed, and people with roles."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from decimal import Decimal

import pytest
from django.contrib.auth.models import User
from django.db import transaction

from access.services import role_assign
from billing import services as billing_services
from billing.models import PriceBook
from metering.models import Team
from tests.dashboards.pool import Pool, build_pool
from tests.factories import windows_complete

MONTH = "2026-10"
PREVIOUS_MONTH = "2026-09"
# Closing a month needs it to be over; tests pass this instant instead of the clock.
AFTER_BOTH_MONTHS = dt.datetime(2026, 11, 15, tzinfo=dt.UTC)


@dataclass
class People:
    finance: User
    platform: User
    vision_lead: User
    search_lead: User
    nobody: User


def make_user(
    username: str, role: str | None, teams: list[Team] = (), *, password: bool = False
) -> User:
    """A person with a role; with `password`, the password is "<username>-password".

    Without one, tests log in with `force_login`: hashing a password costs a good part of a
    second, which adds up over a module.
    """
    user = User.objects.create_user(username, password=f"{username}-password" if password else None)
    if role:
        role_assign(user=user, name=role, teams=teams)
    return user


def make_people(*, passwords: Iterable[str] = ()) -> People:
    """Finance, platform, two team leads and a person without a role; those named in
    `passwords` can log in through the form."""
    with_password = set(passwords)

    def person(username: str, role: str | None, teams: Iterable[Team] = ()) -> User:
        return make_user(username, role, list(teams), password=username in with_password)

    return People(
        finance=person("fiona", "finance"),
        platform=person("pat", "platform"),
        vision_lead=person("vera", "team_lead", Team.objects.filter(name="vision")),
        search_lead=person("sam", "team_lead", Team.objects.filter(name="search")),
        nobody=person("nora", None),
    )


def make_closed_pool() -> Pool:
    """September (3 days) and October (2 days) metered, both closed; a draft book for what-if.

    A flush (transactional tests) removes the default book the migration wrote: make sure of it.
    """
    billing_services.price_book_ensure_default()
    build_pool(first_day=dt.date(2026, 9, 1), days=3, seed=2)
    pool = build_pool(first_day=dt.date(2026, 10, 1), days=2, seed=1)
    windows_complete(periods=(PREVIOUS_MONTH, MONTH))
    for period in (PREVIOUS_MONTH, MONTH):
        billing_services.period_close(period=period, now=AFTER_BOTH_MONTHS)
    billing_services.price_book_create_draft(
        effective_from=dt.date(2027, 1, 1),
        notes="cheaper hardware",
        depreciation_per_gpu_hour=Decimal("9.50"),
    )
    return pool


@pytest.fixture(scope="module")
def shared_pool(django_db_setup, django_db_blocker) -> Iterator[tuple[Pool, People]]:
    """The pool and people, built once per module in a transaction rolled back at its end.

    Each test runs inside it in a savepoint (the `db` fixture), so tests still see only their
    own changes, and nothing outlives the module for the other areas' tests.
    """
    with django_db_blocker.unblock(), transaction.atomic():
        yield make_closed_pool(), make_people()
        transaction.set_rollback(True)


@pytest.fixture
def closed_pool(shared_pool, db) -> Pool:
    return shared_pool[0]


@pytest.fixture
def people(shared_pool, db) -> People:
    return shared_pool[1]


@pytest.fixture
def draft_book(closed_pool) -> PriceBook:
    return PriceBook.objects.get(status=PriceBook.Status.DRAFT)


@pytest.fixture
def reports_dir(settings, tmp_path):
    settings.TANDEM_REPORTS_DIR = str(tmp_path / "reports")
    return tmp_path / "reports"
