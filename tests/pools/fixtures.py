"""The pool fixtures (see tests/pools/__init__.py); an area's conftest.py imports those it uses."""

from __future__ import annotations

import copy
from collections.abc import Iterator

import pytest
from django.db import transaction

from billing.services import period_close, price_book_ensure_default
from tests.factories import windows_complete
from tests.pools.api import ApiPool, build_api_pool
from tests.pools.boundary import BoundaryPool, build_boundary_pool
from tests.pools.reports import PERIOD, ReportPool, build_report_pool


@pytest.fixture(scope="module")
def api_pool_rows(django_db_setup, django_db_blocker) -> Iterator[ApiPool]:
    """The API pool, built once per module in a transaction rolled back at its end.

    Each test runs inside it in a savepoint (the `db` fixture), so a test that changes a row
    leaves it unchanged for the next one, and nothing outlives the module for other areas.
    Once built, a module's other database tests see its rows too: one that writes rows of its
    own reads back only those (by their ids), not everything in a table.
    """
    with django_db_blocker.unblock(), transaction.atomic():
        # A transactional test before this module may have flushed the migration's book.
        price_book_ensure_default()
        yield build_api_pool()
        transaction.set_rollback(True)


@pytest.fixture
def api_pool(api_pool_rows: ApiPool, db: None) -> ApiPool:
    """The module's API pool, a copy per test: a test may rename a team it holds and save it
    (rolled back with the test's savepoint); the next test gets the rows' own values."""
    return copy.deepcopy(api_pool_rows)


@pytest.fixture
def boundary_pool(db: None) -> BoundaryPool:
    """36 hours of an 8-GPU pool from 2026-09-30 00:00 Asia/Shanghai (tests/pools/boundary.py),
    the rest of September and October ingested and empty."""
    price_book_ensure_default()
    pool = build_boundary_pool()
    windows_complete(periods=("2026-09", "2026-10"))
    return pool


@pytest.fixture
def report_pool(db: None) -> ReportPool:
    """The report pool's metering rows, and October closed by billing's own period close."""
    pool = build_report_pool()
    windows_complete(periods=[PERIOD])
    period_close(period=PERIOD)
    return pool
