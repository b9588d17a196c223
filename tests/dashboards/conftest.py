"""Fixtures for the page tests: a small pool over two months, closed, and people with roles."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import pytest
from django.contrib.auth.models import User
from django.db import transaction

from access.services import role_assign
from billing.models import PriceBook
from metering.models import Team
from tests.pools.pages import PagePool, build_closed_page_pool


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


@pytest.fixture(scope="module")
def shared_pool(django_db_setup, django_db_blocker) -> Iterator[tuple[PagePool, People]]:
    """The pool and people, built once per module in a transaction rolled back at its end.

    Each test runs inside it in a savepoint (the `db` fixture), so tests still see only their
    own changes, and nothing outlives the module for the other areas' tests.
    """
    with django_db_blocker.unblock(), transaction.atomic():
        yield build_closed_page_pool(), make_people()
        transaction.set_rollback(True)


@pytest.fixture
def closed_pool(shared_pool, db) -> PagePool:
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
