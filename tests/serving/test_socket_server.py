"""`python -m mediator_project.socket_server`, how every layout starts Daphne: its WebSocket message
limits are above the application's body cap, so that the cap governs (the real frames are sent in
tests/didcomm/app/test_e2e_socket_frames.py), and an option given on the command line still wins."""

from __future__ import annotations

import asyncio
import signal
import socket
import time
from types import SimpleNamespace

import httpx
import pytest
from twisted.internet import defer
from websockets.asyncio.client import connect

from mediator_project import socket_server
from tests.support.servers import free_port, start_daphne


def test_daphnes_message_limits_are_twice_the_body_cap(settings):
    settings.MEDIATOR_MAX_BODY_BYTES = 6 * 1024 * 1024
    assert socket_server.arguments(["-b", "127.0.0.1", "-p", "8001"]) == [
        "--websocket-max-message-size",
        str(12 * 1024 * 1024),
        "--websocket-max-frame-size",
        str(12 * 1024 * 1024),
        "-b",
        "127.0.0.1",
        "-p",
        "8001",
        "mediator_project.asgi:application",
    ]


def test_options_and_an_application_given_on_the_command_line_come_last_and_win(settings):
    args = socket_server.arguments(["--websocket-max-message-size", "5", "other.asgi:application"])
    assert args[-3:] == ["--websocket-max-message-size", "5", "other.asgi:application"]
    assert args.count("mediator_project.asgi:application") == 0


def test_a_tcp_port_listens_with_a_long_backlog_and_reuse_port_binds_it_with_so_reuseport():
    assert socket_server.endpoint_strings(False)(host="127.0.0.1", port=8001) == [
        "tcp:port=8001:interface=127.0.0.1:backlog=4096"
    ]
    (endpoint,) = socket_server.endpoint_strings(True)(host="127.0.0.1", port=0)
    fd = int(endpoint.removeprefix("fd:fileno="))
    with socket.socket(fileno=fd) as sock:
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT) == 1
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN) == 1


def test_a_handshake_not_accepted_within_the_connect_timeout_is_refused_with_503_not_403():
    protocol = socket_server.ServerWebSocketProtocol()
    disconnected = []
    protocol.server = SimpleNamespace(
        websocket_connect_timeout=5, websocket_timeout=-1, protocol_disconnected=disconnected.append
    )
    protocol.state = protocol.STATE_CONNECTING
    protocol.socket_opened = time.time() - 6
    protocol.handshake_deferred = defer.Deferred()
    refusals = []
    protocol.handshake_deferred.addErrback(lambda failure: refusals.append(failure.value))
    protocol.check_timeouts()
    assert [(r.code, r.reason) for r in refusals] == [(503, "Service Unavailable")]
    assert disconnected == [protocol]


@pytest.mark.e2e
@pytest.mark.django_db(transaction=True)
def test_a_post_body_daphne_cannot_parse_as_a_form_reaches_the_application_as_under_granian(tmp_path):
    """Twisted parses a POST form body for Daphne, which never reads the result (socket_server.Request);
    a body that is not the multipart its Content-Type says was answered by Twisted: a bare 400, the
    connection dropped. The application answers it, as it does behind Granian."""
    from apps.tenants.services import tenant_create

    port = free_port()
    tenant_create(slug="daphne", domain=f"127.0.0.1:{port}", public_url=f"http://127.0.0.1:{port}")
    server = start_daphne(tmp_path, port=port)
    try:
        for ctype in ("multipart/form-data; boundary=x", "application/x-www-form-urlencoded"):
            r = httpx.post(server.url + "/", content=b"{}", headers={"Content-Type": ctype}, timeout=10)
            assert (r.status_code, r.json()) == (400, {"type": "ERROR", "code": "INVALID_COMMAND"}), ctype
    finally:
        server.stop()


@pytest.mark.e2e
@pytest.mark.django_db(transaction=True)
def test_sigterm_closes_every_open_socket_with_1012_before_daphne_stops(tmp_path):
    """A restart or a scale-in (SIGTERM) gives each open /ws and /didcomm/ws socket a close frame,
    1012 (service restart), so its client reconnects elsewhere; Daphne alone dropped them (1006)."""
    from apps.tenants.services import tenant_create

    port = free_port()
    host = f"127.0.0.1:{port}"
    tenant_create(slug="draining", domain=host, public_url=f"http://{host}")
    server = start_daphne(tmp_path, port=port, wait_host=host)

    async def sigterm_while_open() -> list[tuple[int | None, bool]]:
        sockets = [
            await connect(f"ws://{host}{path}", open_timeout=10, ping_interval=None, proxy=None)
            for path in ("/ws", "/didcomm/ws")
        ]
        server.proc.send_signal(signal.SIGTERM)
        for sock in sockets:
            await asyncio.wait_for(sock.wait_closed(), 10)
        return [(sock.close_code, sock.protocol.close_rcvd is not None) for sock in sockets]

    try:
        assert asyncio.run(sigterm_while_open()) == [(1012, True), (1012, True)]
        assert server.proc.wait(timeout=15) == 0
    finally:
        server.stop()
