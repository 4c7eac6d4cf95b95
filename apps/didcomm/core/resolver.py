"""One entry point for the DID methods the core resolves without a network: did:key, did:peer:2, did:peer:4."""

from __future__ import annotations

from .did_key import resolve_did_key
from .did_peer import resolve_peer2, resolve_peer4
from .diddoc import DidDocument
from .errors import InvalidDid, UnsupportedDidMethod


def resolve_did(did: str) -> DidDocument:
    """Resolve `did` (a DID URL's fragment is ignored); UnsupportedDidMethod for other methods."""
    if not isinstance(did, str):
        raise InvalidDid("DID must be a string")
    base = did.split("#", 1)[0]
    if base.startswith("did:key:"):
        return resolve_did_key(base)
    if base.startswith("did:peer:2."):
        return resolve_peer2(base)
    if base.startswith("did:peer:4"):
        return resolve_peer4(base)
    raise UnsupportedDidMethod("DID method not supported")
