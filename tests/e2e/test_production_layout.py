"""The production serving layout end to end (issue 8, docs/serving.md): `scripts/run_production.sh`
starts nginx on one public port, Granian's WSGI workers behind it for HTTP and Daphne for /ws,
with the Redis channel layer between them. Two identities register through nginx → Granian,
Alice sends TWO_WAY_PRIVATE through the same path, and Bob's socket, opened through
nginx → Daphne, receives the PENDING_EVENTS push that left a Granian worker after commit and
crossed Redis to the Daphne process.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from apps.wire.client import MediatorClient
from tests.support import servers
from tests.support.push_story import PAYLOAD, run_push_story
from tests.support.servers import ROOT, free_port, redis_socket_url, server_env

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

REDIS_DB = 10  # dedicated to this module: no other test or benchmark uses it
# The same tests over Redis's Unix socket (docs/serving.md): the channel layer between Granian's
# push and Daphne, and the Celery broker URL derived from it.
OVER_TCP_AND_UNIX_SOCKET = pytest.mark.parametrize(
    "layout", [{}, {"env": {"REDIS_URL": "socket"}}], indirect=True, ids=["redis-tcp", "redis-unix-socket"]
)


def layout_env(port: int, http_port: int, ws_port: int, run_dir: Path, extra: dict | None = None) -> dict:
    """The layout's environment: production mode (run_production.sh's default) with this test
    process's deployment key, so that the servers can open the tenant keys the test stored."""
    from django.conf import settings

    return server_env(
        {
            "DATABASE_URL": servers.test_database_url(),
            "REDIS_URL": f"redis://127.0.0.1:6379/{REDIS_DB}",
            "PORT": str(port),
            "HTTP_PORT": str(http_port),
            "WS_PORT": str(ws_port),
            "NO_CELERY": "1",
            "DJANGO_SECRET_KEY": secrets.token_hex(32),
            "MEDIATOR_DEPLOYMENT_KEY": settings.MEDIATOR_DEPLOYMENT_KEY,
            "MEDIATOR_OPERATOR_HOSTS": "127.0.0.1",  # the admin checks below use nginx's address
            "RUN_DIR": str(run_dir),
            "VENV": str(Path(sys.executable).parent.parent),  # this interpreter's environment
            "PATH": os.environ.get("PATH", "") + ":/usr/sbin:/sbin",
            **(extra or {}),
        }
    )


@pytest.fixture
def layout(request, transactional_db, tmp_path):
    """The whole layout on free ports; the tenant answers for nginx's address. Parametrized
    indirectly, the parameter holds tenant settings (rate limits) and, under "env", variables of
    the layout."""
    from apps.tenants.services import tenant_create

    subprocess.run([str(ROOT / "scripts" / "ensure_extra_nginx.sh")], check=True, capture_output=True)
    port, http_port, ws_port = free_port(), free_port(), free_port()
    param = dict(getattr(request, "param", {}))
    extra_env = dict(param.pop("env", {}))
    if extra_env.get("REDIS_URL") == "socket":
        extra_env["REDIS_URL"] = redis_socket_url(REDIS_DB)
    tenant = tenant_create(
        slug="prod-layout",
        domain=f"127.0.0.1:{port}",
        public_url=f"http://127.0.0.1:{port}",
        **{"rate_limit_per_did": 0, "rate_limit_per_ip": 0, **param},
    )
    run_dir = tmp_path / "run"
    env = layout_env(port, http_port, ws_port, run_dir, extra_env)
    log_path = tmp_path / "layout.log"
    proc = subprocess.Popen(
        [str(ROOT / "scripts" / "run_production.sh")],
        cwd=ROOT,
        env=env,
        stdout=log_path.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group: stopping it stops every process it started
    )

    def log() -> str:
        return log_path.read_text(errors="replace")

    def ctl(*args: str) -> str:
        """supervisorctl on this layout's supervisord (deploy/supervisord.conf.template)."""
        done = subprocess.run(
            [str(Path(sys.executable).parent / "supervisorctl"), "-c", str(run_dir / "supervisord.conf"), *args],
            capture_output=True,
            text=True,
            timeout=20,
        )
        return done.stdout

    try:
        deadline = time.time() + 60
        up = set()
        while time.time() < deadline and len(up) < 3:
            assert proc.poll() is None, f"run_production.sh exited early:\n{log()}"
            for p in (port, http_port, ws_port) if len(up) < 3 else ():
                if p in up:
                    continue
                try:
                    r = httpx.get(f"http://127.0.0.1:{p}/health", headers={"Host": f"127.0.0.1:{port}"}, timeout=1)
                    if r.status_code == 200:
                        up.add(p)
                except httpx.HTTPError:
                    pass
            time.sleep(0.2)
        assert len(up) == 3, f"layout did not come up ({sorted(up)}):\n{log()}"
        yield {
            "url": f"http://127.0.0.1:{port}",
            "ws": f"ws://127.0.0.1:{port}/ws",
            "port": port,
            "http_port": http_port,
            "ws_port": ws_port,
            "tenant": tenant,
            "log": log,
            "ctl": ctl,
            "proc": proc,
        }
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=5)


