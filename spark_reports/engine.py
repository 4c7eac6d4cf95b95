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
local[*]). Settings of the server: SPARK_DRIVER_MEMORY, SPARK_JDBC_JARS, SPARK_LOCAL_IP, and
SPARK_ENGINE_JAVA_OPTS (the driver's JIT options, default DRIVER_JIT_OPTS).

One engine per deployment: the server carries its deployment's name (config.DEPLOYMENT_CONF, from
its var/ folder), a client refuses an engine with another name (config.ForeignEngine), and `start`
starts its own engine rather than use one it does not recognise, so two checkouts on one machine
never share an engine. `stop` stops only processes whose command line names this deployment.

Single-flight: `start` holds an exclusive lock (var/spark-engine.lock, flock) from its first look to
the record, so callers starting at once (two reports and the export) get one engine. The engine runs
in a session of its own and outlives a starter killed mid-start, before the record names it; the
command line names the deployment and the port, so the next `start` adopts such an engine (it waits
for it to answer) and `stop` finds it: `stop` ends every process naming this deployment (each
engine's process group: the JVM and Spark's launcher), waits until the lock is free and none is
left, and only then removes the record. A `make run` (scripts/run_embedded.sh) names itself in
MEDIATOR_RUN_ID; its `stop` writes that name to var/spark-engine.stopped, and a `start` from the same
run is refused from then on (its worker, still finishing a task, must not start the engine again).
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from .config import DEFAULT_JARS, DEPLOYMENT_CONF, ROOT, deployment_id, engine_address, env_int, var_dir

RECORD = "spark-engine.json"
LOCK = "spark-engine.lock"  # held by `start` from its first look to the record (single-flight)
STOPPED = "spark-engine.stopped"  # the MEDIATOR_RUN_ID whose `stop` ran: its later starts are refused
RUN_ENV = "MEDIATOR_RUN_ID"
STOP_GRACE_S = 20.0
KILL_WAIT_S = 10.0  # after SIGKILL, how long `stop` waits for the processes to be gone
START_TIMEOUT_S = 120.0
PORT_CONF = "spark.connect.grpc.binding.port"

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
# The driver JVM's JIT: C1 only. Its code is compiled sooner and at less CPU than C2's: on the
# 2-core box the engine started in ~0.35x the time, its first report in ~0.3x, and warm reports
# were not slower (~0.5x: a report's Spark work is mostly freshly generated code run a few times,
# where C2's compiling competes for the cores; docs/benchmarks.md). SPARK_ENGINE_JAVA_OPTS
# replaces it ("" for the JVM's default tiered JIT).
DRIVER_JIT_OPTS = "-XX:TieredStopAtLevel=1"


def spark_submit() -> Path:
    """The spark-submit of the pinned pyspark wheel (the Connect server jar ships inside it)."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent / "bin" / "spark-submit"


def server_command(host: str, port: int) -> list[str]:
    """spark-submit argv for the Connect server (no secrets: the database URL travels per query)."""
    log4j = ROOT / "spark_reports" / "log4j2.properties"
    java_opts = f"-Dlog4j2.configurationFile=file:{log4j} -Dlog4j.configurationFile=file:{log4j}"
    jit = os.environ.get("SPARK_ENGINE_JAVA_OPTS", DRIVER_JIT_OPTS).strip()
    local_ip = os.environ.get("SPARK_LOCAL_IP", "127.0.0.1")
    confs = {
        "spark.connect.grpc.binding.address": host,
        "spark.connect.grpc.binding.port": str(port),
        "spark.driver.bindAddress": local_ip,
        "spark.driver.host": local_ip,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.extraJavaOptions": f"{java_opts} {jit}".strip(),
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


@dataclass(frozen=True)
class EngineProcess:
    """A live process whose command line names this deployment's engine: the JVM, or on its way to
    it (spark-submit's scripts, Spark's launcher JVM)."""

    pid: int
    ppid: int
    pgid: int
    port: int  # the Connect port its command line names (0: none)


def engine_processes() -> list[EngineProcess]:
    """Every live (not zombie) process of this deployment's engines, from /proc."""
    mark = f"{DEPLOYMENT_CONF}={deployment_id()}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if mark not in argv or fields[0] == "Z":
            continue
        port = next((a.split(b"=", 1)[1] for a in argv if a.startswith(f"{PORT_CONF}=".encode())), b"0")
        found.append(EngineProcess(int(entry.name), int(fields[1]), int(fields[2]), int(port or 0)))
    return found


