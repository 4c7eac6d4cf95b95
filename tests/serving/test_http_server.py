"""The production HTTP tier (mediator_project/http_server.py: Granian serving mediator_project/wsgi.py)
as a real process on the test database: commands answered with the protocol's bytes on kept-alive
connections, one persistent database connection per application thread (HTTP_THREADS bounds
them) plus the metering writer's while commands keep coming, a SIGKILLed worker replaced by the
master while the other worker keeps answering, and SIGTERM draining: the requests in flight
answered, new connections refused, master and workers gone. The production layout test (tests/e2e/test_production_layout.py)
runs the whole protocol through it behind nginx.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil
import pytest
from django.db import connection, transaction

from apps.decentrl.models import Nonce
from apps.messaging.services import is_registered
from apps.tenants.models import Tenant
from apps.wire import contract as wc
from apps.wire.canonical import canonical_bytes
from apps.wire.client import Identity
from mediator_project import http_server as tier
from tests.support import servers
from tests.support.pglocks import another_session_waits_for_a_lock
from tests.support.servers import ROOT, free_port

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

INVALID = (400, {"type": "ERROR", "code": "INVALID_COMMAND"})


def _children(pid: int) -> set[int]:
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.add(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"


def _workers(pid: int) -> set[int]:
    """The master's worker processes (multiprocessing's resource tracker, if any, left out)."""
    return {
        p for p in _children(pid) if "resource_tracker" not in Path(f"/proc/{p}/cmdline").read_text(errors="replace")
    }


@pytest.fixture
def http_server(tmp_path, transactional_db):
    from apps.tenants.services import tenant_create

    port = free_port()
    tenant_create(slug="tier", domain=f"127.0.0.1:{port}", public_url=f"http://127.0.0.1:{port}")
    log_path = tmp_path / "granian.log"
    env = servers.server_env(
        {"HTTP_PORT": str(port), "HTTP_WORKERS": "2", "HTTP_THREADS": "3", "DB_CONN_MAX_AGE": "600"}
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "mediator_project.http_server"],
        cwd=ROOT,
        env=env,
        stdout=log_path.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 30
        while True:
            assert proc.poll() is None, log_path.read_text()
            try:
                if httpx.get(url + "/health", timeout=1).status_code == 200 and len(_workers(proc.pid)) == 2:
                    break
            except httpx.HTTPError:
                pass
            assert time.time() < deadline, log_path.read_text()
            time.sleep(0.2)
        yield {"url": url, "proc": proc, "log": lambda: log_path.read_text(errors="replace")}
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=5)


def _post(client: httpx.Client, url: str) -> tuple[int, dict]:
    r = client.post(url + "/", content=b"{}", headers={"Content-Type": "application/json"})
    return r.status_code, r.json()


def test_commands_on_kept_alive_connections_and_one_database_connection_per_thread(http_server):
    """100 commands on each of 8 kept-alive connections: every reply the protocol's error, each
    with its Content-Length and the security headers; PostgreSQL then holds at most
    workers × (HTTP_THREADS + 1) = 8 connections of the tier (persistent, not one per request):
    one per application thread and each worker's metering writer (apps/usage/metering.py), which
    keeps its own while commands keep coming."""
    import asyncio

    import psycopg

    url = http_server["url"]
    proc = http_server["proc"]

    async def kept_alive() -> list[tuple[int, dict, str | None]]:
        async with httpx.AsyncClient(timeout=10) as c:
            out = []
            for _ in range(100):
                r = await c.post(url + "/", content=b"{}", headers={"Content-Type": "application/json"})
                out.append((r.status_code, r.json(), r.headers.get("x-content-type-options")))
            return out

    async def all_connections():
        return await asyncio.gather(*(kept_alive() for _ in range(8)))

    replies = [r for conn in asyncio.run(all_connections()) for r in conn]
    assert replies == [(*INVALID, "nosniff")] * 800
    # The tier's own connections: the backends whose client port is a socket of the master or a
    # worker (other processes of the run, on this test database or not, are not counted).
    db_port = int(connection.settings_dict["PORT"] or 5432)
    tier_ports = {
        c.laddr.port
        for p in [proc.pid, *_children(proc.pid)]
        for c in psutil.Process(p).net_connections(kind="tcp")
        if c.raddr and c.raddr.port == db_port
    }
    with psycopg.connect(servers.test_database_url(), autocommit=True) as admin:
        pids = [
            pid
            for (pid, port) in admin.execute(
                "SELECT pid, client_port FROM pg_stat_activity WHERE datname = current_database()"
                " AND backend_type = 'client backend'"
            )
            if port in tier_ports
        ]
    assert 2 <= len(pids) <= 8, pids  # both workers served; never more than their threads and writers


def test_a_killed_worker_is_replaced_while_the_other_answers_and_sigterm_stops_all(http_server):
    proc = http_server["proc"]
    url = http_server["url"]
    workers = _workers(proc.pid)
    assert len(workers) == 2
    victim = min(workers)
    os.kill(victim, signal.SIGKILL)
    with httpx.Client(timeout=5) as c:
        # The other worker answers at once (a command that was on the dead worker's connection
        # fails with it; a new connection goes to a live worker).
        answered = []
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and len(answered) < 20:
            try:
                with httpx.Client(timeout=5) as fresh:
                    answered.append(_post(fresh, url))
            except httpx.HTTPError:
                pass
        assert answered == [INVALID] * 20
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and not (len(_workers(proc.pid)) == 2 and victim not in _workers(proc.pid)):
        time.sleep(0.2)
    replaced = _workers(proc.pid)
    assert len(replaced) == 2 and victim not in replaced, http_server["log"]()
    assert not _alive(victim)
    with httpx.Client(timeout=5) as c:
        assert [_post(c, url) for _ in range(10)] == [INVALID] * 10

    os.kill(proc.pid, signal.SIGTERM)
    proc.wait(timeout=20)
    assert proc.returncode == 0, http_server["log"]()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(_alive(p) for p in replaced):
        time.sleep(0.1)
    assert not any(_alive(p) for p in replaced)


def test_a_starting_master_waits_for_its_port_instead_of_failing():
    """wait_for_port: False while another socket listens on the port (until the timeout), True
    as soon as it is closed (what a SIGKILLed master's orphaned workers do when the reaper ends
    them)."""
    import socket
    import threading

    from mediator_project.http_server import wait_for_port

    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    number = holder.getsockname()[1]
    started = time.monotonic()
    assert wait_for_port("127.0.0.1", number, timeout=0.5) is False
    assert time.monotonic() - started >= 0.5
    threading.Timer(0.6, holder.close).start()
    started = time.monotonic()
    assert wait_for_port("127.0.0.1", number, timeout=10) is True
    assert 0.5 <= time.monotonic() - started < 5


def test_workers_default_to_half_the_cores_and_threads_to_8(monkeypatch):
    """One worker per two cores (mediator_project/http_server.py says why)."""
    monkeypatch.delenv("HTTP_WORKERS", raising=False)
    monkeypatch.delenv("HTTP_THREADS", raising=False)
    for cores, expected in ((1, 1), (2, 1), (3, 1), (4, 2), (None, 1)):
        monkeypatch.setattr(tier.os, "cpu_count", lambda cores=cores: cores)
        assert tier.workers() == expected
    server = tier.server()
    assert (server.workers, server.blocking_threads) == (1, 8)
    monkeypatch.setenv("HTTP_WORKERS", "3")
    monkeypatch.setenv("HTTP_THREADS", "5")
    server = tier.server()
    assert (server.workers, server.blocking_threads) == (3, 5)


def test_the_tier_binds_loopback_unless_http_host_says_otherwise(monkeypatch):
    """Behind the layout's nginx the tier listens on 127.0.0.1; the container image sets
    HTTP_HOST=0.0.0.0, its network namespace being the boundary (docs/containers.md)."""
    monkeypatch.delenv("HTTP_HOST", raising=False)
    assert tier.server().bind_addr == "127.0.0.1"
    monkeypatch.setenv("HTTP_HOST", "0.0.0.0")
    assert tier.server().bind_addr == "0.0.0.0"


def _registration(tenant: Tenant, alias: str) -> tuple[str, bytes]:
    """(DID, body) of a REQUEST_COMMUNICATION_CONTRACT registering a new identity with `tenant`."""
    who = Identity.create(alias, tenant.did)
    request = wc.build_request(
        requestor_did=who.did,
        recipient_did=tenant.did,
        recipient_prekey=bytes(tenant.prekey_public),
        signing=who.signing,
        expires_at=int(time.time()) + 86_400,
    )
    payload = {
        "type": "REQUEST_COMMUNICATION_CONTRACT",
        "encrypted_contract_request": request.encrypted,
        "requestor_ephemeral_public_key": request.ephemeral_public_b64,
    }
    return who.did, canonical_bytes(who.sign_command(recipient_did=tenant.did, payload=payload))


def _head(port: int, length: int, extra: str = "") -> bytes:
    return (
        f"POST / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {length}\r\n{extra}\r\n"
    ).encode()


def _read_head(sock: socket.socket, data: bytes = b"") -> tuple[bytes, bytes]:
    """(head, what followed it) of the next response on `sock`."""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"closed before a response: {data!r}"
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    return head, rest


def _reply(sock: socket.socket) -> tuple[int, dict]:
    """(status, JSON body) of the next response on `sock`, read by its Content-Length."""
    head, body = _read_head(sock)
    lines = head.decode("latin-1").split("\r\n")
    length = int(next(v for k, v in (line.split(":", 1) for line in lines[1:]) if k.lower() == "content-length"))
    while len(body) < length:
        chunk = sock.recv(65536)
        assert chunk, "closed inside a response body"
        body += chunk
    return int(lines[0].split()[1]), json.loads(body)


def _refused(port: int, timeout: float = 10.0) -> bool:
    """True once a connection to 127.0.0.1:`port` is refused (within `timeout`)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
        except ConnectionRefusedError:
            return True
        time.sleep(0.02)
    return False


