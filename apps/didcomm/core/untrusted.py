"""JSON from a sender: one parse for every DIDComm text a client controls (bodies, protected
headers, did:peer documents), so that no kind of bad input escapes as anything but ValueError."""

from __future__ import annotations

import json


def loads(data: bytes | str) -> object:
    """`json.loads`, with every failure a ValueError: not JSON, not UTF-8 (UnicodeDecodeError is
    one) and nesting past the interpreter's recursion limit (json raises RecursionError)."""
    try:
        return json.loads(data)
    except RecursionError as exc:
        raise ValueError("JSON nested too deeply") from exc
