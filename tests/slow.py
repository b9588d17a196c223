"""A pytest plugin (`-p tests.slow` in pyproject.toml): every test that starts Prometheus, a
Celery worker (or beat, or the demo, which starts both) or Chromium is marked `slow`.

`make test-fast` runs `-m "not slow"`; it stays fast only if nothing that starts one of those
processes slips in unmarked. Two checks, so a new unmarked test fails rather than quietly
making the inner loop slower:

- before its fixtures are set up, a test that requests a fixture decorated with `@starts(...)`
  (a running Prometheus, a worker, a browser) must carry the mark, even when a session-scoped
  fixture already started the process for an earlier test;
- while a test runs (its setup included), starting such a process through `subprocess.Popen`
  (Prometheus, `celery worker|beat`, `config.demo`, Playwright's driver, which launches
  Chromium for the browser tests and for every PDF) fails it when the mark is missing.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Generator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pytest

F = TypeVar("F", bound=Callable[..., Any])

MARK = "slow"
ATTRIBUTE = "_tandem_starts"
_current: list[pytest.Item] = []


def starts(what: str) -> Callable[[F], F]:
    """Declare that a fixture starts `what` (put it under `@pytest.fixture`)."""

    def declare(function: F) -> F:
        setattr(function, ATTRIBUTE, what)
        return function

    return declare


def process_started(argv: Sequence[str]) -> str | None:
    """What a command line starts, among the processes that make a test slow; else None."""
    words = [str(word) for word in argv]
    if not words:
        return None
    program = Path(words[0]).name
    if program == "prometheus":
        return "Prometheus"
    if program.startswith(("chromium", "chrome", "headless_shell")):
        return "Chromium"
    if "run-driver" in words:  # Playwright's driver: it launches Chromium
        return "Chromium (Playwright)"
    if "celery" in words and ({"worker", "beat"} & set(words)):
        return "a Celery worker"
    if "config.demo" in words:
        return "the demo (Prometheus and a Celery worker)"
    return None


def unmarked_message(item: pytest.Item, what: str) -> str:
    return (
        f"{item.nodeid} starts {what} but is not marked `slow`: add @pytest.mark.{MARK} "
        f"(or `pytestmark = pytest.mark.{MARK}`) so `make test-fast` leaves it out "
        "(see tests/slow.py)"
    )


def _offend(item: pytest.Item, what: str) -> None:
    audit = os.environ.get("TANDEM_SLOW_AUDIT")
    if audit:  # record instead of failing: to list the tests that need the mark
        with open(audit, "a") as out:
            out.write(f"{item.nodeid}\t{what}\n")
        return
    pytest.fail(unmarked_message(item, what), pytrace=False)


def _guarded_init(original: Callable[..., None]) -> Callable[..., None]:
    def __init__(self: subprocess.Popen, args: Any, *rest: Any, **kwargs: Any) -> None:
        if _current and _current[-1].get_closest_marker(MARK) is None:
            argv = [args] if isinstance(args, str | bytes | os.PathLike) else list(args)
            what = process_started(argv)
            if what:
                _offend(_current[-1], what)
        original(self, args, *rest, **kwargs)

    __init__._tandem_original = original  # type: ignore[attr-defined]
    return __init__


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(subprocess.Popen.__init__, "_tandem_original"):
        subprocess.Popen.__init__ = _guarded_init(subprocess.Popen.__init__)  # type: ignore[method-assign]


def fixture_starts(item: pytest.Item) -> str | None:
    """What a fixture the test requests (directly or not) starts, if any."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return None
    for name in item.fixturenames:
        for definition in info.name2fixturedefs.get(name, ()):
            what = getattr(definition.func, ATTRIBUTE, None)
            if what:
                return what
    return None


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker(MARK) is None:
        what = fixture_starts(item)
        if what:
            _offend(item, what)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, object, object]:
    _current.append(item)
    try:
        return (yield)
    finally:
        _current.pop()
