"""A DIDComm v2 agent on apps/didcomm/core only: the client side of a mediator, for the tests, the
cluster drills (scripts/cluster/drill.py) and bench/ (which may import tests/support).

It packs authcrypt/anoncrypt messages to a DID, unpacks what comes back, and wraps a routing/2.0
forward, as a wallet or a sending agent would (docs/didcomm.md "How a wallet connects").
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from apps.didcomm.core import jwe
from apps.didcomm.core.did_peer import peer2_create
from apps.didcomm.core.keys import ED25519, X25519, PrivateKey
from apps.didcomm.core.resolver import key_agreement_key, resolve_did

CM2 = "https://didcomm.org/coordinate-mediation/2.0/"
CM3 = "https://didcomm.org/coordinate-mediation/3.0/"
PICKUP = "https://didcomm.org/messagepickup/3.0/"
FORWARD = "https://didcomm.org/routing/2.0/forward"
ENCRYPTED = "application/didcomm-encrypted+json"


class Agent:
    """An agent with a did:peer:2 (E then V, like the Identus SDK: its key-agreement kid is #key-1)."""

    def __init__(self, services: list[dict[str, Any]] | None = None):
        self.x = PrivateKey.generate(X25519)
        self.ed = PrivateKey.generate(ED25519)
        self.did = peer2_create([("E", self.x.public), ("V", self.ed.public)], services or [])
        self.kid = self.did + "#key-1"

    def message(
        self, type_: str, body: dict[str, Any] | None = None, *, return_route: str | None = "all", **extra: Any
    ) -> dict[str, Any]:
        msg = {
            "id": str(uuid.uuid4()),
            "typ": "application/didcomm-plain+json",
            "type": type_,
            "from": self.did,
            "body": body if body is not None else {},
            "created_time": int(time.time()),
            **extra,
        }
        if return_route:
            msg["return_route"] = return_route
        return msg

    def pack(self, message: dict[str, Any], to_did: str, *, anon: bool = False) -> bytes:
        """Authcrypt (or anoncrypt) `message` to `to_did`'s first key-agreement key."""
        vm = resolve_did(to_did).key_agreement[0]
        sender = None if anon else (self.kid, self.x)
        plaintext = json.dumps({**message, "to": [to_did]}).encode()
        return json.dumps(jwe.encrypt(plaintext, to=[(vm.id, vm.key)], sender=sender)).encode()

    def unpack(self, body: bytes | str | dict[str, Any]) -> tuple[dict[str, Any], jwe.Decrypted]:
        """Decrypt a JWE for us; the plaintext message and the decryption facts."""
        decrypted = jwe.decrypt(
            body,
            private_key_for=lambda kid: self.x if kid == self.kid else None,
            sender_key_for=key_agreement_key,
        )
        return json.loads(decrypted.plaintext), decrypted


def routed_did(mediator_did: str) -> Agent:
    """A recipient DID whose service names the mediator DID (as the Identus SDK builds its own)."""
    return Agent(services=[{"type": "DIDCommMessaging", "serviceEndpoint": {"uri": mediator_did, "accept": []}}])


def forward_for(
    recipient: Agent, mediator_did: str, inner: dict[str, Any] | None = None, *, next_: str | None = None
) -> bytes:
    """A routing/2.0 forward of an opaque inner JWE for `recipient`, anoncrypt to the mediator."""
    sender = Agent()
    inner = inner or json.loads(
        sender.pack({"id": str(uuid.uuid4()), "type": "https://example.org/hello", "body": {"n": 1}}, recipient.did)
    )
    fwd = {
        "id": str(uuid.uuid4()),
        "typ": "application/didcomm-plain+json",
        "type": FORWARD,
        "body": {"next": next_ or recipient.did},
        "attachments": [{"data": {"json": inner}}],
    }
    return sender.pack(fwd, mediator_did, anon=True)
