"""DIDComm v2 encrypted messages (JWE, general JSON serialization), both directions, one implementation.

Key management: ECDH-ES+A256KW (anoncrypt) and ECDH-1PU+A256KW (authcrypt), Concat KDF
(RFC 7518 §4.6; draft-madden-jose-ecdh-1pu-04 §2.3 for 1PU, whose SuppPubInfo carries the
content tag, "cctag"). Content: A256CBC-HS512 (RFC 7518 §5.2), A256GCM, XC20P. Curves: X25519
and the NIST curves. DIDComm v2 §"ECDH-1PU key wrapping and common protected headers": `epk`,
`apv` (= b64url(sha256(sorted recipient kids joined by ".")) and, for authcrypt, `skid` and
`apu` (= b64url(skid)) are in the protected header, shared by all recipients.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import padding
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.keywrap import InvalidUnwrap, aes_key_unwrap, aes_key_wrap
from nacl import bindings
from nacl.exceptions import CryptoError

from apps.wire.canonical import loads_strict
from apps.wire.encoding import EncodingError, b64decode, b64url_nopad

from .errors import (
    InvalidKey,
    MalformedEnvelope,
    UndecryptableEnvelope,
    UnknownRecipientKey,
    UnknownSenderKey,
    UnsupportedAlgorithm,
)
from .keys import EC_CURVES, X25519, PrivateKey, PublicKey

TYP_ENCRYPTED = "application/didcomm-encrypted+json"
ANONCRYPT = "ECDH-ES+A256KW"
AUTHCRYPT = "ECDH-1PU+A256KW"
A256CBC_HS512 = "A256CBC-HS512"
A256GCM = "A256GCM"
XC20P = "XC20P"
# enc -> (CEK bytes, IV bytes, tag bytes)
_ENC = {A256CBC_HS512: (64, 16, 32), A256GCM: (32, 12, 16), XC20P: (32, 24, 16)}
# DIDComm v2: ECDH-1PU needs the tag before key wrapping; only A256CBC-HS512 is specified for it.
_AUTHCRYPT_ENCS = (A256CBC_HS512,)
KEY_AGREEMENT_CURVES = (X25519, *EC_CURVES)

RecipientKeyLookup = Callable[[str], PrivateKey | None]
SenderKeyLookup = Callable[[str], PublicKey | None]


@dataclass(frozen=True)
class Decrypted:
    plaintext: bytes
    alg: str
    enc: str
    recipient_kid: str  # the kid we decrypted with
    sender_kid: str | None  # authcrypt only: the verified `skid`
    recipient_kids: tuple[str, ...]  # every recipient of the envelope


def _b64(value: object, what: str) -> bytes:
    if not isinstance(value, str):
        raise MalformedEnvelope(f"{what} must be a base64url string")
    try:
        return b64decode(value)
    except EncodingError as exc:
        raise MalformedEnvelope(f"{what} is not base64url") from exc


def apv_for(kids: Sequence[str]) -> str:
    """DIDComm v2 `apv`: base64url(SHA-256 of the sorted recipient kids joined by '.')."""
    return b64url_nopad(hashlib.sha256(".".join(sorted(kids)).encode("utf-8")).digest())


def _lp(data: bytes) -> bytes:
    return len(data).to_bytes(4, "big") + data


def _kek(alg: str, z: bytes, apu: bytes, apv: bytes, tag: bytes) -> bytes:
    """Concat KDF (SHA-256) to a 256-bit key-wrapping key; 1PU appends the cctag to SuppPubInfo."""
    supp_pub = (256).to_bytes(4, "big") + (_lp(tag) if alg == AUTHCRYPT else b"")
    other = _lp(alg.encode("ascii")) + _lp(apu) + _lp(apv) + supp_pub
    # NIST SP 800-56A §5.8.1 for 256 bits of SHA-256: one round, counter 1 (what cryptography's
    # ConcatKDFHash computes, without building its objects per message).
    return hashlib.sha256(b"\x00\x00\x00\x01" + z + other).digest()


def _cbc_hs512_tag(mac_key: bytes, aad: bytes, iv: bytes, ciphertext: bytes) -> bytes:
    al = (len(aad) * 8).to_bytes(8, "big")
    return hmac.digest(mac_key, aad + iv + ciphertext + al, "sha512")[:32]


def _content_encrypt(enc: str, cek: bytes, iv: bytes, plaintext: bytes, aad: bytes) -> tuple[bytes, bytes]:
    if enc == A256CBC_HS512:
        padder = padding.PKCS7(128).padder()
        padded = padder.update(plaintext) + padder.finalize()
        encryptor = Cipher(algorithms.AES(cek[32:]), modes.CBC(iv)).encryptor()
        ciphertext = encryptor.update(padded) + encryptor.finalize()
        return ciphertext, _cbc_hs512_tag(cek[:32], aad, iv, ciphertext)
    if enc == A256GCM:
        out = AESGCM(cek).encrypt(iv, plaintext, aad)
        return out[:-16], out[-16:]
    out = bindings.crypto_aead_xchacha20poly1305_ietf_encrypt(plaintext, aad, iv, cek)
    return out[:-16], out[-16:]


def _pkcs7_unpad(padded: bytes) -> bytes:
    """PKCS #7 padding removed (RFC 7518 §5.2.2.2: after the tag verified, so no padding oracle)."""
    n = padded[-1] if padded else 0
    if not 0 < n <= 16 or padded[-n:] != bytes((n,)) * n:
        raise UndecryptableEnvelope("content does not decrypt")
    return padded[:-n]


