"""The simulated cluster's balancer (deploy/cluster/haproxy.cfg.template, rendered by
scripts/cluster/render_lb.sh) answers its own errors as the protocol does, with the CORS headers the
application gives (MEDIATOR_CORS_ORIGINS, apps/decentrl/middleware.py), so that a browser wallet
calling POST / or POST /didcomm cross-origin can read them. HAProxy alone on loopback: app1 a stub
node whose /health answers ok and which closes every other request unanswered (the balancer's 502),
app2 nothing at all; then both taken out of service (its 503)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.support.servers import ROOT, free_port

pytestmark = pytest.mark.e2e

HAPROXY = shutil.which("haproxy") or "/usr/sbin/haproxy"
TENANT_HOST = "mediator.cluster.test"
ORIGINS = "https://wallet.example,http://localhost:3000"
CORS = {
    "access-control-allow-origin": "https://wallet.example",
    "vary": "Origin",
    "access-control-allow-methods": "GET, POST, OPTIONS",
    "access-control-allow-headers": "Content-Type",
    "access-control-max-age": "86400",
}
PROBLEM = "https://didcomm.org/report-problem/2.0/problem-report"


def _stub_node(listener: socket.socket) -> None:
    """A node whose /health is ok and which closes any other request without a reply."""
    while True:
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        with conn:
            head = b""
            while b"\r\n\r\n" not in head and (chunk := conn.recv(65536)):
                head += chunk
            if head.startswith(b"GET /health "):
                body = b'{"status": "ok"}'
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body)


def _admin(sock_path: Path, command: str) -> str:
    """One command on HAProxy's stats socket (level admin)."""
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(5)
        s.connect(str(sock_path))
        s.sendall(command.encode() + b"\n")
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    return data.decode()


def _state(sock_path: Path, server: str) -> str:
    for line in _admin(sock_path, "show stat").splitlines():
        cols = line.split(",")
        if len(cols) > 17 and cols[0] == "apps" and cols[1] == server:
            return cols[17]
    return "?"


@pytest.fixture
def balancer(tmp_path):
    if not Path(HAPROXY).exists():
        pytest.skip("haproxy is not installed (scripts/cluster/install.sh)")
    (tmp_path / "lb").mkdir()
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    threading.Thread(target=_stub_node, args=(listener,), daemon=True).start()
    port = free_port()
    env = {
        **os.environ,
        "CLUSTER_DIR": str(tmp_path),
        "DJANGO_SETTINGS_MODULE": "mediator_project.settings_test",
        "MEDIATOR_CORS_ORIGINS": ORIGINS,
    }
    config = subprocess.run(
        [
            str(ROOT / "scripts" / "cluster" / "render_lb.sh"),
            f"127.0.0.1:{port}",
            f"127.0.0.1:{listener.getsockname()[1]}",
            f"127.0.0.1:{free_port()}",
            TENANT_HOST,
        ],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    (tmp_path / "lb" / "haproxy.cfg").write_text(config)
    proc = subprocess.Popen([HAPROXY, "-db", "-f", str(tmp_path / "lb" / "haproxy.cfg")], start_new_session=True)
    sock_path = tmp_path / "lb" / "haproxy.sock"
    try:
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                if _state(sock_path, "app1") == "UP":
                    break
            except OSError:
                pass
            time.sleep(0.1)
        else:
            pytest.fail("the balancer did not see app1 up within 15 s")
        yield f"http://127.0.0.1:{port}", sock_path
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)
        listener.close()


def _post(url: str, path: str, origin: str) -> httpx.Response:
    return httpx.post(
        url + path,
        content=b"{}",
        headers={"Host": TENANT_HOST, "Origin": origin, "Content-Type": "application/json"},
        timeout=10,
    )


def _assert_protocol_error(resp: httpx.Response, path: str) -> None:
    assert (resp.status_code, resp.headers["content-type"]) == (503, "application/json")
    if path == "/":
        assert json.loads(resp.content) == {"code": "MEDIATOR_UNAVAILABLE", "type": "ERROR"}
    else:
        report = json.loads(resp.content)
        assert (report["type"], report["body"]["code"]) == (PROBLEM, "e.p.me.unavailable")
        assert isinstance(report["id"], str) and report["id"]


def test_the_balancers_own_errors_carry_the_applications_cors_headers(balancer):
    url, sock_path = balancer
    # A node closing the connection (502) or none in service (503): both answered 503, the
    # allowed origin echoed with Vary, another origin given none of the headers.
    for phase in ("node failed mid-request", "no node in service"):
        if phase == "no node in service":
            _admin(sock_path, "disable server apps/app1")
            _admin(sock_path, "disable server apps/app2")
        for path in ("/", "/didcomm"):
            resp = _post(url, path, "https://wallet.example")
            _assert_protocol_error(resp, path)
            assert {name: resp.headers.get(name) for name in CORS} == CORS, (phase, path)
            resp = _post(url, path, "https://evil.example")
            _assert_protocol_error(resp, path)
            assert {name: resp.headers.get(name) for name in CORS} == dict.fromkeys(CORS), (phase, path)
