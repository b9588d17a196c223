"""The demo and a test run stop the embedded PostgreSQL they started, and only that one.

pgserver never stops the server under var/pgdata (entry points share it), so `make demo`
stops it on Ctrl-C, and a test session when it ends, when it was the one to start it. A
throw-away data directory under the test's own folder plays var/; the session's own
embedded server is never touched.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from config.embedded import embedded_postgres_pid, embedded_postgres_stop
from tests.conftest import REPO

# A test session as `make test` runs one (the plugin of pyproject.toml's addopts), whose test
# records the pid of the embedded PostgreSQL it ran on.
PROBE = """
import os
from pathlib import Path

from config.embedded import embedded_postgres_pid, var_dir_from_environment


def test_it_runs_on_the_embedded_postgresql():
    pid = embedded_postgres_pid(var_dir_from_environment())
    Path(os.environ["PROBE_PID_FILE"]).write_text(str(pid))
"""

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


def var_folder(tmp_path: Path) -> Path:
    """A var/ of the test's own, empty, that PostgreSQL can use."""
    var_dir = tmp_path / "var"
    var_dir.mkdir()
    os.chmod(tmp_path, 0o755)  # pgserver runs PostgreSQL as its own user when root
    return var_dir


def embedded_started(var_dir: Path) -> int | None:
    """Start the embedded PostgreSQL on `var_dir` in another process, as an entry point does;
    its pid."""
    env = {key: value for key, value in os.environ.items() if key != "DATABASE_URL"}
    subprocess.run(
        [sys.executable, "-c", START_EMBEDDED, str(var_dir)],
        cwd=REPO, env=env, check=True, timeout=120, capture_output=True,
    )  # fmt: skip
    return embedded_postgres_pid(var_dir)


def test_it_stops_the_embedded_postgresql_it_started_and_only_that(tmp_path: Path) -> None:
    var_dir = var_folder(tmp_path)
    assert embedded_postgres_pid(var_dir) is None
    pid = embedded_started(var_dir)
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


def session_run(tmp_path: Path, var_dir: Path) -> int | None:
    """A pytest session of one test on `var_dir`'s embedded PostgreSQL, in a clean environment
    as a newcomer's (no DATABASE_URL, not an xdist worker of this run); the pid it ran on."""
    (tmp_path / "probe").mkdir()
    (tmp_path / "probe" / "test_probe.py").write_text(PROBE)
    pid_file = tmp_path / "pid"
    env = {
        key: value
        for key, value in os.environ.items()
        if key != "DATABASE_URL" and not key.startswith("PYTEST_")
    }
    env.update(TANDEM_VAR_DIR=str(var_dir), PROBE_PID_FILE=str(pid_file))
    subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(REPO),
         "-c", str(REPO / "pyproject.toml"), str(tmp_path / "probe" / "test_probe.py")],
        cwd=REPO, env=env, check=True, timeout=300, capture_output=True,
    )  # fmt: skip
    text = pid_file.read_text()
    return None if text == "None" else int(text)


def test_it_stops_the_embedded_postgresql_a_test_session_started(tmp_path: Path) -> None:
    var_dir = var_folder(tmp_path)
    pid = session_run(tmp_path, var_dir)
    try:
        assert pid is not None
        assert embedded_postgres_pid(var_dir) is None
        assert not alive(pid)
    finally:
        if pid is not None and alive(pid):
            os.kill(pid, signal.SIGKILL)


def test_it_leaves_running_an_embedded_postgresql_a_test_session_found(tmp_path: Path) -> None:
    var_dir = var_folder(tmp_path)
    running = embedded_started(var_dir)
    try:
        assert running is not None
        assert session_run(tmp_path, var_dir) == running
        assert embedded_postgres_pid(var_dir) == running  # the demo's, say: still serving
    finally:
        if running is not None:
            embedded_postgres_stop(var_dir, running)