def test_sigterm_answers_the_requests_in_flight_refuses_new_connections_and_exits(http_server):
    """SIGTERM to the master (what podman, Kubernetes and supervisord send) with two registrations
    in flight: one whose body is still arriving (the worker has read its head and asked for the
    body: 100 Continue), one inside the application, waiting on a PostgreSQL lock the test holds
    on the nonce table (every authenticated command stores its nonce). Before either finishes the
    port refuses connections and an idle kept-alive connection is closed; then both are answered
    MEDIATOR_REGISTRATION_SUCCESS, each connection closed after its answer, both identities are
    registered, and master and workers exit 0 well within WORKERS_KILL_TIMEOUT (no worker killed)."""
    tenant = Tenant.objects.get(slug="tier")
    port = int(http_server["url"].rsplit(":", 1)[1])
    proc = http_server["proc"]
    workers = _workers(proc.pid)
    uploading_did, uploading = _registration(tenant, "uploading")
    waiting_did, waiting = _registration(tenant, "waiting")
    idle = socket.create_connection(("127.0.0.1", port), timeout=10)
    idle.sendall(_head(port, 2) + b"{}")
    assert _reply(idle) == INVALID  # kept alive: HTTP/1.1's default

    in_app = socket.create_connection(("127.0.0.1", port), timeout=10)
    slow = socket.create_connection(("127.0.0.1", port), timeout=10)
    with transaction.atomic():
        with connection.cursor() as cur:
            cur.execute(f"LOCK TABLE {Nonce._meta.db_table} IN ACCESS EXCLUSIVE MODE")
        in_app.sendall(_head(port, len(waiting)) + waiting)
        assert another_session_waits_for_a_lock()
        slow.sendall(_head(port, len(uploading), "Expect: 100-continue\r\n"))
        assert _read_head(slow) == (b"HTTP/1.1 100 Continue", b"")
        half = len(uploading) // 2
        slow.sendall(uploading[:half])

        os.kill(proc.pid, signal.SIGTERM)
        assert _refused(port), http_server["log"]()
        assert idle.recv(1) == b""
        slow.sendall(uploading[half:])
    # The lock went with the transaction.

    for sock in (slow, in_app):
        status, body = _reply(sock)
        assert (status, body["type"], body["code"]) == (200, "SUCCESS", "MEDIATOR_REGISTRATION_SUCCESS")
        assert sock.recv(1) == b""
        sock.close()
    idle.close()
    proc.wait(timeout=tier.WORKERS_KILL_TIMEOUT)  # counted from the lock's release
    assert proc.returncode == 0
    assert "Killing worker" not in http_server["log"](), http_server["log"]()
    assert not any(_alive(p) for p in workers)
    assert is_registered(tenant=tenant, did=uploading_did) and is_registered(tenant=tenant, did=waiting_did)
