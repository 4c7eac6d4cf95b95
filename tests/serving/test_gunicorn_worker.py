"""The production HTTP tier's worker class (mediator_project/gunicorn_worker.py) in a real
gunicorn process: a kept-alive connection's next request is served by the same thread when it
comes within the linger; pipelined requests are answered in order; a connection held by a
lingering thread never starves another connection; and a client closing a lingered connection
costs nothing. The production layout test (tests/e2e/test_production_layout.py) runs the whole
protocol through this worker too.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.servers import ROOT, free_port

pytestmark = pytest.mark.e2e

WORKER = "mediator_project.gunicorn_worker.LingeringThreadWorker"


def start(tmp_path: Path, *, threads: int, linger_ms: int, worker: str = WORKER):
    port = free_port()
    log = tmp_path / f"gunicorn-{port}.log"
    env = dict(os.environ, GUNICORN_KEEPALIVE_LINGER_MS=str(linger_ms), PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gunicorn",
            "-b",
            f"127.0.0.1:{port}",
            "-w",
            "1",
            "--threads",
            str(threads),
            "-k",
            worker,
            "--keep-alive",
            "30",
            "--chdir",
            str(ROOT),
            "tests.serving.threadapp:application",
        ],  # fmt: skip
        env=env,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    deadline = time.time() + 30
    while time.time() < deadline:
        assert proc.poll() is None, log.read_text()
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.1)
    return proc, port, log


def stop(proc) -> None:
    os.killpg(proc.pid, signal.SIGTERM)
    proc.wait(timeout=20)


@pytest.fixture
def server(tmp_path):
    procs = []

    def run(**kw):
        proc, port, log = start(tmp_path, **kw)
        procs.append(proc)
        return port, log

    yield run
    for proc in procs:
        stop(proc)


def request(path: str = "/", body: bytes = b"x") -> bytes:
    return f"POST {path} HTTP/1.1\r\nHost: t\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body


def read_responses(sock: socket.socket, count: int) -> list[tuple[int, str]]:
    """`count` responses from `sock`: (status, body) each."""
    buf, out = b"", []
    while len(out) < count:
        while b"\r\n\r\n" not in buf:
            chunk = sock.recv(65536)
            assert chunk, f"connection closed after {len(out)} responses"
            buf += chunk
        head, _, buf = buf.partition(b"\r\n\r\n")
        lines = head.decode().split("\r\n")
        length = next(int(ln.split(":", 1)[1]) for ln in lines if ln.lower().startswith("content-length:"))
        while len(buf) < length:
            buf += sock.recv(65536)
        out.append((int(lines[0].split()[1]), buf[:length].decode()))
        buf = buf[length:]
    return out


def connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def test_next_request_within_the_linger_is_served_by_the_same_thread(server):
    port, _ = server(threads=4, linger_ms=2000)
    with connect(port) as sock:
        seen = []
        for i in range(6):
            sock.sendall(request(f"/r{i}", b"a" * i))
            [(status, body)] = read_responses(sock, 1)
            thread, path, length = body.split()
            assert (status, path, int(length)) == (200, f"/r{i}", i)
            seen.append(thread)
    assert len(set(seen)) == 1, seen


def test_pipelined_requests_are_answered_in_order(server):
    port, _ = server(threads=2, linger_ms=50)
    with connect(port) as sock:
        sock.sendall(request("/p1", b"12") + request("/p2", b"345") + request("/p3"))
        got = [(status, body.split()[1], int(body.split()[2])) for status, body in read_responses(sock, 3)]
    assert got == [(200, "/p1", 2), (200, "/p2", 3), (200, "/p3", 1)]


def test_a_lingering_thread_does_not_starve_another_connection(server):
    """One thread, two connections: while the thread lingers on A (idle after its first request),
    B's request is served within the linger, and A is still served afterwards."""
    linger_ms = 400
    port, _ = server(threads=1, linger_ms=linger_ms)
    with connect(port) as a, connect(port) as b:
        a.sendall(request("/a1"))
        assert read_responses(a, 1)[0][1].split()[1] == "/a1"
        started = time.monotonic()
        b.sendall(request("/b1"))
        [(status, body)] = read_responses(b, 1)
        waited = time.monotonic() - started
        assert (status, body.split()[1]) == (200, "/b1")
        assert waited < linger_ms / 1000 + 1.0  # at most one linger plus scheduling
        a.sendall(request("/a2"))
        assert read_responses(a, 1)[0][1].split()[1] == "/a2"
        b.sendall(request("/b2"))
        assert read_responses(b, 1)[0][1].split()[1] == "/b2"


def test_no_linger_while_other_connections_wait(server):
    """Two threads, three connections with slow requests in flight: every request is answered,
    none waits behind an idle lingering connection for the whole linger."""
    port, _ = server(threads=2, linger_ms=5000)
    socks = [connect(port) for _ in range(3)]
    try:
        started = time.monotonic()
        for i, s in enumerate(socks):
            s.sendall(request("/slow", str(i).encode()))
        bodies = sorted(read_responses(s, 1)[0][1].split()[2] for s in socks)
        elapsed = time.monotonic() - started
    finally:
        for s in socks:
            s.close()
    assert bodies == ["1", "1", "1"]
    assert elapsed < 5.0  # two rounds of 0.3 s, not a 5 s linger


def test_client_closing_a_lingered_connection(server):
    port, log = server(threads=1, linger_ms=3000)
    a = connect(port)
    a.sendall(request("/c1"))
    assert read_responses(a, 1)[0][0] == 200
    a.close()  # the thread is lingering on it: it sees the close and moves on
    with connect(port) as b:
        b.sendall(request("/c2"))
        assert read_responses(b, 1)[0][1].split()[1] == "/c2"
    assert "Traceback" not in log.read_text()


def test_linger_zero_is_stock_behaviour(server):
    port, _ = server(threads=2, linger_ms=0)
    with connect(port) as sock:
        for i in range(3):
            sock.sendall(request(f"/z{i}"))
            assert read_responses(sock, 1)[0][1].split()[1] == f"/z{i}"
