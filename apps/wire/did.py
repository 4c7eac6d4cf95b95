"""did:decentrl (DCTRL-0001) parsing, construction and local resolution; did:web for mediators."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote

from .encoding import (
    ED25519_PUB,
    X25519_PUB,
    EncodingError,
    b64decode,
    b64url_nopad,
    multikey_decode,
    multikey_encode,
)

DID_CONTEXT = ["https://www.w3.org/ns/did/v1", "https://w3id.org/security/suites/jws-2020/v1"]
MAX_DID_LENGTH = 2048


class DidError(ValueError):
    """The DID does not parse or resolve."""


@dataclass(frozen=True)
class ResolvedDid:
    """What a mediator needs from a resolved DID."""

    did: str
    signing_key: bytes  # Ed25519 public
    pre_key: bytes  # X25519 public
    mediator_did: str | None = None
    alias: str | None = None
    document: dict[str, Any] | None = None

    def signing_key_for(self, key_id: str) -> bytes | None:
        """The signing key if `key_id` names it (absolute or relative `#signing`), else None."""
        if key_id in (f"{self.did}#signing", "#signing"):
            return self.signing_key
        return None


def decentrl_did(alias: str, signing_pub: bytes, pre_pub: bytes, mediator_did: str) -> str:
    """Compose did:decentrl:{alias}:{signing}:{pre}:{mediator} (DCTRL-0001 §4)."""
    return ":".join(
        [
            "did:decentrl",
            b64url_nopad(alias.encode("utf-8")),
            multikey_encode(ED25519_PUB, signing_pub),
            multikey_encode(X25519_PUB, pre_pub),
            b64url_nopad(mediator_did.encode("utf-8")),
        ]
    )


def parse_decentrl(did: str) -> ResolvedDid:
    """Parse and resolve a did:decentrl locally; DidError when it does not resolve."""
    if not isinstance(did, str) or len(did) > MAX_DID_LENGTH:
        raise DidError("not a DID string")
    did = did.split("#", 1)[0]
    if not did.startswith("did:decentrl:"):
        raise DidError("not did:decentrl")
    parts = did[len("did:decentrl:") :].split(":")
    if len(parts) != 4 or not all(parts):
        raise DidError("did:decentrl needs 4 segments")
    a, s, p, m = parts
    try:
        alias = b64decode(a).decode("utf-8")
        signing = multikey_decode(ED25519_PUB, s)
        pre = multikey_decode(X25519_PUB, p)
        mediator = b64decode(m).decode("utf-8")
    except (EncodingError, UnicodeDecodeError) as exc:
        raise DidError(str(exc)) from exc
    if not mediator.startswith("did:"):
        raise DidError("mediator segment is not a DID")
    return ResolvedDid(did=did, signing_key=signing, pre_key=pre, mediator_did=mediator, alias=alias)


def mediator_did_of(did: str) -> str:
    """The mediator DID hosting `did`: a did:web is its own mediator, a did:decentrl names one."""
    if did.startswith("did:web:"):
        return did
    mediator = parse_decentrl(did).mediator_did
    assert mediator is not None  # parse_decentrl always sets it
    return mediator


def decentrl_document(r: ResolvedDid) -> dict[str, Any]:
    """The DID document of a did:decentrl (dctrl-0001 §4 reading)."""
    return {
        "@context": DID_CONTEXT,
        "id": r.did,
        "controller": r.did,
        "verificationMethod": [
            {
                "id": f"{r.did}#signing",
                "type": "Ed25519VerificationKey2020",
                "controller": r.did,
                "publicKeyMultibase": multikey_encode(ED25519_PUB, r.signing_key),
            }
        ],
        "keyAgreement": [
            {
                "id": f"{r.did}#prekey",
                "type": "X25519KeyAgreementKey2020",
                "controller": r.did,
                "publicKeyMultibase": multikey_encode(X25519_PUB, r.pre_key),
            }
        ],
        "authentication": [f"{r.did}#signing"],
        "service": [{"id": "#mediator", "type": "DecentrlMediator", "serviceEndpoint": r.mediator_did}],
    }


def web_did_for_host(host: str) -> str:
    """did:web for a host, with the port colon written %3A (did:web:localhost%3A8000)."""
    return "did:web:" + quote(host.lower(), safe="")


def host_for_web_did(did: str) -> str:
    """Inverse of web_did_for_host for host-only did:web identifiers."""
    if not did.startswith("did:web:"):
        raise DidError("not did:web")
    return unquote(did[len("did:web:") :].split(":", 1)[0])


def mediator_document(did: str, signing_pub: bytes, pre_pub: bytes, uri: str) -> dict[str, Any]:
    """A mediator's DID document, exactly as DCTRL-0004 §3.2."""
    return {
        "@context": DID_CONTEXT,
        "id": did,
        "controller": did,
        "verificationMethod": [
            {
                "id": f"{did}#signing",
                "type": "Ed25519VerificationKey2020",
                "controller": did,
                "publicKeyMultibase": multikey_encode(ED25519_PUB, signing_pub),
            }
        ],
        "keyAgreement": [
            {
                "id": f"{did}#prekey",
                "type": "X25519KeyAgreementKey2020",
                "controller": did,
                "publicKeyMultibase": multikey_encode(X25519_PUB, pre_pub),
            }
        ],
        "authentication": [f"{did}#signing"],
        "service": [{"id": "#mediator-service", "type": "DecentrlMediator", "serviceEndpoint": {"uri": uri}}],
    }


def parse_mediator_document(doc: dict[str, Any]) -> ResolvedDid:
    """Extract the keys and endpoint from a mediator DID document (client side)."""
    try:
        did = doc["id"]
        signing = multikey_decode(ED25519_PUB, doc["verificationMethod"][0]["publicKeyMultibase"])
        pre = multikey_decode(X25519_PUB, doc["keyAgreement"][0]["publicKeyMultibase"])
    except (KeyError, IndexError, TypeError, EncodingError) as exc:
        raise DidError("malformed mediator DID document") from exc
    if not isinstance(did, str) or not did.startswith("did:") or len(did) > MAX_DID_LENGTH:
        raise DidError("malformed mediator DID document")
    return ResolvedDid(did=did, signing_key=signing, pre_key=pre, document=doc)
