"""Fixtures shared by every test area. Area-specific fixtures live in tests/<area>/conftest.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from django.test import override_settings

# The pool fixtures (`api_pool`, `boundary_pool`, `report_pool`) for every area; pytester for
# the test of the `slow` mark's enforcement (tests/test_slow_marks.py).
pytest_plugins = ["tests.pools.fixtures", "pytester"]

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures"


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    """tests/fixtures: the real exporters' samples and the pricing worked examples."""
    return FIXTURES


@pytest.fixture(scope="session", autouse=True)
def fast_password_hashing() -> Iterator[None]:
    """Test users' passwords hashed with MD5, not production's PBKDF2 (a third of a second a
    hash or login on this machine; `make test-fast` took 2 min 59 s with it, 2 min 35 s
    without): what is tested is who may log in and see what, not the hash's cost. The
    override lives in the test processes only; config/settings.py keeps Django's hashers."""
    with override_settings(PASSWORD_HASHERS=["django.contrib.auth.hashers.MD5PasswordHasher"]):
        yield


@pytest.fixture(scope="session", autouse=True)
def collected_static(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The static files collected as a deployment collects them (the Dockerfile), into a
    folder of the test process's own: pages and the API are tested with WhiteNoise serving
    plotly.js from STATIC_ROOT, as in production, and a fresh clone, whose var/static does
    not exist yet, runs the tests as a used one does."""
    from django.core.management import call_command

    root = tmp_path_factory.mktemp("static")
    with override_settings(STATIC_ROOT=root):
        call_command("collectstatic", "--noinput", verbosity=0)
        yield


# tryfirst: xdist's own hook turns the mark into the node id's `@group` suffix, so it must see it.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under xdist (`--dist loadgroup`), each test area runs on one worker, so the pools its
    session-scoped fixtures simulate, back-fill and serve are built once, not once a worker."""
    tests = REPO / "tests"
    for item in items:
        area = item.path.relative_to(tests).parts[0]
        item.add_marker(pytest.mark.xdist_group(area.removesuffix(".py")))


# Fixtures that give a test the database (pytest-django's).
DATABASE_FIXTURES = {"db", "transactional_db", "django_db_reset_sequences"}


@pytest.fixture(autouse=True)
def default_price_book(request: pytest.FixtureRequest) -> None:
    """Every database test starts with the migration's default price book, as a new database
    has it: a transactional test's flush empties every table, the book included, and the test
    that runs next on that worker would otherwise find none."""
    marked = request.node.get_closest_marker("django_db") is not None
    if not marked and not DATABASE_FIXTURES & set(request.fixturenames):
        return
    request.getfixturevalue("_django_db_helper")  # the test's own database mode, set up now
    from billing.services import price_book_ensure_default

    price_book_ensure_default()
