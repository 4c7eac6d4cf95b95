"""Communication contracts in reading R1 (docs/protocol-readings.md §4, dctrl-0003 §3.2).

{"communication_contract": {requestor_did, recipient_did, requestor_ephemeral_public_key,
  recipient_ephemeral_public_key, expires_at}, "requestor_signature", "recipient_signature"}

requestor_signature covers the terms without recipient_ephemeral_public_key; recipient_signature
covers the whole communication_contract. Unknown members are carried verbatim.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .canonical import CanonicalError, canonical_bytes, loads_strict
from .crypto import (
    CryptoFailure,
    Ed25519KeyPair,
    X25519KeyPair,
    aes_gcm_decrypt,
    aes_gcm_encrypt,
    sign_json_object,
    verify_json_object,
    x25519,
)
from .did import DidError, ResolvedDid
from .encoding import EncodingError, b64decode, b64encode
from .envelope import is_integral

Resolver = Callable[[str], ResolvedDid]


class ContractInvalid(ValueError):
    """Malformed contract: INVALID_COMMAND."""


class ContractSignaturesInvalid(ValueError):
    """A contract signature does not verify: INVALID_SIGNATURES."""


@dataclass(frozen=True)
class ContractInfo:
    requestor_did: str
    recipient_did: str
    expires_at: int
    contract_hash: str

    def other_party(self, did: str) -> str:
        return self.recipient_did if did == self.requestor_did else self.requestor_did

    def has_party(self, did: str) -> bool:
        return did in (self.requestor_did, self.recipient_did)


def contract_hash(communication_contract: dict[str, Any]) -> str:
    """Contract id: lowercase hex SHA-256 of the canonical communication_contract (open point 12)."""
    return hashlib.sha256(canonical_bytes(communication_contract)).hexdigest()


def requestor_signable(terms: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in terms.items() if k != "recipient_ephemeral_public_key"}


def _key32(value: object, name: str) -> bytes:
    if not isinstance(value, str) or len(value) > 64:
        raise ContractInvalid(f"{name} must be base64")
    try:
        raw = b64decode(value)
    except EncodingError as exc:
        raise ContractInvalid(f"{name} must be base64") from exc
    if len(raw) != 32:
        raise ContractInvalid(f"{name} must be 32 bytes")
    return raw


def check_terms(terms: object, *, with_recipient_key: bool, now_s: int) -> ContractInfo:
    """Structural checks of the contract terms (docs/protocol-readings.md §4, 'Contract checks')."""
    if not isinstance(terms, dict):
        raise ContractInvalid("communication_contract must be an object")
    req, rec = terms.get("requestor_did"), terms.get("recipient_did")
    if not isinstance(req, str) or not isinstance(rec, str) or not req or not rec:
        raise ContractInvalid("party DIDs must be strings")
    if len(req) > 2048 or len(rec) > 2048:
        raise ContractInvalid("party DID too long")
    if req == rec:
        raise ContractInvalid("parties must differ")
    _key32(terms.get("requestor_ephemeral_public_key"), "requestor_ephemeral_public_key")
    if with_recipient_key:
        _key32(terms.get("recipient_ephemeral_public_key"), "recipient_ephemeral_public_key")
    exp: Any = terms.get("expires_at")
    if not is_integral(exp) or not (0 < int(exp) < 2**53):
        raise ContractInvalid("expires_at must be an integer (Unix seconds)")
    expires_at = int(exp)
    if expires_at <= now_s:
        raise ContractInvalid("contract already expired")
    try:
        h = contract_hash(terms)
    except CanonicalError as exc:
        raise ContractInvalid(str(exc)) from exc
    return ContractInfo(requestor_did=req, recipient_did=rec, expires_at=expires_at, contract_hash=h)


def verify_signed_contract(signed: object, resolve: Resolver, *, now_s: int) -> ContractInfo:
    """Check form, resolve both parties and verify both signatures (DCTRL-0003 §8 under R1)."""
    if not isinstance(signed, dict):
        raise ContractInvalid("signed_communication_contract must be an object")
    terms = signed.get("communication_contract")
    info = check_terms(terms, with_recipient_key=True, now_s=now_s)
    try:
        requestor = resolve(info.requestor_did)
        recipient = resolve(info.recipient_did)
    except DidError as exc:
        raise ContractInvalid("a contract party does not resolve") from exc
    assert isinstance(terms, dict)
    ok_req = verify_json_object(requestor_signable(terms), signed.get("requestor_signature"), requestor.signing_key)
    ok_rec = verify_json_object(terms, signed.get("recipient_signature"), recipient.signing_key)
    if not (ok_req and ok_rec):
        raise ContractSignaturesInvalid("contract signature failed")
    return info


# --- client side -----------------------------------------------------------------------------


@dataclass(frozen=True)
class ContractRequest:
    """A signed request, its encryption, and the ephemeral private key the requestor keeps."""

    request: dict[str, Any]
    encrypted: str
    ephemeral: X25519KeyPair

    @property
    def ephemeral_public_b64(self) -> str:
        return b64encode(self.ephemeral.public)


def build_request(
    *, requestor_did: str, recipient_did: str, recipient_prekey: bytes, signing: Ed25519KeyPair, expires_at: int
) -> ContractRequest:
    """Build, sign and encrypt a contract request to `recipient_prekey` (DCTRL-0003 §4)."""
    eph = X25519KeyPair.generate()
    terms = {
        "requestor_did": requestor_did,
        "recipient_did": recipient_did,
        "requestor_ephemeral_public_key": b64encode(eph.public),
        "expires_at": expires_at,
    }
    request = {"communication_contract": terms, "requestor_signature": sign_json_object(terms, signing)}
    key = x25519(eph.private, recipient_prekey)
    encrypted = aes_gcm_encrypt(key, json.dumps(request, separators=(",", ":")).encode("utf-8"))
    return ContractRequest(request=request, encrypted=encrypted, ephemeral=eph)


def decrypt_request(encrypted_b64: str, ephemeral_public_b64: str, prekey_private: bytes) -> dict[str, Any]:
    """Decrypt a contract request with X25519(prekey_private, requestor ephemeral) and no KDF."""
    try:
        epk = _key32(ephemeral_public_b64, "requestor_ephemeral_public_key")
        plaintext = aes_gcm_decrypt(x25519(prekey_private, epk), encrypted_b64)
        request = loads_strict(plaintext)
    except (CryptoFailure, CanonicalError) as exc:
        raise ContractInvalid("contract request does not decrypt") from exc
    if not isinstance(request, dict) or not isinstance(request.get("communication_contract"), dict):
        raise ContractInvalid("contract request is malformed")
    return request


def accept_request(request: dict[str, Any], signing: Ed25519KeyPair) -> tuple[dict[str, Any], X25519KeyPair]:
    """Add a fresh recipient ephemeral key and countersign: the SignedCommunicationContract."""
    eph = X25519KeyPair.generate()
    terms = dict(request["communication_contract"])
    terms["recipient_ephemeral_public_key"] = b64encode(eph.public)
    signed = {
        "communication_contract": terms,
        "requestor_signature": request["requestor_signature"],
        "recipient_signature": sign_json_object(terms, signing),
    }
    return signed, eph


def verify_request_signature(request: dict[str, Any], requestor: ResolvedDid) -> bool:
    """The requestor's signature over the request terms."""
    terms = request.get("communication_contract")
    if not isinstance(terms, dict):
        return False
    return verify_json_object(requestor_signable(terms), request.get("requestor_signature"), requestor.signing_key)


def root_secret(own_ephemeral_private: bytes, their_ephemeral_public_b64: str) -> bytes:
    """X25519(own ephemeral, their ephemeral): the AES-256 key for transit events (no KDF)."""
    return x25519(own_ephemeral_private, b64decode(their_ephemeral_public_b64))
