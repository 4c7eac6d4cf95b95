"""What the in-process CPU benchmarks share (bench/hotpath_cpu.py, bench/query_events_cpu.py): a
fresh migrated database, the real WSGI command entry driven without a server, CPU accounting of
the worker and of every PostgreSQL backend of that database, and the report.
"""

from __future__ import annotations

import io
import json
import os
import statistics
import subprocess
import sys
import time

from bench.pg import PG_ADMIN_URL, db_url

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def setup_django(db: str, redis_url: str) -> str:
    """Drop, create and migrate `db`, then set Django up on it; returns its URL.

    Diagnostics only: BENCH_DB_SET="synchronous_commit=off" (database settings, e.g. to see what
    the commit flush costs; the mediator itself requires synchronous_commit=on) and
    BENCH_LOG_LEVEL (default WARNING: no per-command log line).
    """
    import psycopg

    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{db}"')
        conn.execute(f'CREATE DATABASE "{db}"')
        for item in filter(None, os.environ.get("BENCH_DB_SET", "").split(",")):
            name, value = item.split("=", 1)
            conn.execute(f'ALTER DATABASE "{db}" SET {name} = {value}')
    url = db_url(db)
    os.environ.update(
        {
            "DJANGO_SETTINGS_MODULE": "mediator_project.settings",
            "DATABASE_URL": url,
            "REDIS_URL": redis_url,
            "DJANGO_DEBUG": "0",
            "LOG_LEVEL": os.environ.get("BENCH_LOG_LEVEL", "WARNING"),
            "MEDIATOR_RATE_LIMIT_PER_DID": "0",
            "MEDIATOR_RATE_LIMIT_PER_IP": "0",
            # The HTTP tier's persistent connection per thread (scripts/run_production.sh), not the
            # pool's checkout and return (and Django's connect/close) on every command.
            "DB_CONN_MAX_AGE": os.environ.get("DB_CONN_MAX_AGE", "600"),
        }
    )
    subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v0"], cwd=ROOT, check=True)
    import django

    django.setup()
    return url


