"""Public and private keys of DIDComm: Ed25519, X25519, P-256/384/521; multicodec, multibase and JWK forms.

EC public keys are kept as compressed SEC1 points (the did:key form); JWKs carry x and y.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cryptography.exceptions import InvalidSignature as _CryptographyInvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from nacl import bindings
from nacl.exceptions import CryptoError

from apps.wire.encoding import B58_MAX_CHARS, EncodingError, b58decode, b58encode, b64decode, b64url_nopad

from .errors import InvalidKey

ED25519 = "Ed25519"
X25519 = "X25519"
P256 = "P-256"
P384 = "P-384"
P521 = "P-521"
OKP_CURVES = (ED25519, X25519)
EC_CURVES = {P256: ec.SECP256R1(), P384: ec.SECP384R1(), P521: ec.SECP521R1()}
_EC_SIZE = {P256: 32, P384: 48, P521: 66}

# multicodec table (https://github.com/multiformats/multicodec/blob/master/table.csv)
MULTICODEC_PUBLIC = {ED25519: 0xED, X25519: 0xEC, P256: 0x1200, P384: 0x1201, P521: 0x1202}
MULTICODEC_PRIVATE = {ED25519: 0x1300, X25519: 0x1302, P256: 0x1306, P384: 0x1307, P521: 0x1308}
_CURVE_BY_PUBLIC_CODEC = {code: crv for crv, code in MULTICODEC_PUBLIC.items()}


def varint_encode(n: int) -> bytes:
    """Unsigned LEB128 varint, as multicodec prefixes use."""
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def varint_decode(data: bytes) -> tuple[int, int]:
    """(value, bytes consumed) of the varint at the start of `data`; at most 3 bytes (multicodec codes)."""
    value = 0
    for i, byte in enumerate(data[:3]):
        value |= (byte & 0x7F) << (7 * i)
        if not byte & 0x80:
            return value, i + 1
    raise InvalidKey("bad multicodec varint")


def multibase_decode(text: str, *, max_chars: int = B58_MAX_CHARS) -> bytes:
    """Bytes of a base58btc multibase string (`z…`), the only base DIDComm keys use; `max_chars`
    bounds the base58 text (a key's by default)."""
    if not isinstance(text, str) or not text.startswith("z") or len(text) < 2:
        raise InvalidKey("not a base58btc multibase value")
    try:
        return b58decode(text[1:], max_chars=max_chars)
    except EncodingError as exc:
        raise InvalidKey("not a base58btc multibase value") from exc


def multibase_encode(data: bytes) -> str:
    """`z` + base58btc(data)."""
    return "z" + b58encode(data)


def b64u_decode(text: object, what: str = "value") -> bytes:
    """Decode a base64url member of a JWK or JOSE object; InvalidKey on anything else."""
    try:
        return b64decode(text)
    except EncodingError as exc:
        raise InvalidKey(f"{what} is not base64url") from exc


@dataclass(frozen=True)
class PublicKey:
    crv: str
    raw: bytes  # OKP: the 32-byte key; EC: the compressed SEC1 point

    def __post_init__(self) -> None:
        if self.crv in OKP_CURVES:
            if len(self.raw) != 32:
                raise InvalidKey(f"{self.crv} public key must be 32 bytes")
        elif self.crv in EC_CURVES:
            self._ec()  # validates the point is on the curve
        else:
            raise InvalidKey("unsupported curve")

    def _ec(self) -> ec.EllipticCurvePublicKey:
        try:
            return ec.EllipticCurvePublicKey.from_encoded_point(EC_CURVES[self.crv], self.raw)
        except ValueError as exc:
            raise InvalidKey(f"not a {self.crv} point") from exc

    @classmethod
    def from_ec_point(cls, crv: str, point: bytes) -> PublicKey:
        """From a compressed or uncompressed SEC1 point."""
        if crv not in EC_CURVES:
            raise InvalidKey("unsupported curve")
        try:
            key = ec.EllipticCurvePublicKey.from_encoded_point(EC_CURVES[crv], point)
        except ValueError as exc:
            raise InvalidKey(f"not a {crv} point") from exc
        return cls(crv, key.public_bytes(serialization.Encoding.X962, serialization.PublicFormat.CompressedPoint))

    # multicodec / multibase ("Multikey", did:key)
    @property
    def multicodec(self) -> bytes:
        """Multicodec prefix + key bytes."""
        return varint_encode(MULTICODEC_PUBLIC[self.crv]) + self.raw

    @property
    def multibase(self) -> str:
        """`z6Mk…` (Ed25519), `z6LS…` (X25519), `zDn…` (P-256)."""
        return multibase_encode(self.multicodec)

    @classmethod
    def from_multicodec(cls, data: bytes) -> PublicKey:
        """Inverse of `multicodec`."""
        code, used = varint_decode(data)
        crv = _CURVE_BY_PUBLIC_CODEC.get(code)
        if crv is None:
            raise InvalidKey("unsupported multicodec key type")
        if crv in EC_CURVES:
            return cls.from_ec_point(crv, data[used:])
        return cls(crv, data[used:])

    @classmethod
    def from_multibase(cls, text: str) -> PublicKey:
        """Inverse of `multibase`."""
        return cls.from_multicodec(multibase_decode(text))

    # JWK (RFC 7517, RFC 8037)
    def to_jwk(self) -> dict[str, Any]:
        """The public JWK."""
        if self.crv in OKP_CURVES:
            return {"kty": "OKP", "crv": self.crv, "x": b64url_nopad(self.raw)}
        numbers = self._ec().public_numbers()
        size = _EC_SIZE[self.crv]
        return {
            "kty": "EC",
            "crv": self.crv,
            "x": b64url_nopad(numbers.x.to_bytes(size, "big")),
            "y": b64url_nopad(numbers.y.to_bytes(size, "big")),
        }

    @classmethod
    def from_jwk(cls, jwk: object) -> PublicKey:
        """From a public (or private: `d` is ignored) JWK."""
        if not isinstance(jwk, dict):
            raise InvalidKey("JWK must be an object")
        kty, crv = jwk.get("kty"), jwk.get("crv")
        if kty == "OKP" and crv in OKP_CURVES:
            return cls(crv, b64u_decode(jwk.get("x"), "x"))
        if kty == "EC" and crv in EC_CURVES:
            x, y = b64u_decode(jwk.get("x"), "x"), b64u_decode(jwk.get("y"), "y")
            size = _EC_SIZE[crv]
            if len(x) != size or len(y) != size:
                raise InvalidKey(f"{crv} coordinates must be {size} bytes")
            return cls.from_ec_point(crv, b"\x04" + x + y)
        raise InvalidKey("unsupported JWK kty/crv")

    def to_x25519(self) -> PublicKey:
        """The X25519 key of an Ed25519 key (birational map, libsodium)."""
        if self.crv != ED25519:
            raise InvalidKey("only Ed25519 keys convert to X25519")
        try:
            return PublicKey(X25519, bindings.crypto_sign_ed25519_pk_to_curve25519(self.raw))
        except (CryptoError, ValueError) as exc:
            raise InvalidKey("Ed25519 key has no X25519 form") from exc

    def verify(self, message: bytes, signature: bytes) -> bool:
        """True when `signature` is a valid Ed25519 signature of `message` (EdDSA only)."""
        if self.crv != ED25519:
            raise InvalidKey("only Ed25519 keys verify EdDSA signatures")
        try:
            Ed25519PublicKey.from_public_bytes(self.raw).verify(signature, message)
        except _CryptographyInvalidSignature:
            return False
        return True


@dataclass(frozen=True, repr=False)
class PrivateKey:
    crv: str
    secret: bytes  # OKP: the 32-byte seed/scalar; EC: the big-endian scalar d
    public: PublicKey

    def __repr__(self) -> str:  # never print the secret
        return f"PrivateKey(crv={self.crv!r}, public={self.public.multibase!r})"

    @classmethod
    def generate(cls, crv: str) -> PrivateKey:
        """A fresh random key on `crv`."""
        if crv in OKP_CURVES:
            return cls.from_secret(crv, os.urandom(32))
        if crv in EC_CURVES:
            d = ec.generate_private_key(EC_CURVES[crv]).private_numbers().private_value
            return cls.from_secret(crv, d.to_bytes(_EC_SIZE[crv], "big"))
        raise InvalidKey("unsupported curve")

    @classmethod
    def from_secret(cls, crv: str, secret: bytes) -> PrivateKey:
        """From the raw secret; derives the public half."""
        if crv == ED25519 and len(secret) == 32:
            pub = Ed25519PrivateKey.from_private_bytes(secret).public_key().public_bytes_raw()
            return cls(crv, secret, PublicKey(crv, pub))
        if crv == X25519 and len(secret) == 32:
            pub = X25519PrivateKey.from_private_bytes(secret).public_key().public_bytes_raw()
            return cls(crv, secret, PublicKey(crv, pub))
        if crv in EC_CURVES and len(secret) == _EC_SIZE[crv]:
            try:
                key = ec.derive_private_key(int.from_bytes(secret, "big"), EC_CURVES[crv])
            except ValueError as exc:
                raise InvalidKey(f"not a {crv} scalar") from exc
            point = key.public_key().public_bytes(
                serialization.Encoding.X962, serialization.PublicFormat.CompressedPoint
            )
            return cls(crv, secret, PublicKey(crv, point))
        raise InvalidKey("unsupported curve or wrong secret length")

    @classmethod
    def from_jwk(cls, jwk: object) -> PrivateKey:
        """From a private JWK; the public members must match `d`."""
        public = PublicKey.from_jwk(jwk)
        secret = jwk.get("d") if isinstance(jwk, Mapping) else None
        key = cls.from_secret(public.crv, b64u_decode(secret, "d"))
        if key.public != public:
            raise InvalidKey("JWK public members do not match d")
        return key

    def to_jwk(self) -> dict[str, Any]:
        """The private JWK (for handing keys to test peers; never log it)."""
        return {**self.public.to_jwk(), "d": b64url_nopad(self.secret)}

    @property
    def multibase(self) -> str:
        """Multibase of the private multicodec form (`ed25519-priv`, `x25519-priv`, …)."""
        return multibase_encode(varint_encode(MULTICODEC_PRIVATE[self.crv]) + self.secret)

    def exchange(self, peer: PublicKey) -> bytes:
        """ECDH shared secret Z with `peer` (same curve); rejects the all-zero X25519 output."""
        if peer.crv != self.crv:
            raise InvalidKey("key agreement across curves")
        if self.crv == X25519:
            # libsodium (RFC 7748 X25519, the same Z as OpenSSL's): no key objects per message, and
            # the GIL is released while it multiplies (as for the Ed25519 checks of Decentrl commands).
            try:
                shared = bindings.crypto_scalarmult(self.secret, peer.raw)
            except (RuntimeError, CryptoError, TypeError) as exc:  # low-order point: all-zero output
                raise InvalidKey("X25519 key agreement failed") from exc
            if shared == bytes(32):
                raise InvalidKey("X25519 key agreement failed")
            return shared
        if self.crv in EC_CURVES:
            private = ec.derive_private_key(int.from_bytes(self.secret, "big"), EC_CURVES[self.crv])
            return private.exchange(ec.ECDH(), peer._ec())
        raise InvalidKey(f"{self.crv} is not a key-agreement curve")

    def sign(self, message: bytes) -> bytes:
        """Ed25519 signature (EdDSA)."""
        if self.crv != ED25519:
            raise InvalidKey("only Ed25519 keys sign")
        return Ed25519PrivateKey.from_private_bytes(self.secret).sign(message)

    def to_x25519(self) -> PrivateKey:
        """The X25519 private key of an Ed25519 key (libsodium's conversion)."""
        if self.crv != ED25519:
            raise InvalidKey("only Ed25519 keys convert to X25519")
        return PrivateKey.from_secret(
            X25519, bindings.crypto_sign_ed25519_sk_to_curve25519(self.secret + self.public.raw)
        )
