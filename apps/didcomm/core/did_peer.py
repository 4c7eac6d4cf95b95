"""did:peer:2 (create and resolve) and did:peer:4 (resolve), per the peer DID method spec.

did:peer:2 keys get ids `#key-1`, `#key-2`, … in segment order, services `#service`,
`#service-1`, … when they carry no id (spec, "Resolving a did:peer:2", clarified). A service
segment may hold a JSON list (the Identus SDK emits `.SW10`, an empty one).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from apps.wire.canonical import loads_strict
from apps.wire.encoding import EncodingError, b64decode, b64url_nopad

from .diddoc import DidDocument, document_from_json
from .errors import InvalidDid, InvalidKey
from .keys import PublicKey, multibase_decode, multibase_encode, varint_decode, varint_encode

PEER2 = "did:peer:2"
PEER4 = "did:peer:4"
MAX_PEER_DID_LENGTH = 16_384  # a DID with a few services is < 1 kB; a did:peer:4 with a big doc a few kB
_CONTEXT = ["https://www.w3.org/ns/did/v1", "https://w3id.org/security/multikey/v1"]
_PURPOSES = {
    "A": "assertionMethod",
    "E": "keyAgreement",
    "V": "authentication",
    "I": "capabilityInvocation",
    "D": "capabilityDelegation",
}
_ABBREVIATIONS = {"type": "t", "DIDCommMessaging": "dm", "serviceEndpoint": "s", "routingKeys": "r", "accept": "a"}
_EXPANSIONS = {v: k for k, v in _ABBREVIATIONS.items()}
_JSON_CODEC = 0x0200
_SHA256_MULTIHASH = b"\x12\x20"


def _abbreviate(value: object, *, expand: bool) -> object:
    if isinstance(value, dict):
        return _abbreviate_object(value, expand=expand)
    if isinstance(value, list):
        return [_abbreviate(v, expand=expand) for v in value]
    return value


def _abbreviate_object(value: dict[Any, Any], *, expand: bool) -> dict[Any, Any]:
    table = _EXPANSIONS if expand else _ABBREVIATIONS
    out: dict[Any, Any] = {}
    for k, v in value.items():
        key = table.get(k, k)
        if key in ("type", "t") and isinstance(v, str):
            out[key] = table.get(v, v)
        else:
            out[key] = _abbreviate(v, expand=expand)
    return out


def encode_service(service: Mapping[str, Any]) -> str:
    """The `S` segment body of one service: abbreviated, whitespace-free JSON in base64url."""
    text = json.dumps(_abbreviate(dict(service), expand=False), separators=(",", ":"), ensure_ascii=False)
    return b64url_nopad(text.encode("utf-8"))


def peer2_create(keys: Sequence[tuple[str, PublicKey]], services: Sequence[Mapping[str, Any]] = ()) -> str:
    """A did:peer:2 from (purpose code, key) pairs in order, then one `S` segment per service."""
    parts = [PEER2]
    for purpose, key in keys:
        if purpose not in _PURPOSES:
            raise InvalidDid("unknown did:peer:2 purpose code")
        parts.append(purpose + key.multibase)
    parts.extend("S" + encode_service(svc) for svc in services)
    return ".".join(parts)


def mediator_peer_did(
    *, authentication: PublicKey, agreement: PublicKey, http_uri: str, ws_uri: str | None = None
) -> str:
    """Our mediator DID: V (Ed25519) then E (X25519), then the http(s) service and optionally the ws(s) one.

    The http service comes first: the Identus SDK posts to the first DIDCommMessaging service.
    """
    services = [{"type": "DIDCommMessaging", "serviceEndpoint": {"uri": http_uri, "accept": ["didcomm/v2"]}}]
    if ws_uri:
        services.append({"type": "DIDCommMessaging", "serviceEndpoint": {"uri": ws_uri, "accept": ["didcomm/v2"]}})
    return peer2_create([("V", authentication), ("E", agreement)], services)


def mediator_legacy_did(*, authentication: PublicKey, agreement: PublicKey, http_uri: str) -> str:
    """The same mediator keys for older did:peer:2 libraries (SICPA `peerdid` 0.5 with `didcomm` 0.3):
    V then E, then ONE service segment in the string form, which is all they parse.

    Their regex takes one `S` segment; pydid 0.3 types a service as DIDComm (routing keys, accept)
    only with a string `serviceEndpoint` and a `recipientKeys` list (empty here: the keys are the
    DID's own). Only the http(s) endpoint: these libraries make no socket connections.
    """
    service = {"type": "DIDCommMessaging", "serviceEndpoint": http_uri, "routingKeys": [], "accept": ["didcomm/v2"]}
    return peer2_create([("V", authentication), ("E", agreement)], [{**service, "recipientKeys": []}])


def _decode_service_segment(body: str) -> list[dict[str, Any]]:
    try:
        value = loads_strict(b64decode(body).decode("utf-8"))
    except (EncodingError, UnicodeDecodeError, ValueError) as exc:
        raise InvalidDid("did:peer:2 service segment is not base64url JSON") from exc
    items = value if isinstance(value, list) else [value]
    services = [item for item in items if isinstance(item, dict)]
    if len(services) != len(items):
        raise InvalidDid("did:peer:2 service is not a JSON object")
    try:
        return [_abbreviate_object(item, expand=True) for item in services]
    except RecursionError as exc:  # parsed just under the limit, nested too deeply to walk
        raise InvalidDid("did:peer:2 service nested too deeply") from exc


def peer2_document_json(did: str) -> dict[str, Any]:
    """The DID-Core JSON document of a did:peer:2 (spec shape: relative ids, Multikey)."""
    if not isinstance(did, str) or not did.startswith(PEER2 + ".") or len(did) > MAX_PEER_DID_LENGTH:
        raise InvalidDid("not a did:peer:2")
    doc: dict[str, Any] = {"@context": list(_CONTEXT), "id": did, "verificationMethod": []}
    services: list[dict[str, Any]] = []
    for element in did[len(PEER2) + 1 :].split("."):
        code, body = element[:1], element[1:]
        if code == "S":
            services.extend(_decode_service_segment(body))
        elif code in _PURPOSES:
            try:
                PublicKey.from_multibase(body)
            except InvalidKey as exc:
                raise InvalidDid("did:peer:2 key is not a supported multikey") from exc
            vm_id = f"#key-{len(doc['verificationMethod']) + 1}"
            doc["verificationMethod"].append(
                {"id": vm_id, "type": "Multikey", "controller": did, "publicKeyMultibase": body}
            )
            doc.setdefault(_PURPOSES[code], []).append(vm_id)
        else:
            raise InvalidDid("unknown did:peer:2 element")
    unnamed = 0
    for svc in services:
        if "id" not in svc:
            svc["id"] = "#service" if unnamed == 0 else f"#service-{unnamed}"
            unnamed += 1
    doc["service"] = services
    return doc


def resolve_peer2(did: str) -> DidDocument:
    """Resolve a did:peer:2."""
    return document_from_json(peer2_document_json(did))


def _peer4_hash(encoded_document: str) -> str:
    return multibase_encode(_SHA256_MULTIHASH + hashlib.sha256(encoded_document.encode("ascii")).digest())


def peer4_create(input_document: Mapping[str, Any]) -> str:
    """The long-form did:peer:4 of an input document (no root id, relative references)."""
    text = json.dumps(dict(input_document), separators=(",", ":"), ensure_ascii=False)
    encoded = multibase_encode(varint_encode(_JSON_CODEC) + text.encode("utf-8"))
    return f"{PEER4}{_peer4_hash(encoded)}:{encoded}"


def peer4_short_form(did: str) -> str:
    """The short form (`did:peer:4z…` hash only) of a long or short did:peer:4."""
    if not isinstance(did, str) or not did.startswith(PEER4 + "z"):
        raise InvalidDid("not a did:peer:4")
    parts = did.split(":")
    if len(parts) not in (3, 4):
        raise InvalidDid("not a did:peer:4")
    return ":".join(parts[:3])


def peer4_document_json(did: str) -> dict[str, Any]:
    """The contextualised document of a long-form did:peer:4, after checking its hash."""
    if not isinstance(did, str) or not did.startswith(PEER4 + "z") or len(did) > MAX_PEER_DID_LENGTH:
        raise InvalidDid("not a did:peer:4")
    parts = did.split(":")
    if len(parts) != 4:
        raise InvalidDid("a short-form did:peer:4 resolves only from its stored long form")
    hash_part, encoded = parts[2][1:], parts[3]
    if _peer4_hash(encoded) != hash_part:
        raise InvalidDid("did:peer:4 hash does not match its document")
    try:
        raw = multibase_decode(encoded, max_chars=MAX_PEER_DID_LENGTH)
        code, used = varint_decode(raw)
        if code != _JSON_CODEC:
            raise InvalidDid("did:peer:4 document is not multicodec JSON")
        doc = loads_strict(raw[used:].decode("utf-8"))
    except (InvalidKey, UnicodeDecodeError, ValueError) as exc:
        if isinstance(exc, InvalidDid):
            raise
        raise InvalidDid("did:peer:4 document does not decode") from exc
    if not isinstance(doc, dict) or "id" in doc:
        raise InvalidDid("did:peer:4 input document must be an object without id")
    if not isinstance(doc.get("alsoKnownAs", []), list) or not isinstance(doc.get("verificationMethod", []), list):
        raise InvalidDid("did:peer:4 alsoKnownAs and verificationMethod must be lists")
    short = f"{PEER4}{hash_part}"
    doc["id"] = did
    doc["alsoKnownAs"] = [*doc.get("alsoKnownAs", []), short]
    for vm in doc.get("verificationMethod", []):
        if isinstance(vm, dict):
            vm.setdefault("controller", did)
    return doc


def resolve_peer4(did: str) -> DidDocument:
    """Resolve a long-form did:peer:4."""
    return document_from_json(peer4_document_json(did))


def peer4_didcomm_v1(key: PublicKey, endpoints: Sequence[str]) -> str:
    """A long-form did:peer:4 shaped as ACA-Py 1.7 makes its own (one Ed25519 `#key-0` for
    authentication and key agreement; one `did-communication` service per endpoint, in priority order)."""
    services = [
        {
            "id": f"#didcomm-{i}",
            "type": "did-communication",
            "recipientKeys": ["#key-0"],
            "routingKeys": [],
            "serviceEndpoint": uri,
            "priority": i,
        }
        for i, uri in enumerate(endpoints)
    ]
    return peer4_create(
        {
            "@context": list(_CONTEXT),
            "verificationMethod": [{"id": "#key-0", "type": "Multikey", "publicKeyMultibase": key.multibase}],
            "authentication": ["#key-0"],
            "keyAgreement": ["#key-0"],
            "service": services,
        }
    )
