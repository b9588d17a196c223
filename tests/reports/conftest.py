"""Fixtures for the report tests: a small pool with October 2026 closed, people, a file dir."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.test import Client

from access.models import Role
from billing.services import period_close
from tests.factories import windows_complete
from tests.reports import factories as f


@pytest.fixture(autouse=True)
def reports_dir(settings, tmp_path: Path) -> Path:
    """Every test writes its report files under its own temporary directory."""
    settings.TANDEM_REPORTS_DIR = str(tmp_path / "reports")
    settings.TANDEM_TIMEZONE = "Asia/Shanghai"
    settings.TANDEM_STEP_SECONDS = 300
    return tmp_path / "reports"


@pytest.fixture
def pool(db) -> f.Pool:
    """The metering rows, and October closed by billing's own period close."""
    pool = f.build_pool()
    windows_complete(periods=[f.PERIOD])
    period_close(period=f.PERIOD)
    return pool


@pytest.fixture
def people(pool: f.Pool) -> dict[str, Client]:
    """Logged-in clients: finance, platform, the lead of `search`, a user without a role."""
    users = {
        "finance": f.RoleFactory(user__username="fiona", name=Role.Name.FINANCE).user,
        "platform": f.RoleFactory(user__username="pat", name=Role.Name.PLATFORM).user,
        "lead": f.RoleFactory(
            user__username="lena", name=Role.Name.TEAM_LEAD, teams=[pool.teams["search"]]
        ).user,
        "nobody": f.UserFactory(username="norman"),
    }
    clients = {"anonymous": Client()}
    for name, user in users.items():
        client = Client()
        client.force_login(user)
        clients[name] = client
    return clients
