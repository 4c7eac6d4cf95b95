"""What `make run` starts belongs to it: the run script (scripts/run_embedded.sh) as a real process
in its own process group, with the embedded PostgreSQL (scripts/with_postgres.py), Daphne, the Celery worker (embedded beat) and this deployment's
Spark engine (started as the worker starts it, in its own session, on a port of its own); SIGTERM
to the group, and every one of them is gone, also when the engine was still starting. Starting the
engine is single-flight, and an engine whose starter was killed before recording it is adopted by
the next start and ended by `stop`. And a deployment never uses another's engine."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from spark_reports import config, engine

pytestmark = pytest.mark.spark
ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _group(pgid: int) -> set[int]:
    out = subprocess.run(["ps", "-o", "pid=", "-g", str(pgid)], capture_output=True, text=True, check=False).stdout
    return {int(p) for p in out.split()}


def _wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    pytest.fail(f"timed out waiting for {what}")


WITH_POSTGRES = [sys.executable, "scripts/with_postgres.py", "--"]
# Two reports and the metering export, queued at once as the operator API and the beat queue them.
QUEUE_TWO_REPORTS_AND_AN_EXPORT = (
    "from datetime import date; from celery import current_app; from apps.usage import services;"
    " [services.report_run_request(date_from=date(2026, 1, 1), date_to=date(2026, 1, 2)) for _ in range(2)];"
    " current_app.send_task('apps.usage.tasks.export_metering')"
)


def _env(var: Path) -> dict[str, str]:
    """A checkout's environment with `var` as its var/ (its own deployment, database and engine)."""
    drop = ("SPARK_", "DJANGO_SETTINGS", "TEST_DATABASE", "DATABASE_URL", "MEDIATOR_RUN_ID")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    return env | {"MEDIATOR_VAR_DIR": str(var), "PYTHONPATH": str(ROOT), "MEDIATOR_STOP_GRACE_S": "20"}


def _engine_processes(var: Path) -> dict[int, int]:
    """pid -> parent pid of every live process naming the deployment of `var` (the engine's JVM and
    the scripts and launcher on the way to it), read from /proc as a user would look."""
    mark = f"{config.DEPLOYMENT_CONF}={hashlib.sha256(str(var.resolve()).encode()).hexdigest()[:16]}".encode()
    found = {}
    for entry in Path("/proc").iterdir():
        try:
            named = entry.name.isdigit() and mark in (entry / "cmdline").read_bytes().split(b"\0")
            if named and _alive(int(entry.name)):
                found[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError):
            continue
    return found


def _engines(var: Path) -> set[int]:
    """The engines of `var`'s deployment: its processes whose parent is none of them."""
    procs = _engine_processes(var)
    return {pid for pid, parent in procs.items() if parent not in procs}


def _starters(var: Path) -> set[int]:
    """Live `python -m spark_reports.engine` processes of `var`'s deployment."""
    found = set()
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and b"spark_reports.engine" in (entry / "cmdline").read_bytes():
                if f"MEDIATOR_VAR_DIR={var}".encode() in (entry / "environ").read_bytes().split(b"\0"):
                    found.add(int(entry.name))
        except OSError:
            continue
    return {pid for pid in found if _alive(pid)}


def _kill_leftovers(var: Path) -> None:
    for pid in [*_starters(var), *_engine_processes(var)]:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _start_run(var: Path, env: dict[str, str], port: int, log) -> subprocess.Popen:
    """`make run` of `var` (the run script under its embedded PostgreSQL) in its own process group,
    returned once Daphne answers (after initdb and the migrations, run by the script) and the Celery
    worker runs."""
    run = subprocess.Popen(  # noqa: S603
        [*WITH_POSTGRES, "scripts/run_embedded.sh", "127.0.0.1", str(port)],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group, as `make run` has in a terminal
    )
    _wait_for(lambda: engine.is_up("127.0.0.1", port) or run.poll() is not None, 180, "Daphne")
    assert run.poll() is None, "the run script exited"
    _wait_for(
        lambda: any(b"celery" in Path(f"/proc/{p}/cmdline").read_bytes() for p in _group(run.pid) if _alive(p)),
        60,
        "the Celery worker",
    )
    return run


