"""A socket server over its capacity refuses by policy, on a real Daphne (apps/realtime/admission.py):
over MEDIATOR_WS_MAX_ADMITTING sockets being admitted, or MEDIATOR_WS_MAX_SOCKETS open, a new socket
is accepted and answered in its protocol's words (`/ws`: ERROR MEDIATOR_UNAVAILABLE; `/didcomm/ws`:
an `e.p.me.unavailable` problem report) and closed with 1013 and a retry hint, never an HTTP status;
a place freed is taken again."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from apps.tenants.services import tenant_create
from apps.wire.client import Identity, MediatorClient
from apps.wire.ws import MediatorSocket
from tests.support.didcomm_agent import Agent
from tests.support.servers import free_port, start_daphne

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

PROBLEM = "https://didcomm.org/report-problem/2.0/problem-report"
TRUST_PING = "https://didcomm.org/trust-ping/2.0/ping"
REASON = "try again in 7 s"


async def _refusal(ws) -> tuple[str, int | None, str | None]:
    """(ERROR code or problem code, close code, close reason) of a socket the server refuses."""
    frame = json.loads(await asyncio.wait_for(ws.recv(), 30))
    try:
        await asyncio.wait_for(ws.recv(), 30)
    except ConnectionClosed:
        pass
    code = frame["body"]["code"] if frame.get("type") == PROBLEM else frame["code"]
    return code, ws.close_code, ws.close_reason


def test_over_capacity_a_socket_of_either_protocol_is_refused_with_1013_and_a_freed_place_is_taken(
    transactional_db, tmp_path
):
    port = free_port()
    host = f"127.0.0.1:{port}"
    tenant = tenant_create(slug="cap", domain=host)
    env = {"MEDIATOR_WS_MAX_SOCKETS": "2", "MEDIATOR_WS_MAX_ADMITTING": "1", "MEDIATOR_WS_RETRY_AFTER_S": "7"}
    server = start_daphne(tmp_path, port=port, env=env, wait_host=host)
    http = MediatorClient(f"http://{host}", host=host)
    alice, bob = Identity.create("alice", tenant.did), Identity.create("bob", tenant.did)
    http.register(alice)
    http.register(bob)
    wallet = Agent()
    mediator_did = http.http.get(f"http://{host}/didcomm/invitation").json()["from"]

    def didcomm_ws():
        return connect(f"ws://{host}/didcomm/ws", compression=None, proxy=None, ping_interval=None)

    async def ws():
        return await MediatorSocket.open(f"ws://{host}/ws")

    async def body():
        pending = await ws()  # connected, AUTHENTICATE not sent: the one socket being admitted
        by_admitting = [await _refusal((await ws()).conn), await _refusal(await didcomm_ws())]
        assert (await pending.authenticate(alice))["type"] == "AUTH_SUCCESS"
        live = await didcomm_ws()  # the second open socket, admitted once its trust ping is answered
        await live.send(wallet.pack(wallet.message(TRUST_PING, {"response_requested": True}), mediator_did))
        pong, _ = wallet.unpack(await asyncio.wait_for(live.recv(), 30))
        by_open = [await _refusal((await ws()).conn), await _refusal(await didcomm_ws())]
        await pending.close()
        # The freed place is taken once the server has seen the close (a refusal until then).
        deadline = time.monotonic() + 30
        while True:
            sock = await ws()
            reply = await sock.authenticate(bob)
            if reply["type"] == "AUTH_SUCCESS" or time.monotonic() > deadline:
                break
            await sock.wait_closed()
        await sock.close()
        await live.close()
        return by_admitting, pong["type"], by_open, reply

    try:
        by_admitting, pong, by_open, reply = asyncio.run(body())
    finally:
        http.close()
        server.stop()
    refused_ws = ("MEDIATOR_UNAVAILABLE", 1013, REASON)
    refused_didcomm = ("e.p.me.unavailable", 1013, REASON)
    assert by_admitting == [refused_ws, refused_didcomm]
    assert pong == "https://didcomm.org/trust-ping/2.0/ping-response"
    assert by_open == [refused_ws, refused_didcomm]
    assert reply == {"type": "AUTH_SUCCESS"}
    assert "Traceback" not in server.log()


def test_two_socket_processes_serve_one_port_with_reuse_port_and_one_stopping_leaves_the_other(
    transactional_db, tmp_path
):
    port = free_port()
    host = f"127.0.0.1:{port}"
    tenant = tenant_create(slug="pair", domain=host)
    first, second = (
        start_daphne(tmp_path, port=port, wait_host=host, args=("--reuse-port",), log_name=f"daphne-{n}.log")
        for n in ("first", "second")
    )
    http = MediatorClient(f"http://{host}", host=host)
    alice = Identity.create("alice", tenant.did)
    http.register(alice)

    async def authenticated() -> dict:
        sock = await MediatorSocket.open(f"ws://{host}/ws")
        reply = await sock.authenticate(alice)
        await sock.close()
        return reply

    try:
        # /health answered, but maybe by the first: the second is serving once it listens.
        deadline = time.monotonic() + 30
        while "Listening on TCP address" not in second.log() and time.monotonic() < deadline:
            assert second.proc.poll() is None, second.log()
            time.sleep(0.1)
        first.stop()
        replies = [asyncio.run(authenticated()) for _ in range(3)]
    finally:
        http.close()
        first.stop()
        second.stop()
    assert replies == [{"type": "AUTH_SUCCESS"}] * 3
    assert first.proc.returncode == 0
