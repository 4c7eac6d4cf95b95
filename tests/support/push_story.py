"""The DCTRL push story that both production layouts run, tests/e2e/test_production_layout.py
(nginx in front of Granian and Daphne) and tests/containers/test_compose.py (the HTTP and sockets
containers): two identities register over HTTP, agree a contract, Alice sends TWO_WAY_PRIVATE to
the HTTP tier and Bob's authenticated socket on the sockets tier receives its PENDING_EVENTS push
(it left the HTTP process after commit and crossed Redis); the same command again is a replay.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from apps.wire.client import Identity, MediatorClient, agree_contract
from apps.wire.ws import open_authenticated

DAY = 86_400
PAYLOAD = "sealed-blob-1"


@dataclass(frozen=True)
class PushStory:
    alice: Identity
    bob: Identity
    event_id: str


def run_push_story(
    client: MediatorClient, ws_url: str, *, mediator_did: str, push_timeout: float = 15.0, **socket_options: Any
) -> PushStory:
    """The story through `client` (the HTTP tier) and `ws_url` (the sockets tier; `socket_options`
    go to open_authenticated, e.g. connect_to), asserting each answer; returns who and what was sent."""
    assert client.did == mediator_did
    alice, bob = Identity.create("alice", mediator_did), Identity.create("bob", mediator_did)
    for who in (alice, bob):
        signed = client.register(who, lifetime_s=DAY)  # verifies the tenant's countersignature
        assert client.last_reply is not None and client.last_reply[1]["code"] == "MEDIATOR_REGISTRATION_SUCCESS"
        assert signed["communication_contract"]["recipient_did"] == mediator_did
    signed, _, _ = agree_contract(alice, bob, lifetime_s=DAY)
    assert client.command(bob, {"type": "SAVE_COMMUNICATION_CONTRACT", "signed_communication_contract": signed}) == {
        "type": "SUCCESS"
    }
    envelope = alice.sign_command(recipient_did=bob.did, payload=PAYLOAD, channel="TWO_WAY_PRIVATE")

    async def story() -> tuple[dict, dict]:
        sock = await open_authenticated(ws_url, bob, **socket_options)
        try:
            sent = await asyncio.to_thread(client.send, envelope)
            deadline = time.monotonic() + push_timeout
            while True:
                frame = await sock.recv(timeout=max(0.1, deadline - time.monotonic()))
                if frame.get("type") == "PING":
                    await sock.pong(frame)
                elif frame.get("type") != "CONTRACTS_UPDATED":
                    return sent, frame
        finally:
            await sock.close()

    sent, frame = asyncio.run(story())
    event_id = sent["pendingEventId"]
    assert sent == {"type": "SUCCESS", "pendingEventId": event_id}
    assert frame == {
        "type": "PENDING_EVENTS",
        "events": [{"id": event_id, "sender_did": alice.did, "payload": PAYLOAD}],
    }
    # The same command again is a replay.
    assert client.send(envelope, raise_errors=False) == {"type": "ERROR", "code": "DUPLICATE_NONCE"}
    assert client.last_reply is not None and client.last_reply[0] == 401
    return PushStory(alice=alice, bob=bob, event_id=event_id)