def _content_decrypt(enc: str, cek: bytes, iv: bytes, ciphertext: bytes, tag: bytes, aad: bytes) -> bytes:
    try:
        if enc == A256CBC_HS512:
            if not hmac.compare_digest(_cbc_hs512_tag(cek[:32], aad, iv, ciphertext), tag):
                raise UndecryptableEnvelope("authentication tag does not verify")
            decryptor = Cipher(algorithms.AES(cek[32:]), modes.CBC(iv)).decryptor()
            return _pkcs7_unpad(decryptor.update(ciphertext) + decryptor.finalize())
        if enc == A256GCM:
            return AESGCM(cek).decrypt(iv, ciphertext + tag, aad)
        return bindings.crypto_aead_xchacha20poly1305_ietf_decrypt(ciphertext + tag, aad, iv, cek)
    except (InvalidTag, CryptoError, ValueError) as exc:
        if isinstance(exc, UndecryptableEnvelope):
            raise
        raise UndecryptableEnvelope("content does not decrypt") from exc


def encrypt(
    plaintext: bytes,
    *,
    to: Sequence[tuple[str, PublicKey]],
    sender: tuple[str, PrivateKey] | None = None,
    enc: str = A256CBC_HS512,
) -> dict[str, Any]:
    """A DIDComm v2 JWE of `plaintext` for every (kid, key) in `to`: authcrypt from `sender` (skid, key), else anoncrypt.

    `epk`, `apv` (and `skid`, `apu`) go in the protected header, where didcomm-node and the Identus SDK look.
    """
    if not to:
        raise UnsupportedAlgorithm("no recipient")
    curves = {key.crv for _, key in to}
    if len(curves) != 1 or next(iter(curves)) not in KEY_AGREEMENT_CURVES:
        raise UnsupportedAlgorithm("recipients must share one key-agreement curve")
    crv = next(iter(curves))
    if enc not in _ENC:
        raise UnsupportedAlgorithm("unsupported content encryption")
    alg = AUTHCRYPT if sender else ANONCRYPT
    if sender and enc not in _AUTHCRYPT_ENCS:
        raise UnsupportedAlgorithm("authcrypt uses A256CBC-HS512")
    if sender and sender[1].crv != crv:
        raise UnsupportedAlgorithm("sender and recipients must share one curve")
    kids = [kid for kid, _ in to]
    epk = PrivateKey.generate(crv)
    header: dict[str, Any] = {"typ": TYP_ENCRYPTED, "alg": alg, "enc": enc}
    if sender:
        header["skid"] = sender[0]
        header["apu"] = b64url_nopad(sender[0].encode("utf-8"))
    header["apv"] = apv_for(kids)
    header["epk"] = epk.public.to_jwk()
    protected = b64url_nopad(json.dumps(header, separators=(",", ":")).encode("utf-8"))
    cek_len, iv_len, _ = _ENC[enc]
    cek, iv = os.urandom(cek_len), os.urandom(iv_len)
    ciphertext, tag = _content_encrypt(enc, cek, iv, plaintext, protected.encode("ascii"))
    apu = sender[0].encode("utf-8") if sender else b""
    apv = b64decode(header["apv"])
    recipients = []
    for kid, key in to:
        z = epk.exchange(key) + (sender[1].exchange(key) if sender else b"")
        recipients.append(
            {"header": {"kid": kid}, "encrypted_key": b64url_nopad(aes_key_wrap(_kek(alg, z, apu, apv, tag), cek))}
        )
    return {
        "protected": protected,
        "recipients": recipients,
        "iv": b64url_nopad(iv),
        "ciphertext": b64url_nopad(ciphertext),
        "tag": b64url_nopad(tag),
    }


