"""Settings come from the environment and fail early, naming the variable, when it is wrong."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

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
    ],
)
def test_it_refuses_to_start_with_a_bad_setting_and_names_it(overrides, named) -> None:
    result = start_django(**overrides)
    assert result.returncode != 0
    assert named in result.stderr.splitlines()[-1]


def test_it_starts_with_production_settings_from_the_environment() -> None:
    result = start_django(TANDEM_DEBUG="0", SECRET_KEY="x" * 50)
    assert result.returncode == 0, result.stderr


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
