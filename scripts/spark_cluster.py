"""A Spark standalone cluster on this machine, from the scripts the pyspark wheel ships (bin/spark-class):
a master, N workers and the Spark Connect server of the usage jobs attached to the master.

    python scripts/spark_cluster.py start --dir var/spark-cluster [--workers 2]   # prints the addresses as JSON
    python scripts/spark_cluster.py stop --dir var/spark-cluster

Then point the product at it: SPARK_REMOTE=sc://127.0.0.1:<connect port> in the environment of the
Celery worker that runs the reports and the export (docs/usage.md, "On a cluster"). On your own
cluster, start its Connect server the same way (`python -m spark_reports.engine serve` with
SPARK_ENGINE_MASTER=spark://your-master:7077, SPARK_ENGINE_HOST set to an address the workers and
the mediator reach) or use the cluster's own, with the JDBC driver jars on its --jars.
`make spark-cluster-test` starts one, runs a report on it with a worker killed mid-report, and
compares the results with local mode's (tests/usage/test_spark_cluster.py).
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
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from spark_reports import engine  # noqa: E402 - after the repository is on the path

STATE = "cluster.json"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _spark_class() -> str:
    return str(engine.spark_submit().parent / "spark-class")


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    env.pop("SPARK_REMOTE", None)
    # The master and the workers only coordinate: the C1 compiler alone and the serial collector
    # halve the CPU they take to start on a small machine (the executors keep the JVM's defaults).
    env.setdefault("SPARK_DAEMON_JAVA_OPTS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
    return env


def _spawn(argv: list[str], log: Path) -> int:
    with log.open("ab") as out:
        proc = subprocess.Popen(  # noqa: S603 - argv built here, no shell
            argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=_env(), start_new_session=True
        )
    return proc.pid


def master_state(ui_port: int) -> dict:
    """The master's own account of the cluster (its web UI's /json/: workers, applications)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/json/", timeout=2) as resp:  # noqa: S310 - loopback
            return json.loads(resp.read())
    except OSError:
        return {}


def alive_workers(ui_port: int) -> int:
    return int(master_state(ui_port).get("aliveworkers", 0))


def start(directory: Path, workers: int, worker_memory: str, timeout: float = 180.0) -> dict:
    directory.mkdir(parents=True, exist_ok=True)
    port, ui = _free_port(), _free_port()
    master = f"spark://127.0.0.1:{port}"
    state: dict = {"master": master, "master_ui_port": ui, "pids": {}}
    state["pids"]["master"] = _spawn(
        [_spark_class(), "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
         "--webui-port", str(ui)],
        directory / "master.log",
    )  # fmt: skip
    deadline = time.monotonic() + timeout
    while not engine.is_up("127.0.0.1", port):
        if time.monotonic() > deadline:
            raise RuntimeError(f"the master did not answer (see {directory / 'master.log'})")
        time.sleep(0.25)
    for n in range(1, workers + 1):
        work = directory / f"worker-{n}"
        work.mkdir(exist_ok=True)
        state["pids"][f"worker-{n}"] = _spawn(
            [_spark_class(), "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--cores", "1",
             "--memory", worker_memory, "--webui-port", str(_free_port()), "--work-dir", str(work), master],
            directory / f"worker-{n}.log",
        )  # fmt: skip
    while alive_workers(ui) < workers:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{alive_workers(ui)} of {workers} workers registered (see {directory})")
        time.sleep(0.25)
    connect = _free_port()
    # The Connect server on this master, named after this directory (not the checkout's deployment,
    # whose `engine stop`, at the end of a `make run`, ends every engine naming it); the caller's own
    # environment (a test run's) is left as it was.
    swapped = {"SPARK_ENGINE_MASTER": master, "MEDIATOR_VAR_DIR": str(directory.resolve())}
    before = {name: os.environ.get(name) for name in swapped}
    os.environ.update(swapped)
    try:
        state["pids"]["connect"] = engine.start_background(var_dir=directory, host="127.0.0.1", port=connect)
    finally:
        for name, value in before.items():
            if value is None:
                del os.environ[name]
            else:
                os.environ[name] = value
    state["connect"] = f"sc://127.0.0.1:{connect}"
    (directory / STATE).write_text(json.dumps(state))
    return state


def _descendants(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True, check=False)
    found = []
    for child in (int(p) for p in out.stdout.split()):
        found += [child, *_descendants(child)]
    return found


def kill_tree(pid: int, sig: int = signal.SIGKILL) -> None:
    """`pid` and every process under it (a worker and the executors it launched)."""
    for p in [pid, *_descendants(pid)]:
        try:
            os.kill(p, sig)
        except ProcessLookupError:
            pass


def stop(directory: Path) -> None:
    try:
        state = json.loads((directory / STATE).read_text())
    except (OSError, ValueError):
        return
    for pid in state["pids"].values():
        kill_tree(pid, signal.SIGTERM)
    deadline = time.monotonic() + 20
    for pid in state["pids"].values():
        while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        kill_tree(pid)
    (directory / STATE).unlink(missing_ok=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["start", "stop"])
    parser.add_argument("--dir", default=str(ROOT / "var" / "spark-cluster"))
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--worker-memory", default="1g")
    args = parser.parse_args()
    if args.action == "start":
        print(json.dumps(start(Path(args.dir), args.workers, args.worker_memory)))
    else:
        stop(Path(args.dir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
