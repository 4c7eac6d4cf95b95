"""What `make run` starts belongs to it: the run script (scripts/run_embedded.sh) as a real process
in its own process group, with the embedded PostgreSQL (scripts/with_postgres.py), Daphne, the Celery worker (embedded beat) and this deployment's
Spark engine (started as the worker starts it, in its own session, on a port of its own); SIGTERM
to the group, and every one of them is gone. And a deployment never uses another's engine."""

from __future__ import annotations

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


def test_sigterm_to_the_run_scripts_group_stops_every_child_and_the_engine(tmp_path):
    var = tmp_path / "var"
    var.mkdir()
    drop = ("SPARK_", "DJANGO_SETTINGS", "TEST_DATABASE", "DATABASE_URL")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env |= {"MEDIATOR_VAR_DIR": str(var), "PYTHONPATH": str(ROOT), "MEDIATOR_STOP_GRACE_S": "20"}
    # The embedded PostgreSQL of this var/, as `make run` has it (scripts/with_postgres.py).
    with_postgres = [sys.executable, "scripts/with_postgres.py", "--"]
    migrate = [*with_postgres, sys.executable, "manage.py", "migrate", "--noinput", "-v0"]
    subprocess.run(migrate, cwd=ROOT, env=env, check=True)
    port = _free_port()
    log = (tmp_path / "run.log").open("wb")
    run = subprocess.Popen(  # noqa: S603
        [*with_postgres, "scripts/run_embedded.sh", "127.0.0.1", str(port)],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group, as `make run` has in a terminal
    )
    pgid = run.pid
    try:
        _wait_for(lambda: engine.is_up("127.0.0.1", port), 60, "Daphne")
        _wait_for(
            lambda: any(b"celery" in Path(f"/proc/{p}/cmdline").read_bytes() for p in _group(pgid) if _alive(p)),
            60,
            "the Celery worker",
        )
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
    finally:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        record = var / "spark-engine.json"
        if record.exists():
            pid = json.loads(record.read_text()).get("pid")
            if pid and _alive(pid):
                os.kill(pid, signal.SIGKILL)
        log.close()


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
