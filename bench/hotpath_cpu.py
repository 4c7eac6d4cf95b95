"""CPU cost of one TWO_WAY_PRIVATE, in-process and single-threaded: where the time goes.

    .venv/bin/python -m bench.hotpath_cpu                     # all variants, 3 rounds of 2000
    .venv/bin/python -m bench.hotpath_cpu --n 3000 --rounds 5 --profile   # + cProfile top of the default

Throughput on a shared 2-core box moves with whatever else runs; CPU time per command does not
(much). For each variant this drives the real Django WSGI handler (the code a gunicorn sync
worker runs for `POST /`, minus HTTP parsing) with pre-signed commands and reports, per command:

- `py_us`: CPU of this process (time.process_time: the worker's Python, psycopg, libsodium);
- `pg_us`: CPU of every PostgreSQL backend connected to the bench database (/proc/<pid>/stat):
  with the connection pool a request may run on any of the pool's connections;
- `wall_us`: elapsed time, i.e. with the round trips.

Variants: one-statement path (prepared / not prepared; through the bare POST / entry of
apps/protocol/wsgi.py, its lean Django handler or the full middleware chain), ORM path, each with and without the
command observers (usage metering, metrics) and the after-commit push to Redis.
Needs PostgreSQL and Redis; uses its own database (BENCH_HOTPATH_DB, default mediator_bench_hotpath).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import sys
import time

DB = os.environ.get("BENCH_HOTPATH_DB", "mediator_bench_hotpath")
PG_ADMIN_URL = os.environ.get("BENCH_PG_ADMIN_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
HOST = "hotpath.bench:80"


def setup_django(redis_url: str) -> None:
    import subprocess

    import psycopg

    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{DB}"')
        conn.execute(f'CREATE DATABASE "{DB}"')
        # Diagnostics only, e.g. BENCH_DB_SET="synchronous_commit=off" to see what the commit
        # flush costs (the mediator itself requires synchronous_commit=on).
        for item in filter(None, os.environ.get("BENCH_DB_SET", "").split(",")):
            name, value = item.split("=", 1)
            conn.execute(f'ALTER DATABASE "{DB}" SET {name} = {value}')
    os.environ.update(
        {
            "DJANGO_SETTINGS_MODULE": "mediator_project.settings",
            "DATABASE_URL": PG_ADMIN_URL.rsplit("/", 1)[0] + "/" + DB,
            "REDIS_URL": redis_url,
            "DJANGO_DEBUG": "0",
            "LOG_LEVEL": os.environ.get("BENCH_LOG_LEVEL", "WARNING"),
            "MEDIATOR_RATE_LIMIT_PER_DID": "0",
            "MEDIATOR_RATE_LIMIT_PER_IP": "0",
        }
    )
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v0"], cwd=root, check=True)
    import django

    django.setup()


def backend_cpu_s(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            rest = fh.read().rsplit(")", 1)[1].split()
    except FileNotFoundError:  # the backend ended
        return 0.0
    return (int(rest[11]) + int(rest[12])) / os.sysconf("SC_CLK_TCK")


def backends_cpu_s(db: str = DB) -> dict[int, float]:
    """CPU seconds of each backend connected to database `db` (not counting this query's)."""
    import psycopg

    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        pids = [r[0] for r in conn.execute("SELECT pid FROM pg_stat_activity WHERE datname = %s", [db])]
    return {pid: backend_cpu_s(pid) for pid in pids}


def backends_delta_s(before: dict[int, float], db: str = DB) -> float:
    """CPU used since `before` by the backends then and now (a new backend counts in full)."""
    after = backends_cpu_s(db)
    return sum(after.get(pid, backend_cpu_s(pid)) - cpu for pid, cpu in before.items()) + sum(
        cpu for pid, cpu in after.items() if pid not in before
    )


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
    setup_django(args.redis_url)

    from django.conf import settings
    from django.core.handlers.wsgi import WSGIHandler
    from django.db import connection

    from apps.messaging import notify
    from apps.protocol import hooks
    from apps.protocol.wire import contract as wc
    from apps.protocol.wire.canonical import canonical_bytes
    from apps.protocol.wire.client import Identity
    from apps.protocol.wire.did import parse_decentrl
    from apps.protocol.wsgi import BareCommandApp, CommandHandler
    from apps.tenants.services import tenant_create

    tenant = tenant_create(
        slug="hotpath", domain=HOST, rate_limit_per_did=0, rate_limit_per_ip=0, pending_queue_cap=args.queue_cap
    )
    handlers = {"full": WSGIHandler(), "lean": CommandHandler(), "bare": BareCommandApp()}
    current = {"app": handlers["bare"]}

    def post(body: bytes) -> tuple[str, bytes]:
        out = {}

        def start_response(status, headers, exc_info=None):
            out["status"] = status

        environ = {
            "REQUEST_METHOD": "POST",
            "PATH_INFO": "/",
            "SCRIPT_NAME": "",
            "QUERY_STRING": "",
            "CONTENT_TYPE": "application/json",
            "CONTENT_LENGTH": str(len(body)),
            "HTTP_HOST": HOST,
            "SERVER_NAME": "hotpath.bench",
            "SERVER_PORT": "80",
            "REMOTE_ADDR": "127.0.0.1",
            "SERVER_PROTOCOL": "HTTP/1.1",
            "wsgi.input": io.BytesIO(body),
            "wsgi.url_scheme": "http",
            "wsgi.errors": sys.stderr,
            "wsgi.multithread": False,
            "wsgi.multiprocess": True,
            "wsgi.run_once": False,
            "wsgi.version": (1, 0),
        }
        resp = current["app"](environ, start_response)
        data = b"".join(resp)
        resp.close()
        return out["status"], data

    def direct(who: Identity, payload: dict) -> dict:
        status, data = post(canonical_bytes(who.sign_command(recipient_did=tenant.did, payload=payload)))
        assert status.startswith("200"), data
        return json.loads(data)

    senders = [Identity.create(f"s{i}", tenant.did) for i in range(args.pairs)]
    recipients = [Identity.create(f"r{i}", tenant.did) for i in range(args.pairs)]
    for who in senders + recipients:
        req = wc.build_request(
            requestor_did=who.did,
            recipient_did=tenant.did,
            recipient_prekey=bytes(tenant.prekey_public),
            signing=who.signing,
            expires_at=int(time.time()) + 86_400,
        )
        direct(
            who,
            {
                "type": "REQUEST_COMMUNICATION_CONTRACT",
                "encrypted_contract_request": req.encrypted,
                "requestor_ephemeral_public_key": req.ephemeral_public_b64,
            },
        )
    for s, r in zip(senders, recipients, strict=True):
        req = wc.build_request(
            requestor_did=s.did,
            recipient_did=r.did,
            recipient_prekey=parse_decentrl(r.did).pre_key,
            signing=s.signing,
            expires_at=int(time.time()) + 86_400,
        )
        signed, _ = wc.accept_request(req.request, r.signing)
        direct(r, {"type": "SAVE_COMMUNICATION_CONTRACT", "signed_communication_contract": signed})

    observers = list(hooks.OBSERVERS)
    receivers = list(notify.push_requested.receivers)

    def variant(fast: bool, prepare: bool, observe: bool, push: bool, entry: str = "bare") -> None:
        current["app"] = handlers[entry]
        settings.MEDIATOR_TWO_WAY_FASTPATH = fast
        settings.MEDIATOR_FASTPATH_PREPARE = prepare
        hooks.OBSERVERS[:] = observers if observe else []
        notify.push_requested.receivers = receivers if push else []
        notify.push_requested.sender_receivers_cache.clear()

    variants = {
        "one statement, prepared (default)": (True, True, True, True),
        "one statement, prepared, lean Django handler": (True, True, True, True, "lean"),
        "one statement, prepared, full middleware chain": (True, True, True, True, "full"),
        "one statement, not prepared": (True, False, True, True),
        "ORM path (before)": (False, True, True, True, "full"),
        "one statement, prepared, no observers": (True, True, False, True),
        "one statement, prepared, no push": (True, True, True, False),
        "one statement, prepared, no observers, no push": (True, True, False, False),
        "ORM path, no observers, no push": (False, True, False, False, "full"),
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
            for b in bodies[:50]:  # warm: connection, prepared statement, caches
                post(b)
            connection.ensure_connection()
            pg0, py0, t0 = backends_cpu_s(), time.process_time(), time.perf_counter()
            for b in bodies[50:]:
                status, data = post(b)
                if not status.startswith("200"):
                    raise SystemExit(f"{name}: {status} {data[:200]!r}")
            n = len(bodies) - 50
            wall, py, pg = time.perf_counter() - t0, time.process_time() - py0, backends_delta_s(pg0)
            results[name].append({"py_us": py / n * 1e6, "pg_us": pg / n * 1e6, "wall_us": wall / n * 1e6})
            # Keep queues short: the queue-cap probe walks at most the cap, but start each variant alike.
            with connection.cursor() as cur:
                cur.execute(
                    "UPDATE messaging_pendingevent SET acknowledged_at = now(), payload = '' WHERE acknowledged_at IS NULL"
                )
    variant(True, True, True, True)
    table = {
        name: {k: round(statistics.median(r[k] for r in rows), 1) for k in ("py_us", "pg_us", "wall_us")}
        for name, rows in results.items()
    }
    print(json.dumps({"n": args.n, "rounds": args.rounds, "loadavg": os.getloadavg(), "medians": table}, indent=1))
    print("\n| variant | worker CPU µs | PostgreSQL CPU µs | total CPU µs | wall µs | ceiling on 2 cores (req/s) |")
    print("|---|---|---|---|---|---|")
    for name, m in table.items():
        total = m["py_us"] + m["pg_us"]
        print(f"| {name} | {m['py_us']} | {m['pg_us']} | {round(total, 1)} | {m['wall_us']} | {round(2e6 / total)} |")
    if args.profile:
        import cProfile
        import pstats

        bodies = [
            canonical_bytes(
                senders[i % args.pairs].sign_command(
                    recipient_did=recipients[i % args.pairs].did, payload="A" * 256, channel="TWO_WAY_PRIVATE"
                )
            )
            for i in range(args.n)
        ]
        prof = cProfile.Profile(time.process_time)  # CPU, not wall: the box may be shared
        prof.enable()
        for b in bodies:
            post(b)
        prof.disable()
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats(os.environ.get("BENCH_PROFILE_SORT", "tottime")).print_stats(
            int(os.environ.get("BENCH_PROFILE_TOP", "25"))
        )
        print("\n```\n" + out.getvalue()[-200000:] + "```")
    return table


if __name__ == "__main__":
    main()
