"""CPU cost of one QUERY_EVENTS by tag, in-process and single-threaded (as bench/hotpath_cpu.py for
TWO_WAY_PRIVATE): the real WSGI command handler driven with pre-signed commands.

    .venv/bin/python -m bench.query_events_cpu                       # 3 rounds of 2000
    .venv/bin/python -m bench.query_events_cpu --profile             # + cProfile top (BENCH_PROFILE_SORT/TOP)

Seeds `--stored` events over `--owners` owners with the bench seeder (bench/loadgen.py), 100 events
per tag as in the standard set, and asks for page 0 of 10 by one tag: a full page, whose `total`
comes from the same statement (a window count; no COUNT). Reports per command `py_us` (this process's CPU), `pg_us` (every backend of its database) and
`wall_us`, with and without the command observers (usage metering, metrics).
Uses its own database (BENCH_QE_DB, default mediator_bench_qecpu).
"""

from __future__ import annotations

import argparse
import os

from bench.inprocess import measure, print_profile, registration_payload, report, setup_django, wsgi_poster

DB = os.environ.get("BENCH_QE_DB", "mediator_bench_qecpu")
HOST = "qecpu.bench:80"
PER_TAG = 100


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=2000, help="commands per round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--owners", type=int, default=10)
    ap.add_argument("--stored", type=int, default=100_000)
    ap.add_argument("--redis-url", default=os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/13"))
    ap.add_argument("--profile", action="store_true", help="cProfile the default variant")
    args = ap.parse_args(argv)
    url = setup_django(DB, args.redis_url)

    from apps.decentrl import hooks
    from apps.decentrl.wsgi import CommandEntry
    from apps.tenants.services import tenant_create
    from apps.wire.canonical import canonical_bytes
    from apps.wire.client import Identity
    from bench import loadgen

    tenant = tenant_create(slug="qecpu", domain=HOST, rate_limit_per_did=0, rate_limit_per_ip=0)

    post = wsgi_poster(CommandEntry(), HOST)

    owners = [Identity.create(f"o{i}", tenant.did) for i in range(args.owners)]
    others = [Identity.create(f"p{i}", tenant.did) for i in range(args.owners)]
    for who in owners:
        status, data = post(
            canonical_bytes(who.sign_command(recipient_did=tenant.did, payload=registration_payload(tenant, who)))
        )
        assert status.startswith("200"), data
    ntags = args.stored // args.owners // PER_TAG
    loadgen.TAGS_PER_OWNER = ntags  # the seeder spreads each owner's events over this many tags
    tags = {o.did: [o.tag(f"t{k}") for k in range(ntags)] for o in owners}
    loadgen._bulk_seed_sql(url, tenant.did, owners, others, tags, args.stored)

    def bodies(n: int) -> list[bytes]:
        out = []
        for i in range(n):
            who = owners[i % len(owners)]
            payload = {
                "type": "QUERY_EVENTS",
                "filter": {"encrypted_tags": [tags[who.did][(i * 7919) % ntags]]},
                "pagination": {"page": 0, "page_size": 10},
            }
            out.append(canonical_bytes(who.sign_command(recipient_did=tenant.did, payload=payload)))
        return out

    observers = list(hooks.OBSERVERS)

    def check(name: str):
        def ok(status: str, data: bytes) -> None:
            if not status.startswith("200") or b'"total":100' not in data:
                raise SystemExit(f"{name}: {status} {data[:300]!r}")

        return ok

    variants = {"QUERY_EVENTS by tag (default)": True, "QUERY_EVENTS by tag, no observers": False}
    results: dict[str, list[dict]] = {k: [] for k in variants}
    for _ in range(args.rounds):
        for name, observe in variants.items():
            hooks.OBSERVERS[:] = observers if observe else []
            results[name].append(measure(post, bodies(args.n), DB, check(name)))
    hooks.OBSERVERS[:] = observers
    table = report(results, args.n, args.rounds)
    if args.profile:
        print_profile(post, bodies(args.n))
    return table


if __name__ == "__main__":
    main()
