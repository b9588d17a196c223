"""The soak's fixtures: one short run of the whole stack under faults, shared by its tests."""

from __future__ import annotations

import shutil

import pytest

from tests.slow import starts
from tests.soak.harness import SoakPlan, SoakResult, run_soak

# One fault cycle at a 10 s step: about three minutes with the check.
SHORT = SoakPlan(cycles=1)
TOOLS = ("prometheus", "redis-server")


@pytest.fixture(scope="session")
@starts("Prometheus and Celery workers (the soak)")
def soak_result() -> SoakResult:
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    assert not missing, f"the soak needs {', '.join(missing)} (Debian packages)"
    lines: list[str] = []
    result = run_soak(SHORT, say=lines.append)
    # Shown by pytest with -s, and with any failure (captured output).
    print("\n".join(lines) + result.table())
    return result
