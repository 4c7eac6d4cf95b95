"""did:key (Ed25519 `z6Mk`, X25519 `z6LS`, P-256 `zDn`) and DIDComm v1's raw base58 verkeys.

v1 agents name the same Ed25519 key as `did:key:z6Mk…`, `did:key:z6Mk…#z6Mk…` or a bare
base58 verkey; `normalise_verkey` maps all three to one form.
"""

from __future__ import annotations

from typing import Any

from apps.wire.encoding import EncodingError, b58decode, b58encode

from .diddoc import DidDocument, document_from_json
from .errors import InvalidDid, InvalidKey
from .keys import ED25519, PublicKey

PREFIX = "did:key:"
_CONTEXT = ["https://www.w3.org/ns/did/v1", "https://w3id.org/security/multikey/v1"]


def did_key_from_key(key: PublicKey) -> str:
    """`did:key:` + the key's multibase."""
    return PREFIX + key.multibase


def key_from_did_key(did: str) -> PublicKey:
    """The key of a did:key, with or without a `#fragment` (which must then name the same key)."""
    if not isinstance(did, str) or not did.startswith(PREFIX):
        raise InvalidDid("not a did:key")
    body, _, fragment = did[len(PREFIX) :].partition("#")
    try:
        key = PublicKey.from_multibase(body)
    except InvalidKey as exc:
        raise InvalidDid("did:key does not hold a supported key") from exc
    if fragment and fragment != body:
        raise InvalidDid("did:key fragment names another key")
    return key


def resolve_did_key(did: str) -> DidDocument:
    """The did:key document: an Ed25519 key authenticates and also gets its X25519 key-agreement form."""
    key = key_from_did_key(did)
    base = did.split("#", 1)[0]
    vm = {"id": f"#{key.multibase}", "type": "Multikey", "controller": base, "publicKeyMultibase": key.multibase}
    doc: dict[str, Any] = {"@context": _CONTEXT, "id": base, "verificationMethod": [vm]}
    if key.crv == ED25519:
        x = key.to_x25519()
        doc["verificationMethod"].append(
            {"id": f"#{x.multibase}", "type": "Multikey", "controller": base, "publicKeyMultibase": x.multibase}
        )
        doc.update(authentication=[vm["id"]], assertionMethod=[vm["id"]], keyAgreement=[f"#{x.multibase}"])
    elif key.crv == "X25519":
        doc["keyAgreement"] = [vm["id"]]
    else:  # P-256 and friends: both signing and key agreement
        doc.update(authentication=[vm["id"]], assertionMethod=[vm["id"]], keyAgreement=[vm["id"]])
    return document_from_json(doc)


def verkey_to_did_key(verkey: str) -> str:
    """`did:key:z6Mk…` of a raw base58 Ed25519 verkey (DIDComm v1)."""
    try:
        raw = b58decode(verkey)
        return did_key_from_key(PublicKey(ED25519, raw))
    except (EncodingError, InvalidKey) as exc:
        raise InvalidKey("not a base58 Ed25519 verkey") from exc


def did_key_to_verkey(did: str) -> str:
    """The raw base58 verkey of an Ed25519 did:key."""
    key = key_from_did_key(did)
    if key.crv != ED25519:
        raise InvalidKey("only Ed25519 did:keys have a verkey")
    return b58encode(key.raw)


def normalise_verkey(value: str) -> str:
    """One form (raw base58) for an Ed25519 key given as verkey, did:key or did:key#fragment."""
    if isinstance(value, str) and value.startswith(PREFIX):
        return did_key_to_verkey(value)
    return did_key_to_verkey(verkey_to_did_key(value))
