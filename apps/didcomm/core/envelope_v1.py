"""DIDComm v1 envelopes (Aries RFC 0019): authcrypt and anoncrypt, pack and unpack, on libsodium.

The CEK is wrapped per recipient with crypto_box (authcrypt; the sender's verkey travels in a
sealed box) or crypto_box_seal (anoncrypt), to the X25519 form of the recipient's Ed25519 verkey.
The content is ChaCha20-Poly1305 (IETF) with the base64url `protected` header as AAD. The header
says `enc: xchacha20poly1305_ietf`, but what ACA-Py and Credo (Askar's `C20P`) and indy-sdk before
them actually produce is the 12-byte-nonce IETF cipher; a 24-byte `iv` (true XChaCha20) is
accepted on unpack too. Keys are named by raw base58 verkeys (`kid`), as v1 agents send them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nacl import bindings
from nacl.exceptions import CryptoError

from apps.wire.canonical import loads_strict
from apps.wire.encoding import EncodingError, b58decode, b58encode, b64decode, b64url_nopad

from .errors import (
    InvalidKey,
    MalformedEnvelope,
    UndecryptableEnvelope,
    UnknownRecipientKey,
    UnsupportedAlgorithm,
)
from .keys import ED25519, PrivateKey, PublicKey

ENC = "xchacha20poly1305_ietf"
TYP = "JWM/1.0"
AUTHCRYPT, ANONCRYPT = "Authcrypt", "Anoncrypt"
_IETF_NONCE, _XCHACHA_NONCE, _BOX_NONCE, _TAG = 12, 24, 24, 16

# Content cipher by nonce length: IETF ChaCha20-Poly1305 (what agents send) or XChaCha20-Poly1305.
_DECRYPT = {
    _IETF_NONCE: bindings.crypto_aead_chacha20poly1305_ietf_decrypt,
    _XCHACHA_NONCE: bindings.crypto_aead_xchacha20poly1305_ietf_decrypt,
}

PrivateKeyLookup = Callable[[str], PrivateKey | None]


@dataclass(frozen=True)
class Unpacked:
    message: bytes
    recipient_verkey: str  # base58, the `kid` we decrypted with
    sender_verkey: str | None  # base58, authcrypt only


def _verkey_bytes(verkey: str) -> bytes:
    try:
        raw = b58decode(verkey)
    except (EncodingError, TypeError) as exc:
        raise InvalidKey("verkey is not base58") from exc
    PublicKey(ED25519, raw)  # length check
    return raw


def _x25519_public(verkey_raw: bytes) -> bytes:
    try:
        return bindings.crypto_sign_ed25519_pk_to_curve25519(verkey_raw)
    except (CryptoError, ValueError) as exc:
        raise InvalidKey("Ed25519 verkey has no X25519 form") from exc


def _x25519_secret(key: PrivateKey) -> bytes:
    return key.to_x25519().secret


def pack(message: bytes, *, to_verkeys: Sequence[str], sender: PrivateKey | None = None) -> dict[str, Any]:
    """An RFC 0019 envelope of `message` for each base58 verkey: authcrypt from `sender`, else anoncrypt."""
    if not to_verkeys:
        raise InvalidKey("at least one recipient verkey")
    if sender is not None and sender.crv != ED25519:
        raise InvalidKey("the sender key must be Ed25519")
    cek = os.urandom(32)
    recipients = []
    sender_keys = (b58encode(sender.public.raw).encode("ascii"), _x25519_secret(sender)) if sender is not None else None
    for verkey in to_verkeys:
        target_x = _x25519_public(_verkey_bytes(verkey))
        if sender_keys is None:
            recipients.append(
                {"encrypted_key": b64url_nopad(bindings.crypto_box_seal(cek, target_x)), "header": {"kid": verkey}}
            )
            continue
        sender_vk, sender_x = sender_keys
        nonce = os.urandom(_BOX_NONCE)
        wrapped = bindings.crypto_box(cek, nonce, target_x, sender_x)
        recipients.append(
            {
                "encrypted_key": b64url_nopad(wrapped),
                "header": {
                    "kid": verkey,
                    "sender": b64url_nopad(bindings.crypto_box_seal(sender_vk, target_x)),
                    "iv": b64url_nopad(nonce),
                },
            }
        )
    protected = {
        "enc": ENC,
        "typ": TYP,
        "alg": AUTHCRYPT if sender is not None else ANONCRYPT,
        "recipients": recipients,
    }
    protected_b64 = b64url_nopad(json.dumps(protected, separators=(",", ":")).encode("utf-8"))
    iv = os.urandom(_IETF_NONCE)
    sealed = bindings.crypto_aead_chacha20poly1305_ietf_encrypt(message, protected_b64.encode("ascii"), iv, cek)
    return {
        "protected": protected_b64,
        "iv": b64url_nopad(iv),
        "ciphertext": b64url_nopad(sealed[:-_TAG]),
        "tag": b64url_nopad(sealed[-_TAG:]),
    }


def _decoded_protected(envelope: Mapping[str, Any]) -> dict[str, Any]:
    """`protected` decoded, and saying this is RFC 0019 (`enc`); MalformedEnvelope saying why not."""
    protected = envelope.get("protected")
    if not isinstance(protected, str):
        raise MalformedEnvelope("an RFC 0019 envelope needs protected (a base64url string)")
    try:
        header = loads_strict(b64decode(protected))
    except (EncodingError, ValueError, UnicodeDecodeError) as exc:
        raise MalformedEnvelope("protected is not base64url of a JSON object") from exc
    if not isinstance(header, dict):
        raise MalformedEnvelope("protected is not base64url of a JSON object")
    if header.get("enc") != ENC:
        raise MalformedEnvelope(f"protected.enc must be {ENC}")
    return header


def envelope_header(envelope: object) -> dict[str, Any]:
    """The decoded `protected` header of an RFC 0019 envelope; MalformedEnvelope saying what is
    wrong with the envelope otherwise (what an agent that sent `application/didcomm-envelope-enc`
    is told)."""
    if not isinstance(envelope, Mapping):
        raise MalformedEnvelope("an RFC 0019 envelope is a JSON object")
    if "recipients" in envelope:
        raise MalformedEnvelope(
            "top-level recipients: a DIDComm v2 JWE, not an RFC 0019 envelope "
            "(send it as application/didcomm-encrypted+json)"
        )
    for name in ("iv", "ciphertext", "tag"):
        if not isinstance(envelope.get(name), str):
            raise MalformedEnvelope(f"an RFC 0019 envelope needs {name} (a base64url string)")
    return _decoded_protected(envelope)


def protected_header(envelope: Mapping[str, Any]) -> dict[str, Any] | None:
    """The decoded `protected` header if `envelope` is an RFC 0019 envelope (`enc` says so), else None."""
    if not isinstance(envelope, Mapping) or "ciphertext" not in envelope:
        return None
    try:
        return _decoded_protected(envelope)
    except MalformedEnvelope:
        return None


def is_v1(envelope: Mapping[str, Any]) -> bool:
    """True when `envelope` is DIDComm v1 (RFC 0019) rather than a DIDComm v2 JWE.

    A v2 JWE (General JSON serialization) lists its recipients at the top; an RFC 0019 envelope
    lists them inside its protected header and has no top-level `recipients`. Checking that first
    spares every v2 message a decoding of its protected header that only the v2 path needs."""
    if not isinstance(envelope, Mapping) or "recipients" in envelope:
        return False
    return protected_header(envelope) is not None


def _b64(value: object, what: str) -> bytes:
    try:
        return b64decode(value)
    except (EncodingError, TypeError) as exc:
        raise MalformedEnvelope(f"{what} is not base64url") from exc


def unpack(envelope: Mapping[str, Any], *, private_key_for: PrivateKeyLookup) -> Unpacked:
    """Open an RFC 0019 envelope with the first recipient `kid` (base58 verkey) we hold a key for."""
    header = envelope_header(envelope)
    alg = header.get("alg")
    if alg not in (AUTHCRYPT, ANONCRYPT):
        raise UnsupportedAlgorithm("alg must be Authcrypt or Anoncrypt")
    recipients = header.get("recipients")
    if not isinstance(recipients, list) or not recipients:
        raise MalformedEnvelope("recipients are required")
    for entry in recipients:
        if not isinstance(entry, dict) or not isinstance(entry.get("header"), dict):
            raise MalformedEnvelope("recipient needs a header")
        kid = entry["header"].get("kid")
        if not isinstance(kid, str):
            raise MalformedEnvelope("recipient needs a kid")
        key = private_key_for(kid)
        if key is None:
            continue
        cek, sender = _unwrap(entry, key, authcrypt=alg == AUTHCRYPT)
        return Unpacked(_open_content(envelope, cek), kid, sender)
    raise UnknownRecipientKey("no recipient key of this envelope is ours")


def _unwrap(entry: dict[str, Any], key: PrivateKey, *, authcrypt: bool) -> tuple[bytes, str | None]:
    """The CEK (and for authcrypt the sender's verkey) from one recipient entry."""
    header = entry["header"]
    wrapped = _b64(entry.get("encrypted_key"), "encrypted_key")
    own_x = _x25519_secret(key)
    own_x_public = _x25519_public(key.public.raw)
    try:
        if not authcrypt:
            if "sender" in header or "iv" in header:
                raise MalformedEnvelope("anoncrypt recipients carry no sender")
            return bindings.crypto_box_seal_open(wrapped, own_x_public, own_x), None
        sealed_sender, nonce = _b64(header.get("sender"), "sender"), _b64(header.get("iv"), "iv")
        if len(nonce) != _BOX_NONCE:
            raise MalformedEnvelope("recipient iv must be 24 bytes")
        sender_vk = bindings.crypto_box_seal_open(sealed_sender, own_x_public, own_x).decode("ascii")
        sender_x = _x25519_public(_verkey_bytes(sender_vk))
        return bindings.crypto_box_open(wrapped, nonce, sender_x, own_x), sender_vk
    except (CryptoError, ValueError, UnicodeDecodeError) as exc:
        if isinstance(exc, MalformedEnvelope | InvalidKey):
            raise
        raise UndecryptableEnvelope("the content key does not unwrap") from exc


def _open_content(envelope: Mapping[str, Any], cek: bytes) -> bytes:
    iv, ciphertext, tag = (_b64(envelope.get(k), k) for k in ("iv", "ciphertext", "tag"))
    decrypt = _DECRYPT.get(len(iv))
    if decrypt is None or len(tag) != _TAG or len(cek) != 32:
        raise MalformedEnvelope("iv must be 12 or 24 bytes and tag 16")
    try:
        return decrypt(ciphertext + tag, str(envelope["protected"]).encode("ascii"), iv, cek)
    except (CryptoError, ValueError) as exc:
        raise UndecryptableEnvelope("the content does not decrypt") from exc
