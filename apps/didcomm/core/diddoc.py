"""A resolved DID document, built from DID-Core JSON the same way for every method (did:key, did:peer:2/4).

Key references are looked up by their `#key-N`-style id and also by the key's multibase
fingerprint (`#z6LS…` or `#6LS…`), the form older did:peer:2 libraries and did:key use, or by its
first SHORT_FINGERPRINT characters without the `z` (`#6LSqg4J8`), the ids SICPA `peerdid` 0.5 gives.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from apps.wire.encoding import EncodingError, b58decode

from .errors import InvalidDid, InvalidKey
from .keys import ED25519, X25519, PublicKey, multibase_decode

# Key types whose bare (non-multicodec) base58 or multibase value says the curve.
_BARE_KEY_TYPES = {
    "Ed25519VerificationKey2018": ED25519,
    "Ed25519VerificationKey2020": ED25519,
    "X25519KeyAgreementKey2019": X25519,
    "X25519KeyAgreementKey2020": X25519,
}
# peerdid 0.5 (SICPA) names a did:peer:2 key `#` + the first 8 characters of its fingerprint, `z` left out.
SHORT_FINGERPRINT = 8
RELATIONSHIPS = ("authentication", "assertionMethod", "keyAgreement", "capabilityInvocation", "capabilityDelegation")


@dataclass(frozen=True)
class VerificationMethod:
    id: str  # absolute DID URL
    controller: str
    type: str
    key: PublicKey


@dataclass(frozen=True)
class DidcommEndpoint:
    """One DIDCommMessaging (or did-communication) service, normalised across encodings."""

    id: str
    type: str
    uri: str
    accept: tuple[str, ...]
    routing_keys: tuple[str, ...]


@dataclass(frozen=True)
class DidDocument:
    id: str
    verification_methods: tuple[VerificationMethod, ...]
    relationships: Mapping[str, tuple[str, ...]]  # name -> absolute ids
    services: tuple[dict[str, Any], ...]
    also_known_as: tuple[str, ...] = ()
    json: dict[str, Any] = field(default_factory=dict[str, Any], compare=False)  # the DID-Core document as resolved

    @property
    def key_agreement(self) -> list[VerificationMethod]:
        """Key-agreement methods, in document order."""
        return [self._by_id[i] for i in self.relationships.get("keyAgreement", ()) if i in self._by_id]

    @property
    def authentication(self) -> list[VerificationMethod]:
        """Authentication methods, in document order."""
        return [self._by_id[i] for i in self.relationships.get("authentication", ()) if i in self._by_id]

    @property
    def _by_id(self) -> dict[str, VerificationMethod]:
        return {vm.id: vm for vm in self.verification_methods}

    def find(self, kid: str, relationship: str | None = None) -> VerificationMethod | None:
        """The method `kid` names (absolute or relative; `#key-N`, the multibase fingerprint or its short
        form), optionally within one relationship."""
        if not isinstance(kid, str) or "#" not in kid:
            return None
        did, fragment = kid.split("#", 1)
        if did and did != self.id and did not in self.also_known_as:
            return None
        allowed = None if relationship is None else set(self.relationships.get(relationship, ()))
        for vm in self.verification_methods:
            if allowed is not None and vm.id not in allowed:
                continue
            if vm.id.split("#", 1)[1] == fragment or fragment in (vm.key.multibase, vm.key.multibase[1:]):
                return vm
        if len(fragment) != SHORT_FINGERPRINT:
            return None
        # The short form names a key only when no other key of the document starts the same way.
        named = [vm for vm in self.verification_methods if vm.key.multibase[1 : 1 + SHORT_FINGERPRINT] == fragment]
        if len(named) != 1 or (allowed is not None and named[0].id not in allowed):
            return None
        return named[0]

    def didcomm_endpoints(self) -> list[DidcommEndpoint]:
        """DIDComm services in document order, whether `serviceEndpoint` is an object (v2 final) or a string."""
        out = []
        for svc in self.services:
            endpoint = svc.get("serviceEndpoint")
            if svc.get("type") not in ("DIDCommMessaging", "did-communication"):
                continue
            if isinstance(endpoint, dict):
                uri, accept, routing = endpoint.get("uri"), endpoint.get("accept", []), endpoint.get("routingKeys", [])
            else:  # the older encoding: accept/routingKeys beside a string endpoint
                uri, accept, routing = endpoint, svc.get("accept", []), svc.get("routingKeys", [])
            if not isinstance(uri, str) or not _str_list(accept) or not _str_list(routing):
                continue
            out.append(DidcommEndpoint(str(svc.get("id", "")), svc["type"], uri, tuple(accept), tuple(routing)))
        return out


def _str_list(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def absolute(did: str, ref: str) -> str:
    """`did#frag` for a relative `#frag`; absolute references unchanged."""
    return did + ref if ref.startswith("#") else ref


def verification_method_key(vm: Mapping[str, Any]) -> PublicKey:
    """The public key of a verification method: Multikey / *2020 multibase, JsonWebKey2020, or *2018/2019 base58."""
    if "publicKeyJwk" in vm:
        return PublicKey.from_jwk(vm["publicKeyJwk"])
    vm_type = vm.get("type")
    if vm_type is not None and not isinstance(vm_type, str):
        raise InvalidKey("verification method type is not a string")
    if "publicKeyMultibase" in vm:
        value = vm["publicKeyMultibase"]
        if vm_type in _BARE_KEY_TYPES:  # the 2020 suites: try multicodec first, then bare bytes
            try:
                key = PublicKey.from_multibase(value)
                if key.crv == _BARE_KEY_TYPES[vm_type]:
                    return key
            except InvalidKey:
                pass
            return PublicKey(_BARE_KEY_TYPES[vm_type], multibase_decode(value))
        return PublicKey.from_multibase(value)
    if "publicKeyBase58" in vm and vm_type in _BARE_KEY_TYPES:
        if not isinstance(vm["publicKeyBase58"], str):
            raise InvalidKey("publicKeyBase58 is not a string")
        try:
            return PublicKey(_BARE_KEY_TYPES[vm_type], b58decode(vm["publicKeyBase58"]))
        except EncodingError as exc:
            raise InvalidKey("publicKeyBase58 is not base58") from exc
    raise InvalidKey("verification method has no supported key material")


def document_from_json(doc: Mapping[str, Any]) -> DidDocument:
    """Parse a resolved DID-Core document: methods (listed or embedded), relationships, services."""
    did = doc.get("id")
    if not isinstance(did, str) or not did.startswith("did:"):
        raise InvalidDid("document has no DID id")
    methods: dict[str, VerificationMethod] = {}

    def add(vm: object) -> str:
        if not isinstance(vm, Mapping) or not isinstance(vm.get("id"), str):
            raise InvalidDid("verification method without an id")
        vm_id = absolute(did, vm["id"])
        methods[vm_id] = VerificationMethod(
            id=vm_id,
            controller=str(vm.get("controller", did)),
            type=str(vm.get("type", "")),
            key=verification_method_key(vm),
        )
        return vm_id

    for vm in _list(doc.get("verificationMethod", [])):
        add(vm)
    relationships: dict[str, tuple[str, ...]] = {}
    for name in RELATIONSHIPS:
        refs = []
        for item in _list(doc.get(name, [])):
            refs.append(absolute(did, item) if isinstance(item, str) else add(item))
        relationships[name] = tuple(refs)
    services = tuple(s for s in _list(doc.get("service", [])) if isinstance(s, dict))
    aka = tuple(a for a in _list(doc.get("alsoKnownAs", [])) if isinstance(a, str))
    return DidDocument(did, tuple(methods.values()), relationships, services, aka, dict(doc))


def _list(value: object) -> list[Any]:
    if not isinstance(value, list):
        raise InvalidDid("expected a list in the DID document")
    return value


# The pre-DID-Core document older Aries agents attach to DID Exchange 1.0 (`did_doc~attach`): ACA-Py's
# legacy DIDDoc (`publicKey`, `authentication: [{type, publicKey: ref}]`, an `IndyAgent` service with
# base58 `recipientKeys`), for an unqualified DID whose document id is `did:sov:<did>`.
LEGACY_SERVICE_TYPES = ("IndyAgent", "did-communication")


def legacy_document_from_json(doc: object) -> DidDocument:
    """Parse an attached Aries DID document, legacy (`publicKey`, `IndyAgent`) or DID-Core."""
    if not isinstance(doc, Mapping):
        raise InvalidDid("the DID document is not an object")
    converted = dict(doc)
    methods = _list(doc.get("verificationMethod", [])) + _list(doc.get("publicKey", []))
    converted.pop("publicKey", None)
    converted["verificationMethod"] = methods
    auth = []
    for item in _list(doc.get("authentication", [])):
        # legacy: {"type": "Ed25519SignatureAuthentication2018", "publicKey": "<did>#1"} (a reference)
        if isinstance(item, Mapping) and "id" not in item and isinstance(item.get("publicKey"), str):
            auth.append(item["publicKey"])
        else:
            auth.append(item)
    converted["authentication"] = auth
    services = []
    for svc in _list(doc.get("service", [])):
        if isinstance(svc, Mapping) and svc.get("type") in LEGACY_SERVICE_TYPES:
            svc = {**svc, "type": "did-communication"}
        services.append(svc)
    converted["service"] = services
    parsed = document_from_json(converted)
    return DidDocument(
        parsed.id, parsed.verification_methods, parsed.relationships, parsed.services, parsed.also_known_as, dict(doc)
    )
