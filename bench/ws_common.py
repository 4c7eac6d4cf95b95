"""Shared setup for the /ws benchmarks: a dedicated PostgreSQL database, one tenant, a Daphne
process started with the production settings module, identities registered over HTTP, and
many authenticated sockets opened with the client library.

Everything runs on 127.0.0.1. Rate limits are switched off for the benchmark tenant and process
(the benchmark opens thousands of sockets from one address).
"""

from __future__ import annotations

import asyncio
import os
import resource
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from bench.pg import PG_ADMIN_URL, db_url

ROOT = Path(__file__).resolve().parents[1]
BENCH_DB = os.environ.get("BENCH_WS_DB", "mediator_bench_ws")
BENCH_DB_URL = db_url(BENCH_DB)
BENCH_REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/12")
VAR_DIR = ROOT / "var" / "bench-ws"
CONNECT_TIMEOUT_S = int(os.environ.get("BENCH_WS_CONNECT_TIMEOUT_S", "60"))


def raise_nofile() -> int:
    """Raise the open-file limit to the hard limit (each socket is a descriptor on both ends)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_env(*, redis: bool, extra: dict | None = None) -> dict:
    env = dict(os.environ)
    env.update(
        {
            "DJANGO_SETTINGS_MODULE": "mediator_project.settings",
            "DATABASE_URL": BENCH_DB_URL,
            "DJANGO_DEBUG": "0",
            "LOG_LEVEL": "WARNING",
            "REDIS_URL": BENCH_REDIS_URL if redis else "",
            "MEDIATOR_VAR_DIR": str(VAR_DIR),
            "MEDIATOR_RATE_LIMIT_PER_DID": "0",
            "MEDIATOR_RATE_LIMIT_PER_IP": "0",
            "MEDIATOR_WS_CONNECT_PER_IP": "0",
            "MEDIATOR_WS_AUTH_PER_IP": "0",
            "PYTHONPATH": str(ROOT),
            "PYTHONUNBUFFERED": "1",
        }
    )
    env.update(extra or {})
    return env


def prepare_database() -> None:
    """Create the benchmark database if needed and migrate it."""
    import psycopg

    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [BENCH_DB]).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{BENCH_DB}"')
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput", "-v0"],
        cwd=ROOT,
        env=server_env(redis=False),
        check=True,
    )


def django_setup() -> None:
    """Use Django in this process (to create the tenant) against the benchmark database."""
    for k, v in server_env(redis=False).items():
        if k in ("DJANGO_SETTINGS_MODULE", "DATABASE_URL", "DJANGO_DEBUG", "MEDIATOR_VAR_DIR", "REDIS_URL"):
            os.environ[k] = v
    import logging

    import django

    django.setup()
    logging.getLogger("httpx").setLevel(logging.WARNING)


def make_tenant(host: str):
    """A fresh tenant for `host` with rate limits off (old benchmark tenants are removed first)."""
    from django.db import connection

    from apps.tenants.models import Tenant
    from apps.tenants.services import tenant_create

    try:
        Tenant.objects.filter(domain=host).delete()
    except Exception:  # noqa: BLE001 - a leftover tenant on a reused port; its data may be protected
        Tenant.objects.filter(domain=host).update(domain=f"old-{time.time_ns()}.invalid")
    tenant = tenant_create(
        slug=f"bench-{host.replace(':', '-').replace('.', '-')}-{int(time.time())}",
        domain=host,
        rate_limit_per_did=0,
        rate_limit_per_ip=0,
    )
    connection.close()
    return tenant


@dataclass
class Daphne:
    port: int
    proc: subprocess.Popen
    log_path: Path

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def rss_kib(self) -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        return 0

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def start_daphne(port: int, *, redis: bool, env: dict | None = None) -> Daphne:
    """A Daphne process on `port` (production settings; `env` adds or overrides variables)."""
    VAR_DIR.mkdir(parents=True, exist_ok=True)
    log_path = VAR_DIR / f"daphne-{port}.log"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mediator_project.socket_server",
            "-b",
            "127.0.0.1",
            "-p",
            str(port),
            # An open storm of thousands of sockets queues handshakes for longer than the 5 s
            # default; capacity (holding sockets) is what is measured, open rate is reported.
            "--websocket_connect_timeout",
            str(CONNECT_TIMEOUT_S),
            "mediator_project.asgi:application",
        ],
        cwd=ROOT,
        env=server_env(redis=redis, extra=env),
        stdout=log_path.open("wb"),
        stderr=subprocess.STDOUT,
    )
    d = Daphne(port, proc, log_path)
    deadline = time.time() + 60
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(log_path.read_text(errors="replace"))
        try:
            if httpx.get(f"http://{d.host}/health", timeout=1).status_code == 200:
                return d
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    d.stop()
    raise RuntimeError("daphne did not start")


@dataclass
class SocketPool:
    """Many authenticated sockets, each drained (and answering PINGs) by its own task."""

    sockets: list = field(default_factory=list)
    tasks: list = field(default_factory=list)
    failures: int = 0
    failure_kinds: dict = field(default_factory=dict)

    async def open(self, url: str, identities: list, n: int, concurrency: int = 32) -> None:
        from apps.wire.ws import open_authenticated

        sem = asyncio.Semaphore(concurrency)

        async def one(i: int) -> None:
            async with sem:
                try:
                    sock = await open_authenticated(
                        url, identities[i % len(identities)], open_timeout=CONNECT_TIMEOUT_S
                    )
                except Exception as exc:  # noqa: BLE001 - counted and reported
                    self.failures += 1
                    kind = f"{type(exc).__name__}:{getattr(exc, 'code', '')}"
                    self.failure_kinds[kind] = self.failure_kinds.get(kind, 0) + 1
                    return
            self.sockets.append(sock)
            self.tasks.append(asyncio.create_task(_drain(sock)))

        await asyncio.gather(*(one(i) for i in range(n)))

    async def close(self) -> None:
        for t in self.tasks:
            t.cancel()
        for start in range(0, len(self.sockets), 500):
            await asyncio.gather(*(s.close() for s in self.sockets[start : start + 500]), return_exceptions=True)
        self.sockets.clear()
        self.tasks.clear()


async def _drain(sock) -> None:
    from apps.wire.ws import SocketClosed

    try:
        while True:
            frame = await sock.recv(timeout=3600)
            if frame.get("type") == "PING":
                await sock.pong(frame)
    except (SocketClosed, TimeoutError, asyncio.CancelledError):
        return


def register_many(base_url: str, mediator_did: str, n: int, prefix: str) -> list:
    """`n` identities registered over HTTP (the protocol's own registration flow)."""
    from apps.wire.client import Identity, MediatorClient

    client = MediatorClient(base_url, timeout=30)
    out = []
    for i in range(n):
        who = Identity.create(f"{prefix}{i}", mediator_did)
        client.register(who, lifetime_s=86_400)
        out.append(who)
    client.close()
    return out


def machine() -> dict:
    """What the numbers were measured on."""
    import platform

    def run(cmd: list[str]) -> str:
        try:
            return subprocess.run(cmd, capture_output=True, text=True, check=False).stdout.strip()
        except OSError:
            return "?"

    mem = run(["free", "-h"]).splitlines()
    return {
        "nproc": run(["nproc"]),
        "mem": mem[1] if len(mem) > 1 else "?",
        "python": platform.python_version(),
        "postgres": run(["psql", "-V"]),
        "redis": run(["redis-server", "--version"]),
    }


def percentile(values: list[float], p: float) -> float:
    s = sorted(values)
    if not s:
        return float("nan")
    k = min(len(s) - 1, max(0, round(p / 100 * (len(s) - 1))))
    return s[k]


class PushRecorder:
    """Stamps when each PENDING_EVENTS event id first arrives on `sock` (answering PINGs), so a
    benchmark can measure from its own send to the frame."""

    def __init__(self, sock) -> None:
        self.sock = sock
        self.arrived: dict[str, float] = {}
        self._got = asyncio.Event()
        self._task = asyncio.create_task(self._read())

    async def _read(self) -> None:
        while True:
            frame = await self.sock.recv(timeout=3600)
            now = time.perf_counter()
            if frame.get("type") == "PENDING_EVENTS":
                for ev in frame["events"]:
                    self.arrived.setdefault(ev["id"], now)
                self._got.set()
            elif frame.get("type") == "PING":
                await self.sock.pong(frame)

    async def arrival(self, event_id: str, timeout: float = 10) -> float:
        """perf_counter() time at which `event_id` arrived (waits for it)."""
        while event_id not in self.arrived:
            self._got.clear()
            if event_id in self.arrived:
                break
            await asyncio.wait_for(self._got.wait(), timeout)
        return self.arrived[event_id]

    def stop(self) -> None:
        self._task.cancel()


def presigned_sends(sender, recipient, n: int, payload_bytes: int = 256) -> list[bytes]:
    """n signed TWO_WAY_PRIVATE bodies: signing is not part of what the latency benches measure."""
    from apps.wire.canonical import canonical_bytes

    return [
        canonical_bytes(
            sender.sign_command(recipient_did=recipient.did, payload="A" * payload_bytes, channel="TWO_WAY_PRIVATE")
        )
        for _ in range(n)
    ]
