"""One form for the ways a forward's `body.next` can name a recipient (pure; docs/didcomm.md), and
whether a request proves control of a recipient DID.

A recipient registered as a DID is found by that DID and by any `did#fragment` URL of it. An
Ed25519 did:key is also found by its X25519 did:key form (a sender encrypts to the key-agreement
key, and some name that as the forward's `next`), so both normalise to the X25519 did:key.
"""

from __future__ import annotations

import hashlib
import re

from apps.didcomm.core.did_key import did_key_from_key, key_from_did_key
from apps.didcomm.core.did_peer import MAX_PEER_DID_LENGTH
from apps.didcomm.core.errors import DidcommError, InvalidDid
from apps.didcomm.core.keys import ED25519, PublicKey
from apps.didcomm.core.resolver import resolve_did

MAX_DID_LENGTH = MAX_PEER_DID_LENGTH
_SPACE = re.compile(r"\s")


def did_hash(value: str) -> str:
    """The lookup key of a (normalised) DID: hex SHA-256 (RecipientKey.lookup_hash, Mediation.client_hash)."""
    return hashlib.sha256(value.encode("utf-8")).hexdigest()


def lookup_form(value: object) -> str:
    """The normalised form of a recipient DID, DID URL or did:key; InvalidDid if it is not one."""
    if not isinstance(value, str) or not value.startswith("did:") or len(value) > MAX_DID_LENGTH:
        raise InvalidDid("not a DID")
    base = value.split("#", 1)[0]
    if base.count(":") < 2 or _SPACE.search(base):
        raise InvalidDid("not a DID")
    if base.startswith("did:key:"):
        key = key_from_did_key(base)
        return did_key_from_key(key.to_x25519() if key.crv == ED25519 else key)
    return base


def check_registrable(value: object) -> str:
    """`lookup_form`, and for the methods we resolve (did:key, did:peer) a document that resolves."""
    form = lookup_form(value)
    if form.startswith(("did:key:", "did:peer:")):
        try:
            resolve_did(form)
        except DidcommError as exc:
            raise InvalidDid("DID does not resolve") from exc
    return form


def key_forms(keys: list[PublicKey]) -> frozenset[tuple[str, bytes]]:
    """Each key as (curve, raw bytes), an Ed25519 key also as its X25519 form: a request authcrypted
    with an Ed25519 key's X25519 form (DIDComm v1, a did:key sender) holds that key too."""
    out = set()
    for key in keys:
        out.add((key.crv, key.raw))
        if key.crv == ED25519:
            try:
                x = key.to_x25519()
            except DidcommError:
                continue
            out.add((x.crv, x.raw))
    return frozenset(out)


def proves_control(value: str, proof: frozenset[tuple[str, bytes]]) -> bool:
    """Whether a request authcrypted or signed with the keys of `proof` (`key_forms`) holds a key of
    the DID `value` names (did:key, did:peer:2, did:peer:4 long form: the methods resolved here)."""
    if not proof:
        return False
    try:
        doc = resolve_did(value.split("#", 1)[0])
    except DidcommError:
        return False
    return not key_forms([vm.key for vm in doc.verification_methods]).isdisjoint(proof)
