"""Fixtures shared by every test area. Area-specific fixtures live in tests/<area>/conftest.py."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures"


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    """tests/fixtures: the real exporters' samples and the pricing worked examples."""
    return FIXTURES


# tryfirst: xdist's own hook turns the mark into the node id's `@group` suffix, so it must see it.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under xdist (`--dist loadgroup`), each test area runs on one worker, so the pools its
    session-scoped fixtures simulate, back-fill and serve are built once, not once a worker."""
    tests = REPO / "tests"
    for item in items:
        area = item.path.relative_to(tests).parts[0]
        item.add_marker(pytest.mark.xdist_group(area.removesuffix(".py")))
