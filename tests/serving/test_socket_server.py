"""`python -m mediator_project.socket_server`, how every layout starts Daphne: its WebSocket message
limits are above the application's body cap, so that the cap governs (the real frames are sent in
tests/didcomm/app/test_e2e_socket_frames.py), and an option given on the command line still wins."""

from __future__ import annotations

import asyncio
import signal

import httpx
import pytest
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
