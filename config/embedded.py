"""Embedded defaults for a machine with nothing configured.

`make demo` must run on a fresh machine: with no DATABASE_URL we start a private PostgreSQL
(the `pgserver` package) under var/, and with no Redis answering we fall back to Celery's
filesystem transport under var/. Production always sets both variables.
"""

from __future__ import annotations

import os
import secrets
import socket
from pathlib import Path


def embedded_database_url(var_dir: Path) -> str:
    # pgserver keeps its lock file in the user's runtime directory, which a login session
    # provides (XDG_RUNTIME_DIR) and CI, cron or a container do not; platformdirs then warns
    # on stderr at import. Give it one of ours instead, private as the standard requires.
    if not os.environ.get("XDG_RUNTIME_DIR"):
        runtime = var_dir / "run"
        runtime.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.environ["XDG_RUNTIME_DIR"] = str(runtime)
    import pgserver  # imported lazily: only the embedded default needs it

    server = pgserver.get_server(var_dir / "pgdata", cleanup_mode=None)
    return server.get_uri("postgres")


def redis_answers(host: str = "127.0.0.1", port: int = 6379) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5) as connection:
            connection.sendall(b"PING\r\n")
            return connection.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def filesystem_broker_options(var_dir: Path) -> dict:
    folder = var_dir / "celery-broker"
    for sub in ("out", "processed"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    return {
        "data_folder_in": str(folder / "out"),
        "data_folder_out": str(folder / "out"),
        "data_folder_processed": str(folder / "processed"),
    }


def demo_secret_key(var_dir: Path) -> str:
    """A key generated once into var/, so sessions survive restarts of the demo."""
    path = var_dir / "secret_key"
    if not path.exists():
        var_dir.mkdir(parents=True, exist_ok=True)
        path.write_text(secrets.token_urlsafe(50))
        path.chmod(0o600)
    return path.read_text().strip()
