"""A pytest plugin (`-p tests.private_services` in pyproject.toml) that gives the test session
services of its own before Django's settings are read.

Settings read CELERY_BROKER_URL once, at import, which pytest-django does before any conftest
is loaded; hence a plugin, whose hook runs first. Every pytest process (each xdist worker too)
starts its own redis-server, so two test runs on one machine, or a test run beside the demo or
another application, never read or flush each other's queues. A CELERY_BROKER_URL set in the
environment is ignored on purpose: the tests flush their broker between tests.

Settings only read DATABASE_URL, so this plugin is the test session's entry point for the
database as manage.py is for a command: without DATABASE_URL it starts (or joins) the embedded
PostgreSQL under var/pgdata and sets the URL. Under xdist every worker process runs this hook;
pgserver shares one server per data directory between processes, so they all join one server.
The process that started it (the xdist controller, which outlives its workers, or a run
without xdist) stops it when the session ends, so `make test` leaves no PostgreSQL running;
one it found running (the demo's, another test run's) it leaves alone.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from config.embedded import (
    database_url_ensure_owned,
    embedded_defaults_ensure,
    embedded_postgres_stop,
    private_redis_start,
    var_dir_from_environment,
)


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    var_dir = var_dir_from_environment()
    # None in an xdist worker: it inherits the controller's DATABASE_URL and joins its server.
    started = database_url_ensure_owned(var_dir)
    if started is not None:
        early_config.add_cleanup(lambda: embedded_postgres_stop(var_dir, started))
    embedded_defaults_ensure(var_dir)
    folder = Path(tempfile.mkdtemp(prefix="tandem-test-redis-"))
    redis = private_redis_start(folder, die_with_parent=True)
    os.environ["CELERY_BROKER_URL"] = redis.url
    early_config.add_cleanup(lambda: shutil.rmtree(folder, ignore_errors=True))
    early_config.add_cleanup(redis.stop)
