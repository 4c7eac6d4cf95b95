"""The warm Spark engine: one long-lived Spark Connect server that report jobs connect to.

    python -m spark_reports.engine serve    # foreground: a program of the production layout
    python -m spark_reports.engine start    # background, returns once it answers (the lazy start)
    python -m spark_reports.engine status   # exit 0 when it answers

A report used to start its own JVM and SparkSession (15-40 s on this box before reading a row).
The engine keeps one JVM warm, with the JDBC drivers on its classpath; each report is a thin
Connect client (`config.build_session`). The server listens on SPARK_ENGINE_HOST:SPARK_ENGINE_PORT
(default 127.0.0.1:15002, loopback only) and runs its executors on SPARK_ENGINE_MASTER
(default local[*]). Settings of the server: SPARK_DRIVER_MEMORY, SPARK_JDBC_JARS, SPARK_LOCAL_IP.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from .config import DEFAULT_JARS, ROOT, engine_address, env_int

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
    }
    cmd = [
        str(spark_submit()),
        "--class",
        SERVER_CLASS,
        "--name",
        "mediator-spark-engine",
        "--master",
        os.environ.get("SPARK_ENGINE_MASTER", "local[*]"),
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


def start_background(*, var_dir: Path, host: str, port: int, timeout: float = 120.0) -> int:
    """Start the engine detached from the caller (its own session: it outlives a worker restart),
    log to var_dir/spark-engine.log, and return its pid once the port answers."""
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
            return proc.pid
        if proc.poll() is not None:
            raise RuntimeError(f"the Spark engine exited with {proc.returncode} (see {var_dir / 'spark-engine.log'})")
        time.sleep(0.25)
    raise RuntimeError(f"the Spark engine did not answer on {host}:{port} within {timeout:.0f} s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["serve", "start", "status"])
    parser.add_argument("--var-dir", default=os.environ.get("MEDIATOR_VAR_DIR", str(ROOT / "var")))
    args = parser.parse_args(argv)
    host, port = engine_address()
    if args.action == "status":
        up = is_up(host, port)
        print(f"spark engine {host}:{port} {'up' if up else 'down'}")
        return 0 if up else 1
    if args.action == "start":
        if is_up(host, port):
            print(f"spark engine {host}:{port} already up")
            return 0
        pid = start_background(var_dir=Path(args.var_dir), host=host, port=port)
        print(f"spark engine {host}:{port} up (pid {pid})")
        return 0
    # serve: replace this process with the JVM, so a supervisor's signals reach it directly.
    cmd = server_command(host, port)
    os.execve(cmd[0], cmd, _env())  # noqa: S606
    return 1  # pragma: no cover


if __name__ == "__main__":
    sys.exit(main())
