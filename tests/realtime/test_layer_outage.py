"""A channel-layer (Redis) outage on real Daphne sockets, with a private `redis-server` the test
stops: open sockets, and upgrades made during the outage, get their protocol's refusal, never a
1011 or a Daphne traceback. `/ws`: `{"type":"ERROR","code":"MEDIATOR_UNAVAILABLE"}`, close 4503;
`/didcomm/ws`: an `e.p.me.unavailable` problem report, close 4503. Nothing stored is lost: the
events stay pending (docs/realtime.md)."""

from __future__ import annotations

import asyncio
import json

import pytest
from websockets.asyncio.client import connect

from apps.wire.ws import MediatorSocket
from tests.support.didcomm_agent import CM2, ENCRYPTED, PICKUP, Agent
from tests.support.servers import start_redis

from .test_daphne import Deployment

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

PROBLEM = "https://didcomm.org/report-problem/2.0/problem-report"
WS_REFUSAL = ({"type": "ERROR", "code": "MEDIATOR_UNAVAILABLE"}, 4503)


def _didcomm_socket(d: Deployment):
    return connect(
        f"ws://{d.host}/didcomm/ws", host="127.0.0.1", port=d.ports[0], proxy=None, ping_interval=None, max_size=None
    )


async def _ws_refusal(sock: MediatorSocket) -> tuple[dict, int]:
    frame = await sock.recv(30)
    return frame, await sock.wait_closed()


async def _didcomm_refusal(ws) -> tuple[str, int]:
    frame = json.loads(await asyncio.wait_for(ws.recv(), 30))
    await asyncio.wait_for(ws.wait_closed(), 30)
    return (frame["type"] == PROBLEM and frame["body"]["code"]), ws.close_code


def test_a_redis_outage_closes_open_sockets_and_refuses_upgrades_in_each_protocols_words(transactional_db, tmp_path):
    redis_server = start_redis(tmp_path)
    d = Deployment(tmp_path, env={"REDIS_URL": redis_server.url})
    try:
        alice, bob = d.pair()
        mediator_did = d.clients[0].http.get(d.clients[0].base_url + "/didcomm/invitation").json()["from"]
        wallet = Agent()

        def didcomm_send(message: dict) -> None:
            body = wallet.pack(message, mediator_did)
            resp = d.clients[0].http.post(
                d.clients[0].base_url + "/didcomm", content=body, headers={"Content-Type": ENCRYPTED}
            )
            assert resp.status_code == 200, resp.text

        didcomm_send(wallet.message(CM2 + "mediate-request"))

        async def body():
            open_ws = await d.socket(bob)
            open_didcomm = await _didcomm_socket(d)
            live = wallet.message(PICKUP + "live-delivery-change", {"live_delivery": True})
            await open_didcomm.send(wallet.pack(live, mediator_did).decode())
            assert wallet.unpack(await asyncio.wait_for(open_didcomm.recv(), 10))[0]["body"]["live_delivery"]

            await asyncio.to_thread(redis_server.stop)
            closed = [await _ws_refusal(open_ws), await _didcomm_refusal(open_didcomm)]
            refused = [
                await _ws_refusal(await MediatorSocket.open(f"ws://{d.host}/ws", connect_to=("127.0.0.1", d.ports[0]))),
                await _didcomm_refusal(await _didcomm_socket(d)),
            ]
            return closed, refused

        closed, refused = asyncio.run(body())
        assert closed == refused == [WS_REFUSAL, ("e.p.me.unavailable", 4503)]
        assert "Traceback" not in d.servers[0].log()
    finally:
        d.close()
        redis_server.stop()
