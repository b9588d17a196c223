"""What a process the tests start (a Celery worker, beat, the demo) is handed: the test
database's real connection and the test session's private Redis.

One helper for every such process, so none of them rebuilds a URL by hand. The embedded
PostgreSQL (pgserver) listens on a Unix socket only, which `dj_database_url` keeps in
OPTIONS["host"], not in HOST: a URL rebuilt from HOST and PORT alone points a worker at another
server (or at none).
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path
from urllib.parse import quote, urlencode

from simulator.prometheus import die_with_parent, free_port

__all__ = ["PrivateRedis", "child_environment", "database_url", "die_with_parent", "free_port"]

# PostgreSQL options that settings.py sets itself in every process; not part of the address.
SETTINGS_OWN_OPTIONS = {"options"}


def database_url() -> str:
    """The URL of the database this test process is connected to (pytest-django's test
    database), socket or TCP, for a child process's DATABASE_URL."""
    from django.db import connection

    return database_url_of(connection.settings_dict)


def database_url_of(settings_dict: dict) -> str:
    options = {
        key: value
        for key, value in (settings_dict.get("OPTIONS") or {}).items()
        if key not in SETTINGS_OWN_OPTIONS
    }
    host = settings_dict.get("HOST") or ""
    if host.startswith("/"):
        # A socket directory: kept as a query parameter, which keeps its case (a URL's host
        # part is lower-cased by every parser).
        options.setdefault("host", host)
        host = ""
    user = quote(settings_dict.get("USER") or "", safe="")
    password = settings_dict.get("PASSWORD") or ""
    credentials = f"{user}:{quote(password, safe='')}@" if password else f"{user}@"
    port = f":{settings_dict['PORT']}" if settings_dict.get("PORT") else ""
    query = f"?{urlencode(options)}" if options else ""
    return f"postgres://{credentials}{host}{port}/{quote(settings_dict['NAME'], safe='')}{query}"


class PrivateRedis:
    """A redis-server of the test session's own on a free loopback port, keeping nothing on
    disk. The tests never read, write or flush a Redis they did not start."""

    def __init__(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        command = [
            "redis-server",
            "--port", str(self.port), "--bind", "127.0.0.1",
            "--save", "", "--appendonly", "no", "--dir", str(folder),
            "--logfile", str(folder / "redis.log"),
        ]  # fmt: skip
        try:
            self.process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                preexec_fn=die_with_parent,
            )
        except FileNotFoundError:
            raise RuntimeError(
                "redis-server is not installed: the tests run a Redis of their own "
                "(`make test` installs Debian's redis-server)"
            ) from None
        self._wait_until_ready(folder)

    def _wait_until_ready(self, folder: Path) -> None:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                log = folder / "redis.log"
                raise RuntimeError(f"redis-server exited: {log.read_text()[-2000:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as link:
                    link.sendall(b"PING\r\n")
                    if link.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"redis-server did not answer on port {self.port} within 20 s")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def child_environment(**overrides: str) -> dict[str, str]:
    """The environment for a process a test starts: this process's (its private broker
    included) with the test database's URL."""
    return {**os.environ, "DATABASE_URL": database_url(), **overrides}
