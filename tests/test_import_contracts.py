"""The app graph's import-linter contracts (pyproject.toml) hold, and catch a forbidden import.

`lint-imports` runs as `make test` and `make lint` run it, in a subprocess. A forbidden import
is added to a copy of the tree (never to the checkout, which other tests read at the same time)
and must break the contract it names; an import inside a function counts like any other.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.conftest import REPO

LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
LAYERS = "Apps are layered: config > dashboards > reports > billing > access > metering"
DJANGO_FREE = "The pricing engine, the kernel and the simulator import no Django"
WITHIN_APPS = "Within each app: urls > admin | apis | views > tasks > services > selectors"


def lint_imports(root: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--no-logo"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": str(LINT_IMPORTS.parent), "PYTHONPATH": str(root)},
    )


def copy_of_the_tree(destination: Path) -> Path:
    """pyproject.toml and the root packages' Python files: all lint-imports reads."""
    pyproject = REPO / "pyproject.toml"
    shutil.copy(pyproject, destination / "pyproject.toml")
    packages = tomllib.loads(pyproject.read_text())["tool"]["importlinter"]["root_packages"]
    for package in packages:
        shutil.copytree(
            REPO / package,
            destination / package,
            ignore=lambda _, names: [n for n in names if not (n.endswith(".py") or "." not in n)],
        )
    return destination


def test_it_keeps_every_contract_on_the_tree() -> None:
    result = lint_imports(REPO)

    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout
    assert f"{LAYERS}" in result.stdout.replace("\n", "")


@pytest.mark.parametrize(
    ("module", "source", "contract", "broken"),
    [
        (
            "metering/forbidden_probe.py",
            "from dashboards import selectors  # noqa: F401\n",
            LAYERS,
            "metering is not allowed to import dashboards",
        ),
        (
            "audit/forbidden_probe.py",
            "def role():\n    from access.selectors import user_role\n\n    return user_role\n",
            LAYERS,
            "audit is not allowed to import access",
        ),
        (
            "billing/pricing/forbidden_probe.py",
            "from billing.models import PriceBook  # noqa: F401\n",
            DJANGO_FREE,
            "billing.pricing is not allowed to import django",
        ),
        (
            "simulator/forbidden_probe.py",
            "import django  # noqa: F401\n",
            DJANGO_FREE,
            "simulator is not allowed to import django",
        ),
        (
            "reports/services.py",  # appended to: a report service that imports a view
            "\n\ndef probe():\n    from reports import views\n\n    return views\n",
            WITHIN_APPS,
            "reports.services is not allowed to import reports.views",
        ),
    ],
)
def test_it_fails_on_a_forbidden_import(
    tmp_path: Path, module: str, source: str, contract: str, broken: str
) -> None:
    root = copy_of_the_tree(tmp_path)
    with (root / module).open("a") as probe:
        probe.write(source)

    result = lint_imports(root)

    output = result.stdout.replace("\n", "")
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"{contract}" in output and "BROKEN" in output
    assert broken in result.stdout