@OVER_TCP_AND_UNIX_SOCKET
def test_a_send_through_nginx_and_granian_is_pushed_to_a_socket_through_nginx_and_daphne(layout):
    """The push story (tests/support/push_story.py) through nginx; what it stored, and that its
    replay stored nothing."""
    from apps.messaging.models import PendingEvent

    tenant = layout["tenant"]
    client = MediatorClient(layout["url"], timeout=30)
    story = run_push_story(client, layout["ws"], mediator_did=tenant.did)
    stored = PendingEvent.objects.get(public_id=story.event_id)
    assert (stored.tenant_id, stored.recipient_did, stored.sender_did, stored.payload) == (
        tenant.pk,
        story.bob.did,
        story.alice.did,
        PAYLOAD,
    )
    assert PendingEvent.objects.filter(tenant=tenant, recipient_did=story.bob.did).count() == 1
    client.close()


@pytest.mark.parametrize("layout", [{"rate_limit_per_ip": 1, "rate_limit_per_ip_burst": 2}], indirect=True)
def test_per_ip_limits_count_the_client_behind_nginx_not_nginx(layout):
    """Every request reaches Granian from nginx's 127.0.0.1; run_production.sh trusts nginx's
    X-Forwarded-For, so two clients (two loopback source addresses) get a bucket each. The
    addresses are drawn per run: limiter windows in Redis outlive a test's database."""
    first, second = (f"127.{secrets.randbelow(250) + 2}.{secrets.randbelow(256)}.{n}" for n in (2, 3))

    def post(source: str) -> tuple[int, dict]:
        with httpx.Client(transport=httpx.HTTPTransport(local_address=source), timeout=10) as c:
            r = c.post(layout["url"] + "/", content=b"{}", headers={"Content-Type": "application/json"})
        return r.status_code, r.json()

    invalid = (400, {"type": "ERROR", "code": "INVALID_COMMAND"})
    assert [post(first) for _ in range(2)] == [invalid, invalid]
    assert post(first) == (429, {"type": "ERROR", "code": "RATE_LIMITED"})
    assert post(second) == invalid


def test_http_threads_reconnect_after_their_database_connections_die(layout):
    """Granian's application threads keep persistent connections (DB_CONN_MAX_AGE=600 from run_production.sh).
    When PostgreSQL ends them (a restart, pg_terminate_backend), the next requests still succeed:
    each thread closes its dead idle connection at request_started (apps/ops/dbconn.py) instead
    of failing one request per thread with 503."""
    import psycopg
    from django.db import connection

    url = layout["url"]

    def health_burst(n: int) -> list[int]:
        with httpx.Client(timeout=10) as c:
            return [c.get(url + "/health").status_code for _ in range(n)]

    async def concurrent(n: int) -> list[int]:
        async with httpx.AsyncClient(timeout=10) as c:
            replies = await asyncio.gather(*(c.get(url + "/health") for _ in range(n)))
        return [r.status_code for r in replies]

    assert asyncio.run(concurrent(32)) == [200] * 32  # every application thread now holds a connection
    with psycopg.connect(servers.test_database_url(), autocommit=True) as admin:
        pids = [
            pid
            for (pid,) in admin.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
                " AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
            )
        ]
    own = connection.connection.info.backend_pid if connection.connection else None  # this test's
    pids = [p for p in pids if p != own]
    assert len(pids) >= 2
    servers.terminate_backends(pids)
    assert health_burst(20) == [200] * 20
    assert asyncio.run(concurrent(32)) == [200] * 32
    assert "closed by the server while idle; reconnecting" in layout["log"]()


def _children(pid: int) -> set[int]:
    """Processes whose parent is `pid` (an nginx master's workers, a Granian master's)."""
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
    return (Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]) != "Z"


