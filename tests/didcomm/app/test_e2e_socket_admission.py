"""`/didcomm/ws` admission and idleness on a real Daphne: the per-address connect limit of `/ws`
(one window for both socket paths), and a socket that is not in use (no live client, no frame the
mediator accepted for MEDIATOR_DIDCOMM_WS_IDLE_TIMEOUT_S) is closed with a problem report and 4408;
a live socket, and one whose frames keep being accepted, stay open."""

from __future__ import annotations

import asyncio
import contextlib
import json

import pytest
from websockets.exceptions import ConnectionClosed

from tests.support.didcomm_agent import CM2, PICKUP, Agent

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

PROBLEM = "https://didcomm.org/report-problem/2.0/problem-report"
IDLE_S = 3


async def _refusal(ws) -> tuple[str, int]:
    """(problem code or ERROR code, close code) of a socket the server refuses or closes."""
    frame = json.loads(await asyncio.wait_for(ws.recv(), 30))
    await asyncio.wait_for(ws.wait_closed(), 30)
    code = frame["body"]["code"] if frame.get("type") == PROBLEM else frame["code"]
    return code, ws.close_code


def test_didcomm_upgrades_count_against_the_connect_limit_of_ws(deployment):
    # The in-process limiter: a fresh window per Daphne whatever ran before on the shared Redis.
    # A burst of 3 upgrades, then one a minute: the fourth within the test is refused.
    env = {
        "MEDIATOR_WS_CONNECT_PER_IP": "1",
        "MEDIATOR_WS_CONNECT_PER_IP_BURST": "3",
        "MEDIATOR_RATE_LIMIT_REDIS_URL": "",
    }
    deploy = deployment(env=env)
    wallet = Agent()
    ping = wallet.message("https://didcomm.org/trust-ping/2.0/ping", {"response_requested": True})

    async def body():
        admitted = [await deploy.socket() for _ in range(2)]
        admitted.append(await deploy.socket("/ws"))  # the third upgrade of this address
        refused = [await _refusal(await deploy.socket()), await _refusal(await deploy.socket("/ws"))]
        # The admitted ones were not touched.
        await admitted[0].send(wallet.pack(ping, deploy.mediator_did))
        pong, _ = wallet.unpack(await asyncio.wait_for(admitted[0].recv(), 10))
        for ws in admitted:
            await ws.close()
        return pong["thid"], refused

    thid, refused = asyncio.run(body())
    assert thid == ping["id"]
    assert refused == [("e.p.xfer.rate-limited", 4029), ("RATE_LIMITED", 4029)]


def test_a_socket_not_in_use_is_closed_after_the_idle_timeout_and_a_live_or_busy_one_stays(deployment):
    deploy = deployment(env={"MEDIATOR_DIDCOMM_WS_IDLE_TIMEOUT_S": str(IDLE_S)})
    wallet = Agent()
    deploy.send(wallet, wallet.message(CM2 + "mediate-request"))

    def ping() -> bytes:
        return wallet.pack(
            wallet.message("https://didcomm.org/trust-ping/2.0/ping", {"response_requested": True}),
            deploy.mediator_did,
        )

    async def pong(ws) -> str:
        return wallet.unpack(await asyncio.wait_for(ws.recv(), 10))[0]["type"]

    async def body():
        live = await deploy.socket()
        await live.send(
            wallet.pack(wallet.message(PICKUP + "live-delivery-change", {"live_delivery": True}), deploy.mediator_did)
        )
        assert wallet.unpack(await asyncio.wait_for(live.recv(), 10))[0]["body"]["live_delivery"] is True
        busy = await deploy.socket()  # its frames are accepted: each keeps it open
        garbage = await deploy.socket()  # its frames are refused: they do not
        idle = await deploy.socket()  # opened last: the others' deadlines without use came before its own
        idle_closed = asyncio.create_task(_refusal(idle))

        async def keep_busy() -> int:
            pongs = 0
            while not idle_closed.done():  # accepted frames, one after the other, until `idle` closes
                await busy.send(ping())
                assert await pong(busy) == "https://didcomm.org/trust-ping/2.0/ping-response"
                pongs += 1
                await asyncio.sleep(0.1)
            return pongs

        busy_pongs = asyncio.create_task(keep_busy())
        garbage_answers = []
        while True:  # refused frames until the server closes it: before `idle`, which opened later
            with contextlib.suppress(ConnectionClosed):  # closed meanwhile: its report is read below
                await garbage.send("not a message")
            frame = json.loads(await asyncio.wait_for(garbage.recv(), 30))
            garbage_answers.append(frame["body"]["code"])
            if frame["body"]["code"] != "e.p.msg":
                break
            assert not idle_closed.done()
            await asyncio.sleep(0.1)
        await asyncio.wait_for(garbage.wait_closed(), 30)
        idle_refusal, pongs = await idle_closed, await busy_pongs
        # Both still open: the live socket (opened first, no frame since) and the busy one.
        for ws in (live, busy):
            await ws.send(ping())
            assert await pong(ws) == "https://didcomm.org/trust-ping/2.0/ping-response"
            await ws.close()
        return idle_refusal, (garbage_answers[-1], garbage.close_code), pongs

    idle, garbage, busy_pongs = asyncio.run(body())
    assert idle == ("e.p.xfer.idle-timeout", 4408)
    assert garbage == ("e.p.xfer.idle-timeout", 4408)
    assert busy_pongs > 1
