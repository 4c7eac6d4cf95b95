"""Socket frames over Daphne's own 1 MiB default, on a real Daphne started as every layout starts
it (`python -m mediator_project.socket_server`): the application's cap governs, not Daphne's.

- `/didcomm/ws`: a 2 MiB forward is stored, as the same bytes are over `POST /didcomm`; a frame
  over the deployment's cap gets `e.p.xfer.too-big` and the socket stays open;
- `/ws`: a 2 MiB first frame is answered AUTH_FAILED INVALID_MESSAGE with its close code, not
  dropped without a close frame.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from django.conf import settings

from tests.support.didcomm_agent import PICKUP, Agent, forward_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

PROBLEM = "https://didcomm.org/report-problem/2.0/problem-report"
MIB = 1024 * 1024


@pytest.fixture
def deploy(deployment):
    return deployment()


def _forward_of(rcpt: Agent, mediator_did: str, size: int) -> bytes:
    """A forward to `rcpt` of about `size` bytes."""
    inner = json.loads(
        Agent().pack({"id": "big", "type": "https://example.org/blob", "body": {"b": "A" * size}}, rcpt.did)
    )
    return forward_for(rcpt, mediator_did, inner)


def test_a_didcomm_socket_takes_frames_up_to_the_applications_cap_and_answers_one_over_it(deploy):
    assert settings.MEDIATOR_MAX_BODY_BYTES == 6 * MIB  # the cap the docs promise
    wallet, rcpt = deploy.grant()
    forward = _forward_of(rcpt, deploy.mediator_did, 2 * MIB)
    assert 2 * MIB < len(forward) < 6 * MIB
    ping = wallet.message("https://didcomm.org/trust-ping/2.0/ping", {"response_requested": True})

    async def body():
        async with deploy.socket() as ws:
            await ws.send(forward.decode())  # a forward answers nothing
            await ws.send("x" * (6 * MIB + 1))  # over the cap: a problem report, the socket stays open
            report = json.loads(await asyncio.wait_for(ws.recv(), 30))
            assert (report["type"], report["body"]["code"]) == (PROBLEM, "e.p.xfer.too-big")
            await ws.send(wallet.pack(ping, deploy.mediator_did))
            pong, _ = wallet.unpack(await asyncio.wait_for(ws.recv(), 10))
            assert pong["thid"] == ping["id"]

    asyncio.run(body())
    status = deploy.send(wallet, wallet.message(PICKUP + "status-request", {"recipient_did": rcpt.did}))
    assert status["body"]["message_count"] == 1


def test_a_ws_first_frame_over_a_mib_is_answered_not_dropped(deploy):
    async def body():
        async with deploy.socket("/ws") as ws:
            await ws.send("x" * (2 * MIB))
            answer = json.loads(await asyncio.wait_for(ws.recv(), 30))
            await ws.wait_closed()
            return answer, ws.close_code

    assert asyncio.run(body()) == ({"type": "AUTH_FAILED", "code": "INVALID_MESSAGE"}, 4002)


@pytest.mark.parametrize("path", ["/didcomm/ws", "/ws"])
def test_a_frame_over_the_servers_limit_is_closed_with_1009_not_dropped(deployment, path):
    """Over Daphne's limit (twice the cap, mediator_project/socket_server.py) the frame never reaches
    the application: the socket is closed with 1009 (message too big, RFC 6455 §7.4.1), as a client
    needs to know why, instead of the TCP connection being dropped without a close frame. A small cap
    keeps the frame small."""
    cap = 64 * 1024
    deploy = deployment(env={"MEDIATOR_MAX_BODY_BYTES": str(cap)})

    async def body():
        async with deploy.socket(path) as ws:
            await ws.send("x" * (2 * cap + 1))
            await asyncio.wait_for(ws.wait_closed(), 30)
            return ws.close_code

    assert asyncio.run(body()) == 1009
