"""DIDComm v2 signed messages: JWS general JSON serialization with EdDSA (Ed25519)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from apps.wire.canonical import loads_strict
from apps.wire.encoding import EncodingError, b64decode, b64url_nopad

from .errors import InvalidKey, InvalidSignature, MalformedEnvelope, UnsupportedAlgorithm
from .keys import ED25519, PrivateKey, PublicKey

TYP_SIGNED = "application/didcomm-signed+json"
PublicKeyLookup = Callable[[str], PublicKey | None]


@dataclass(frozen=True)
class Verified:
    payload: bytes
    signer_kids: tuple[str, ...]


def sign(payload: bytes, *, kid: str, key: PrivateKey) -> dict[str, Any]:
    """An EdDSA-signed DIDComm message (one signature, `kid` in the unprotected header)."""
    if key.crv != ED25519:
        raise UnsupportedAlgorithm("only EdDSA (Ed25519) signing")
    protected = b64url_nopad(json.dumps({"typ": TYP_SIGNED, "alg": "EdDSA"}, separators=(",", ":")).encode())
    body = b64url_nopad(payload)
    signature = key.sign(f"{protected}.{body}".encode("ascii"))
    return {
        "payload": body,
        "signatures": [{"protected": protected, "signature": b64url_nopad(signature), "header": {"kid": kid}}],
    }


def verify(data: Mapping[str, Any], *, public_key_for: PublicKeyLookup) -> Verified:
    """Verify every signature of a general-JSON JWS (EdDSA only); the payload bytes if all verify."""
    payload_b64, signatures = data.get("payload"), data.get("signatures")
    if not isinstance(payload_b64, str) or not isinstance(signatures, list) or not signatures:
        raise MalformedEnvelope("JWS needs payload and signatures")
    # Decoded first: the signing input below is the payload's base64url text as ASCII bytes.
    try:
        payload = b64decode(payload_b64)
    except EncodingError as exc:
        raise MalformedEnvelope("JWS payload is not base64url") from exc
    kids = []
    for entry in signatures:
        if not isinstance(entry, dict) or not isinstance(entry.get("protected"), str):
            raise MalformedEnvelope("JWS signature needs a protected header")
        try:
            header = loads_strict(b64decode(entry["protected"]))
            signature = b64decode(entry.get("signature"))
        except (EncodingError, ValueError, UnicodeDecodeError) as exc:
            raise MalformedEnvelope("JWS signature does not decode") from exc
        if not isinstance(header, dict):
            raise MalformedEnvelope("JWS protected header is not an object")
        if header.get("alg") != "EdDSA":
            raise UnsupportedAlgorithm("only EdDSA signatures")
        unprotected = entry.get("header")
        kid = header.get("kid") or (unprotected.get("kid") if isinstance(unprotected, dict) else None)
        if not isinstance(kid, str):
            raise MalformedEnvelope("JWS signature needs a kid")
        key = public_key_for(kid)
        if key is None:
            raise InvalidSignature("signing key does not resolve")
        try:
            ok = len(signature) == 64 and key.verify(f"{entry['protected']}.{payload_b64}".encode("ascii"), signature)
        except InvalidKey as exc:
            raise InvalidSignature("signing key is not Ed25519") from exc
        if not ok:
            raise InvalidSignature("signature does not verify")
        kids.append(kid)
    return Verified(payload, tuple(kids))
