"""One entry point for the DID methods the core resolves without a network: did:key, did:peer:2, did:peer:4."""

from __future__ import annotations

from .did_key import resolve_did_key
from .did_peer import resolve_peer2, resolve_peer4
from .diddoc import DidDocument
from .errors import DidcommError, InvalidDid, UnsupportedDidMethod
from .keys import PublicKey


def resolve_did(did: str) -> DidDocument:
    """Resolve `did` (a DID URL's fragment is ignored); UnsupportedDidMethod for other methods."""
    if not isinstance(did, str):
        raise InvalidDid("DID must be a string")
    base = did.split("#", 1)[0]
    if base.startswith("did:key:"):
        return resolve_did_key(base)
    if base.startswith("did:peer:2"):
        return resolve_peer2(base)
    if base.startswith("did:peer:4"):
        return resolve_peer4(base)
    raise UnsupportedDidMethod("DID method not supported")


def key_agreement_key(kid: str) -> PublicKey | None:
    """The key-agreement key a DID URL names (for authcrypt `skid`), or None if it does not resolve."""
    return _key(kid, "keyAgreement")


def authentication_key(kid: str) -> PublicKey | None:
    """The authentication key a DID URL names (for JWS `kid`), or None if it does not resolve."""
    return _key(kid, "authentication")


def _key(kid: str, relationship: str) -> PublicKey | None:
    try:
        vm = resolve_did(kid).find(kid, relationship)
    except DidcommError:
        return None
    return vm.key if vm else None
