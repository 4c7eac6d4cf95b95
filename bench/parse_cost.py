"""CPU cost of parsing one typical TWO_WAY_PRIVATE body (wire.envelope.parse_command), with timeit.

    .venv/bin/python -m bench.parse_cost                  # best of 7 rounds of 200 000

Pure wire code: no Django, no database. The body is a signed envelope around a 512-byte sealed blob
(about 1.2 KB), what a short chat message costs on the wire. The timer is process CPU time, so
other load on a shared box moves the numbers less than wall time would.
"""

from __future__ import annotations

import argparse
import base64
import os
import time
import timeit

from apps.wire.canonical import canonical_bytes, loads_strict
from apps.wire.client import Identity
from apps.wire.envelope import parse_command


def typical_body() -> bytes:
    alice = Identity.create("alice", "did:web:a.example")
    bob = Identity.create("bob", "did:web:a.example")
    blob = base64.b64encode(os.urandom(384)).decode()
    return canonical_bytes(alice.sign_command(recipient_did=bob.did, payload=blob, channel="TWO_WAY_PRIVATE"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    body = typical_body()
    print(f"body {len(body)} bytes")
    for name, fn in (("loads_strict", lambda: loads_strict(body)), ("parse_command", lambda: parse_command(body))):
        best = min(timeit.repeat(fn, number=args.n, repeat=args.rounds, timer=time.process_time)) / args.n
        print(f"{name:14} {best * 1e6:6.2f} us")


if __name__ == "__main__":
    main()
