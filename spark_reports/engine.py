"""The warm Spark engine: one long-lived Spark Connect server that report jobs connect to.

    python -m spark_reports.engine serve    # foreground: a program of the production layout
    python -m spark_reports.engine start    # background, returns once it answers (the lazy start)
    python -m spark_reports.engine status   # exit 0 when this deployment's engine answers
    python -m spark_reports.engine stop     # stop this deployment's engine (make run, on its way out)

A JVM and a SparkSession take tens of seconds to start on a small box, before reading a row: the
engine keeps one JVM warm, with the JDBC drivers on its classpath; each report is a thin
Connect client (`config.build_session`). The server listens on SPARK_ENGINE_HOST (default
127.0.0.1, loopback only) and SPARK_ENGINE_PORT when set, else on a free port it records with its
pid in MEDIATOR_VAR_DIR/spark-engine.json, and runs its executors on SPARK_ENGINE_MASTER (default
local[*]). Settings of the server: SPARK_DRIVER_MEMORY, SPARK_JDBC_JARS, SPARK_LOCAL_IP.

One engine per deployment: the server carries its deployment's name (config.DEPLOYMENT_CONF, from
its var/ folder), a client refuses an engine with another name (config.ForeignEngine), and `start`
starts its own engine rather than use one it does not recognise, so two checkouts on one machine
never share an engine. `stop` stops only a process whose command line names this deployment.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from .config import DEFAULT_JARS, DEPLOYMENT_CONF, ROOT, deployment_id, engine_address, env_int, var_dir

RECORD = "spark-engine.json"
STOP_GRACE_S = 20.0

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"


def spark_submit() -> Path:
    """The spark-submit of the pinned pyspark wheel (the Connect server jar ships inside it)."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent / "bin" / "spark-submit"


def server_command(host: str, port: int) -> list[str]:
    """spark-submit argv for the Connect server (no secrets: the database URL travels per query)."""
    log4j = ROOT / "spark_reports" / "log4j2.properties"
    java_opts = f"-Dlog4j2.configurationFile=file:{log4j} -Dlog4j.configurationFile=file:{log4j}"
    local_ip = os.environ.get("SPARK_LOCAL_IP", "127.0.0.1")
    confs = {
        "spark.connect.grpc.binding.address": host,
        "spark.connect.grpc.binding.port": str(port),
        "spark.driver.bindAddress": local_ip,
        "spark.driver.host": local_ip,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.extraJavaOptions": java_opts,
        "spark.executor.extraJavaOptions": java_opts,
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.adaptive.enabled": "false",
        "spark.sql.shuffle.partitions": str(env_int("SPARK_SHUFFLE_PARTITIONS", 4)),
        # Task progress streamed to the job (the run page's "tasks done of total") every 0.2 s, as
        # the job prints it (the default, 2 s, reported nothing for the operations of a small
        # report on a warm engine: they finish sooner).
        "spark.connect.progress.reportInterval": "200ms",
        # A finished client's session and cached extract are released after 5 minutes idle.
        "spark.connect.session.manager.defaultSessionTimeout": "5min",
        # Whose engine this is: clients check it (config.build_session), `stop` looks for it.
        DEPLOYMENT_CONF: deployment_id(),
    }
    master = os.environ.get("SPARK_ENGINE_MASTER", "local[*]")
    if not master.startswith("local"):
        # Executors on a cluster's workers (scripts/spark_cluster.py, or the user's own).
        confs["spark.executor.memory"] = os.environ.get("SPARK_EXECUTOR_MEMORY", "512m")
    cmd = [
        str(spark_submit()),
        "--class",
        SERVER_CLASS,
        "--name",
        "mediator-spark-engine",
        "--master",
        master,
        "--driver-memory",
        os.environ.get("SPARK_DRIVER_MEMORY", "1g"),
        "--jars",
        os.environ.get("SPARK_JDBC_JARS", DEFAULT_JARS),
    ]
    for key, value in confs.items():
        cmd += ["--conf", f"{key}={value}"]
    return cmd


