"""Canonical JSON with JavaScript semantics (docs/protocol-readings.md §2, DCTRL-0002 §7).

`canonical_bytes(obj)` is what `JSON.stringify` prints for a deep key-sorted copy of `obj`,
encoded as UTF-8. `loads_strict(raw)` is the one parser of JSON a client sent, for both protocols
(Decentrl commands and frames, every DIDComm text: envelopes, protected headers, messages, did:peer
documents): it refuses invalid UTF-8, NaN/Infinity, non-finite or oversized numbers, lone
surrogates, duplicate keys and excessive nesting, each as CanonicalError (a ValueError).
"""

from __future__ import annotations

import json
import math
from json.encoder import encode_basestring  # C-accelerated, ensure_ascii=False flavour
from typing import Any

MAX_DEPTH = 64
MAX_INT_DIGITS = 64


class CanonicalError(ValueError):
    """The value cannot be represented in canonical JSON (or parsed strictly)."""


class RawJSON(str):
    """Already-serialised JSON text, emitted verbatim (stored contracts are returned as received)."""


def js_number(value: float) -> str:
    """Format a float as ECMAScript Number#toString does."""
    if not math.isfinite(value):
        raise CanonicalError("non-finite number")
    if value == 0:
        return "0"  # also -0
    sign = "-" if value < 0 else ""
    r = repr(abs(value))  # shortest round-trip digits, like JS
    if "e" in r:
        mant, exp_s = r.split("e")
        exp = int(exp_s)
    else:
        mant, exp = r, 0
    if "." in mant:
        int_part, frac_part = mant.split(".")
    else:
        int_part, frac_part = mant, ""
    if frac_part == "0":
        frac_part = ""
    digits = (int_part + frac_part).lstrip("0")
    # n: position of the decimal point relative to the start of `digits`
    lead_zeros = len(int_part + frac_part) - len((int_part + frac_part).lstrip("0"))
    n = len(int_part) - lead_zeros + exp
    digits = digits.rstrip("0")
    k = len(digits)
    if k <= n <= 21:
        out = digits + "0" * (n - k)
    elif 0 < n <= 21:
        out = digits[:n] + "." + digits[n:]
    elif -6 < n <= 0:
        out = "0." + "0" * (-n) + digits
    else:
        e = n - 1
        es = f"e+{e}" if e >= 0 else f"e-{-e}"
        out = digits[0] + ("." + digits[1:] if k > 1 else "") + es
    return sign + out


def _utf16_key(s: str) -> bytes:
    return s.encode("utf-16-be", "surrogatepass")


def _check_str(s: str) -> None:
    try:
        s.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise CanonicalError("lone surrogate") from exc


def _encode(obj: Any, out: list[str], depth: int) -> None:
    if depth > MAX_DEPTH:
        raise CanonicalError("nesting too deep")
    if obj is None:
        out.append("null")
    elif obj is True:
        out.append("true")
    elif obj is False:
        out.append("false")
    elif isinstance(obj, RawJSON):
        out.append(obj)
    elif isinstance(obj, str):
        _check_str(obj)
        out.append(encode_basestring(obj))
    elif isinstance(obj, int):
        out.append(str(obj))
    elif isinstance(obj, float):
        out.append(js_number(obj))
    elif isinstance(obj, dict):
        out.append("{")
        first = True
        # Check key types before sorting: sorting a non-str key would raise AttributeError.
        if not all(isinstance(key, str) for key in obj):
            raise CanonicalError("non-string key")
        for key in sorted(obj, key=_utf16_key):
            _check_str(key)
            if not first:
                out.append(",")
            first = False
            out.append(encode_basestring(key))
            out.append(":")
            _encode(obj[key], out, depth + 1)
        out.append("}")
    elif isinstance(obj, (list, tuple)):
        out.append("[")
        for i, item in enumerate(obj):
            if i:
                out.append(",")
            _encode(item, out, depth + 1)
        out.append("]")
    else:
        raise CanonicalError(f"unsupported type {type(obj).__name__}")


def _slow_canonical_str(obj: Any) -> str:
    """The reference encoder: every value canonical JSON can carry, floats and RawJSON included."""
    out: list[str] = []
    _encode(obj, out, 0)
    return "".join(out)


