"""The demo queues on a Redis of its own: the machine's Redis is never read or flushed (issue 15).

A throw-away redis-server on a free port plays the machine's Redis (another application's keys
in another database, and its task waiting in the default `celery` queue of database 0); the
real 127.0.0.1:6379 is never touched.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from config.demo import start_private_broker
from config.embedded import PrivateRedis, private_redis_start
from tests.conftest import REPO

FOREIGN_TASK = json.dumps(
    {
        "body": "W1s0Ml0sIHt9LCB7fV0=",
        "headers": {"task": "billing_app.tasks.send_invoice", "id": "foreign-task-1"},
        "properties": {"delivery_tag": "foreign-1"},
    }
)

# What the demo's worker does first with its broker: purge and read the default queue. Run in
# a process of its own with the demo's environment, as the worker is.
CONSUME_LIKE_THE_WORKER = """
import json
from config.celery import app
app.send_task("reports.tasks.report_run_execute", args=[1])
with app.connection_for_read() as connection:
    queue = connection.SimpleQueue("celery")
    message = queue.get(timeout=5)
    received = message.headers["task"]
    message.ack()
    queue.close()
    purged = app.control.purge()
print(json.dumps({"broker": app.conf.broker_url, "received": received, "purged": purged}))
"""


@pytest.fixture
def machine_redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    server = private_redis_start(tmp_path / "machine")
    try:
        yield server
    finally:
        server.stop()


def test_it_leaves_another_applications_redis_untouched(
    machine_redis: PrivateRedis, tmp_path: Path
) -> None:
    machine_db0 = redis.Redis(port=machine_redis.port, db=0)
    machine_db3 = redis.Redis(port=machine_redis.port, db=3)
    machine_db0.lpush("celery", FOREIGN_TASK)
    machine_db3.set("billing_app:session", "keep me")

    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("CELERY_BROKER_URL", "DATABASE_URL")
    }
    # Only Celery is started below: a URL that is parsed but never connected to will do.
    env["DATABASE_URL"] = "postgres://unused@127.0.0.1:1/unused"
    demo_redis = start_private_broker(env, tmp_path / "var")
    try:
        assert demo_redis.port != machine_redis.port
        assert env["CELERY_BROKER_URL"] == demo_redis.url
        assert (tmp_path / "var" / "redis").is_dir()
        result = subprocess.run(
            [sys.executable, "-c", CONSUME_LIKE_THE_WORKER],
            cwd=REPO,
            env={**env, "DJANGO_SETTINGS_MODULE": "config.settings"},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 0, result.stderr
        seen = json.loads(result.stdout.splitlines()[-1])
    finally:
        demo_redis.stop()

    assert seen["broker"] == demo_redis.url
    assert seen["received"] == "reports.tasks.report_run_execute"
    assert machine_db0.lrange("celery", 0, -1) == [FOREIGN_TASK.encode()]
    assert machine_db3.get("billing_app:session") == b"keep me"
    assert machine_db0.dbsize() == 1 and machine_db3.dbsize() == 1


def test_it_queues_on_the_filesystem_without_a_broker_url(tmp_path: Path) -> None:
    """Settings no longer adopt whatever Redis answers on the machine's default port."""
    env = {key: value for key, value in os.environ.items() if key != "CELERY_BROKER_URL"}
    env.update(
        DATABASE_URL="postgres://unused@127.0.0.1:1/unused",
        TANDEM_VAR_DIR=str(tmp_path),
        DJANGO_SETTINGS_MODULE="config.settings",
    )
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "import django; django.setup(); from django.conf import settings;"
            " print(settings.CELERY_BROKER_URL)",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["filesystem://"]
    assert (tmp_path / "celery-broker" / "out").is_dir()