def is_up(host: str, port: int, timeout: float = 1.0) -> bool:
    """True when something accepts connections on the engine's port."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def wait_up(host: str, port: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if is_up(host, port):
            return True
        time.sleep(0.25)
    return False


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # The server must not pick up a client-side remote (it would refuse to start a local JVM).
    env.pop("SPARK_REMOTE", None)
    env.pop("SPARK_CONNECT_MODE_ENABLED", None)
    return env


def free_port(host: str) -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def _write_record(var_dir: Path, host: str, port: int, pid: int) -> None:
    record = {"host": host, "port": port, "pid": pid, "deployment": deployment_id()}
    tmp = var_dir / (RECORD + ".tmp")
    tmp.write_text(json.dumps(record))
    tmp.replace(var_dir / RECORD)


def _read_record(var_dir: Path) -> dict:
    try:
        return json.loads((var_dir / RECORD).read_text())
    except (OSError, ValueError):
        return {}


def names_this_deployment(pid: int) -> bool:
    """True when process `pid` is alive and is this deployment's engine (its command line says so)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return f"{DEPLOYMENT_CONF}={deployment_id()}".encode() in cmdline


def is_ours(var_dir: Path, host: str, port: int) -> bool:
    """This deployment's engine is the one answering on host:port."""
    record = _read_record(var_dir)
    return (
        bool(port)
        and record.get("port") == port
        and record.get("deployment") == deployment_id()
        and names_this_deployment(int(record.get("pid") or 0))
        and is_up(host, port)
    )


def start(var_dir: Path) -> tuple[int, int, bool]:
    """Start this deployment's engine unless it is up; (pid, port, already up)."""
    host, port = engine_address()
    if is_ours(var_dir, host, port):
        return int(_read_record(var_dir)["pid"]), port, True
    if os.environ.get("SPARK_ENGINE_PORT", "").strip():
        if is_up(host, port):
            raise RuntimeError(f"{host}:{port} (SPARK_ENGINE_PORT) answers, but not as this deployment's engine")
    else:
        port = free_port(host)
    return start_background(var_dir=var_dir, host=host, port=port), port, False


def stop(var_dir: Path, grace: float = STOP_GRACE_S) -> str:
    """Stop this deployment's engine (TERM, then KILL after `grace` seconds); never another process."""
    record = _read_record(var_dir)
    pid = int(record.get("pid") or 0)
    if not pid or not names_this_deployment(pid):
        (var_dir / RECORD).unlink(missing_ok=True)
        return "spark engine not running"
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while names_this_deployment(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if names_this_deployment(pid):
        os.kill(pid, signal.SIGKILL)
        while names_this_deployment(pid):
            time.sleep(0.05)
    (var_dir / RECORD).unlink(missing_ok=True)
    return f"spark engine stopped (pid {pid})"


def start_background(*, var_dir: Path, host: str, port: int, timeout: float = 120.0) -> int:
    """Start the engine detached from the caller (its own session: it outlives a worker restart;
    `stop` ends it), log to var_dir/spark-engine.log, record its port and pid in
    var_dir/spark-engine.json, and return its pid once the port answers."""
    var_dir.mkdir(parents=True, exist_ok=True)
    with (var_dir / "spark-engine.log").open("ab") as log:
        proc = subprocess.Popen(  # noqa: S603 - argv built above, no shell
            server_command(host, port),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=_env(),
            start_new_session=True,
        )
    (var_dir / "spark-engine.pid").write_text(str(proc.pid))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if is_up(host, port):
            _write_record(var_dir, host, port, proc.pid)
            return proc.pid
        if proc.poll() is not None:
            raise RuntimeError(f"the Spark engine exited with {proc.returncode} (see {var_dir / 'spark-engine.log'})")
        time.sleep(0.25)
    raise RuntimeError(f"the Spark engine did not answer on {host}:{port} within {timeout:.0f} s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["serve", "start", "status", "stop"])
    parser.add_argument("--var-dir", default=str(var_dir()))
    args = parser.parse_args(argv)
    var = Path(args.var_dir)
    host, port = engine_address()
    if args.action == "status":
        up = is_ours(var, host, port)
        print(f"spark engine {host}:{port} {'up' if up else 'down'}")
        return 0 if up else 1
    if args.action == "stop":
        print(stop(var))
        return 0
    if args.action == "start":
        pid, port, already = start(var)
        print(f"spark engine {host}:{port} {'already up' if already else 'up'} (pid {pid})")
        return 0
    # serve: replace this process with the JVM (same pid), so a supervisor's signals reach it directly.
    if not os.environ.get("SPARK_ENGINE_PORT", "").strip():
        port = free_port(host)
    var.mkdir(parents=True, exist_ok=True)
    _write_record(var, host, port, os.getpid())
    cmd = server_command(host, port)
    os.execve(cmd[0], cmd, _env())  # noqa: S606
    return 1  # pragma: no cover


if __name__ == "__main__":
    sys.exit(main())
