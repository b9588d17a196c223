"""Settings come from the environment and fail early, naming the variable, when it is wrong."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from ipaddress import ip_network
from pathlib import Path
from urllib.parse import unquote

import pytest
from django.contrib.auth.models import User
from django.core.signals import request_finished, request_started
from django.db import DEFAULT_DB_ALIAS, close_old_connections, connection, connections
from django.test import Client
from django.urls import reverse

from access.models import Role
from config import settings as config_settings
from config.embedded import embedded_postgres_pid, embedded_postgres_stop
from tests.conftest import REPO


def start_django(**overrides: str) -> subprocess.CompletedProcess:
    env = {**os.environ, **overrides}
    return subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        cwd=REPO,
        env={**env, "DJANGO_SETTINGS_MODULE": "config.settings"},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        ({"DATABASE_URL": "this is not a url"}, "DATABASE_URL"),
        ({"DATABASE_URL": "mysql://root@127.0.0.1/test"}, "DATABASE_URL"),
        ({"TANDEM_DEBUG": "0", "SECRET_KEY": ""}, "SECRET_KEY"),
        ({"TANDEM_DEBUG": "maybe"}, "TANDEM_DEBUG"),
        ({"TANDEM_STEP_SECONDS": "five"}, "TANDEM_STEP_SECONDS"),
        ({"TANDEM_STEP_SECONDS": "420"}, "TANDEM_STEP_SECONDS"),  # 3600 / 420 is not whole
        ({"TANDEM_STEP_SECONDS": "0"}, "TANDEM_STEP_SECONDS"),
        ({"TANDEM_STEP_SECONDS": "7200"}, "TANDEM_STEP_SECONDS"),
        ({"TANDEM_PROMETHEUS_DEADLINE_SECONDS": "0"}, "TANDEM_PROMETHEUS_DEADLINE_SECONDS"),
        ({"TANDEM_TRUSTED_PROXIES": "10.0.0.0/33"}, "TANDEM_TRUSTED_PROXIES"),
        ({"TANDEM_TRUSTED_PROXIES": "10.0.0.1, proxy.internal"}, "TANDEM_TRUSTED_PROXIES"),
    ],
)
def test_it_refuses_to_start_with_a_bad_setting_and_names_it(overrides, named) -> None:
    result = start_django(**overrides)
    assert result.returncode != 0
    assert named in result.stderr.splitlines()[-1]


def environment_without(*names: str) -> dict[str, str]:
    return {key: value for key, value in os.environ.items() if key not in names}


def test_it_refuses_without_a_database_url_and_starts_or_writes_nothing(tmp_path) -> None:
    """Importing settings is free of side effects: no embedded PostgreSQL, no key file."""
    var = tmp_path / "var"
    var.mkdir()
    env = environment_without("DATABASE_URL", "SECRET_KEY", "XDG_RUNTIME_DIR")
    result = subprocess.run(
        [sys.executable, "-c", "import config.settings"],
        cwd=REPO,
        env={**env, "TANDEM_VAR_DIR": str(var), "TANDEM_DEBUG": "1"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    last = result.stderr.splitlines()[-1]
    assert "ImproperlyConfigured: DATABASE_URL is not set" in last
    assert "manage.py" in last  # says how to get the embedded one
    assert list(var.iterdir()) == []  # no pgdata, no run/ lock directory, no secret_key
    assert not (var / "pgdata").exists()


def test_it_checks_with_manage_py_and_no_database_url() -> None:
    """manage.py is an entry point: without DATABASE_URL it starts (here: joins the test
    session's) embedded PostgreSQL under var/pgdata and the check reaches the database."""
    env = {**environment_without("DATABASE_URL"), "DJANGO_SETTINGS_MODULE": "config.settings"}

    def manage(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    var = Path(env.get("TANDEM_VAR_DIR", REPO / "var"))
    # Under `make test` the session's embedded server runs already; a session run against
    # another DATABASE_URL has none, and the one manage.py starts here is this test's to stop.
    running_before = embedded_postgres_pid(var)
    try:
        result = manage("check", "--database", "default")
        assert result.returncode == 0, result.stderr
        assert "System check identified no issues" in result.stdout
        connected = manage(
            "shell", "--no-imports", "-c",
            "import os; from django.db import connection; connection.ensure_connection();"
            " print(os.environ['DATABASE_URL'])",
        )  # fmt: skip
        assert connected.returncode == 0, connected.stderr
        assert str(var / "pgdata") in unquote(connected.stdout)
    finally:
        started = embedded_postgres_pid(var)
        if running_before is None and started is not None:
            assert embedded_postgres_stop(var, started)


def test_it_starts_with_production_settings_from_the_environment() -> None:
    result = start_django(TANDEM_DEBUG="0", SECRET_KEY="x" * 50)
    assert result.returncode == 0, result.stderr


def test_it_reads_trusted_proxies_as_addresses_and_networks(monkeypatch) -> None:
    monkeypatch.setenv("TANDEM_TRUSTED_PROXIES", " 10.9.0.0/16, 192.0.2.7,,fd00::/8 ")
    assert config_settings.env_networks("TANDEM_TRUSTED_PROXIES") == (
        ip_network("10.9.0.0/16"),
        ip_network("192.0.2.7/32"),
        ip_network("fd00::/8"),
    )
    monkeypatch.delenv("TANDEM_TRUSTED_PROXIES")
    assert config_settings.env_networks("TANDEM_TRUSTED_PROXIES") == ()  # default: none


def compose_command() -> list[str]:
    docker = shutil.which("docker")
    if (
        docker
        and subprocess.run([docker, "compose", "version"], capture_output=True).returncode == 0
    ):
        return [docker, "compose"]
    legacy = shutil.which("docker-compose")
    assert legacy, (
        "neither `docker compose` nor `docker-compose` is installed (make test installs it)"
    )
    return [legacy]


def test_it_has_a_valid_compose_file_with_the_production_services() -> None:
    result = subprocess.run(
        [*compose_command(), "config", "--services"],
        cwd=REPO,
        env={**os.environ, "SECRET_KEY": "compose-check"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    services = set(result.stdout.split())
    assert {"postgres", "redis", "prometheus", "web", "worker", "beat", "simulator"} <= services


@pytest.fixture
def production_request_cycle():
    """Requests that check the database connection at their start and end, as Django's WSGI
    handler does (the test client switches `close_old_connections` off around its requests)."""

    def check_connections(**kwargs) -> None:
        close_old_connections()

    request_started.connect(check_connections)
    request_finished.connect(check_connections)
    yield
    request_started.disconnect(check_connections)
    request_finished.disconnect(check_connections)


def backend_pid() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return cursor.fetchone()[0]


def terminate_other_backends() -> list[int]:
    """What a database restart or failover does to Tandem: its connections are dropped."""
    other = connections.create_connection(DEFAULT_DB_ALIAS)
    try:
        with other.cursor() as cursor:
            cursor.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
                " AND backend_type = 'client backend' AND pid <> pg_backend_pid()"
            )
            pids = [pid for (pid,) in cursor.fetchall()]
            for pid in pids:
                cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
            return pids
    finally:
        other.close()


@pytest.mark.django_db(transaction=True)
def test_it_answers_the_first_request_after_the_database_dropped_its_connections(
    production_request_cycle,
) -> None:
    assert connection.settings_dict["CONN_MAX_AGE"] > 0  # persistent: the case that broke
    person = User.objects.create_user("dora")
    Role.objects.create(user=person, name=Role.Name.FINANCE)
    client = Client(raise_request_exception=False)
    client.force_login(person)
    assert client.get(reverse("reports:runs")).status_code == 200
    before = backend_pid()
    assert before in terminate_other_backends()
    assert client.get(reverse("reports:runs")).status_code == 200
    assert backend_pid() != before  # a new connection, opened by the health check