def test_sigterm_to_the_run_scripts_group_stops_every_child_and_the_engine(tmp_path):
    var = tmp_path / "var"
    var.mkdir()
    env = _env(var)
    port = _free_port()
    log = (tmp_path / "run.log").open("wb")
    run = _start_run(var, env, port, log)
    pgid = run.pid
    try:
        # The engine, started as the worker starts it lazily (services.spark_engine_ensure): its own
        # session, a free port of its own, recorded in this deployment's var/.
        out = subprocess.run(
            [sys.executable, "-m", "spark_reports.engine", "start"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert out.returncode == 0, out.stdout + out.stderr
        record = json.loads((var / "spark-engine.json").read_text())
        assert record["port"] != 15002 and engine.is_up("127.0.0.1", record["port"])
        jvm = record["pid"]
        assert _alive(jvm) and jvm not in _group(pgid)  # outside the group: only the script can stop it
        children = {p for p in _group(pgid) if _alive(p)} - {run.pid}
        assert len(children) >= 2, children  # Daphne and the worker at least

        os.killpg(pgid, signal.SIGTERM)
        everything = children | {run.pid, jvm}
        _wait_for(lambda: not any(_alive(p) for p in everything), 90, "every process of the run to stop")
        assert run.wait(5) == 0
        assert not (var / "spark-engine.json").exists()
        assert _engine_processes(var) == {}
    finally:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        _kill_leftovers(var)
        log.close()


def test_sigterm_while_reports_and_an_export_start_the_engine_leaves_no_engine(tmp_path):
    var = tmp_path / "var"
    var.mkdir()
    env = _env(var)
    port = _free_port()
    log = (tmp_path / "run.log").open("wb")
    run = _start_run(var, env, port, log)
    try:
        queue = [*WITH_POSTGRES, sys.executable, "manage.py", "shell", "-c", QUEUE_TWO_REPORTS_AND_AN_EXPORT]
        subprocess.run(queue, cwd=ROOT, env=env, check=True, capture_output=True, timeout=120)
        # The worker's first `engine start` has spawned the engine (its own session, not yet
        # answering, not yet recorded): stop `make run` now, as Ctrl+C or a kill of its group does.
        _wait_for(lambda: _engine_processes(var), 120, "the worker to start the engine")
        os.killpg(run.pid, signal.SIGTERM)
        assert run.wait(120) == 0
        _wait_for(lambda: not _starters(var), 60, "every `engine start` to end")
        assert _engine_processes(var) == {}
        assert not (var / "spark-engine.json").exists()
    finally:
        try:
            os.killpg(run.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        _kill_leftovers(var)
        log.close()


def test_an_engine_whose_starter_was_killed_is_adopted_once_and_stopped(tmp_path, monkeypatch):
    var = tmp_path / "var"
    var.mkdir()
    env = _env(var)
    record = var / "spark-engine.json"
    engine_cli = [sys.executable, "-m", "spark_reports.engine"]
    try:
        # A worker killed in the middle of `start`: the engine's process exists, no record names it.
        starter = subprocess.Popen([*engine_cli, "start"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL)
        _wait_for(lambda: _engines(var), 60, "the engine's process")
        starter.kill()
        starter.wait()
        assert not record.exists()
        (orphan,) = _engines(var)
        # Two reports and the export ask for the engine at the same moment: one engine, the orphan.
        callers = [
            subprocess.Popen([*engine_cli, "start"], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
            for _ in range(3)
        ]
        outputs = [caller.communicate(timeout=240)[0] for caller in callers]
        port = json.loads(record.read_text())["port"]
        assert [caller.returncode for caller in callers] == [0, 0, 0]
        assert outputs == [f"spark engine 127.0.0.1:{port} already up (pid {orphan})\n"] * 3
        assert json.loads(record.read_text())["pid"] == orphan
        assert _engines(var) == {orphan} and engine.is_up("127.0.0.1", port)

        stopped = subprocess.run([*engine_cli, "stop"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
        assert (stopped.returncode, stopped.stdout) == (0, f"spark engine stopped (pid {orphan})\n"), stopped.stderr
        assert _engine_processes(var) == {}
        assert not record.exists()
    finally:
        _kill_leftovers(var)


def test_a_deployment_never_uses_another_deployments_engine(spark_engine, monkeypatch, tmp_path):
    # The tests' engine answers on SPARK_ENGINE_PORT; a second checkout (another var/) pointed there.
    other = tmp_path / "other-checkout" / "var"
    other.mkdir(parents=True)
    monkeypatch.setenv("MEDIATOR_VAR_DIR", str(other))
    with pytest.raises(config.ForeignEngine, match="not this deployment's"):
        config.build_session("another-checkout")
    with pytest.raises(RuntimeError, match="not as this deployment's engine"):
        engine.start(other)
    assert not (other / "spark-engine.json").exists()


def test_sigterm_to_a_starting_engine_start_ends_the_engine_it_started(tmp_path):
    var = tmp_path / "var"
    var.mkdir()
    starter = subprocess.Popen(
        [sys.executable, "-m", "spark_reports.engine", "start"],
        cwd=ROOT,
        env=_env(var),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_for(lambda: _engines(var), 60, "the engine's process")
        starter.terminate()  # a stop reaching the worker's group: the engine, in its own session, does not get it
        assert starter.wait(60) == 128 + signal.SIGTERM
        assert _engine_processes(var) == {}
        assert not (var / "spark-engine.json").exists()
    finally:
        starter.kill()
        _kill_leftovers(var)