@pytest.mark.parametrize("layout", [{"env": {"NO_CELERY": "0"}}], indirect=True)
def test_a_killed_process_is_restarted_alone_while_the_others_keep_answering(layout):
    """Issue 13 item 5: supervisord restarts the one program that died. A thread posts commands
    (a protocol 400 each) all along; each process is SIGKILLed in turn. Daphne, the Celery workers
    (maintenance and push) and beat are not on the POST / path: not one command fails while they restart. Granian and
    nginx are back within seconds, with new pids (Granian answers once its new master has loaded
    the application), and what their dead masters left (workers holding the listening socket) is
    gone (scripts/supervisor_reaper.py)."""
    import threading

    ctl = layout["ctl"]
    programs = ["daphne", "celery-worker", "celery-push", "celery-beat", "granian", "nginx"]

    def pid(name: str) -> int:
        out = ctl("pid", name).strip()
        return int(out) if out.isdigit() else 0

    def running(name: str) -> bool:
        return " RUNNING " in ctl("status", name)

    deadline = time.time() + 40
    while time.time() < deadline and not all(running(p) for p in programs):
        time.sleep(0.5)
    assert all(running(p) for p in programs), ctl("status")

    phase = {"name": "warmup"}
    outcomes: list[tuple[str, bool]] = []
    stop = threading.Event()
    invalid = (400, {"type": "ERROR", "code": "INVALID_COMMAND"})

    def load() -> None:
        with httpx.Client(timeout=5) as c:
            while not stop.is_set():
                name = phase["name"]
                try:
                    r = c.post(layout["url"] + "/", content=b"{}", headers={"Content-Type": "application/json"})
                    outcomes.append((name, (r.status_code, r.json()) == invalid))
                except (httpx.HTTPError, ValueError):
                    outcomes.append((name, False))
                time.sleep(0.01)

    def commands_in(name: str, n: int = 5, timeout: float = 10) -> None:
        """Wait until the thread has posted `n` commands in phase `name` (not a fixed time)."""
        started = time.monotonic()
        while sum(1 for p, _ in outcomes if p == name) < n and time.monotonic() - started < timeout:
            time.sleep(0.01)
        assert sum(1 for p, _ in outcomes if p == name) >= n, name

    thread = threading.Thread(target=load, daemon=True)
    thread.start()
    recovered: dict[str, float] = {}
    try:
        commands_in("warmup")
        for name in programs:
            old = pid(name)
            orphans = _children(old)
            phase["name"] = name
            os.kill(old, signal.SIGKILL)
            killed_at = time.monotonic()
            while time.monotonic() - killed_at < 20 and not (pid(name) not in (0, old) and running(name)):
                time.sleep(0.2)
            assert pid(name) not in (0, old) and running(name), f"{name} not back:\n{ctl('status')}"
            recovered[name] = time.monotonic() - killed_at
            if name in ("granian", "nginx"):
                # The reaper's SIGTERM, then SIGKILL after 5 s.
                while time.monotonic() - killed_at < 10 and any(_alive(p) for p in orphans):
                    time.sleep(0.2)
                assert orphans and not any(_alive(p) for p in orphans), f"{name} left {orphans}"
            # …and answering: the next commands through the whole layout succeed.
            # Granian's workers stop with their master, so its gap includes the new master loading
            # the application (~1.6 s of CPU; 4-14 s of wall time on the shared box at load
            # average 6-17, docs/serving.md); the others answer within seconds.
            window = 30 if name == "granian" else 10
            answered_at = time.monotonic()
            while time.monotonic() - answered_at < window and [ok for n, ok in outcomes[-5:]] != [True] * 5:
                time.sleep(0.1)
            assert [ok for n, ok in outcomes[-5:]] == [True] * 5, name
        phase["name"] = "after"
        commands_in("after")
    finally:
        stop.set()
        thread.join(timeout=10)

    failed = {n: sum(1 for p, ok in outcomes if p == n and not ok) for n in ["warmup", *programs, "after"]}
    total = {n: sum(1 for p, _ in outcomes if p == n) for n in ["warmup", *programs, "after"]}
    print(f"restart seconds {recovered}; failed/total POST / per phase {failed} / {total}")
    off_the_path = ("warmup", "daphne", "celery-worker", "celery-push", "celery-beat", "after")
    assert {n: failed[n] for n in off_the_path} == dict.fromkeys(off_the_path, 0)
    assert all(total[n] > 0 for n in total)
    assert httpx.get(f"http://127.0.0.1:{layout['ws_port']}/health", timeout=5).status_code == 200


def _read_head(sock) -> tuple[int, dict[str, str], bytes]:
    """(status, lower-cased headers, what came after the head) of a reply read off `sock`."""
    data = b""
    while b"\r\n\r\n" not in data and (chunk := sock.recv(65536)):
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
    return int(lines[0].split()[1]), headers, rest


def _raw(port: int, request: bytes) -> tuple[int, dict[str, str], bytes]:
    """One request as raw bytes over a socket (framing httpx refuses to send); the reply parsed."""
    import socket

    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request)
        status, headers, body = _read_head(sock)
        while len(body) < int(headers.get("content-length", 0)) and (chunk := sock.recv(65536)):
            body += chunk
    return status, headers, body


CAP = 65_536


