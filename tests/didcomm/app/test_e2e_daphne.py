"""DIDComm v2 end to end on real Daphne processes (Redis channel layer between them): mediation
over HTTP, a didcomm-node forward picked up after being offline, live delivery over /didcomm/ws
on another process, and a socket that drops mid-delivery losing nothing."""

from __future__ import annotations

import asyncio
import json

import pytest

from apps.didcomm.core.resolver import resolve_did
from tests.interop import didcomm_node
from tests.interop.didcomm_node import Party
from tests.support.didcomm_agent import CM2, PICKUP, Agent, forward_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def deploy(deployment):
    return deployment(processes=2)


ALICE = Party.create()  # the sender: didcomm-node authcrypts from her did:peer:2


def _node_forward(mediator_did: str, recipient: Party, text: str) -> bytes:
    """didcomm-node packs a message for `recipient` and wraps it in a routing/2.0 forward to us."""
    alice = ALICE
    med = Party(mediator_did, None, None)  # only its public DID document is needed
    msg = didcomm_node.message(alice, recipient, {"text": text})
    [packed] = didcomm_node.run(
        [{"op": "pack", "message": msg, "to": recipient.did, "from": alice.did}],
        parties=[med, alice, recipient],
        secrets_of=[alice],
    )
    [fwd] = didcomm_node.run(
        [
            {
                "op": "forward",
                "packed": packed["packed"],
                "to": recipient.did,
                "routing_keys": [mediator_did + "#key-2"],
                "enc_alg_anon": "Xc20pEcdhEsA256kw",
            }
        ],
        parties=[med, alice, recipient],
        secrets_of=[],
    )
    assert fwd["ok"], fwd
    return fwd["packed"].encode()


def test_offline_pickup_of_a_didcomm_node_forward_then_live_delivery_across_processes(deploy):
    wallet = Agent()
    assert deploy.send(wallet, wallet.message(CM2 + "mediate-request"))["body"] == {"routing_did": deploy.mediator_did}
    # The recipient is a did:peer:2 didcomm-node can encrypt to; the wallet registers it.
    recipient = Party.create()
    answer = deploy.send(
        wallet, wallet.message(CM2 + "keylist-update", {"updates": [{"recipient_did": recipient.did, "action": "add"}]})
    )
    assert answer["body"]["updated"][0]["result"] == "success"

    # Offline: two forwards built by didcomm-node are stored (202), then picked up over HTTP.
    for text in ("one", "two"):
        resp = deploy.post(_node_forward(deploy.mediator_did, recipient, text), i=1)
        assert resp.status_code == 202 and resp.content == b""
    delivery = deploy.send(wallet, wallet.message(PICKUP + "delivery-request", {"limit": 10}))
    assert delivery["type"] == PICKUP + "delivery"
    opened = didcomm_node.run(
        [{"op": "unpack", "packed": json.dumps(a["data"]["json"])} for a in delivery["attachments"]],
        parties=[Party(deploy.mediator_did, None, None), ALICE, recipient],
        secrets_of=[recipient],
    )
    assert [o["message"]["body"]["text"] for o in opened] == ["one", "two"], opened
    assert {o["metadata"]["encrypted_from_kid"] for o in opened} == {ALICE.did + "#key-1"}
    status = deploy.send(
        wallet,
        wallet.message(PICKUP + "messages-received", {"message_id_list": [a["id"] for a in delivery["attachments"]]}),
    )
    assert status["body"] == {"message_count": 0, "live_delivery": False}

    async def live():
        async with deploy.socket(i=1) as ws:  # process 1 holds the socket; forwards go to process 0
            await ws.send(
                wallet.pack(
                    wallet.message(PICKUP + "live-delivery-change", {"live_delivery": True}), deploy.mediator_did
                ).decode()
            )
            st, _ = wallet.unpack(await asyncio.wait_for(ws.recv(), 10))
            assert st["type"] == PICKUP + "status" and st["body"] == {"message_count": 0, "live_delivery": True}
            resp = await asyncio.to_thread(deploy.post, _node_forward(deploy.mediator_did, recipient, "live"), 0)
            assert resp.status_code == 202
            pushed, decrypted = wallet.unpack(await asyncio.wait_for(ws.recv(), 10))
            assert decrypted.sender_kid == deploy.mediator_did + "#key-2"
            assert pushed["type"] == PICKUP + "delivery" and len(pushed["attachments"]) == 1
            return pushed["attachments"][0]

    attachment = asyncio.run(live())
    # A push is never the only copy: still queued until messages-received.
    status = deploy.send(wallet, wallet.message(PICKUP + "status-request"))
    assert status["body"]["message_count"] == 1
    status = deploy.send(wallet, wallet.message(PICKUP + "messages-received", {"message_id_list": [attachment["id"]]}))
    assert status["body"]["message_count"] == 0


def test_a_socket_that_drops_mid_delivery_loses_nothing(deploy):
    wallet, rcpt = deploy.grant()

    async def drop():
        ws = await deploy.socket().__aenter__()
        await ws.send(
            wallet.pack(
                wallet.message(PICKUP + "live-delivery-change", {"live_delivery": True}), deploy.mediator_did
            ).decode()
        )
        await asyncio.wait_for(ws.recv(), 10)
        # The client vanishes (TCP reset, no close handshake) just as a message is forwarded.
        ws.transport.abort()
        resp = await asyncio.to_thread(deploy.post, forward_for(rcpt, deploy.mediator_did), 0)
        assert resp.status_code == 202

    asyncio.run(drop())
    delivery = deploy.send(wallet, wallet.message(PICKUP + "delivery-request", {"limit": 10}))
    assert delivery["type"] == PICKUP + "delivery" and len(delivery["attachments"]) == 1
    inner, _ = rcpt.unpack(delivery["attachments"][0]["data"]["json"])
    assert inner["body"] == {"n": 1}


def test_the_mediator_did_published_by_a_server_resolves_to_its_own_endpoints(deploy):
    endpoints = [e.uri for e in resolve_did(deploy.mediator_did).didcomm_endpoints()]
    assert endpoints == [f"http://{deploy.host}/didcomm", f"ws://{deploy.host}/didcomm/ws"]
