"""The nonce claim alone on PostgreSQL, by table shape: today's text key against a digest key.

    .venv/bin/python -m bench.nonce_key_ab --rounds 10 --n 3000 --stored 400000

Creates, in its own database (BENCH_NONCE_DB, default mediator_bench_noncekey, dropped at the
end), one table per shape, each seeded with `--stored` live rows (the store a window of traffic
leaves), and runs the command path's claim (`INSERT … ON CONFLICT … DO UPDATE … WHERE expires_at
< now RETURNING`, apps/decentrl/storage.py, prepared, autocommit: every claim commits) on fresh
pairs, batches of `--n` per shape (split over `--clients` connections claiming at once, their
backends' CPU summed), the order flipping each round; after each batch a replay of its first
pair must be refused. Reports per claim the PostgreSQL CPU (from /proc, 10 ms ticks: batches of
3000 give ~3 µs steps) and the batch's wall time over its claims, medians of the rounds, and
writes them with every round to bench/results/nonce_key_ab-<stored>-<UTC>.json. Shapes:

- `text`: `protocol_nonce` as it is: bigserial id, unique (tenant_id, sender_did, nonce), the
  expiry index;
- `digest_pk`: a 16-byte sha256 digest of (tenant, sender DID, nonce), length-prefixed, as the
  primary key, with tenant_id and the expiry index;
- `digest_id`: the same digest under a unique index beside a bigserial id.

tenant_id references a tenant table in every shape (a deferred foreign key, as Django makes).
Sender DIDs are `--did-len` characters (147 as in the earlier measurement, docs/benchmark-history.md),
nonces UUIDs. docs/benchmark-history.md, "A hashed nonce key, measured before building it".
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import psycopg

from bench.pg import PG_ADMIN_URL, db_url

DB = os.environ.get("BENCH_NONCE_DB", "mediator_bench_noncekey")

SHAPES = {
    "text": (
        "CREATE TABLE n_text (id bigserial PRIMARY KEY, tenant_id bigint NOT NULL REFERENCES tenant (id) DEFERRABLE INITIALLY DEFERRED, sender_did varchar(2048) NOT NULL,"
        " nonce varchar(36) NOT NULL, expires_at bigint NOT NULL, UNIQUE (tenant_id, sender_did, nonce));"
        " CREATE INDEX n_text_exp ON n_text (expires_at)",
        "INSERT INTO n_text (tenant_id, sender_did, nonce, expires_at) VALUES (%s, %s, %s, %s)"
        " ON CONFLICT (tenant_id, sender_did, nonce) DO UPDATE SET expires_at = EXCLUDED.expires_at"
        " WHERE n_text.expires_at < %s RETURNING id",
    ),
    "digest_pk": (
        "CREATE TABLE n_digest_pk (key bytea PRIMARY KEY, tenant_id bigint NOT NULL REFERENCES tenant (id) DEFERRABLE INITIALLY DEFERRED, expires_at bigint NOT NULL);"
        " CREATE INDEX n_digest_pk_exp ON n_digest_pk (expires_at)",
        "INSERT INTO n_digest_pk (key, tenant_id, expires_at) VALUES (%s, %s, %s)"
        " ON CONFLICT (key) DO UPDATE SET expires_at = EXCLUDED.expires_at"
        " WHERE n_digest_pk.expires_at < %s RETURNING tenant_id",
    ),
    "digest_id": (
        "CREATE TABLE n_digest_id (id bigserial PRIMARY KEY, key bytea NOT NULL UNIQUE, tenant_id bigint NOT NULL REFERENCES tenant (id) DEFERRABLE INITIALLY DEFERRED,"
        " expires_at bigint NOT NULL); CREATE INDEX n_digest_id_exp ON n_digest_id (expires_at)",
        "INSERT INTO n_digest_id (key, tenant_id, expires_at) VALUES (%s, %s, %s)"
        " ON CONFLICT (key) DO UPDATE SET expires_at = EXCLUDED.expires_at"
        " WHERE n_digest_id.expires_at < %s RETURNING id",
    ),
}


def _digest(tenant: int, did: str, nonce: str) -> bytes:
    d, n = did.encode(), nonce.encode()
    raw = tenant.to_bytes(8, "big") + len(d).to_bytes(4, "big") + d + len(n).to_bytes(4, "big") + n
    return hashlib.sha256(raw).digest()[:16]


def _params(shape: str, tenant: int, did: str, nonce: str, exp: int, now: int) -> list:
    if shape == "text":
        return [tenant, did, nonce, exp, now]
    return [_digest(tenant, did, nonce), tenant, exp, now]


def _cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=1000, help="claims per batch")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--stored", type=int, default=200_000, help="live rows seeded per table")
    ap.add_argument("--did-len", type=int, default=147)
    ap.add_argument("--senders", type=int, default=16)
    ap.add_argument("--clients", type=int, default=1, help="connections claiming at once (threads)")
    ap.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    args = ap.parse_args(argv)

    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{DB}"')
        admin.execute(f'CREATE DATABASE "{DB}"')
    conn = psycopg.connect(db_url(DB), autocommit=True, prepare_threshold=0)
    dids = [("did:key:z6Mk" + uuid.uuid4().hex * 8)[: args.did_len] for _ in range(args.senders)]
    now = int(time.time() * 1000)
    conn.execute("CREATE TABLE tenant (id bigint PRIMARY KEY)", prepare=False)
    conn.execute("INSERT INTO tenant SELECT generate_series(1, 4)", prepare=False)
    for shape in args.shapes:
        create, claim = SHAPES[shape]
        for stmt in create.split("; "):
            conn.execute(stmt, prepare=False)
        with conn.cursor() as cur:
            rows = [
                _params(shape, 1 + i % 4, dids[i % len(dids)], str(uuid.uuid4()), now + 300_000, now)[:-1]
                for i in range(args.stored)
            ]
            cols = "tenant_id, sender_did, nonce, expires_at" if shape == "text" else "key, tenant_id, expires_at"
            with cur.copy(f"COPY n_{shape} ({cols}) FROM STDIN") as cp:
                for r in rows:
                    cp.write_row(r)
        conn.execute(f"VACUUM ANALYZE n_{shape}", prepare=False)
    conns = [conn] + [
        psycopg.connect(db_url(DB), autocommit=True, prepare_threshold=0) for _ in range(args.clients - 1)
    ]
    pids = [c.execute("SELECT pg_backend_pid()").fetchone()[0] for c in conns]
    pool = ThreadPoolExecutor(len(conns))

    def run(c: psycopg.Connection, claim: str, part: list[list]) -> None:
        for p in part:
            assert c.execute(claim, p).fetchone() is not None

    sizes = {
        s: conn.execute(
            "SELECT pg_table_size(%s::regclass) / 1048576, pg_indexes_size(%s::regclass) / 1048576", [f"n_{s}"] * 2
        ).fetchone()
        for s in args.shapes
    }

    results: dict[str, list[dict]] = {s: [] for s in args.shapes}
    order = list(args.shapes)
    for rnd in range(args.rounds):
        for shape in order:
            _, claim = SHAPES[shape]
            batch = [
                _params(shape, 1 + i % 4, dids[i % len(dids)], str(uuid.uuid4()), now + 300_000, now)
                for i in range(args.n)
            ]
            parts = [batch[k :: len(conns)] for k in range(len(conns))]
            cpu0, t0 = sum(map(_cpu_s, pids)), time.perf_counter()
            for f in [pool.submit(run, c, claim, part) for c, part in zip(conns, parts, strict=True)]:
                f.result()
            t1, cpu1 = time.perf_counter(), sum(map(_cpu_s, pids))
            results[shape].append({"pg_us": (cpu1 - cpu0) / args.n * 1e6, "wall_us": (t1 - t0) / args.n * 1e6})
            # A replay of the batch's first pair must be refused by every shape.
            assert conn.execute(claim, batch[0]).fetchone() is None
        order.reverse()
        print(
            f"round {rnd + 1}: " + ", ".join(f"{s} {results[s][-1]['pg_us']:.0f} µs" for s in args.shapes), flush=True
        )
    summary = {
        s: {
            "pg_us_median": statistics.median(r["pg_us"] for r in results[s]),
            "wall_us_median": statistics.median(r["wall_us"] for r in results[s]),
        }
        for s in args.shapes
    }
    for s in args.shapes:
        if s != "text" and "text" in summary:
            summary[s]["pg_saving_us"] = summary["text"]["pg_us_median"] - summary[s]["pg_us_median"]
            summary[s]["pg_ratio"] = summary[s]["pg_us_median"] / summary["text"]["pg_us_median"]
            summary[s]["rounds_below_text"] = sum(
                a["pg_us"] < b["pg_us"] for a, b in zip(results[s], results["text"], strict=True)
            )
    for s in args.shapes:
        summary[s]["heap_mib"], summary[s]["indexes_mib"] = sizes[s]
    summary["shared_buffers"] = conn.execute("SHOW shared_buffers").fetchone()[0]
    summary["stored"] = args.stored
    summary["clients"] = args.clients
    summary["load_1min"] = os.getloadavg()[0]
    print(json.dumps(summary, indent=1))
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    out = os.path.join(os.path.dirname(__file__), "results", f"nonce_key_ab-{args.stored}-{stamp}.json")
    with open(out, "w") as f:
        json.dump(
            {"argv": argv if argv is not None else sys.argv[1:], "summary": summary, "rounds": results}, f, indent=1
        )
    print(out)
    pool.shutdown()
    for c in conns:
        c.close()
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{DB}"')
    return summary


if __name__ == "__main__":
    main()