def backend_cpu_s(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            rest = fh.read().rsplit(")", 1)[1].split()
    except FileNotFoundError:  # the backend ended
        return 0.0
    return (int(rest[11]) + int(rest[12])) / os.sysconf("SC_CLK_TCK")


def backends_cpu_s(db: str) -> dict[int, float]:
    """CPU seconds of each backend connected to database `db` (not counting this query's). With
    the connection pool a command may run on any pool connection; the metering flush has its own."""
    import psycopg

    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        pids = [r[0] for r in conn.execute("SELECT pid FROM pg_stat_activity WHERE datname = %s", [db])]
    return {pid: backend_cpu_s(pid) for pid in pids}


def backends_delta_s(before: dict[int, float], db: str) -> float:
    """CPU used since `before` by the backends then and now (a new backend counts in full)."""
    after = backends_cpu_s(db)
    return sum(after.get(pid, backend_cpu_s(pid)) - cpu for pid, cpu in before.items()) + sum(
        cpu for pid, cpu in after.items() if pid not in before
    )


def wsgi_poster(app, host: str, *, path: str = "/", content_type: str = "application/json", method: str = "POST"):
    """post(body) -> (status line, reply bytes): `POST /` (or `method` `path`) through the WSGI callable `app`."""
    server_name = host.split(":", 1)[0]

    def post(body: bytes) -> tuple[str, bytes]:
        out = {}

        def start_response(status, headers, exc_info=None):
            out["status"] = status

        environ = {
            "REQUEST_METHOD": method,
            "PATH_INFO": path,
            "SCRIPT_NAME": "",
            "QUERY_STRING": "",
            "CONTENT_TYPE": content_type,
            "CONTENT_LENGTH": str(len(body)),
            "HTTP_HOST": host,
            "SERVER_NAME": server_name,
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
        if hasattr(resp, "close"):  # Django's response; CommandEntry answers with a list
            resp.close()
        return out["status"], data

    return post


def registration_payload(tenant, who) -> dict:
    """REQUEST_COMMUNICATION_CONTRACT registering `who` with `tenant` for a day."""
    from apps.wire import contract as wc

    req = wc.build_request(
        requestor_did=who.did,
        recipient_did=tenant.did,
        recipient_prekey=bytes(tenant.prekey_public),
        signing=who.signing,
        expires_at=int(time.time()) + 86_400,
    )
    return {
        "type": "REQUEST_COMMUNICATION_CONTRACT",
        "encrypted_contract_request": req.encrypted,
        "requestor_ephemeral_public_key": req.ephemeral_public_b64,
    }


def registered_pairs(post, tenant, pairs: int) -> tuple[list, list]:
    """`pairs` senders and recipients registered with `tenant` through `post` (a wsgi_poster of
    `POST /`), each recipient holding a day-long contract with its sender: TWO_WAY_PRIVATE's world."""
    from apps.wire import contract as wc
    from apps.wire.canonical import canonical_bytes
    from apps.wire.client import Identity
    from apps.wire.did import parse_decentrl

    def direct(who, payload: dict) -> None:
        status, data = post(canonical_bytes(who.sign_command(recipient_did=tenant.did, payload=payload)))
        assert status.startswith("200"), data

    senders = [Identity.create(f"s{i}", tenant.did) for i in range(pairs)]
    recipients = [Identity.create(f"r{i}", tenant.did) for i in range(pairs)]
    for who in senders + recipients:
        direct(who, registration_payload(tenant, who))
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
    return senders, recipients


def measure(post, batch: list[bytes], db: str, check) -> dict:
    """Send `batch` (the first 50 warm connection, prepared statements and caches); per command:
    this process's CPU, the database's backends' CPU and the wall time, in µs. `check(status,
    data)` raises on a wrong reply."""
    from django.db import connection

    for b in batch[:50]:
        post(b)
    connection.ensure_connection()
    pg0, py0, t0 = backends_cpu_s(db), time.process_time(), time.perf_counter()
    for b in batch[50:]:
        check(*post(b))
    n = len(batch) - 50
    wall, py, pg = time.perf_counter() - t0, time.process_time() - py0, backends_delta_s(pg0, db)
    return {"py_us": py / n * 1e6, "pg_us": pg / n * 1e6, "wall_us": wall / n * 1e6}


def report(results: dict[str, list[dict]], n: int, rounds: int) -> dict:
    """Medians per variant, printed as JSON and as the Markdown table docs/benchmark-history.md quotes."""
    table = {
        name: {k: round(statistics.median(r[k] for r in rows), 1) for k in ("py_us", "pg_us", "wall_us")}
        for name, rows in results.items()
    }
    print(json.dumps({"n": n, "rounds": rounds, "loadavg": os.getloadavg(), "medians": table}, indent=1))
    print("\n| variant | worker CPU µs | PostgreSQL CPU µs | total CPU µs | wall µs | ceiling on 2 cores (req/s) |")
    print("|---|---|---|---|---|---|")
    for name, m in table.items():
        total = m["py_us"] + m["pg_us"]
        print(f"| {name} | {m['py_us']} | {m['pg_us']} | {round(total, 1)} | {m['wall_us']} | {round(2e6 / total)} |")
    return table


def print_profile(post, batch: list[bytes]) -> None:
    """cProfile of `batch` by this thread's CPU time (the box may be shared); BENCH_PROFILE_SORT/TOP pick the view."""
    import cProfile
    import pstats

    prof = cProfile.Profile(time.thread_time)  # this thread only: not the metering writer's
    prof.enable()
    for b in batch:
        post(b)
    prof.disable()
    if dump := os.environ.get("BENCH_PROFILE_DUMP"):  # a file prefix: keep the raw stats for pstats
        prof.dump_stats(f"{dump}-{len(os.listdir(os.path.dirname(dump) or '.'))}.prof")
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats(os.environ.get("BENCH_PROFILE_SORT", "tottime")).print_stats(
        int(os.environ.get("BENCH_PROFILE_TOP", "25"))
    )
    print("\n```\n" + out.getvalue() + "```")
