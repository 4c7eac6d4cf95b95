"""DIDComm v1 (Aries) plaintext messages: `@type`/`@id`, the `~thread` and `~transport` decorators,
v1 keys (did:key or raw base58) and signed `~attach` data (the DID Exchange `did_rotate~attach`)."""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from apps.wire.canonical import loads_strict
from apps.wire.encoding import EncodingError, b64decode, b64url_nopad

from .did_key import did_key_to_verkey, verkey_to_did_key
from .errors import DidcommError, InvalidKey, InvalidSignature, MalformedMessage
from .keys import ED25519, PrivateKey, PublicKey

BASE = "https://didcomm.org/"
# ACA-Py still accepts (with a warning) the old prefix; a message using it is read as the new one.
OLD_BASE = "did:sov:BzCbsNYhMrjHiqZDTUASHg;spec/"
MAX_ID = 256


@dataclass(frozen=True)
class V1Message:
    id: str
    type: str  # always with the https://didcomm.org/ prefix
    thid: str  # ~thread.thid, or the message's own @id
    pthid: str | None
    return_route: str | None  # ~transport.return_route: all | none | thread
    raw: dict[str, Any] = field(default_factory=dict[str, Any], compare=False)

    def get(self, name: str, default: object = None) -> object:
        return self.raw.get(name, default)


def parse(data: bytes | str | Mapping[str, Any]) -> V1Message:
    """Validate a v1 plaintext message's `@type`, `@id` and decorators."""
    obj: object
    if isinstance(data, Mapping):
        obj = dict(data)
    else:
        try:
            obj = loads_strict(data)
        except (ValueError, UnicodeDecodeError) as exc:
            raise MalformedMessage("not JSON") from exc
    if not isinstance(obj, dict):
        raise MalformedMessage("message is not a JSON object")
    msg_type, msg_id = obj.get("@type"), obj.get("@id")
    if not isinstance(msg_type, str) or not msg_type:
        raise MalformedMessage("@type is required")
    if not isinstance(msg_id, str) or not msg_id or len(msg_id) > MAX_ID:
        raise MalformedMessage("@id is required")
    if msg_type.startswith(OLD_BASE):
        msg_type = BASE + msg_type[len(OLD_BASE) :]
    thread = obj.get("~thread", {})
    if not isinstance(thread, dict):
        raise MalformedMessage("~thread must be an object")
    thid, pthid = thread.get("thid", msg_id), thread.get("pthid")
    if not isinstance(thid, str) or (pthid is not None and not isinstance(pthid, str)):
        raise MalformedMessage("~thread ids must be strings")
    transport = obj.get("~transport", {})
    if not isinstance(transport, dict):
        raise MalformedMessage("~transport must be an object")
    route = transport.get("return_route")
    return V1Message(msg_id, msg_type, thid, pthid, route if isinstance(route, str) else None, obj)


def key_to_did_key(value: object) -> str:
    """The did:key (no fragment) of an Ed25519 key given as did:key, did:key#fragment or raw base58."""
    if not isinstance(value, str) or not value or len(value) > 256:
        raise InvalidKey("not a key")
    try:
        if value.startswith("did:key:"):
            return verkey_to_did_key(did_key_to_verkey(value))
        return verkey_to_did_key(value)
    except DidcommError as exc:
        raise InvalidKey("not an Ed25519 did:key or base58 verkey") from exc


def key_to_verkey(value: object) -> str:
    """The raw base58 verkey of an Ed25519 key given as did:key or base58."""
    return did_key_to_verkey(key_to_did_key(value))


def _jws_protected(key: PublicKey) -> str:
    kid = "did:key:" + key.multibase
    jwk = {"kty": "OKP", "crv": "Ed25519", "x": b64url_nopad(key.raw), "kid": kid}
    return b64url_nopad(json.dumps({"alg": "EdDSA", "jwk": jwk}).encode("utf-8"))


def signed_text_attachment(attach_id: str, content: str, key: PrivateKey) -> dict[str, Any]:
    """A `text/string` attachment of `content`, JWS-signed by `key` as ACA-Py signs `did_rotate~attach`:
    `data.base64` is standard base64; the signing input is the unpadded base64url form of it."""
    if key.crv != ED25519:
        raise InvalidKey("attachments are signed with Ed25519")
    payload = content.encode("utf-8")
    protected = _jws_protected(key.public)
    signature = key.sign(f"{protected}.{b64url_nopad(payload)}".encode("ascii"))
    return {
        "@id": attach_id,
        "mime-type": "text/string",
        "data": {
            "base64": base64.b64encode(payload).decode("ascii"),
            "jws": {
                "header": {"kid": "did:key:" + key.public.multibase},
                "protected": protected,
                "signature": b64url_nopad(signature),
            },
        },
    }


def verify_attachment(attachment: Mapping[str, Any]) -> tuple[bytes, PublicKey]:
    """(content, signer key) of a singly-signed `~attach` entry; InvalidSignature if it does not verify."""
    data = attachment.get("data") if isinstance(attachment, Mapping) else None
    jws = data.get("jws") if isinstance(data, Mapping) else None
    content = data.get("base64") if isinstance(data, Mapping) else None
    if not isinstance(jws, Mapping) or not isinstance(content, str):
        raise MalformedMessage("attachment needs data.base64 and data.jws")
    try:
        payload = b64decode(content)
        protected = loads_strict(b64decode(jws["protected"]))
        if not isinstance(protected, dict):
            raise TypeError("the protected header is not an object")
        signature = b64decode(jws["signature"])
        key = PublicKey.from_jwk(protected["jwk"])
    except (EncodingError, ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
        raise MalformedMessage("attachment signature does not decode") from exc
    if protected.get("alg") != "EdDSA" or key.crv != ED25519:
        raise InvalidSignature("only EdDSA attachment signatures")
    if not key.verify(f"{jws['protected']}.{b64url_nopad(payload)}".encode("ascii"), signature):
        raise InvalidSignature("attachment signature does not verify")
    return payload, key
