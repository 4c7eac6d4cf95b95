"""CPU cost of one TWO_WAY_PRIVATE, in-process and single-threaded: where the time goes.

    .venv/bin/python -m bench.hotpath_cpu                     # all variants, 3 rounds of 2000
    .venv/bin/python -m bench.hotpath_cpu --n 3000 --rounds 5 --profile   # + cProfile top of the default

Throughput on a shared 2-core box moves with whatever else runs; CPU time per command does not
(much). For each variant this drives the real Django WSGI handler (the code a WSGI
worker runs for `POST /`, minus HTTP parsing) with pre-signed commands and reports, per command:

- `py_us`: CPU of this process (time.process_time: the worker's Python, psycopg, libsodium);
- `pg_us`: CPU of every PostgreSQL backend connected to the bench database (/proc/<pid>/stat):
  with the connection pool a request may run on any of the pool's connections;
- `wall_us`: elapsed time, i.e. with the round trips.

Variants: the PostgreSQL storage backend's one statement (prepared / not prepared; through the
production entry of apps/decentrl/wsgi.py or Django's full middleware chain and view), the SQL
backend SQLite uses (apps/decentrl/storage.py), each with and without the command observers
(usage metering, metrics) and the after-commit push to Redis.
Needs PostgreSQL and Redis; uses its own database (BENCH_HOTPATH_DB, default mediator_bench_hotpath).
"""

from __future__ import annotations

import argparse
import os

from bench.inprocess import (
    measure,
    print_profile,
    registered_pairs,
    report,
    setup_django,
    wsgi_poster,
)

DB = os.environ.get("BENCH_HOTPATH_DB", "mediator_bench_hotpath")
HOST = "hotpath.bench:80"


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=2000, help="commands per round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--pairs", type=int, default=20)
    ap.add_argument("--redis-url", default=os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/13"))
    ap.add_argument("--profile", action="store_true", help="cProfile the default variant (top 25 by tottime)")
    ap.add_argument("--queue-cap", type=int, default=10_000, help="the tenant's pending_queue_cap")
    ap.add_argument("--only", nargs="*", help="run only the variants whose name contains one of these")
    args = ap.parse_args(argv)
    setup_django(DB, args.redis_url)

    from django.conf import settings
    from django.core.handlers.wsgi import WSGIHandler
    from django.db import connection

    from apps.decentrl import hooks, storage
    from apps.decentrl.wsgi import CommandEntry
    from apps.messaging import notify
    from apps.tenants.services import tenant_create
    from apps.wire.canonical import canonical_bytes

    tenant = tenant_create(
        slug="hotpath", domain=HOST, rate_limit_per_did=0, rate_limit_per_ip=0, pending_queue_cap=args.queue_cap
    )
    handlers = {"full": WSGIHandler(), "entry": CommandEntry()}
    current = {"app": handlers["entry"]}

    post = wsgi_poster(lambda environ, start_response: current["app"](environ, start_response), HOST)

    senders, recipients = registered_pairs(post, tenant, args.pairs)

    observers = list(hooks.OBSERVERS)
    receivers = list(notify.push_requested.receivers)

    def check(name: str):
        def ok(status: str, data: bytes) -> None:
            if not status.startswith("200"):
                raise SystemExit(f"{name}: {status} {data[:200]!r}")

        return ok

    backends = {True: storage.PostgresStorage(), False: storage.SqlStorage()}

    def variant(fast: bool, prepare: bool, observe: bool, push: bool, entry: str = "entry") -> None:
        current["app"] = handlers[entry]
        storage._chosen[:] = [backends[fast]]
        settings.DB_PREPARED_STATEMENTS = prepare
        hooks.OBSERVERS[:] = observers if observe else []
        notify.push_requested.receivers = receivers if push else []
        notify.push_requested.sender_receivers_cache.clear()

    variants = {
        "one statement, prepared (default)": (True, True, True, True),
        "one statement, prepared, full middleware chain": (True, True, True, True, "full"),
        "one statement, not prepared": (True, False, True, True),
        "SQL backend (SQLite's), full middleware chain": (False, True, True, True, "full"),
        "one statement, prepared, no observers": (True, True, False, True),
        "one statement, prepared, no push": (True, True, True, False),
        "one statement, prepared, no observers, no push": (True, True, False, False),
        "SQL backend, no observers, no push": (False, True, False, False, "full"),
    }
    if args.only:
        variants = {k: v for k, v in variants.items() if any(o in k for o in args.only)}
    results: dict[str, list[dict]] = {k: [] for k in variants}
    for _ in range(args.rounds):
        for name, flags in variants.items():
            variant(*flags)
            bodies = [
                canonical_bytes(
                    senders[i % args.pairs].sign_command(
                        recipient_did=recipients[i % args.pairs].did, payload="A" * 256, channel="TWO_WAY_PRIVATE"
                    )
                )
                for i in range(args.n)
            ]
            results[name].append(measure(post, bodies, DB, check(name)))
            # Keep queues short: the queue-cap probe walks at most the cap, but start each variant alike.
            with connection.cursor() as cur:
                cur.execute(
                    "UPDATE messaging_pendingevent SET acknowledged_at = now(), payload = '' WHERE acknowledged_at IS NULL"
                )
    variant(True, True, True, True)
    table = report(results, args.n, args.rounds)
    if args.profile:
        print_profile(
            post,
            [
                canonical_bytes(
                    senders[i % args.pairs].sign_command(
                        recipient_did=recipients[i % args.pairs].did, payload="A" * 256, channel="TWO_WAY_PRIVATE"
                    )
                )
                for i in range(args.n)
            ],
        )
    return table


if __name__ == "__main__":
    main()