def _signal(proc: EngineProcess, sig: int) -> None:
    """`sig` to the process, to its whole process group when it leads one (an engine started by
    `start` leads its session: the JVM and the launcher Spark runs before it)."""
    try:
        if proc.pgid == proc.pid:
            os.killpg(proc.pid, sig)
        else:
            os.kill(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _end(var_dir: Path, which: Callable[[EngineProcess], bool], grace: float, *, until_unlocked: bool) -> set[int]:
    """TERM every engine process `which` selects (KILL after `grace` seconds) until none is left
    (and, with `until_unlocked`, no `start` holds the lock, so none can be on its way); the pids
    ended (the engines, not their launchers). A starter whose JVM dies gives up and frees the lock
    (start_background)."""
    sent: dict[int, int] = {}
    seen: dict[int, EngineProcess] = {}
    deadline = time.monotonic() + grace
    with _lock_file(var_dir) as fd:
        locked = not until_unlocked
        while True:
            procs = [p for p in engine_processes() if which(p)]
            sig = signal.SIGKILL if time.monotonic() > deadline else signal.SIGTERM
            for proc in procs:
                seen.setdefault(proc.pid, proc)
                if sent.get(proc.pid) != sig:
                    _signal(proc, sig)
                    sent[proc.pid] = sig
            locked = locked or _try_lock(fd)
            if locked and not procs:
                return {p.pid for p in _roots(list(seen.values()))}
            if time.monotonic() > deadline + KILL_WAIT_S:
                left = ", ".join(str(p.pid) for p in procs) or "a start holding the lock"
                raise RuntimeError(f"the Spark engine did not stop within {grace + KILL_WAIT_S:.0f} s ({left})")
            time.sleep(0.1)


@contextmanager
def _lock_file(var_dir: Path) -> Iterator[int]:
    """The lock file's descriptor; closing it releases the lock (not inherited by the engine)."""
    var_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(var_dir / LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        yield fd
    finally:
        os.close(fd)


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


@contextmanager
def _start_lock(var_dir: Path, timeout: float) -> Iterator[None]:
    """This deployment's start lock, waited for at most `timeout` seconds (a holder is bounded by
    its own start timeout)."""
    with _lock_file(var_dir) as fd:
        deadline = time.monotonic() + timeout
        while not _try_lock(fd):
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"another start of this deployment's Spark engine held {var_dir / LOCK} for {timeout:.0f} s"
                )
            time.sleep(0.1)
        yield


def _roots(procs: list[EngineProcess]) -> list[EngineProcess]:
    """The engines among `procs`: the processes whose parent is not one of them."""
    pids = {p.pid for p in procs}
    return [p for p in procs if p.ppid not in pids]


def _adopt(var_dir: Path, host: str, fixed_port: int, timeout: float) -> tuple[int, int] | None:
    """An engine of this deployment that no record names (its starter was killed before writing
    one): wait for it to answer on the port its command line names, record it and return (pid,
    port); end the others, and any that dies or does not answer in time."""
    deadline = time.monotonic() + timeout
    keep: tuple[int, int] | None = None
    for proc in sorted(_roots(engine_processes()), key=lambda p: p.pid):
        if keep is None and proc.port and fixed_port in (0, proc.port):
            while names_this_deployment(proc.pid) and time.monotonic() < deadline:
                if is_up(host, proc.port):
                    keep = (proc.pid, proc.port)
                    break
                time.sleep(0.25)
    doomed = {p.pgid for p in _roots(engine_processes()) if keep is None or p.pid != keep[0]}
    if doomed:
        _end(var_dir, lambda p: p.pgid in doomed, STOP_GRACE_S, until_unlocked=False)
    if keep is not None:
        _write_record(var_dir, host, keep[1], keep[0])
    return keep


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


def start(var_dir: Path, timeout: float = START_TIMEOUT_S) -> tuple[int, int, bool]:
    """Start this deployment's engine unless it is up, one caller at a time; (pid, port, already
    up). An engine no record names is adopted (_adopt)."""
    with _start_lock(var_dir, timeout):
        _refuse_when_stopped(var_dir)
        host, port = engine_address()  # after the lock: a caller before us may have just started it
        if is_ours(var_dir, host, port):
            return int(_read_record(var_dir)["pid"]), port, True
        fixed = os.environ.get("SPARK_ENGINE_PORT", "").strip()
        adopted = _adopt(var_dir, host, port if fixed else 0, timeout)
        if adopted is not None:
            return adopted[0], adopted[1], True
        if fixed:
            if is_up(host, port):
                raise RuntimeError(f"{host}:{port} (SPARK_ENGINE_PORT) answers, but not as this deployment's engine")
        else:
            port = free_port(host)
        _refuse_when_stopped(var_dir)  # a stop may have ended the engine we waited for in _adopt
        return start_background(var_dir=var_dir, host=host, port=port, timeout=timeout), port, False


def _refuse_when_stopped(var_dir: Path) -> None:
    """A start on behalf of a `make run` whose `stop` has run (MEDIATOR_RUN_ID) is refused."""
    run = os.environ.get(RUN_ENV, "").strip()
    if run and _read_text(var_dir / STOPPED) == run:
        raise RuntimeError("this deployment's Spark engine was stopped by the make run that asks (it is stopping)")


def stop(var_dir: Path, grace: float = STOP_GRACE_S) -> str:
    """Stop every engine of this deployment (TERM, then KILL after `grace` seconds), recorded or
    not, and wait until none is left and no start is under way; never another process."""
    run = os.environ.get(RUN_ENV, "").strip()
    if run:
        var_dir.mkdir(parents=True, exist_ok=True)
        (var_dir / STOPPED).write_text(run)
    ended = _end(var_dir, lambda p: True, grace, until_unlocked=True)
    (var_dir / RECORD).unlink(missing_ok=True)
    if not ended:
        return "spark engine not running"
    return f"spark engine stopped (pid {', '.join(str(p) for p in sorted(ended))})"


def _read_text(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def start_background(*, var_dir: Path, host: str, port: int, timeout: float = START_TIMEOUT_S) -> int:
    """Start the engine detached from the caller (its own session: it outlives a worker restart;
    `stop` ends it), log to var_dir/spark-engine.log, record its port and pid in
    var_dir/spark-engine.json, and return its pid once the port answers. Interrupted before that
    (SIGTERM in `engine start`, Ctrl+C), it ends the engine it started before passing it on."""
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
    deadline = time.monotonic() + timeout
    try:
        (var_dir / "spark-engine.pid").write_text(str(proc.pid))
        while time.monotonic() < deadline:
            if is_up(host, port):
                _write_record(var_dir, host, port, proc.pid)
                return proc.pid
            if proc.poll() is not None:
                raise RuntimeError(
                    f"the Spark engine exited with {proc.returncode} (see {var_dir / 'spark-engine.log'})"
                )
            time.sleep(0.25)
    except BaseException:
        _end_started(proc)
        raise
    _end_started(proc)
    raise RuntimeError(f"the Spark engine did not answer on {host}:{port} within {timeout:.0f} s")


def _end_started(proc: subprocess.Popen) -> None:
    """End an engine this process started and will not record (its session: the JVM and Spark's
    launcher). A second SIGTERM or Ctrl+C waits until that is done (blocked meanwhile)."""
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
    try:
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


def _interrupt(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


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
        try:
            print(stop(var))
        except RuntimeError as exc:
            print(f"spark engine: {exc}", file=sys.stderr)
            return 1
        return 0
    if args.action == "start":
        # SIGTERM (the caller's stop, to its process group) interrupts the start like Ctrl+C:
        # start_background ends the engine it started rather than leave it to nobody.
        signal.signal(signal.SIGTERM, _interrupt)
        try:
            pid, port, already = start(var)
        except RuntimeError as exc:
            print(exc, file=sys.stderr)
            return 1
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
