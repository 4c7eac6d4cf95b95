"""CPU cost of one QUERY_EVENTS by tag, in-process and single-threaded (as bench/hotpath_cpu.py for
TWO_WAY_PRIVATE): the real WSGI command handler driven with pre-signed commands.

    .venv/bin/python -m bench.query_events_cpu                       # 3 rounds of 2000
    .venv/bin/python -m bench.query_events_cpu --profile             # + cProfile top (BENCH_PROFILE_SORT/TOP)

Seeds `--stored` events over `--owners` owners with the bench seeder (bench/loadgen.py), 100 events
per tag as in the standard set, and asks for page 0 of 10 by one tag: a full page, so the COUNT
runs too. Reports per command `py_us` (this process's CPU), `pg_us` (every backend of its database) and
`wall_us`, with and without the command observers (usage metering, metrics).
Uses its own database (BENCH_QE_DB, default mediator_bench_qecpu).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import sys
import time

DB = os.environ.get("BENCH_QE_DB", "mediator_bench_qecpu")
PG_ADMIN_URL = os.environ.get("BENCH_PG_ADMIN_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
HOST = "qecpu.bench:80"
PER_TAG = 100


def setup_django(redis_url: str) -> str:
    import subprocess

    import psycopg

    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{DB}"')
        conn.execute(f'CREATE DATABASE "{DB}"')
    url = PG_ADMIN_URL.rsplit("/", 1)[0] + "/" + DB
    os.environ.update(
        {
            "DJANGO_SETTINGS_MODULE": "mediator_project.settings",
            "DATABASE_URL": url,
            "REDIS_URL": redis_url,
            "DJANGO_DEBUG": "0",
            "LOG_LEVEL": "WARNING",
            "MEDIATOR_RATE_LIMIT_PER_DID": "0",
            "MEDIATOR_RATE_LIMIT_PER_IP": "0",
        }
    )
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v0"], cwd=root, check=True)
    import django

    django.setup()
    return url


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=2000, help="commands per round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--owners", type=int, default=10)
    ap.add_argument("--stored", type=int, default=100_000)
    ap.add_argument("--redis-url", default=os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/13"))
    ap.add_argument("--profile", action="store_true", help="cProfile the default variant")
    args = ap.parse_args(argv)
    url = setup_django(args.redis_url)

    from django.db import connection

    from apps.protocol import hooks
    from apps.protocol.wire import contract as wc
    from apps.protocol.wire.canonical import canonical_bytes
    from apps.protocol.wire.client import Identity
    from apps.protocol.wsgi import BareCommandApp
    from apps.tenants.services import tenant_create
    from bench import loadgen
    from bench.hotpath_cpu import backends_cpu_s, backends_delta_s

    tenant = tenant_create(slug="qecpu", domain=HOST, rate_limit_per_did=0, rate_limit_per_ip=0)
    app = BareCommandApp()

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
            "SERVER_NAME": "qecpu.bench",
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
        resp = app(environ, start_response)
        data = b"".join(resp)
        resp.close()
        return out["status"], data

    owners = [Identity.create(f"o{i}", tenant.did) for i in range(args.owners)]
    others = [Identity.create(f"p{i}", tenant.did) for i in range(args.owners)]
    for who in owners:
        req = wc.build_request(
            requestor_did=who.did,
            recipient_did=tenant.did,
            recipient_prekey=bytes(tenant.prekey_public),
            signing=who.signing,
            expires_at=int(time.time()) + 86_400,
        )
        payload = {
            "type": "REQUEST_COMMUNICATION_CONTRACT",
            "encrypted_contract_request": req.encrypted,
            "requestor_ephemeral_public_key": req.ephemeral_public_b64,
        }
        status, data = post(canonical_bytes(who.sign_command(recipient_did=tenant.did, payload=payload)))
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
    variants = {"QUERY_EVENTS by tag (default)": True, "QUERY_EVENTS by tag, no observers": False}
    results: dict[str, list[dict]] = {k: [] for k in variants}
    for _ in range(args.rounds):
        for name, observe in variants.items():
            hooks.OBSERVERS[:] = observers if observe else []
            batch = bodies(args.n)
            for b in batch[:50]:  # warm: connection, prepared statements, caches
                post(b)
            connection.ensure_connection()
            pg0, py0, t0 = backends_cpu_s(DB), time.process_time(), time.perf_counter()
            for b in batch[50:]:
                status, data = post(b)
                if not status.startswith("200") or b'"total":100' not in data:
                    raise SystemExit(f"{name}: {status} {data[:300]!r}")
            n = len(batch) - 50
            wall, py, pg = time.perf_counter() - t0, time.process_time() - py0, backends_delta_s(pg0, DB)
            results[name].append({"py_us": py / n * 1e6, "pg_us": pg / n * 1e6, "wall_us": wall / n * 1e6})
    hooks.OBSERVERS[:] = observers
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

        batch = bodies(args.n)
        prof = cProfile.Profile(time.process_time)  # CPU, not wall: the box may be shared
        prof.enable()
        for b in batch:
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
