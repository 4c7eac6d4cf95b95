"""Open what a real agent sent to the mediator (a recorded run, tests/interop/v1_server.py `record`) with the
mediator keys recorded beside it."""

from __future__ import annotations

import json
from dataclasses import dataclass

from apps.didcomm.core import envelope_v1
from apps.didcomm.core.keys import ED25519, PrivateKey
from apps.wire.encoding import b58encode


@dataclass(frozen=True)
class Opened:
    transport: str
    type: str  # the message type without the https://didcomm.org/ prefix
    message: dict
    sender_verkey: str | None  # None: anoncrypt


def mediator_key(fixture: dict) -> PrivateKey:
    return PrivateKey.from_secret(ED25519, bytes.fromhex(fixture["identity"]["authentication_secret"]))


def open_recorded(fixture: dict) -> list[Opened]:
    """Every recorded envelope, opened: each is DIDComm v1 and addressed to the mediator's Ed25519 key."""
    key = mediator_key(fixture)
    keys = {b58encode(key.public.raw): key}
    out = []
    for sent in fixture["messages"]:
        unpacked = envelope_v1.unpack(sent["envelope"], private_key_for=keys.get)
        message = json.loads(unpacked.message)
        short = message["@type"].removeprefix("https://didcomm.org/")
        out.append(Opened(sent["transport"], short, message, unpacked.sender_verkey))
    return out
