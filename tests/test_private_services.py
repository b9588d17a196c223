"""`make test` never reads or flushes a Redis it did not start (issue 15): every pytest process
queues on a redis-server of its own (tests/private_services.py), even when the environment
names another application's Redis.

A throw-away redis-server on a free port plays that other application's Redis; the real
127.0.0.1:6379 is never touched.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from config.embedded import PrivateRedis, private_redis_start
from tests.conftest import REPO

# What the suite's Celery tests do to their broker before they start a worker.
FLUSHES_ITS_BROKER = """
import redis
from django.conf import settings


def test_it_flushes_its_broker():
    from config.celery import app

    redis.Redis.from_url(settings.CELERY_BROKER_URL).flushall()
    app.control.purge()
    print("broker", settings.CELERY_BROKER_URL)
"""


@pytest.fixture
def other_applications_redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    server = private_redis_start(tmp_path / "other", die_with_parent=True)
    try:
        yield server
    finally:
        server.stop()


def test_it_runs_on_a_redis_of_its_own(settings) -> None:
    assert settings.CELERY_BROKER_URL.startswith("redis://127.0.0.1:")
    assert not settings.CELERY_BROKER_URL.startswith("redis://127.0.0.1:6379/")


def test_it_leaves_a_redis_named_in_the_environment_untouched(
    other_applications_redis: PrivateRedis, tmp_path: Path
) -> None:
    queue = redis.Redis(port=other_applications_redis.port, db=0)
    keys = redis.Redis(port=other_applications_redis.port, db=3)
    queue.lpush("celery", b'{"headers": {"task": "billing_app.tasks.send_invoice"}}')
    keys.set("billing_app:session", "keep me")
    (tmp_path / "test_flush.py").write_text(FLUSHES_ITS_BROKER)
    # A developer's shell that names another application's Redis, and no xdist worker name
    # (the nested run is a pytest process of its own).
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTEST_")}
    env["CELERY_BROKER_URL"] = other_applications_redis.url

    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider",
         "-c", str(REPO / "pyproject.toml"), str(tmp_path / "test_flush.py")],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip

    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "1 passed" in result.stdout
    assert f"broker {other_applications_redis.url}" not in result.stdout
    assert queue.lrange("celery", 0, -1) == [
        b'{"headers": {"task": "billing_app.tasks.send_invoice"}}'
    ]
    assert keys.get("billing_app:session") == b"keep me"
