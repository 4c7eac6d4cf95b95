"""Real server processes for end-to-end tests: Daphne (and later Celery) on free ports,
pointed at the pytest-django test database so they see what the test commits."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from django.conf import settings
from django.db import connection

from tests.support import clock

ROOT = Path(__file__).resolve().parents[2]
# The Redis scripts/ensure_services.sh starts on a Unix socket only (make test runs it first).
REDIS_SOCKET = ROOT / "var" / "redis" / "redis.sock"


def redis_socket_url(db: int) -> str:
    """REDIS_URL of that Redis, database `db`, in redis-py's form (docs/serving.md)."""
    assert REDIS_SOCKET.is_socket(), f"no Redis on {REDIS_SOCKET}: run scripts/ensure_services.sh"
    return f"unix://{REDIS_SOCKET}?db={db}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_database_url() -> str:
    """URL of the database the current test run uses (the pytest-django test DB)."""
    s = connection.settings_dict
    return f"postgresql://{s['USER'] or 'postgres'}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"


def terminate_backends(pids: list[int]) -> None:
    """End these PostgreSQL backends of the test database (pg_terminate_backend, as a restart
    would) and wait up to 10 s until PostgreSQL lists none of them."""
    import psycopg

    with psycopg.connect(test_database_url(), autocommit=True) as admin:
        for pid in pids:
            admin.execute("SELECT pg_terminate_backend(%s)", [pid])
        deadline = time.time() + 10
        while (
            time.time() < deadline
            and admin.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s)", [pids]).fetchone()[0]
        ):
            time.sleep(0.05)


def server_env(extra: dict | None = None) -> dict:
    env = dict(os.environ)
    env.update(
        {
            "DJANGO_SETTINGS_MODULE": "mediator_project.settings_test",
            "TEST_DATABASE_URL": test_database_url(),
            "PYTHONPATH": str(ROOT),
            "PYTHONUNBUFFERED": "1",
            # The test's own secrets, whatever var/ the server is given: tenant keys sealed here must
            # unseal there (a var/ of its own would generate other secrets).
            "MEDIATOR_DEPLOYMENT_KEY": settings.MEDIATOR_DEPLOYMENT_KEY,
            "DJANGO_SECRET_KEY": settings.SECRET_KEY,
            "USAGE_METERING_MODE": os.environ.get("USAGE_METERING_MODE", "buffered"),
            # The sockets' database threads, as production has them (settings_test keeps them off).
            "MEDIATOR_WS_DB_THREADS": os.environ.get("MEDIATOR_WS_DB_THREADS", "8"),
        }
    )
    if env.get(clock.SHIFT_ENV):  # the test process's clock is shifted: so is the server's
        env["PYTHONPATH"] = f"{clock.SITE_DIR}{os.pathsep}{ROOT}"
    env.update(extra or {})
    return env


@dataclass
class Server:
    port: int
    proc: subprocess.Popen
    log_path: Path
    env: dict = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/ws"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)

    def kill9(self) -> None:
        self.stop(signal.SIGKILL)


def start_daphne(
    tmp_path: Path,
    *,
    port: int | None = None,
    env: dict | None = None,
    wait_host: str | None = None,
    args: tuple[str, ...] = (),
    log_name: str | None = None,
) -> Server:
    """Start Daphne as every layout does (`python -m mediator_project.socket_server`, with `args`)
    and wait until /health answers."""
    port = port or free_port()
    log_path = tmp_path / (log_name or f"daphne-{port}.log")
    full_env = server_env(env)
    proc = subprocess.Popen(
        [sys.executable, "-m", "mediator_project.socket_server", "-b", "127.0.0.1", "-p", str(port), *args],
        cwd=ROOT,
        env=full_env,
        stdout=log_path.open("wb"),
        stderr=subprocess.STDOUT,
    )
    server = Server(port=port, proc=proc, log_path=log_path, env=full_env)
    deadline = time.time() + 30
    headers = {"Host": wait_host} if wait_host else {}
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"daphne exited early:\n{server.log()}")
        try:
            if httpx.get(server.url + "/health", timeout=1, headers=headers).status_code in (200, 503):
                return server
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    server.stop()
    raise RuntimeError(f"daphne did not start:\n{server.log()}")


