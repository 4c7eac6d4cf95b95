"""Message Pickup 4.0 on `/didcomm/ws` of a real Daphne (Redis channel layer), both formats: every
request answered on the socket, refusals as problem-report frames, live mode that pushes only what
arrives (the queue before it is asked for), pushes that stay queued until messages-received (a socket
cut before its ack loses nothing: a later pickup gets the same id), and an unacknowledged push sent
again on the same socket once MEDIATOR_DIDCOMM_LIVE_ACK_TIMEOUT_S passed (the real clock; the exact
rules on an injected clock: test_live_ack.py)."""

from __future__ import annotations

import asyncio
import json

import pytest

from tests.didcomm.app.conftest import REDIS_DB_URL
from tests.support.didcomm_agent import Agent, forward_for
from tests.support.didcomm_agent_v1 import CM1, ENVELOPE, AgentV1, forward_to
from tests.support.layers import redis_channel_layers

pytestmark = [pytest.mark.e2e]
P4 = "https://didcomm.org/message-pickup/4.0/"
P4_PROBLEM = P4 + "problem-report"


@pytest.fixture
def deploy(deployment, settings):
    settings.CHANNEL_LAYERS = redis_channel_layers(REDIS_DB_URL)
    return deployment


async def _next(ws, open_) -> dict:
    return open_(await asyncio.wait_for(ws.recv(), 10))[0]


def test_v2_every_message_on_the_socket_and_live_mode_that_pushes_only_new_messages(deploy):
    d = deploy()
    wallet, rcpt = d.grant()
    assert d.post(forward_for(rcpt, d.mediator_did)).status_code == 202  # queued before live mode

    def frame(kind: str, body: dict | None = None, **kw) -> str:
        return wallet.pack(wallet.message(P4 + kind, body or {}, **kw), d.mediator_did).decode()

    async def body():
        async with d.socket() as ws:
            ask = wallet.message(P4 + "status-request")
            await ws.send(wallet.pack(ask, d.mediator_did).decode())
            status = await _next(ws, wallet.unpack)
            assert (status["type"], status["thid"], status["body"]["message_count"]) == (P4 + "status", ask["id"], 1)
            assert status["body"]["live_delivery"] is False
            await ws.send(frame("delivery-request", {"message_count_limit": 10}))
            [queued] = (await _next(ws, wallet.unpack))["attachments"]
            # Refusals are problem-report frames; the socket stays open.
            for kind, fields, route, code in (
                ("delivery-request", {"message_count_limit": 1}, None, "e.p.msg.return-route-required"),
                ("delivery-request", {"message_count_limit": 0}, "all", "e.p.msg.invalid-body"),
                ("live-delivery-change", {"live_delivery": "yes"}, "all", "e.p.msg.invalid-body"),
                ("status-request", {"recipient_did": Agent().did}, "all", "e.p.me.res.not-found"),
            ):
                await ws.send(frame(kind, fields, return_route=route))
                report = await _next(ws, wallet.unpack)
                assert (report["type"], report["body"]["code"]) == (P4_PROBLEM, code)
            ask = wallet.message(P4 + "live-delivery-change", {"live_delivery": True})
            await ws.send(wallet.pack(ask, d.mediator_did).decode())
            status = await _next(ws, wallet.unpack)
            assert (status["thid"], status["body"]["live_delivery"], status["body"]["message_count"]) == (
                ask["id"],
                True,
                1,
            )
            # A new message is pushed; the one queued before is not (it would come first).
            resp = await asyncio.to_thread(d.post, forward_for(rcpt, d.mediator_did))
            assert resp.status_code == 202
            pushed = await _next(ws, wallet.unpack)
            assert (pushed["type"], pushed["body"], "thid" in pushed) == (P4 + "delivery", {}, False)
            [fresh] = pushed["attachments"]
            assert fresh["id"] != queued["id"] and rcpt.unpack(fresh["data"]["json"])[0]["body"] == {"n": 1}
            # Acknowledged on the socket: no answer (the next frame is the status asked next).
            await ws.send(frame("messages-received", {"message_id_list": [fresh["id"]]}, return_route=None))
            await ws.send(frame("status-request"))
            status = await _next(ws, wallet.unpack)
            assert (status["type"], status["body"]["message_count"], status["body"]["live_delivery"]) == (
                P4 + "status",
                1,
                True,
            )
            await ws.send(frame("live-delivery-change", {"live_delivery": False}))
            assert (await _next(ws, wallet.unpack))["body"]["live_delivery"] is False
        # A socket cut before its ack: the push stays queued; a later pickup gets the same id.
        async with d.socket() as ws:
            await ws.send(frame("live-delivery-change", {"live_delivery": True}))
            assert (await _next(ws, wallet.unpack))["body"]["live_delivery"] is True
            assert (await asyncio.to_thread(d.post, forward_for(rcpt, d.mediator_did))).status_code == 202
            [cut] = (await _next(ws, wallet.unpack))["attachments"]
        return queued, cut

    queued, cut = asyncio.run(body())
    delivery = d.send(wallet, wallet.message(P4 + "delivery-request", {"message_count_limit": 10}))
    assert [a["id"] for a in delivery["attachments"]] == [queued["id"], cut["id"]]
    assert delivery["attachments"][1] == cut