@pytest.mark.parametrize("layout", [{"env": {"MEDIATOR_MAX_BODY_BYTES": str(CAP)}}], indirect=True)
def test_every_error_nginx_produces_is_the_protocols_json(layout):
    """Issue 13 item 6: what nginx itself refuses is answered as the protocol's error, with the
    status the application gives that code (apps/wire/errors.py), never nginx's HTML.
    nginx's body cap is the application's MEDIATOR_MAX_BODY_BYTES: a body at the cap reaches the
    application, one byte more is refused by nginx, with the application's own answer."""
    from apps.wire.errors import ErrorCode, error_body

    port, host = layout["port"], f"127.0.0.1:{layout['port']}".encode()

    def post(headers: bytes, body: bytes = b"") -> tuple[int, dict[str, str], bytes]:
        return _raw(port, b"POST / HTTP/1.1\r\nHost: " + host + b"\r\nConnection: close\r\n" + headers + b"\r\n" + body)

    def expect(code: ErrorCode, reply: tuple[int, dict[str, str], bytes]) -> None:
        status, headers, body = reply
        assert (status, headers["content-type"], json.loads(body)) == (
            code.http_status,
            "application/json",
            error_body(code),
        )
        # MEDIATOR_CORS_ORIGINS is * here: nginx's own replies carry it as the application's do.
        assert headers.get("access-control-allow-origin") == "*"

    invalid, too_large = ErrorCode.INVALID_COMMAND, ErrorCode.PAYLOAD_TOO_LARGE
    # At the cap: the application parses it (not JSON: INVALID_COMMAND, from Granian's application).
    at_cap = post(f"Content-Length: {CAP}\r\n".encode(), b"x" * CAP)
    expect(invalid, at_cap)
    # Over the cap, declared or chunked: nginx's 413, as JSON.
    expect(too_large, post(f"Content-Length: {CAP + 1}\r\n".encode(), b"x" * (CAP + 1)))
    chunk = b"x" * (CAP + 1)
    expect(too_large, post(b"Transfer-Encoding: chunked\r\n", b"%x\r\n" % len(chunk) + chunk + b"\r\n0\r\n\r\n"))
    # Bad chunked framing, Content-Length with Transfer-Encoding, an unknown Transfer-Encoding.
    expect(invalid, post(b"Transfer-Encoding: chunked\r\n", b"zz\r\nnot a chunk\r\n0\r\n\r\n"))
    expect(invalid, post(b"Transfer-Encoding: chunked\r\nContent-Length: 2\r\n", b"2\r\n{}\r\n0\r\n\r\n"))
    expect(invalid, post(b"Transfer-Encoding: gzip\r\n", b"{}"))
    # An oversized request header (nginx's 494) and a malformed request line.
    expect(invalid, post(b"X-Big: " + b"a" * 20_000 + b"\r\n"))
    expect(invalid, _raw(port, b"POST / HTTP/1.1\r\nHost: " + host + b"\r\nContent-Length: x\r\n\r\n"))
    # The upstream down (Granian stopped, then /ws's Daphne): MEDIATOR_UNAVAILABLE.
    layout["ctl"]("stop", "granian")
    expect(ErrorCode.MEDIATOR_UNAVAILABLE, post(b"Content-Length: 2\r\n", b"{}"))
    layout["ctl"]("stop", "daphne")
    ws = _raw(port, b"GET /ws HTTP/1.1\r\nHost: " + host + b"\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
    expect(ErrorCode.MEDIATOR_UNAVAILABLE, ws)


def test_request_lines_nginx_cannot_parse_are_the_protocols_json(layout, tmp_path):
    """A request line nginx refuses before it has a URI (too long, %00, a bad escape, a path above
    the root, `*`, an unknown HTTP version, garbage) gets the same JSON as nginx's other 400s, never
    nginx's HTML 500 ("empty URI in redirect to named location"): the error pages are URIs, not
    named locations (deploy/nginx.conf.template). Under /didcomm, when the request line says so, a
    problem report."""
    port, host = layout["port"], f"127.0.0.1:{layout['port']}".encode()

    def get(target: bytes, version: bytes = b"HTTP/1.1", method: bytes = b"GET") -> tuple[int, dict[str, str], bytes]:
        return _raw(port, method + b" " + target + b" " + version + b"\r\nHost: " + host + b"\r\n\r\n")

    def expect(reply: tuple[int, dict[str, str], bytes], didcomm: bool = False) -> None:
        status, headers, body = reply
        assert (status, headers["content-type"], headers.get("access-control-allow-origin")) == (
            400,
            "application/json",
            "*",
        ), body
        if not didcomm:
            assert body == b'{"code":"INVALID_COMMAND","type":"ERROR"}'
            return
        report = json.loads(body)
        assert len(report["id"]) == 32 and int(report["id"], 16) >= 0  # nginx's $request_id
        assert report == {
            "id": report["id"],
            "type": PROBLEM,
            "body": {"code": "e.p.msg", "comment": "malformed request"},
        }

    long = b"a" * 10_000  # over nginx's header buffers: its 414
    for target in (b"/" + long, b"/public/%00", b"/%", b"/%zz", b"/../", b"/%2e%2e/", b"/x/../../ws", b"*"):
        expect(get(target))
    expect(get(b"/", b"HTTP/9.9"))
    expect(get(b"/../invalid_command"))  # the error page's own URI is out of a client's reach
    expect(_raw(port, b"\x01\x02 garbage\r\n\r\n"))
    for target in (b"/didcomm/" + long, b"/didcomm/%zz", b"/didcomm/../../", b"/didcomm/%00"):
        expect(get(target, method=b"POST"), didcomm=True)
    expect(get(b"/didcomm", b"HTTP/9.9", b"POST"), didcomm=True)
    expect(get(b"/didcommx/%zz"))
    errors = (tmp_path / "run" / "nginx-error.log").read_text()
    assert "named location" not in errors and "[crit]" not in errors and "[alert]" not in errors


def _ws_frame(data: bytes) -> tuple[int, bytes, bytes] | None:
    """The first frame of `data` from a server (unmasked, a 7- or 16-bit length): (opcode, payload,
    the rest), None until it is complete."""
    import struct

    if len(data) < 2:
        return None
    size, start = data[1] & 0x7F, 2
    if size == 126:
        if len(data) < 4:
            return None
        size, start = struct.unpack("!H", data[2:4])[0], 4
    if len(data) < start + size:
        return None
    return data[0] & 0x0F, data[start : start + size], data[start + size :]


def _ws_refusal(port: int, path: bytes) -> tuple[int, str, int]:
    """A WebSocket upgrade to `path` as raw bytes (sent as is, not normalised): the handshake's
    status, the first text frame and the close code."""
    import base64
    import socket
    import struct

    key = base64.b64encode(os.urandom(16))
    head = b"GET " + path + b" HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nUpgrade: websocket\r\n" % port
    head += b"Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: " + key + b"\r\n\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(head)
        status, _, data = _read_head(sock)
        frames: list[tuple[int, bytes]] = []
        while not frames or frames[-1][0] != 0x8:
            if parsed := _ws_frame(data):
                opcode, payload, data = parsed
                frames.append((opcode, payload))
            elif chunk := sock.recv(65536):
                data += chunk
            else:
                break
    texts = [payload.decode() for opcode, payload in frames if opcode == 0x1]
    closes = [struct.unpack("!H", payload[:2])[0] for opcode, payload in frames if opcode == 0x8]
    return status, texts[0] if texts else "", closes[0] if closes else 0


def test_websocket_paths_nginx_normalises_onto_ws_are_refused_by_daphne_without_a_traceback(layout):
    """nginx picks its /ws and /didcomm/ws location on the normalised path but passes the URI as
    sent, so Daphne gets `//ws` or `/x/../ws`, which no route serves: the catch-all route of
    mediator_project/asgi.py refuses it like a host no mediator serves (ERROR UNKNOWN_MEDIATOR, or
    the problem report under /didcomm, then close 4404), never URLRouter's 500. That the application
    then returns without an exception (which Daphne would log a second later) is proven in process,
    with no wait, by tests/realtime/test_routing.py (`comm.wait()` on the same paths)."""
    port = layout["port"]
    unknown = '{"type":"ERROR","code":"UNKNOWN_MEDIATOR"}'
    for path in (b"//ws", b"/./ws", b"/x/../ws"):
        assert _ws_refusal(port, path) == (101, unknown, 4404), path
    for path in (b"/didcomm//ws", b"/didcomm/./ws", b"/didcomm/../ws"):
        status, text, code = _ws_refusal(port, path)
        assert (status, json.loads(text)["body"]["code"], code) == (101, "e.p.xfer.unknown-mediator", 4404), path


def test_production_mode_headers_through_the_layout(layout):
    """Issue 13 item 8: run_production.sh runs in production mode (MEDIATOR_ENV defaults to
    production, so MEDIATOR_PUBLIC_SCHEME is https behind nginx): the admin's login page gets the
    Content-Security-Policy, HSTS and Secure cookies; no server names its version."""
    from django.conf import settings

    url, port = layout["url"], layout["port"]
    login = httpx.get(url + "/admin/login/", timeout=10)
    assert login.status_code == 200
    assert login.headers["content-security-policy"] == settings.MEDIATOR_CSP
    assert login.headers["strict-transport-security"] == "max-age=31536000"
    cookie = login.headers["set-cookie"]
    assert cookie.startswith("csrftoken=") and "; Secure" in cookie
    command = httpx.post(url + "/", content=b"{}", timeout=10)
    assert command.json() == {"type": "ERROR", "code": "INVALID_COMMAND"}
    assert command.headers["strict-transport-security"] == "max-age=31536000"
    assert "content-security-policy" not in command.headers
    # A debug 404 would list the URL map; production answers in the surface's shape.
    missing = httpx.get(url + "/no-such-page", timeout=10)
    assert (missing.status_code, missing.json()) == (404, {"type": "ERROR", "code": "UNKNOWN_MEDIATOR"})
    missing_didcomm = httpx.get(url + "/didcomm/no-such-page", timeout=10)
    assert (missing_didcomm.status_code, missing_didcomm.json()["body"]["code"]) == (404, "e.p.xfer.unknown-mediator")
    assert {login.headers["server"], command.headers["server"], missing.headers["server"]} == {"nginx"}
    for direct in (layout["http_port"], layout["ws_port"]):
        server = httpx.get(f"http://127.0.0.1:{direct}/health", headers={"Host": f"127.0.0.1:{port}"}, timeout=10)
        assert "/" not in server.headers.get("server", ""), server.headers


def test_the_layout_refuses_to_start_in_debug(transactional_db, tmp_path):
    """Production (run_production.sh's default mode) with DJANGO_DEBUG on stops before any process
    starts, saying why."""
    env = layout_env(free_port(), free_port(), free_port(), tmp_path / "run", {"DJANGO_DEBUG": "1"})
    proc = subprocess.Popen(
        [str(ROOT / "scripts" / "run_production.sh")],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.terminate()  # it started after all: supervisord stops what it started
        stdout, stderr = proc.communicate(timeout=60)
    done = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    assert done.returncode != 0
    assert "ImproperlyConfigured: DJANGO_DEBUG must be off with MEDIATOR_ENV=production" in done.stderr
    assert "production layout:" not in done.stdout
    assert not (tmp_path / "run" / "supervisord.pid").exists()


# --- DIDComm v2 through the layout (docs/didcomm.md, docs/serving.md) ------------------------------

PROBLEM = "https://didcomm.org/report-problem/2.0/problem-report"


@OVER_TCP_AND_UNIX_SOCKET
def test_didcomm_through_nginx_granian_and_daphne_mediation_forward_and_live_push(layout):
    """POST /didcomm goes nginx → Granian (its own lean CommandEntry, as POST /: no CSRF, no
    cookie, both media types), /didcomm/ws nginx → Daphne; a forward stored by a Granian
    worker is pushed to the live socket across Redis."""
    from websockets.asyncio.client import connect

    from apps.didcomm.models import QueuedMessage
    from tests.support.didcomm_agent import CM2, ENCRYPTED, PICKUP, Agent, forward_for, routed_did

    url, host = layout["url"], f"127.0.0.1:{layout['port']}"
    http = httpx.Client(base_url=url, timeout=30)
    invitation = http.get("/didcomm/invitation").json()
    mediator = invitation["from"]
    assert http.get("/didcomm/invitation", params={"form": "url"}).text.startswith(f"{url}/didcomm?_oob=")
    wallet = Agent()

    def send(message: dict) -> dict:
        resp = http.post("/didcomm", content=wallet.pack(message, mediator), headers={"Content-Type": ENCRYPTED})
        assert (resp.status_code, resp.headers["content-type"]) == (200, ENCRYPTED), resp.text
        assert "content-security-policy" not in resp.headers and "set-cookie" not in resp.headers
        return wallet.unpack(resp.content)[0]

    # Mediation with return_route: the answer is in the HTTP reply body.
    grant = send(wallet.message(CM2 + "mediate-request"))
    assert (grant["type"], grant["body"]) == (CM2 + "mediate-grant", {"routing_did": mediator})
    rcpt = routed_did(mediator)
    update = send(wallet.message(CM2 + "keylist-update", {"updates": [{"recipient_did": rcpt.did, "action": "add"}]}))
    assert update["body"]["updated"][0]["result"] == "success"
    # Other media types are refused by the application (415), not by nginx or the bare entry.
    refused = http.post("/didcomm", content=b"{}", headers={"Content-Type": "text/plain"})
    assert (refused.status_code, refused.json()["body"]["code"]) == (415, "e.p.xfer.unsupported-media-type")

    async def live() -> tuple[dict, dict, httpx.Response]:
        async with connect(
            f"ws://{host}/didcomm/ws", compression=None, proxy=None, ping_interval=None, max_size=None
        ) as ws:
            change = wallet.message(PICKUP + "live-delivery-change", {"live_delivery": True})
            await ws.send(wallet.pack(change, mediator).decode())
            status, _ = wallet.unpack(await asyncio.wait_for(ws.recv(), 10))
            # A forward as `application/json` (also accepted): 202, no body, then the push.
            fwd = await asyncio.to_thread(
                http.post, "/didcomm", content=forward_for(rcpt, mediator), headers={"Content-Type": "application/json"}
            )
            pushed, _ = wallet.unpack(await asyncio.wait_for(ws.recv(), 10))
            return status, pushed, fwd

    status, pushed, fwd = asyncio.run(live())
    assert status["body"] == {"message_count": 0, "live_delivery": True}
    assert (fwd.status_code, fwd.content) == (202, b"")
    assert pushed["type"] == PICKUP + "delivery" and len(pushed["attachments"]) == 1
    assert rcpt.unpack(pushed["attachments"][0]["data"]["json"])[0]["body"] == {"n": 1}
    # Stored before the 202 and still there after the push, until messages-received.
    assert QueuedMessage.objects.filter(tenant=layout["tenant"]).count() == 1
    done = send(wallet.message(PICKUP + "messages-received", {"message_id_list": [pushed["attachments"][0]["id"]]}))
    assert done["body"]["message_count"] == 0
    http.close()


@pytest.mark.parametrize("layout", [{"env": {"NGINX_CLIENT_TIMEOUT": "1s"}}], indirect=True)
def test_a_method_nginx_refuses_is_json_and_a_stalled_body_is_closed_at_the_configured_timeout(layout):
    """TRACE, which nginx refuses itself, gets the application's answer to a wrong method (405;
    under /didcomm a problem report), not nginx's HTML. A body that stalls past NGINX_CLIENT_TIMEOUT
    gets no reply at all: nginx ends a request that timed out without a response (error_page does
    not apply), so the layout closes the connection, at the configured timeout."""
    import socket

    port, host = layout["port"], f"127.0.0.1:{layout['port']}".encode()
    status, headers, body = _raw(port, b"TRACE / HTTP/1.1\r\nHost: " + host + b"\r\nConnection: close\r\n\r\n")
    assert (status, headers["content-type"], headers.get("access-control-allow-origin"), body) == (
        405,
        "application/json",
        "*",
        b'{"code":"INVALID_COMMAND","type":"ERROR"}',
    )
    status, headers, body = _raw(port, b"TRACE /didcomm HTTP/1.1\r\nHost: " + host + b"\r\nConnection: close\r\n\r\n")
    report = json.loads(body)
    assert (status, headers["content-type"], report["type"], report["body"]) == (
        405,
        "application/json",
        PROBLEM,
        {"code": "e.p.msg", "comment": "method not allowed"},
    )

    # Part of a body, then nothing: closed by nginx once the (1 s) timeout passed, without a byte;
    # with nginx's 60 s default this read would time out instead.
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(b"POST / HTTP/1.1\r\nHost: " + host + b'\r\nContent-Length: 10\r\n\r\n{"a"')
        assert sock.recv(65536) == b""


@pytest.mark.parametrize("layout", [{"env": {"MEDIATOR_MAX_BODY_BYTES": str(CAP)}}], indirect=True)
def test_every_error_nginx_produces_on_didcomm_is_a_problem_report(layout):
    """Under /didcomm nginx's own errors are Report Problem 2.0 messages (JSON) with the status
    and code the application gives (deploy/nginx.conf.template); POST / keeps its protocol's."""
    port, host = layout["port"], f"127.0.0.1:{layout['port']}".encode()

    def post(path: bytes, headers: bytes, body: bytes = b"") -> tuple[int, dict[str, str], bytes]:
        head = b"POST " + path + b" HTTP/1.1\r\nHost: " + host + b"\r\nConnection: close\r\n"
        return _raw(port, head + b"Content-Type: application/didcomm-encrypted+json\r\n" + headers + b"\r\n" + body)

    def expect(status: int, code: str, reply: tuple[int, dict[str, str], bytes]) -> None:
        got_status, headers, body = reply
        report = json.loads(body)
        assert (got_status, headers["content-type"], report["type"], report["body"]["code"]) == (
            status,
            "application/json",
            PROBLEM,
            code,
        )
        assert isinstance(report["id"], str) and report["id"]

    # At the cap: the application reads it (not a JWE: e.p.msg, from Granian's application); one byte more: nginx.
    expect(400, "e.p.msg", post(b"/didcomm", f"Content-Length: {CAP}\r\n".encode(), b"x" * CAP))
    expect(413, "e.p.xfer.too-big", post(b"/didcomm", f"Content-Length: {CAP + 1}\r\n".encode(), b"x" * (CAP + 1)))
    chunk = b"x" * (CAP + 1)
    chunked = b"%x\r\n" % len(chunk) + chunk + b"\r\n0\r\n\r\n"
    expect(413, "e.p.xfer.too-big", post(b"/didcomm", b"Transfer-Encoding: chunked\r\n", chunked))
    expect(400, "e.p.msg", post(b"/didcomm", b"Transfer-Encoding: chunked\r\n", b"zz\r\nnot a chunk\r\n0\r\n\r\n"))
    expect(400, "e.p.msg", post(b"/didcomm", b"Transfer-Encoding: gzip\r\n", b"{}"))
    expect(400, "e.p.msg", post(b"/didcomm", b"X-Big: " + b"a" * 20_000 + b"\r\n"))
    # POST / keeps the Decentrl error.
    status, _, body = post(b"/", f"Content-Length: {CAP + 1}\r\n".encode(), b"x" * (CAP + 1))
    assert (status, json.loads(body)) == (413, {"code": "PAYLOAD_TOO_LARGE", "type": "ERROR"})
    # The upstreams down: Granian for POST /didcomm and the invitation, Daphne for /didcomm/ws.
    layout["ctl"]("stop", "granian")
    expect(503, "e.p.me.unavailable", post(b"/didcomm", b"Content-Length: 2\r\n", b"{}"))
    expect(503, "e.p.me.unavailable", _raw(port, b"GET /didcomm/invitation HTTP/1.1\r\nHost: " + host + b"\r\n\r\n"))
    layout["ctl"]("stop", "daphne")
    upgrade = b"GET /didcomm/ws HTTP/1.1\r\nHost: " + host + b"\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"
    expect(503, "e.p.me.unavailable", _raw(port, upgrade))


def test_nginx_errors_carry_the_applications_cors_headers(tmp_path):
    """A browser client must be able to read an error nginx made itself: its replies carry the
    CORS headers the application gives (MEDIATOR_CORS_ORIGINS, apps/decentrl/middleware.py),
    here for a list of origins: an allowed origin is echoed with Vary, another gets none. nginx
    alone with the rendered configuration, its upstreams down (MEDIATOR_UNAVAILABLE) and a body
    over its cap (PAYLOAD_TOO_LARGE)."""
    subprocess.run([str(ROOT / "scripts" / "ensure_extra_nginx.sh")], check=True, capture_output=True)
    port, http_port, ws_port = free_port(), free_port(), free_port()
    run_dir = tmp_path / "run"
    env = layout_env(
        port,
        http_port,
        ws_port,
        run_dir,
        {
            "MEDIATOR_CORS_ORIGINS": "https://wallet.example,http://localhost:3000",
            "MEDIATOR_MAX_BODY_BYTES": str(CAP),
        },
    )
    subprocess.run(
        [str(ROOT / "scripts" / "run_production.sh"), "render"], cwd=ROOT, env=env, check=True, capture_output=True
    )
    nginx = subprocess.Popen(
        ["nginx", "-c", str(run_dir / "nginx.conf"), "-g", "daemon off;"], env=env, start_new_session=True
    )
    host = f"127.0.0.1:{port}".encode()
    try:
        deadline = time.time() + 10
        while time.time() < deadline:
            try:
                _raw(port, b"GET /health HTTP/1.1\r\nHost: " + host + b"\r\nConnection: close\r\n\r\n")
                break
            except OSError:
                time.sleep(0.1)

        def post(origin: bytes, body: bytes) -> tuple[int, dict[str, str], bytes]:
            head = b"POST / HTTP/1.1\r\nHost: " + host + b"\r\nConnection: close\r\nOrigin: " + origin + b"\r\n"
            return _raw(port, head + b"Content-Length: %d\r\n\r\n" % len(body) + body)

        cors = {
            "access-control-allow-origin": "https://wallet.example",
            "vary": "Origin",
            "access-control-allow-methods": "GET, POST, OPTIONS",
            "access-control-allow-headers": "Content-Type",
            "access-control-max-age": "86400",
        }
        for body, status, code in ((b"{}", 503, "MEDIATOR_UNAVAILABLE"), (b"x" * (CAP + 1), 413, "PAYLOAD_TOO_LARGE")):
            got, headers, reply = post(b"https://wallet.example", body)
            assert (got, json.loads(reply)) == (status, {"code": code, "type": "ERROR"})
            assert {name: headers.get(name) for name in cors} == cors
            got, headers, reply = post(b"https://evil.example", body)
            assert (got, json.loads(reply)) == (status, {"code": code, "type": "ERROR"})
            assert {name: headers.get(name) for name in cors} == dict.fromkeys(cors)
    finally:
        os.killpg(nginx.pid, signal.SIGTERM)
        nginx.wait(timeout=10)
