"""Fixtures shared by every test area. Area-specific fixtures live in tests/<area>/conftest.py."""

from __future__ import annotations

from collections import Counter
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


# The groups that take longest, started first (a group runs on one worker, so one started last
# is the run's tail): the soak's faults take minutes of real time, the metering area's simulated
# pools and Prometheus processes, the API schema's generated requests.
LONGEST_GROUPS = ("soak", "metering", "api:test_schema")


# A wrapper: the groups are marked before any other plugin's hook runs (xdist's turns the mark
# into the node id's `@group` suffix), and the tests ordered after all of them (pytest-django
# orders database tests by kind, which the sort keeps within each group).
@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> Iterator[None]:
    """Under xdist (`--dist loadgroup`), the modules of a test area that share its
    session-scoped fixtures (a simulated pool, a Prometheus over it) run on one worker, so the
    pool is built once, not once a worker; every other module is a group of its own, which
    any worker may take. The longest groups go first (`LONGEST_GROUPS`), then the rest by
    size, as xdist would order them (`--no-loadscope-reorder` keeps this order)."""
    tests = REPO / "tests"
    sharing = {item.path for item in items if _uses_area_session_fixture(item, item.path.parent)}
    for item in items:
        area = item.path.relative_to(tests).parts[0].removesuffix(".py")
        shared = item.path in sharing or item.path.parent == tests
        item.add_marker(pytest.mark.xdist_group(area if shared else f"{area}:{item.path.stem}"))
    yield
    sizes = Counter(map(_group, items))
    first = {group: rank for rank, group in enumerate(LONGEST_GROUPS)}
    items.sort(key=lambda item: (first.get(_group(item), len(first)), -sizes[_group(item)]))


def _group(item: pytest.Item) -> str:
    """The item's xdist group, from its mark (xdist's suffix has changed its node id)."""
    return item.get_closest_marker("xdist_group").args[0]


def _uses_area_session_fixture(item: pytest.Item, folder: Path) -> bool:
    """Whether the test uses a session-scoped fixture of its folder's conftest.py."""
    definitions = item._fixtureinfo.name2fixturedefs  # type: ignore[attr-defined]
    base = str(folder.relative_to(REPO))
    return any(
        fixture.scope == "session" and fixture.baseid == base
        for name in item.fixturenames
        for fixture in definitions.get(name, ())
    )


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