@dataclass
class CeleryWorker:
    """A real `celery worker` process on a Redis broker, consuming one private queue."""

    broker_url: str
    queue: str
    proc: subprocess.Popen
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def send(self, task_name: str, **kwargs) -> str:
        """Publish `task_name(**kwargs)` to this worker's queue; returns the task id."""
        from mediator_project.celery import app

        with app.connection_for_write(self.broker_url) as conn:
            return app.send_task(task_name, kwargs=kwargs, queue=self.queue, connection=conn).id

    def barrier(self, timeout: float = 30) -> None:
        """Return once every task this worker was given before now, and due by now, has run: a no-op
        (Celery's built-in `celery.accumulate`) with an ETA of now runs after every earlier task of
        the worker's one process (plain tasks run as they arrive, ETA tasks in ETA order)."""
        from mediator_project.celery import app

        with app.connection_for_write(self.broker_url) as conn:
            task_id = app.send_task("celery.accumulate", args=[0], queue=self.queue, countdown=0, connection=conn).id
        deadline = time.monotonic() + timeout
        while f"celery.accumulate[{task_id}] succeeded" not in self.log():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"celery worker did not run the barrier:\n{self.log()}")
            time.sleep(0.05)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)


def start_celery_worker(
    tmp_path: Path, *, redis_db: int = 15, env: dict | None = None, beat: bool = False
) -> CeleryWorker:
    """Start `celery -A mediator_project worker` on redis://127.0.0.1:6379/<redis_db>, pointed at the
    pytest test DB, and wait until it is ready. Its queue name is unique, so parallel test runs
    sharing the Redis database never take each other's tasks."""
    queue = f"test-{os.getpid()}-{free_port()}"
    broker = f"redis://127.0.0.1:6379/{redis_db}"
    log_path = tmp_path / f"celery-{queue}.log"
    # Tasks that re-queue themselves (the DIDComm v1 outbound retry, a wake's resend) go to this
    # worker's queue too.
    full_env = server_env(
        {"CELERY_BROKER_URL": broker, "MEDIATOR_DIDCOMM_OUTBOUND_QUEUE": queue, "PUSH_QUEUE": queue, **(env or {})}
    )
    cmd = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "mediator_project",
        "worker",
        "--pool",
        "solo",
        "--concurrency",
        "1",
        "-Q",
        queue,
        "-n",
        f"{queue}@%h",
        "--without-gossip",
        "--without-mingle",
        "--without-heartbeat",
        "-l",
        "info",
    ]
    if beat:
        cmd += ["-B", "-s", str(tmp_path / f"beat-{queue}")]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=full_env, stdout=log_path.open("wb"), stderr=subprocess.STDOUT)
    worker = CeleryWorker(broker_url=broker, queue=queue, proc=proc, log_path=log_path)
    deadline = time.time() + 40
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"celery worker exited early:\n{worker.log()}")
        if " ready." in worker.log():
            return worker
        time.sleep(0.2)
    worker.stop()
    raise RuntimeError(f"celery worker did not start:\n{worker.log()}")


@dataclass
class RedisServer:
    """A private `redis-server` a test may stop (an outage) without touching the shared ones."""

    port: int
    proc: subprocess.Popen

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def stop(self) -> None:
        """Stop it and wait until its port refuses connections."""
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)


def start_redis(tmp_path: Path, *options: str, port: int | None = None) -> RedisServer:
    """`redis-server` on `port` (default a free one), without persistence, once it answers PING;
    `options` are more of its command-line options (e.g. `--replicaof 127.0.0.1 PORT`)."""
    port = port or free_port()
    proc = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", *options],
        cwd=tmp_path,
        stdout=(tmp_path / f"redis-{port}.log").open("wb"),
        stderr=subprocess.STDOUT,
    )
    return _answering(RedisServer(port=port, proc=proc))


def start_sentinel(tmp_path: Path, master: RedisServer, name: str, down_after_ms: int = 300) -> RedisServer:
    """A Redis Sentinel on a free port monitoring `master` as `name`, alone (quorum 1): it
    promotes a replica `down_after_ms` after the master stops answering. Its configuration file
    is its own (a sentinel rewrites it)."""
    port = free_port()
    conf = tmp_path / f"sentinel-{port}.conf"
    conf.write_text(
        f"port {port}\nbind 127.0.0.1\ndir {tmp_path}\n"
        f"sentinel monitor {name} 127.0.0.1 {master.port} 1\n"
        f"sentinel down-after-milliseconds {name} {down_after_ms}\n"
        f"sentinel failover-timeout {name} 5000\n"
    )
    proc = subprocess.Popen(
        ["redis-server", str(conf), "--sentinel"],
        cwd=tmp_path,
        stdout=(tmp_path / f"sentinel-{port}.log").open("wb"),
        stderr=subprocess.STDOUT,
    )
    return _answering(RedisServer(port=port, proc=proc))


def _answering(server: RedisServer) -> RedisServer:
    import redis

    deadline = time.time() + 10
    while time.time() < deadline:
        try:
            if redis.Redis(port=server.port, socket_connect_timeout=1).ping():
                return server
        except redis.ConnectionError:
            time.sleep(0.05)
    server.stop()
    raise RuntimeError("redis-server did not start")