def test_v1_format_on_the_socket_binary_frames(deploy):
    d = deploy()
    http = d.http[0]
    invitation = http.get("/didcomm/invitation?version=1").json()
    routing_key = invitation["services"][0]["recipientKeys"][0]
    agent, key = AgentV1(), AgentV1()

    def send(message: dict) -> dict | None:
        resp = http.post("/didcomm", content=agent.pack(message, routing_key), headers={"Content-Type": ENVELOPE})
        assert resp.status_code == 200, resp.text
        return agent.unpack(resp.content)[0] if resp.content else None

    send(agent.didx_request(invitation))
    assert send(agent.message(CM1 + "mediate-request"))["@type"] == CM1 + "mediate-grant"
    send(agent.message(CM1 + "keylist-update", updates=[{"recipient_key": key.did_key, "action": "add"}]))

    def frame(kind: str, route: str | None = "all", **fields) -> bytes:
        return agent.pack(agent.message(P4 + kind, return_route=route, **fields), routing_key)

    def forward(n: str) -> dict:
        inner = json.loads(AgentV1().pack({"@type": "https://didcomm.org/basicmessage/1.0/message", "@id": n},
                                          key.did_key))  # fmt: skip
        resp = http.post("/didcomm", content=forward_to(key.did_key, routing_key, inner),
                         headers={"Content-Type": ENVELOPE})  # fmt: skip
        assert resp.status_code == 200
        return inner

    early = forward("early")  # queued before the socket

    async def body():
        async with d.socket() as ws:
            ask = agent.message(P4 + "status-request", recipient_did=key.did_key)
            await ws.send(agent.pack(ask, routing_key))
            raw = await asyncio.wait_for(ws.recv(), 10)
            assert isinstance(raw, bytes)  # v1 answers are binary frames
            status = agent.unpack(raw)[0]
            assert {k: v for k, v in status.items() if k not in ("newest_received_time", "oldest_received_time")} == {
                "@type": P4 + "status",
                "@id": status["@id"],
                "recipient_did": key.did_key,
                "message_count": 1,
                "total_bytes": status["total_bytes"],
                "live_delivery": False,
                "~thread": {"thid": ask["@id"]},
            }
            await ws.send(frame("status-request", recipient_did=key.verkey))  # not a did:key
            report = await _next(ws, agent.unpack)
            assert (report["@type"], report["description"]["code"]) == (P4_PROBLEM, "e.p.msg.invalid-body")
            # A Pickup 4.0 request asking return_route "all" is not implicit pickup: no push came
            # between the answers, the next frame answers the delivery-request.
            ask = agent.message(P4 + "delivery-request", return_route="all", message_count_limit=5)
            await ws.send(agent.pack(ask, routing_key))
            delivery = await _next(ws, agent.unpack)
            assert (delivery["@type"], delivery["~thread"]) == (P4 + "delivery", {"thid": ask["@id"]})
            [queued] = delivery["~attach"]
            assert queued["data"] == {"json": early}
            await ws.send(frame("live-delivery-change", live_delivery=True))
            status = await _next(ws, agent.unpack)
            assert (status["@type"], status["live_delivery"], status["message_count"]) == (P4 + "status", True, 1)
            # Live: the new message only (the queued one is asked for, as above).
            inner = await asyncio.to_thread(forward, "live")
            pushed = await _next(ws, agent.unpack)
            assert sorted(pushed) == ["@id", "@type", "~attach"] and pushed["@type"] == P4 + "delivery"
            [att] = pushed["~attach"]
            assert att["data"] == {"json": inner}
            await ws.send(frame("messages-received", route=None, message_id_list=[att["@id"]]))
            await ws.send(frame("status-request"))
            assert (await _next(ws, agent.unpack))["message_count"] == 1
            await ws.send(frame("messages-received", route=None, message_id_list=[queued["@id"]]))
            await ws.send(frame("delivery-request", message_count_limit=5))
            assert (await _next(ws, agent.unpack))["~attach"] == []  # empty, at once

    asyncio.run(body())


def test_an_unacknowledged_live_delivery_is_sent_again_on_the_same_socket(deploy):
    d = deploy(env={"MEDIATOR_DIDCOMM_LIVE_ACK_TIMEOUT_S": "1"})
    wallet, rcpt = d.grant()

    def frame(kind: str, body: dict, **kw) -> str:
        return wallet.pack(wallet.message(P4 + kind, body, **kw), d.mediator_did).decode()

    async def body():
        async with d.socket() as ws:
            await ws.send(frame("live-delivery-change", {"live_delivery": True}))
            assert (await _next(ws, wallet.unpack))["body"]["live_delivery"] is True
            assert (await asyncio.to_thread(d.post, forward_for(rcpt, d.mediator_did))).status_code == 202
            first = await _next(ws, wallet.unpack)
            again = await asyncio.wait_for(ws.recv(), 15)  # not acknowledged: pushed again
            again = wallet.unpack(again)[0]
            assert again["type"] == P4 + "delivery" and again["attachments"] == first["attachments"]
            assert again["id"] != first["id"]
            ids = [a["id"] for a in again["attachments"]]
            await ws.send(frame("messages-received", {"message_id_list": ids}, return_route=None))
            await ws.send(frame("status-request", {}))
            answer = await _next(ws, wallet.unpack)
            while answer["type"] == P4 + "delivery":  # a further resend that crossed the ack
                assert answer["attachments"] == first["attachments"]
                answer = await _next(ws, wallet.unpack)
            assert answer["body"]["message_count"] == 0

    asyncio.run(body())
