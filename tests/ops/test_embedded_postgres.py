"""The embedded default's database (scripts/with_postgres.py, settings.EMBEDDED_PGDATA): without
DATABASE_URL the settings point at a PostgreSQL whose data and Unix socket are in the var directory;
the script starts that server for a command, in the command's process group, and stops it when the
command ends or when the group is sent SIGTERM; a run started while the previous run's server still
shuts down waits for it; an explicit DATABASE_URL starts nothing."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import quote

import psycopg
import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = [sys.executable, str(ROOT / "scripts" / "with_postgres.py"), "--"]
QUERY = (
    "from mediator_project import settings; import psycopg; d = settings.DATABASES['default'];"
    " c = psycopg.connect(host=d['HOST'], port=d['PORT'], user=d['USER'], dbname=d['NAME']);"
    " print(c.execute('SELECT current_database()').fetchone()[0])"
)


def _env(var_dir: Path, **extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "DATABASE_URL_FILE")}
    return env | {"MEDIATOR_VAR_DIR": str(var_dir), "PYTHONPATH": str(ROOT)} | extra


def _run(args: list[str], env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def _accepts(pgdata: Path) -> bool:
    """Whether the server answers on its socket (named by the TCP port recorded beside the data)."""
    try:
        port = json.loads((pgdata.parent / "pg-tcp.json").read_text())["port"]
        with psycopg.connect(host=str(pgdata), port=port, user="postgres", dbname="postgres", connect_timeout=2):
            return True
    except (OSError, psycopg.OperationalError):
        return False


def _until(condition, timeout_s: float = 60) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _group_gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.fixture(scope="module")
def var_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("embedded-var")


def test_without_database_url_the_settings_name_the_embedded_server(var_dir):
    code = "from mediator_project import settings; print(settings.DATABASE_URL); print(settings.EMBEDDED_PGDATA)"
    out = _run([sys.executable, "-c", code], _env(var_dir)).stdout.split()
    pgdata = var_dir.resolve() / "pg"
    # The socket file is named by the TCP port (5432 until with_postgres.py has recorded one).
    assert out == [f"postgresql://postgres@{quote(str(pgdata), safe='')}:5432/mediator", str(pgdata)]
    url = "postgresql://someone@db.example:5433/other"
    out = _run([sys.executable, "-c", code], _env(var_dir, DATABASE_URL=url)).stdout.split()
    assert out == [url, "None"]


def test_the_command_runs_against_its_own_server_which_stops_after_it(var_dir):
    pgdata = var_dir.resolve() / "pg"
    first = _run([*SCRIPT, sys.executable, "-c", QUERY], _env(var_dir))
    assert (first.returncode, first.stdout) == (0, "mediator\n"), first.stderr
    assert not (pgdata / "postmaster.pid").exists()  # removed by the server's clean shutdown
    assert not _accepts(pgdata)
    # Initialised once: the next run starts the same cluster, and the command's status comes back.
    again = _run([*SCRIPT, sys.executable, "-c", "raise SystemExit(3)"], _env(var_dir))
    assert again.returncode == 3
    assert "initdb" not in again.stderr
    assert not (pgdata / "postmaster.pid").exists()


@pytest.mark.parametrize("when", ["serving", "starting"])
def test_sigterm_to_the_group_stops_the_command_and_the_server(var_dir, when):
    pgdata = var_dir.resolve() / "pg"
    started = var_dir / f"started-{when}"
    proc = subprocess.Popen(
        [*SCRIPT, sys.executable, "-c", f"import time; open({str(started)!r}, 'w'); time.sleep(600)"],
        cwd=ROOT,
        env=_env(var_dir),
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        # "starting": as soon as the server accepts, before or while the command starts.
        assert _until(started.exists if when == "serving" else lambda: _accepts(pgdata))
        os.killpg(proc.pid, signal.SIGTERM)
        assert proc.wait(60) == 0
        assert _until(lambda: _group_gone(proc.pid))  # nothing of the group is left, the server included
        assert not (pgdata / "postmaster.pid").exists()
    finally:
        if not _group_gone(proc.pid):
            os.killpg(proc.pid, signal.SIGKILL)


def test_an_explicit_database_url_starts_no_server(tmp_path):
    env = _env(tmp_path, DATABASE_URL="postgresql://postgres@127.0.0.1:1/none")
    ran = _run([*SCRIPT, sys.executable, "-c", "print('ran')"], env)
    assert (ran.returncode, ran.stdout) == (0, "ran\n")
    assert not (tmp_path / "pg").exists()


def test_a_taken_tcp_port_is_replaced_and_recorded(tmp_path):
    record = tmp_path / "pg-tcp.json"
    first = _run([*SCRIPT, sys.executable, "-c", QUERY], _env(tmp_path))
    assert (first.returncode, first.stdout) == (0, "mediator\n"), first.stderr
    port = json.loads(record.read_text())["port"]
    with socket.socket() as squatter:  # another program holds the port at the next start
        squatter.bind(("127.0.0.1", port))
        squatter.listen()
        again = _run([*SCRIPT, sys.executable, "-c", QUERY], _env(tmp_path))
    assert (again.returncode, again.stdout) == (0, "mediator\n"), again.stderr
    assert json.loads(record.read_text())["port"] != port


# The command of a run being stopped: one open session (PostgreSQL's smart shutdown waits for it), a
# SIGTERM noted, and the end only when the test says so; meanwhile its server stops no further.
DRAINING = (
    "import signal, sys, time; from pathlib import Path; from mediator_project import settings; import psycopg;"
    " d = settings.DATABASES['default'];"
    " c = psycopg.connect(host=d['HOST'], port=d['PORT'], user=d['USER'], dbname=d['NAME']);"
    " ready, stopping, release = map(Path, sys.argv[1:]);"
    " signal.signal(signal.SIGTERM, lambda *_: stopping.touch()); ready.touch();"
    " [time.sleep(0.05) for _ in iter(lambda: release.exists(), True)]"
)


def test_a_run_started_while_the_previous_one_stops_waits_for_its_server(var_dir, tmp_path):
    pgdata = var_dir.resolve() / "pg"
    ready, stopping, release = (tmp_path / name for name in ("ready", "stopping", "release"))
    first = subprocess.Popen(
        [*SCRIPT, sys.executable, "-c", DRAINING, str(ready), str(stopping), str(release)],
        cwd=ROOT,
        env=_env(var_dir),
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    second = None
    log = tmp_path / "second.log"
    try:
        assert _until(ready.exists)
        os.killpg(first.pid, signal.SIGTERM)  # as a stop of `make run` does
        # Its server shuts down (new connections refused) and is still there: what the next run finds.
        assert _until(lambda: stopping.exists() and not _accepts(pgdata))
        assert (pgdata / "postmaster.pid").exists()
        with log.open("w") as out:
            second = subprocess.Popen(
                [*SCRIPT, sys.executable, "-c", QUERY],
                cwd=ROOT,
                env=_env(var_dir),
                start_new_session=True,
                stdout=subprocess.PIPE,
                stderr=out,
                text=True,
            )
        assert _until(lambda: "waiting for the server of" in log.read_text() or second.poll() is not None)
        assert second.poll() is None, log.read_text()
        release.touch()  # the previous run's command ends, then its server
        assert first.wait(60) == 0
        out, _ = second.communicate(timeout=120)
        assert (second.returncode, out) == (0, "mediator\n"), log.read_text()
        assert not (pgdata / "postmaster.pid").exists()
    finally:
        release.touch()
        for proc in (first, second):
            if proc is not None and not _group_gone(proc.pid):
                os.killpg(proc.pid, signal.SIGKILL)
