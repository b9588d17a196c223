"""Embedded defaults for a machine with nothing configured.

`make demo` must run on a fresh machine: with no DATABASE_URL the entry points (manage.py,
`celery -A config`, config.wsgi, the demo, the test plugin) start a private PostgreSQL (the
`pgserver` package) under var/ before Django reads its settings, which only read the
environment and start nothing; with no CELERY_BROKER_URL Celery uses its filesystem
transport under var/. The demo starts a Redis of its own (`private_redis_start`) and hands its
URL to its worker and beat: a Redis that happens to answer on the machine belongs to someone
else, whose queues we must never read or flush. Production always sets both variables.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from simulator.prometheus import die_with_parent as die_with_parent_process
from simulator.prometheus import free_port

REDIS_READY_SECONDS = 20


def var_dir_from_environment() -> Path:
    """Where a checkout keeps its files: TANDEM_VAR_DIR, else var/ beside the code."""
    return Path(os.environ.get("TANDEM_VAR_DIR", Path(__file__).resolve().parent.parent / "var"))


def embedded_defaults_ensure(var_dir: Path | None = None) -> None:
    """What an entry point calls before Django reads its settings: a DATABASE_URL (the
    embedded PostgreSQL when none is set) and, without SECRET_KEY, a key kept in var/ so
    sessions survive restarts. Settings themselves start nothing and write nothing."""
    var_dir = var_dir or var_dir_from_environment()
    database_url_ensure(var_dir)
    if not os.environ.get("SECRET_KEY"):
        demo_secret_key(var_dir)


def database_url_ensure(var_dir: Path) -> str:
    """The environment's DATABASE_URL; without one, the embedded PostgreSQL under
    var/pgdata is started (or joined: pgserver shares one server per data directory between
    processes) and its URL set in the environment, for settings and for child processes."""
    url = os.environ.get("DATABASE_URL", "")
    if not url:
        url = embedded_database_url(var_dir)
        os.environ["DATABASE_URL"] = url
    return url


def database_url_ensure_owned(var_dir: Path) -> int | None:
    """`database_url_ensure`, and the pid of the embedded PostgreSQL if this call started it,
    for the caller to stop when its session ends (`embedded_postgres_stop`); None when
    DATABASE_URL names a server, or when the embedded one was running already: another
    process of the checkout (the demo, a test run, manage.py) may be using it."""
    ours = not os.environ.get("DATABASE_URL") and embedded_postgres_pid(var_dir) is None
    database_url_ensure(var_dir)
    return embedded_postgres_pid(var_dir) if ours else None


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


def embedded_postgres_pid(var_dir: Path) -> int | None:
    """The process id of the embedded PostgreSQL running on var/pgdata, or None: the first
    line of its `postmaster.pid`, which PostgreSQL removes when it stops (a file left by a
    crash names a process that is gone)."""
    try:
        pid = int((var_dir / "pgdata" / "postmaster.pid").read_text().split("\n", 1)[0])
        os.kill(pid, 0)  # raises for a process that is gone (or another user's reused pid)
    except (OSError, ValueError):
        return None
    return pid


def embedded_postgres_stop(var_dir: Path, pid: int, timeout: float = 30.0) -> bool:
    """Stops the embedded PostgreSQL that a caller started: SIGINT is PostgreSQL's fast
    shutdown (sessions rolled back, the data flushed). pgserver itself never stops it
    (entry points share it, `cleanup_mode=None`), so whoever starts it for a session stops
    it. Returns whether it stopped within `timeout`."""
    if embedded_postgres_pid(var_dir) != pid:
        return True  # already stopped, or a server this caller did not start
    os.kill(pid, signal.SIGINT)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if embedded_postgres_pid(var_dir) is None:
            return True
        time.sleep(0.1)
    return False


def redis_answers(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5) as connection:
            connection.sendall(b"PING\r\n")
            return connection.recv(16).startswith(b"+PONG")
    except OSError:
        return False


@dataclass
class PrivateRedis:
    process: subprocess.Popen
    port: int

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def stop(self, timeout: float = 15.0) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def private_redis_start(
    var_dir: Path, *, attempts: int = 3, die_with_parent: bool = False
) -> PrivateRedis:
    """Debian's redis-server for this checkout alone: loopback, a free port, files under
    var/redis, nothing persisted (a restart starts with empty queues, never stale tasks).
    `die_with_parent`: the kernel stops it when the calling process dies (a test run).

    Raises RuntimeError naming the log file when it does not come up."""
    executable = shutil.which("redis-server")
    if executable is None:
        raise RuntimeError("redis-server is not installed (apt-get install redis-server)")
    folder = var_dir / "redis"
    folder.mkdir(parents=True, exist_ok=True)
    log = folder / "redis.log"
    for _ in range(attempts):  # another process may take the free port before redis binds it
        port = free_port()
        process = subprocess.Popen(
            [
                executable, "--bind", "127.0.0.1", "--port", str(port), "--dir", str(folder),
                "--save", "", "--appendonly", "no", "--logfile", str(log),
            ],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            preexec_fn=die_with_parent_process if die_with_parent else None,
        )  # fmt: skip
        deadline = time.monotonic() + REDIS_READY_SECONDS
        while process.poll() is None and time.monotonic() < deadline:
            if redis_answers("127.0.0.1", port):
                return PrivateRedis(process=process, port=port)
            time.sleep(0.05)
        PrivateRedis(process=process, port=port).stop()
    raise RuntimeError(f"the demo's redis-server did not start; see {log}")


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
    """A key generated once into var/, so sessions survive restarts of the demo. Only entry
    points call it; settings read the file with `demo_secret_key_read`."""
    path = var_dir / "secret_key"
    if not path.exists():
        var_dir.mkdir(parents=True, exist_ok=True)
        path.write_text(secrets.token_urlsafe(50))
        path.chmod(0o600)
    return path.read_text().strip()


def demo_secret_key_read(var_dir: Path) -> str:
    """The key an entry point generated into var/, or "" when there is none (settings read
    it and never write it)."""
    try:
        return (var_dir / "secret_key").read_text().strip()
    except FileNotFoundError:
        return ""
