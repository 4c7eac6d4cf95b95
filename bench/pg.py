"""Where the benchmarks find PostgreSQL: one admin URL for every benchmark that creates a database.

PostgreSQL runs on the same box, so the default is its Unix socket when there is one (a little
less server and PostgreSQL CPU per request than loopback TCP). BENCH_PG_ADMIN_URL overrides it.
"""

import os

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