# The stdlib's C encoder prints exactly what `_encode` prints for a "plain" value (below): the
# same string escaping (it is the same encode_basestring), int.__repr__ for ints, true/false/null,
# and keys sorted by code point, which is UTF-16 order when every key is ASCII. Floats (JavaScript
# number formatting), RawJSON, str/int subclasses, non-ASCII keys and deep nesting take `_encode`.
_plain_encode = json.JSONEncoder(
    ensure_ascii=False, allow_nan=False, sort_keys=True, separators=(",", ":"), check_circular=False
).encode
# Exact types only: a str subclass (RawJSON) or an int subclass takes `_encode`.
_SCALARS = frozenset((str, int, bool, type(None)))


def _plain(obj: Any, depth: int) -> bool:
    t = type(obj)
    if t in _SCALARS:
        return True
    if depth >= MAX_DEPTH - 1:
        return False
    if t is dict:
        # Every key a str and ASCII, checked in two C calls: join refuses a non-str key. (A str
        # subclass key is printed by both encoders as its text, in the same place.)
        try:
            if not "".join(obj).isascii():
                return False
        except TypeError:
            return False
        values = obj.values()
    elif t is list or t is tuple:
        values = obj
    else:
        return False
    depth += 1
    for value in values:
        if type(value) not in _SCALARS and not _plain(value, depth):
            return False
    return True


def _canonical(obj: Any) -> tuple[str, bytes]:
    if _plain(obj, 0):
        text = _plain_encode(obj)
        try:
            return text, text.encode("utf-8")
        except UnicodeEncodeError:
            pass  # a lone surrogate: `_encode` raises CanonicalError for it
    text = _slow_canonical_str(obj)
    return text, text.encode("utf-8")


def canonical_str(obj: Any) -> str:
    """Return the canonical JSON text of `obj`."""
    return _canonical(obj)[0]


def canonical_bytes(obj: Any) -> bytes:
    """Return the canonical JSON of `obj` as UTF-8 bytes: what gets signed."""
    return _canonical(obj)[1]


def _reject_constant(name: str) -> Any:
    raise CanonicalError(f"{name} is not valid JSON")


def _parse_int(s: str) -> int:
    if len(s.lstrip("-")) > MAX_INT_DIGITS:
        raise CanonicalError("integer too large")
    return int(s)


def _parse_float(s: str) -> float:
    value = float(s)
    if not math.isfinite(value):
        raise CanonicalError("number out of range")
    return value


def _object_without_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # A repeated key would let what was signed (the re-canonicalised object, last value wins)
    # differ from what another reader of the same bytes sees (first value wins, or an error).
    obj = dict(pairs)
    if len(obj) != len(pairs):
        raise CanonicalError("duplicate key")
    return obj


# Built once: json.loads with keyword arguments builds a new decoder on every call, which cost
# more than the duplicate-key hook (docs/protocol-notes.md §2 and bench/parse_cost.py).
_strict_decoder = json.JSONDecoder(
    object_pairs_hook=_object_without_duplicates,
    parse_constant=_reject_constant,
    parse_int=_parse_int,
    parse_float=_parse_float,
)


def loads_strict(raw: bytes | str, *, forbid_nul: bool = False) -> Any:
    """Parse untrusted JSON, raising CanonicalError for anything canonical JSON cannot carry.

    That includes a key repeated within one object, at any depth. `forbid_nul` also refuses
    U+0000 in any string or key: Decentrl stores strings as received, and the database cannot
    hold it (DIDComm stores JSON text, where it is an escape).
    """
    try:
        text = raw.decode("utf-8") if isinstance(raw, (bytes, bytearray)) else raw
        value = _strict_decoder.decode(text)
    except CanonicalError:
        raise
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise CanonicalError("malformed JSON") from exc
    _validate(value, 0, forbid_nul)
    return value


def _check_untrusted_str(s: str, forbid_nul: bool) -> None:
    if not s.isascii():  # (an ASCII string holds no surrogate)
        _check_str(s)
    if forbid_nul and "\x00" in s:
        raise CanonicalError("U+0000 is not accepted")


def _validate(value: Any, depth: int, forbid_nul: bool = False) -> None:
    if depth > MAX_DEPTH:
        raise CanonicalError("nesting too deep")
    if isinstance(value, str):
        _check_untrusted_str(value, forbid_nul)
    elif isinstance(value, dict):
        for k, v in value.items():
            _check_untrusted_str(k, forbid_nul)
            _validate(v, depth + 1, forbid_nul)
    elif isinstance(value, list):
        for v in value:
            _validate(v, depth + 1, forbid_nul)


def dumps(obj: Any) -> str:
    """Compact JSON for responses (not canonical; key order as built)."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)
