"""The `slow` mark is enforced (tests/slow.py): a test that starts Prometheus, a Celery worker
or Chromium without it fails, naming itself and what it started; with the mark it runs.

Each case runs a small test file in a pytest of its own (pytester, in this process), with the
plugin and nothing of Tandem's: the processes are stand-ins named like the real ones.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.slow import process_started

FIXTURE_FILE = """
import pytest
from tests.slow import starts

@pytest.fixture(scope="session")
@starts("Prometheus")
def running_prometheus():
    return "http://127.0.0.1:9"

{mark}
def test_it_reads_prometheus(running_prometheus):
    assert running_prometheus
"""

POPEN_FILE = """
import subprocess
import pytest

{mark}
def test_it_runs_a_tool():
    subprocess.run([{program!r}, "--version"], check=True)
"""


def run(pytester: pytest.Pytester, source: str) -> pytest.RunResult:
    pytester.makepyfile(test_case=source)
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("TANDEM_SLOW_AUDIT", raising=False)  # fail, as a plain run does
        return pytester.runpytest_inprocess(
            "-p", "tests.slow", "-p", "no:django", "-p", "no:cacheprovider", "-p", "no:xdist"
        )


def stand_in(tmp_path: Path, name: str) -> str:
    """An executable called `name` that only exits 0."""
    program = tmp_path / "bin" / name
    program.parent.mkdir(exist_ok=True)
    program.write_text("#!/bin/sh\nexit 0\n")
    program.chmod(0o755)
    return str(program)


def test_it_fails_an_unmarked_test_that_requests_a_process_fixture(pytester: pytest.Pytester):
    result = run(pytester, FIXTURE_FILE.format(mark=""))

    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        ["*test_case.py::test_it_reads_prometheus starts Prometheus but is not marked `slow`*"]
    )


def test_it_runs_a_marked_test_that_requests_a_process_fixture(pytester: pytest.Pytester):
    result = run(pytester, FIXTURE_FILE.format(mark="@pytest.mark.slow"))

    result.assert_outcomes(passed=1)


@pytest.mark.parametrize(
    ("name", "what"),
    [("prometheus", "Prometheus"), ("chromium", "Chromium")],
)
def test_it_fails_an_unmarked_test_that_starts_the_process_itself(
    pytester: pytest.Pytester, tmp_path: Path, name: str, what: str
):
    program = stand_in(tmp_path, name)

    result = run(pytester, POPEN_FILE.format(mark="", program=program))

    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [f"*test_case.py::test_it_runs_a_tool starts {what} but is not marked `slow`*"]
    )


def test_it_lets_a_marked_test_start_the_process(pytester: pytest.Pytester, tmp_path: Path):
    program = stand_in(tmp_path, "prometheus")

    result = run(pytester, POPEN_FILE.format(mark="@pytest.mark.slow", program=program))

    result.assert_outcomes(passed=1)


def test_it_lets_an_unmarked_test_run_other_programs(pytester: pytest.Pytester, tmp_path: Path):
    program = stand_in(tmp_path, "promtool")

    result = run(pytester, POPEN_FILE.format(mark="", program=program))

    result.assert_outcomes(passed=1)


@pytest.mark.parametrize(
    ("argv", "what"),
    [
        (["/usr/bin/prometheus", "--config.file=x"], "Prometheus"),
        (["/usr/bin/chromium", "--headless"], "Chromium"),
        (["node", "cli.js", "run-driver"], "Chromium (Playwright)"),
        (["python", "-m", "celery", "-A", "config", "worker"], "a Celery worker"),
        (["celery", "-A", "config", "beat"], "a Celery worker"),
        (["python", "-m", "config.demo"], "the demo (Prometheus and a Celery worker)"),
        (["promtool", "tsdb", "create-blocks-from", "openmetrics"], None),
        (["redis-server", "--port", "0"], None),
        (["python", "-m", "celery", "-A", "config", "inspect", "ping"], None),
    ],
)
def test_it_knows_which_commands_start_a_slow_process(argv: list[str], what: str | None):
    assert process_started(argv) == what
