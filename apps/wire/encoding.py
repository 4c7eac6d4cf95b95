"""base64 (standard and url-safe, lenient decoding) and multibase/multicodec keys (DCTRL-0002 §§9-10)."""

from __future__ import annotations

import base64
import binascii

B58_ALPHABET = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
_B58_INDEX = {c: i for i, c in enumerate(B58_ALPHABET)}
ED25519_PUB = b"\xed\x01"
X25519_PUB = b"\xec\x01"
# Both base64 alphabets (standard and url-safe).
_B64_ALPHABETS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/-_"


class EncodingError(ValueError):
    """Input is not valid in the expected encoding."""


def b64encode(data: bytes) -> str:
    """Standard alphabet with padding: the protocol's output form."""
    return base64.b64encode(data).decode("ascii")


def b64url_nopad(data: bytes) -> str:
    """URL-safe alphabet without padding: used for DID segments."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def b64decode(text: object) -> bytes:
    """Decode standard or url-safe base64, padded or not; raise EncodingError otherwise (a value
    that is not a string too: callers hand it untrusted members as they are)."""
    if not isinstance(text, str) or not text.isascii():
        raise EncodingError("not base64")
    body = text.rstrip("=")
    if len(text) - len(body) > 2:
        raise EncodingError("not base64")
    if len(body) % 4 == 1:
        raise EncodingError("bad base64 length" if _alphabet_only(body) else "not base64")
    if ("+" in body or "/" in body) and ("-" in body or "_" in body):
        raise EncodingError("mixed base64 alphabets" if _alphabet_only(body) else "not base64")
    # binascii's strict mode refuses anything outside the standard alphabet, an inner `=` and
    # whitespace in the same pass that decodes (checking the text apart first cost as much again).
    standard = body.replace("-", "+").replace("_", "/") + "=" * (-len(body) % 4)
    try:
        return binascii.a2b_base64(standard, strict_mode=True)
    except (binascii.Error, ValueError) as exc:
        raise EncodingError("not base64") from exc


def _alphabet_only(body: str) -> bool:
    """On the refusals' path: a foreign character is reported before the length or the mix."""
    return all(c in _B64_ALPHABETS for c in body)


def b58encode(data: bytes) -> str:
    """Bitcoin base58 encoding."""
    n = int.from_bytes(data, "big")
    out = []
    while n:
        n, rem = divmod(n, 58)
        out.append(B58_ALPHABET[rem])
    pad = len(data) - len(data.lstrip(b"\0"))
    return "1" * pad + "".join(reversed(out))


# Base58 carries keys here (a multikey, a verkey: < 100 characters); decoding costs time quadratic
# in the length, so longer text is refused before it unless the caller allows more (a did:peer:4's
# long form carries its whole document).
B58_MAX_CHARS = 128
_B58_CHUNK = 10  # digits folded per big-integer step (58**10 < 2**64)


def b58decode(text: str, *, max_chars: int = B58_MAX_CHARS) -> bytes:
    """Bitcoin base58 decoding of at most `max_chars` characters."""
    if not isinstance(text, str):
        raise EncodingError("not base58btc")
    if len(text) > max_chars:
        raise EncodingError("base58 text too long")
    n = 0
    for start in range(0, len(text), _B58_CHUNK):
        chunk = text[start : start + _B58_CHUNK]
        value = 0
        for ch in chunk:
            try:
                value = value * 58 + _B58_INDEX[ch]
            except KeyError as exc:
                raise EncodingError("not base58btc") from exc
        n = n * 58 ** len(chunk) + value
    body = n.to_bytes((n.bit_length() + 7) // 8, "big") if n else b""
    pad = len(text) - len(text.lstrip("1"))
    return b"\0" * pad + body


def multikey_encode(prefix: bytes, key: bytes) -> str:
    """`z` + base58btc(multicodec prefix + raw key)."""
    return "z" + b58encode(prefix + key)


def multikey_decode(prefix: bytes, text: str) -> bytes:
    """Inverse of multikey_encode; checks the multibase `z`, the multicodec and a 32-byte key."""
    if not isinstance(text, str) or not text.startswith("z") or len(text) > 60:
        raise EncodingError("not a z-multibase key")
    raw = b58decode(text[1:])
    if len(raw) != 34 or raw[:2] != prefix:
        raise EncodingError("wrong multicodec or key length")
    return raw[2:]
