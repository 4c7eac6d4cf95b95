"""Packing the mediator's own messages: DIDComm v2 authcrypt (JWE, ECDH-1PU) from an identity's
X25519 key, DIDComm v1 authcrypt (RFC 0019) from its Ed25519 key, wrapped in routing forwards."""

from __future__ import annotations

import json
import time
import uuid

from apps.didcomm.core import envelope_v1, jwe
from apps.didcomm.core.errors import DidcommError
from apps.didcomm.core.keys import X25519, PublicKey
from apps.didcomm.core.resolver import resolve_did

from . import protocols
from .models import MediatorIdentity


def _compact(message: dict) -> bytes:
    return json.dumps(message, separators=(",", ":")).encode("utf-8")


def stamp(message: dict, *, from_did: str, to_did: str | None) -> dict:
    """A DIDComm v2 plaintext message of ours with the headers every one carries: a new id, typ,
    from, to and created_time."""
    out = {
        "id": str(uuid.uuid4()),
        "typ": "application/didcomm-plain+json",
        **message,
        "from": from_did,
        "created_time": int(time.time()),
    }
    if to_did:
        out["to"] = [to_did]
    return out


def agreement_key_for(kid: str) -> tuple[str, PublicKey]:
    """(kid, X25519 public key) of the key-agreement key `kid` names (resolving its DID). The kid
    stays as the caller wrote it (any id form `DidDocument.find` reads): its library finds its
    secret by that name."""
    vm = resolve_did(kid).find(kid, "keyAgreement")
    if vm is None or vm.key.crv != X25519:
        raise DidcommError("recipient has no X25519 key-agreement key")
    return kid, vm.key


def pack_to(
    message: dict, *, identity: MediatorIdentity, recipient: tuple[str, PublicKey], sender_kid: str | None = None
) -> dict:
    """Authcrypt `message` from the identity's X25519 key to a resolved key (`agreement_key_for`);
    `sender_kid` names that key as the client named it (dispatch's `mediator_kid`), else `agreement_kid`."""
    return jwe.encrypt(
        _compact(message), to=[recipient], sender=(sender_kid or identity.agreement_kid, identity.agreement_key)
    )


def pack_for_kid(message: dict, *, identity: MediatorIdentity, kid: str, sender_kid: str | None = None) -> dict:
    """Authcrypt `message` from the identity's X25519 key to the key-agreement key `kid` names."""
    return pack_to(message, identity=identity, recipient=agreement_key_for(kid), sender_kid=sender_kid)


def pack_for_did(message: dict, *, identity: MediatorIdentity, to_did: str) -> dict:
    """Authcrypt `message` to the first X25519 key-agreement key of `to_did`'s document."""
    doc = resolve_did(to_did)
    for vm in doc.key_agreement:
        if vm.key.crv == X25519:
            return pack_for_kid(message, identity=identity, kid=vm.id)
    raise DidcommError("recipient has no X25519 key-agreement key")


def pack_reply(message: dict, *, identity: MediatorIdentity, their_verkey: str, routing_keys: list[str]) -> dict:
    """DIDComm v1: authcrypt `message` from the identity to `their_verkey`, wrapped in a routing/1.0
    forward (anoncrypt) for each of their routing keys, innermost first."""
    envelope = envelope_v1.pack(_compact(message), to_verkeys=[their_verkey], sender=identity.authentication_key)
    to = their_verkey
    for routing_key in routing_keys:
        forward = {"@type": protocols.FORWARD_V1, "@id": str(uuid.uuid4()), "to": to, "msg": envelope}
        envelope = envelope_v1.pack(json.dumps(forward).encode("utf-8"), to_verkeys=[routing_key])
        to = routing_key
    return envelope
