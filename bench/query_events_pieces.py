"""QUERY_EVENTS' own pieces of worker CPU, timed on their own (no database queries): the reply's
canonical JSON (10 items of a 200-character payload and one 88-character tag), the signed
command's canonical bytes (what the signature check hashes) and the page statement's text.

    .venv/bin/python -m bench.query_events_pieces [LABEL]     # best of 7 x 5,000 each, in µs

Run it from two trees in turn to compare them (docs/benchmark-history.md, "QUERY_EVENTS by tag: the
worker's own work per query").
"""

from __future__ import annotations

import json
import os
import random
import string
import sys
import timeit
import uuid

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mediator_project.settings")

import django  # noqa: E402

django.setup()

from apps.decentrl import storage  # noqa: E402
from apps.messaging import eventquery  # noqa: E402
from apps.wire.canonical import canonical_bytes  # noqa: E402
from apps.wire.client import Identity  # noqa: E402


class _Tenant:
    pk = 1


def main() -> None:
    rnd = random.Random(1)

    def text(n: int) -> str:
        return "".join(rnd.choice(string.ascii_letters + string.digits + "+/") for _ in range(n))

    rows = [
        (str(uuid.uuid4()), text(200), json.dumps([text(88)], separators=(", ", ": ")), 1_700_000_000_000 + i)
        for i in range(10)
    ]
    reply = {
        "type": "SUCCESS",
        "payload": {"events": storage._items(rows), "pagination": {"page": 0, "page_size": 10, "total": 100}},
    }
    mediator = Identity.create("m", "did:peer:x")
    who = Identity.create("o1", mediator.did)
    cmd = who.sign_command(
        recipient_did=mediator.did,
        payload={
            "type": "QUERY_EVENTS",
            "filter": {"encrypted_tags": [who.tag("t1")]},
            "pagination": {"page": 0, "page_size": 10},
        },
    )
    signed = {k: v for k, v in cmd.items() if k != "signature"}
    args = {"tenant": _Tenant, "owner_did": who.did, "after": None, "before": None, "tags": [who.tag("t1")]}
    compose = getattr(storage, "_claim_and_read_sql", None)

    def statement() -> str:
        sql, _ = eventquery.page_statement(**args, offset=0, limit=10)
        return compose(sql) if compose else storage._CLAIM_CHECKING_REGISTRATION_AND_READING.format(page=sql)

    n = 5000
    out = {}
    for name, fn in [
        ("reply canonical", lambda: canonical_bytes(reply)),
        ("command canonical", lambda: canonical_bytes(signed)),
        ("statement text", statement),
    ]:
        out[name] = round(min(timeit.repeat(fn, number=n, repeat=7)) / n * 1e6, 2)
    print(sys.argv[1] if len(sys.argv) > 1 else "-", json.dumps(out))


if __name__ == "__main__":
    main()
