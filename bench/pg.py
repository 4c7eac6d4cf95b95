"""Where the benchmarks find PostgreSQL: one admin URL for every benchmark that creates a database.

PostgreSQL runs on the same box, so the default is its Unix socket when there is one (a little
less server and PostgreSQL CPU per request than loopback TCP). BENCH_PG_ADMIN_URL overrides it.
"""

import os
import sys
from contextlib import contextmanager

PG_SOCKET = "/var/run/postgresql/.s.PGSQL.5432"
PG_ADMIN_URL = os.environ.get(
    "BENCH_PG_ADMIN_URL",
    "postgresql://postgres@%2Fvar%2Frun%2Fpostgresql/postgres"
    if os.path.exists(PG_SOCKET)
    else "postgresql://postgres@127.0.0.1:5432/postgres",
)


def db_url(name: str) -> str:
    """The URL of database `name` on the same server as PG_ADMIN_URL."""
    return PG_ADMIN_URL.rsplit("/", 1)[0] + "/" + name


@contextmanager
def indexes_dropped(conn, tables: list[str]):
    """Bulk load into `tables` without index maintenance: drop their secondary indexes, their unique
    and foreign-key constraints and the foreign keys of other tables that reference them; on leaving,
    re-create them exactly as they were (definitions read back from the catalog), unique ones before
    foreign keys. Index maintenance row by row makes bulk seeding ~10x slower. Seeding only: the
    measured queries run on the re-created indexes. `conn` is an autocommit psycopg connection."""
    conn.execute("SET maintenance_work_mem = '512MB'")
    conn.execute("SET synchronous_commit = off")
    cons = conn.execute(
        "SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid), contype FROM pg_constraint "
        "WHERE conrelid::regclass::text = ANY(%s) AND contype IN ('u', 'f') ORDER BY contype",
        [tables],
    ).fetchall()
    cons += conn.execute(
        "SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid), contype FROM pg_constraint "
        "WHERE confrelid::regclass::text = ANY(%s) AND contype = 'f' AND NOT (conrelid::regclass::text = ANY(%s))",
        [tables, tables],
    ).fetchall()
    owned = {c[1] for c in cons}
    idx = [
        (name, ddl)
        for name, ddl in conn.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = ANY(%s) AND indexname NOT LIKE '%%_pkey'",
            [tables],
        ).fetchall()
        if name not in owned
    ]
    for table, name, _, _kind in sorted(cons, key=lambda c: c[3] != "f"):  # foreign keys first
        conn.execute(f'ALTER TABLE {table} DROP CONSTRAINT "{name}"')
    for name, _ in idx:
        conn.execute(f'DROP INDEX "{name}"')
    try:
        yield
    finally:
        for _, ddl in idx:
            conn.execute(ddl)
        for table, name, definition, _kind in sorted(cons, key=lambda c: c[3] == "f"):  # unique first
            conn.execute(f'ALTER TABLE {table} ADD CONSTRAINT "{name}" {definition}')
        print(f"re-created {len(idx)} indexes and {len(cons)} constraints", file=sys.stderr)
