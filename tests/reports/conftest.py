"""Fixtures for the report tests: people and a file dir; the pool is `report_pool` (tests/pools),
October 2026 closed."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.test import Client

from access.models import Role
from tests.factories import RoleFactory, UserFactory
from tests.pools import reports as pools


@pytest.fixture(autouse=True)
def reports_dir(settings, tmp_path: Path) -> Path:
    """Every test writes its report files under its own temporary directory."""
    settings.TANDEM_REPORTS_DIR = str(tmp_path / "reports")
    settings.TANDEM_TIMEZONE = "Asia/Shanghai"
    settings.TANDEM_STEP_SECONDS = 300
    return tmp_path / "reports"


@pytest.fixture
def people(report_pool: pools.ReportPool) -> dict[str, Client]:
    """Logged-in clients: finance, platform, the lead of `search`, a user without a role."""
    users = {
        "finance": RoleFactory(user__username="fiona", name=Role.Name.FINANCE).user,
        "platform": RoleFactory(user__username="pat", name=Role.Name.PLATFORM).user,
        "lead": RoleFactory(
            user__username="lena", name=Role.Name.TEAM_LEAD, teams=[report_pool.teams["search"]]
        ).user,
        "nobody": UserFactory(username="norman"),
    }
    clients = {"anonymous": Client()}
    for name, user in users.items():
        client = Client()
        client.force_login(user)
        clients[name] = client
    return clients


@pytest.fixture
def finance(db) -> Client:
    """A finance user's client, for a test that builds its own pool (not `report_pool`)."""
    client = Client()
    client.force_login(RoleFactory(user__username="fiona", name=Role.Name.FINANCE).user)
    return client
