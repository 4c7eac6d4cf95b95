"""QUERY_EVENTS by tag, the storage call alone: the page read in the claim's statement (what the
command path does, apps/decentrl/storage.py) against the claim's statement followed by the page
statement on its own (two round trips, the path before), in one process, alternating batches.

    .venv/bin/python -m bench.query_events_storage                 # 8 rounds of 1000 per variant

Seeds `--stored` events over 10 registered owners (100 events per tag, as bench/query_events_cpu.py)
and asks for page 0 of 10 by one tag. Reports per query the worker thread's CPU (`py_us`), the
PostgreSQL backend's CPU (`pg_us`, from /proc, 10 ms ticks: use batches of 1000) and the wall time.
Uses its own database (BENCH_QS_DB, default mediator_bench_qstore).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
import uuid

from bench.inprocess import backend_cpu_s, registration_payload, setup_django, wsgi_poster

DB = os.environ.get("BENCH_QS_DB", "mediator_bench_qstore")
HOST = "qstore.bench:80"
OWNERS = 10
PER_TAG = 100


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=1000, help="queries per batch")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--stored", type=int, default=100_000)
    ap.add_argument("--redis-url", default=os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/13"))
    args = ap.parse_args(argv)
    url = setup_django(DB, args.redis_url)

    from django.db import connection

    from apps.decentrl import storage as st
    from apps.decentrl.wsgi import CommandEntry
    from apps.messaging import eventquery
    from apps.messaging.services import Page
    from apps.tenants.services import tenant_create
    from apps.wire.canonical import canonical_bytes
    from apps.wire.client import Identity
    from apps.wire.envelope import EventFilter, Pagination
    from bench import loadgen

    tenant = tenant_create(slug="qstore", domain=HOST, rate_limit_per_did=0, rate_limit_per_ip=0)
    post = wsgi_poster(CommandEntry(), HOST)
    owners = [Identity.create(f"o{i}", tenant.did) for i in range(OWNERS)]
    dids = [o.did for o in owners]  # Identity.did encodes on every access
    others = [Identity.create(f"p{i}", tenant.did) for i in range(OWNERS)]
    for who in owners:
        body = canonical_bytes(who.sign_command(recipient_did=tenant.did, payload=registration_payload(tenant, who)))
        status, data = post(body)
        assert status.startswith("200"), data
    ntags = args.stored // OWNERS // PER_TAG
    loadgen.TAGS_PER_OWNER = ntags
    tags = {o.did: [o.tag(f"t{k}") for k in range(ntags)] for o in owners}
    loadgen._bulk_seed_sql(url, tenant.did, owners, others, tags, args.stored)
    store = st.PostgresStorage()
    page = Pagination(0, 10)

    def claim(owner: str) -> st.NonceClaim:
        now_ms = int(time.time() * 1000)
        return st.NonceClaim(
            tenant_id=tenant.pk,
            sender_did=owner,
            nonce=str(uuid.uuid4()),
            expires_at_ms=now_ms + 300_000,
            now_ms=now_ms,
        )

    def one_statement(i: int) -> None:
        owner = dids[i % OWNERS]
        flt = EventFilter(encrypted_tags=(tags[owner][(i * 7919) % ntags],))
        found = store.claim_checking_registration(
            claim(owner), tenant=tenant, did=owner, now_s=int(time.time()), read=st.EventsQuery(owner, flt, page)
        )
        assert found.page.total == PER_TAG and len(found.page.items) == 10

    def two_statements(i: int) -> None:
        owner = dids[i % OWNERS]
        found = store.claim_checking_registration(claim(owner), tenant=tenant, did=owner, now_s=int(time.time()))
        assert found.registered
        rows, total = eventquery.stored_events(
            tenant=tenant,
            owner_did=owner,
            after=None,
            before=None,
            tags=[tags[owner][(i * 7919) % ntags]],
            offset=0,
            limit=10,
        )
        result = Page(st._items(rows), total)
        assert result.total == PER_TAG and len(result.items) == 10

    variants = {"claim + page, one statement": one_statement, "claim, then page (two statements)": two_statements}
    for run in variants.values():
        for i in range(100):  # warm: connection, prepared statements, caches
            run(i)
    pid = connection.connection.info.backend_pid
    results: dict[str, list[dict]] = {k: [] for k in variants}
    for r in range(args.rounds):
        for name, run in list(variants.items())[:: 1 if r % 2 == 0 else -1]:
            cpu0, pg0, t0 = time.thread_time(), backend_cpu_s(pid), time.perf_counter()
            for i in range(args.n):
                run(i + r * args.n)
            results[name].append(
                {
                    "py_us": (time.thread_time() - cpu0) / args.n * 1e6,
                    "pg_us": (backend_cpu_s(pid) - pg0) / args.n * 1e6,
                    "wall_us": (time.perf_counter() - t0) / args.n * 1e6,
                }
            )
    table = {
        name: {k: round(statistics.median(r[k] for r in rows), 1) for k in ("py_us", "pg_us", "wall_us")}
        for name, rows in results.items()
    }
    print(json.dumps({"n": args.n, "rounds": args.rounds, "loadavg": os.getloadavg(), "medians": table}, indent=1))
    print("\n| variant | worker CPU µs | PostgreSQL CPU µs | wall µs | per round (worker + PostgreSQL) |")
    print("|---|---|---|---|---|")
    for name, m in table.items():
        rounds = " ".join(f"{round(r['py_us'])}+{round(r['pg_us'])}" for r in results[name])
        print(f"| {name} | {m['py_us']} | {m['pg_us']} | {m['wall_us']} | {rounds} |")
    return table


if __name__ == "__main__":
    main()
