"""Ed25519, X25519 and AES-256-GCM as DCTRL-0002 uses them."""

from __future__ import annotations

import os
from dataclasses import dataclass

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from nacl import bindings
from nacl.exceptions import BadSignatureError, CryptoError
from nacl.signing import SigningKey, VerifyKey

from .canonical import canonical_bytes
from .encoding import EncodingError, b64decode, b64encode


class CryptoFailure(ValueError):
    """A decryption or key agreement failed."""


@dataclass(frozen=True)
class Ed25519KeyPair:
    seed: bytes  # 32-byte private seed
    public: bytes

    @classmethod
    def generate(cls) -> Ed25519KeyPair:
        """A fresh random signing key pair."""
        return cls.from_seed(os.urandom(32))

    @classmethod
    def from_seed(cls, seed: bytes) -> Ed25519KeyPair:
        """Derive the pair from a 32-byte seed."""
        return cls(seed=seed, public=bytes(SigningKey(seed).verify_key))

    def sign(self, message: bytes) -> bytes:
        """Detached 64-byte Ed25519 signature."""
        return SigningKey(self.seed).sign(message).signature


@dataclass(frozen=True)
class X25519KeyPair:
    private: bytes
    public: bytes

    @classmethod
    def generate(cls) -> X25519KeyPair:
        """A fresh random X25519 pair."""
        return cls.from_private(os.urandom(32))

    @classmethod
    def from_private(cls, private: bytes) -> X25519KeyPair:
        """Derive the public half from a 32-byte private key."""
        return cls(private=private, public=bindings.crypto_scalarmult_base(private))


def ed25519_verify(public: bytes, message: bytes, signature: bytes) -> bool:
    """True when `signature` is a valid Ed25519 signature of `message` under `public`."""
    if len(public) != 32 or len(signature) != 64:
        return False
    try:
        VerifyKey(public).verify(message, signature)
        return True
    except (BadSignatureError, CryptoError, ValueError):
        return False


def x25519(private: bytes, public: bytes) -> bytes:
    """Raw X25519 shared secret; refuses low-order points (all-zero output)."""
    if len(private) != 32 or len(public) != 32:
        raise CryptoFailure("X25519 keys are 32 bytes")
    try:
        return bindings.crypto_scalarmult(private, public)
    except (CryptoError, RuntimeError, ValueError) as exc:
        raise CryptoFailure("X25519 failed") from exc


def aes_gcm_encrypt(key: bytes, plaintext: bytes, nonce: bytes | None = None) -> str:
    """base64(nonce(12) ‖ ciphertext ‖ tag(16)), no associated data."""
    nonce = os.urandom(12) if nonce is None else nonce
    return b64encode(nonce + AESGCM(key).encrypt(nonce, plaintext, None))


def aes_gcm_decrypt(key: bytes, blob_b64: str) -> bytes:
    """Inverse of aes_gcm_encrypt; raises CryptoFailure on any malformed or forged blob."""
    try:
        blob = b64decode(blob_b64)
    except EncodingError as exc:
        raise CryptoFailure("blob is not base64") from exc
    if len(blob) < 28:
        raise CryptoFailure("blob too short")
    try:
        return AESGCM(key).decrypt(blob[:12], blob[12:], None)
    except (InvalidTag, ValueError) as exc:
        raise CryptoFailure("AES-GCM authentication failed") from exc


def sign_json_object(obj: object, keypair: Ed25519KeyPair) -> str:
    """base64(Ed25519(canonical(obj))), standard alphabet with padding (DCTRL-0002 §8)."""
    return b64encode(keypair.sign(canonical_bytes(obj)))


def verify_json_object(obj: object, signature_b64: object, public: bytes) -> bool:
    """Verify a sign_json_object signature; any malformed input is simply False."""
    if not isinstance(signature_b64, str) or len(signature_b64) > 100:
        return False
    try:
        sig = b64decode(signature_b64)
        message = canonical_bytes(obj)
    except (EncodingError, ValueError):
        return False
    return ed25519_verify(public, message, sig)


def encrypt_tag(tag: str, keypair: Ed25519KeyPair) -> str:
    """Encrypted tag = base64 Ed25519 signature of the tag's UTF-8 bytes (DCTRL-0002 §11)."""
    return b64encode(keypair.sign(tag.encode("utf-8")))
