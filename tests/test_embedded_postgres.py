"""The demo stops the embedded PostgreSQL it started, and only that one.

pgserver never stops the server under var/pgdata (entry points share it), so `make demo`
stops it on Ctrl-C when the demo was the one to start it. A throw-away data directory under
the test's own folder plays var/; the session's own embedded server is never touched.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from config.embedded import embedded_postgres_pid, embedded_postgres_stop
from tests.conftest import REPO

START_EMBEDDED = """
import sys
from pathlib import Path
from config.embedded import database_url_ensure
print(database_url_ensure(Path(sys.argv[1])))
"""


def alive(pid: int) -> bool:
    """Running, not merely waiting to be reaped: the stopped server's parent is init, which
    may take a moment to reap it."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def test_it_stops_the_embedded_postgresql_it_started_and_only_that(tmp_path: Path) -> None:
    var_dir = tmp_path / "var"
    var_dir.mkdir()
    os.chmod(tmp_path, 0o755)  # pgserver runs PostgreSQL as its own user when root
    assert embedded_postgres_pid(var_dir) is None

    env = {key: value for key, value in os.environ.items() if key != "DATABASE_URL"}
    subprocess.run(
        [sys.executable, "-c", START_EMBEDDED, str(var_dir)],
        cwd=REPO, env=env, check=True, timeout=120, capture_output=True,
    )  # fmt: skip
    pid = embedded_postgres_pid(var_dir)
    try:
        assert pid is not None and alive(pid)

        # A pid the caller did not see start is not signalled.
        assert embedded_postgres_stop(var_dir, os.getpid())
        assert embedded_postgres_pid(var_dir) == pid

        assert embedded_postgres_stop(var_dir, pid)
        assert embedded_postgres_pid(var_dir) is None
        assert not (var_dir / "pgdata" / "postmaster.pid").exists()
        assert not alive(pid)
    finally:
        if pid is not None and alive(pid):
            os.kill(pid, signal.SIGKILL)


def test_it_reads_a_stale_pid_file_as_stopped(tmp_path: Path) -> None:
    pgdata = tmp_path / "pgdata"
    pgdata.mkdir()
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    (pgdata / "postmaster.pid").write_text(f"{gone.pid}\n{pgdata}\n")
    assert embedded_postgres_pid(tmp_path) is None
    (pgdata / "postmaster.pid").write_text("not a pid\n")
    assert embedded_postgres_pid(tmp_path) is None