def parse_envelope(data: bytes | str | Mapping[str, Any]) -> dict[str, Any]:
    """The JWE as a dict; MalformedEnvelope if it is not a JSON object."""
    if type(data) is dict or isinstance(data, Mapping):  # a dict skips the ABC's check
        return dict(data)
    try:
        value = loads_strict(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise MalformedEnvelope("envelope is not JSON") from exc
    if not isinstance(value, dict):
        raise MalformedEnvelope("envelope is not a JSON object")
    return value


def _recipients(jwe: Mapping[str, Any]) -> list[tuple[str, bytes]]:
    recipients = jwe.get("recipients")
    if not isinstance(recipients, list) or not recipients:
        raise MalformedEnvelope("recipients must be a non-empty list")
    out = []
    for r in recipients:
        kid = r.get("header", {}).get("kid") if isinstance(r, dict) and isinstance(r.get("header"), dict) else None
        # A DID URL is ASCII (RFC 3986; anything else percent-encoded): apv hashes the kids' bytes.
        if not isinstance(kid, str) or not kid or not kid.isascii():
            raise MalformedEnvelope("every recipient needs header.kid, a DID URL")
        out.append((kid, _b64(r.get("encrypted_key"), "encrypted_key")))
    return out


def decrypt(
    data: bytes | str | Mapping[str, Any],
    *,
    private_key_for: RecipientKeyLookup,
    sender_key_for: SenderKeyLookup | None = None,
) -> Decrypted:
    """Decrypt a DIDComm v2 JWE with the first recipient kid we hold a key for.

    Authcrypt needs `sender_key_for(skid)`: the sender's key-agreement key, resolved by the caller.
    """
    jwe = parse_envelope(data)
    protected_b64 = jwe.get("protected")
    if not isinstance(protected_b64, str):
        raise MalformedEnvelope("protected header missing")
    protected_raw = _b64(protected_b64, "protected")
    try:
        header = loads_strict(protected_raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise MalformedEnvelope("protected header is not JSON") from exc
    if not isinstance(header, dict):
        raise MalformedEnvelope("protected header is not an object")
    alg, enc = header.get("alg"), header.get("enc")
    if alg not in (ANONCRYPT, AUTHCRYPT):
        raise UnsupportedAlgorithm("unsupported alg")
    if not isinstance(enc, str) or enc not in _ENC or (alg == AUTHCRYPT and enc not in _AUTHCRYPT_ENCS):
        raise UnsupportedAlgorithm("unsupported enc")
    try:
        epk = PublicKey.from_jwk(header.get("epk"))
    except InvalidKey as exc:
        raise MalformedEnvelope("protected header needs a valid epk") from exc
    if epk.crv not in KEY_AGREEMENT_CURVES:
        raise UnsupportedAlgorithm("unsupported key-agreement curve")
    recipients = _recipients(jwe)
    kids = tuple(kid for kid, _ in recipients)
    iv, ciphertext, tag = (
        _b64(jwe.get("iv"), "iv"),
        _b64(jwe.get("ciphertext"), "ciphertext"),
        _b64(jwe.get("tag"), "tag"),
    )
    _, iv_len, tag_len = _ENC[enc]
    if len(iv) != iv_len or len(tag) != tag_len:
        raise MalformedEnvelope("iv or tag has the wrong length for enc")
    # DIDComm v2: apv binds the recipient set; a mismatch means the list was altered.
    if header.get("apv") != apv_for(kids):
        raise UndecryptableEnvelope("apv does not match the recipient kids")
    apv = b64decode(header["apv"])
    apu = _b64(header["apu"], "apu") if "apu" in header else b""
    # Our own keys first: a message for no key of ours costs no resolution of its sender's DID.
    held = [(kid, wrapped, key) for kid, wrapped in recipients if (key := private_key_for(kid)) is not None]
    if not held:
        raise UnknownRecipientKey("no recipient key of ours")
    sender_kid = None
    sender_key = None
    if alg == AUTHCRYPT:
        sender_kid = header.get("skid")
        if sender_kid is None and apu:
            sender_kid = apu.decode("utf-8", "replace")
        if not isinstance(sender_kid, str) or not sender_kid or not sender_kid.isascii():
            raise MalformedEnvelope("authcrypt needs skid, a DID URL")
        if apu != sender_kid.encode("ascii"):
            raise UndecryptableEnvelope("apu does not match skid")
        sender_key = sender_key_for(sender_kid) if sender_key_for else None
        if sender_key is None:
            raise UnknownSenderKey("sender key does not resolve")
        if sender_key.crv != epk.crv:
            raise UndecryptableEnvelope("sender key and epk are on different curves")
    aad = protected_b64.encode("ascii")
    if "aad" in jwe:
        _b64(jwe["aad"], "aad")
        aad += b"." + str(jwe["aad"]).encode("ascii")
    for kid, wrapped, key in held:
        if key.crv != epk.crv:
            continue
        try:
            z = key.exchange(epk) + (key.exchange(sender_key) if sender_key else b"")
            cek = aes_key_unwrap(_kek(alg, z, apu, apv, tag), wrapped)
        except (InvalidKey, InvalidUnwrap, ValueError):
            continue  # another of our kids may still work (e.g. during a key rotation's grace period)
        if len(cek) != _ENC[enc][0]:
            continue
        plaintext = _content_decrypt(enc, cek, iv, ciphertext, tag, aad)
        return Decrypted(plaintext, alg, enc, kid, sender_kid, kids)
    raise UndecryptableEnvelope("key unwrapping failed")
