"""Fixtures for the security tests: the API tests' pool and callers, plus a platform admin.

`api_pool` (tests/pools) and `callers` (tests/api/conftest.py): three teams, alpha led by
`lead_a`, a closed month with statements, tokens of every scope; this file adds the people the
admin and the pages need and a report run with files.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.core.cache import cache
from django.test import Client

from access.models import Role
from reports.models import ReportFile, ReportRun
from tests import factories as f
from tests.api.conftest import Caller, callers  # noqa: F401  (a fixture)
from tests.pools.api import ApiPool


@pytest.fixture(autouse=True)
def _fresh_cache():
    """Throttle counters of one test never leak into the next."""
    cache.clear()
    yield
    cache.clear()


@pytest.fixture
def platform_admin(api_pool: ApiPool):
    """Staff superuser with the platform role: the only one who may use the admin."""
    role = f.RoleFactory(user__username="root", name=Role.Name.PLATFORM)
    user = role.user
    user.is_staff = user.is_superuser = True
    user.set_password("correct horse battery staple")
    user.save()
    return user


@pytest.fixture
def page_callers(callers, platform_admin) -> dict[str, Caller]:  # noqa: F811
    """Every caller with a plain Django test client (pages follow no DRF conventions)."""
    result = {}
    for name, caller in callers.items():
        client = Client()
        if caller.user is not None and not name.startswith("token"):
            client.force_login(caller.user)
        result[name] = Caller(name, client, caller.user)
    admin_client = Client()
    admin_client.force_login(platform_admin)
    result["platform_admin"] = Caller("platform_admin", admin_client, platform_admin)
    # Tokens: the same Bearer header on a plain client (pages must ignore it).
    for name, caller in callers.items():
        if name.startswith("token"):
            header = caller.client._credentials["HTTP_AUTHORIZATION"]
            result[name] = Caller(name, Client(HTTP_AUTHORIZATION=header), caller.user)
    return result


@dataclass
class Objects:
    pool: ApiPool
    run: ReportRun
    files: dict[str, ReportFile]


@pytest.fixture
def objects(api_pool: ApiPool, settings, tmp_path: Path) -> Objects:
    settings.TANDEM_REPORTS_DIR = str(tmp_path / "reports")
    run = ReportRun.objects.create(
        period="2026-10", kind=ReportRun.Kind.ON_DEMAND, status=ReportRun.Status.DONE
    )
    run.directory.mkdir(parents=True)
    files = {}
    for key, name, kind, team, content_type in [
        ("alpha", "tandem-2026-10-alpha.csv", "team_csv", api_pool.teams["alpha"], "text/csv"),
        ("bravo", "tandem-2026-10-bravo.csv", "team_csv", api_pool.teams["bravo"], "text/csv"),
        ("pdf", "tandem-2026-10.pdf", "pdf", None, "application/pdf"),
    ]:
        body = f"{key} file\n".encode()
        (run.directory / name).write_bytes(body)
        files[key] = ReportFile.objects.create(
            run=run,
            name=name,
            kind=kind,
            team=team,
            content_type=content_type,
            size_bytes=len(body),
            sha256=hashlib.sha256(body).hexdigest(),
        )
    return Objects(pool=api_pool, run=run, files=files)
