"""The messaging database seam: the SQL every statement shares, and what PostgreSQL does its own way.

`REGISTERED` is the one text of "registered" (PROTOCOL-DECISIONS §4: `did` owns a live contract
whose parties are itself, as requestor, and this tenant's DID). `services.is_registered` runs it,
and every command statement of apps/decentrl/storage.py embeds it. `Contract.objects.registrations`
is the same predicate for listings that need rows (tests/decentrl/test_storage.py compares them).

`replay_claim` is the one replay claim (`INSERT … ON CONFLICT`) of every front door, `claim` runs
it. Statements run on this thread's prepared cursor (`prepared_cursor`); a recipient's queue depth is
the counter row its triggers keep (`queue_depth`, `PendingQueueDepth`); `serialise` holds an
advisory lock until the caller's transaction ends. tests/decentrl/test_messaging_backend.py checks
them against one model of the answers.
"""

from __future__ import annotations

import functools
import hashlib

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connection, connections
from django.db.backends.postgresql.base import ServerBindingCursor

from .models import Contract, PendingQueueDepth

_CONTRACT = Contract._meta.db_table

# Served by the index contract_parties (docs/indexes.md).
REGISTERED = (
    f"EXISTS(SELECT 1 FROM {_CONTRACT} WHERE tenant_id = %s AND owner_did = %s AND requestor_did = %s"
    " AND recipient_did = %s AND expires_at > %s)"
)


def registered_params(*, tenant_id: int, tenant_did: str, did: str, now_s: int) -> list:
    """The parameters of REGISTERED for `did` on that tenant at `now_s`."""
    return [tenant_id, did, did, tenant_did, now_s]


class _PreparedCursor(ServerBindingCursor):
    """Server-side binding, prepared on first use per connection.

    Django's default psycopg cursor binds client-side: it re-quotes every parameter into the SQL
    text in Python and PostgreSQL re-parses and re-plans it, which profiled at ~10% of a worker's
    CPU for the TWO_WAY_PRIVATE statement. Prepared, PostgreSQL parses and plans it once per
    connection.
    """

    def execute(self, query, params=None, *, prepare=None, binary=None):
        return super().execute(query, params, prepare=True if prepare is None else prepare, binary=binary)


class _Statements:
    """What Django's CursorWrapper does for an `execute` (its execute wrappers, the broken-transaction
    check, its error translation around execute and fetch), on ONE `_PreparedCursor` kept for the
    life of the thread's connection instead of a cursor and a wrapper built and closed per
    statement (which, with the connection proxy's lookups, profiled at ~6 % of a TWO_WAY_PRIVATE's
    worker CPU). Used as a context manager like Django's cursor; leaving it keeps the cursor open
    for the connection's next statement (psycopg cursors run any number of statements)."""

    __slots__ = ("db", "cursor")

    def __init__(self, db, cursor):
        self.db, self.cursor = db, cursor

    def __enter__(self):
        return self

    def __exit__(self, *exc_info) -> None:
        return None

    def execute(self, sql, params=None):
        db = self.db
        if db.execute_wrappers:
            executor = self._execute
            for wrapper in reversed(db.execute_wrappers):
                executor = functools.partial(wrapper, executor)
            return executor(sql, params, False, {"connection": db, "cursor": self})
        return self._execute(sql, params)

    def _execute(self, sql, params, *_wrapper_args):
        self.db.validate_no_broken_transaction()
        with self.db.wrap_database_errors:
            return self.cursor.execute(sql, params)

    def fetchone(self):
        with self.db.wrap_database_errors:
            return self.cursor.fetchone()

    def fetchall(self):
        with self.db.wrap_database_errors:
            return self.cursor.fetchall()


def prepared_cursor():
    """This thread's prepared-statement cursor (`_Statements`: error translation and
    execute wrappers as Django's cursor). The same statements go unprepared (Django's cursor) when
    the operator turned preparation off (DB_PREPARED_STATEMENTS=0, docs/operations.md) or while
    queries are logged."""
    db = connections[DEFAULT_DB_ALIAS]
    if not settings.DB_PREPARED_STATEMENTS or db.queries_logged:
        # Logged queries (DEBUG, tests' query capture) need the interpolated SQL text, which only
        # client-side binding has: same statement, same results, just not prepared.
        return db.cursor()
    raw = db.connection
    if raw is None:
        db.ensure_connection()
        raw = db.connection
    kept = db.__dict__.get("_mediator_statements")
    if kept is None or kept.cursor.connection is not raw or kept.cursor.closed:
        if raw.prepare_threshold is None:
            # Django turns psycopg's statement preparation off (None) for transaction-mode poolers;
            # a threshold no query reaches leaves the ORM's statements unprepared while this
            # cursor's explicit prepare=True works.
            raw.prepare_threshold = 2**31 - 1
        kept = db.__dict__["_mediator_statements"] = _Statements(db, _PreparedCursor(raw))
    return kept


def replay_claim(table: str, key: tuple[str, ...]) -> str:
    """The replay claim on `table` (unique on `key`, with `id` and an integer `expires_at`), the one
    text of every front door's: Decentrl's nonces, DIDComm's message ids. Its parameters are the key's
    values, the record's `expires_at`, then the time before which a record is past (`claim`)."""
    columns = ", ".join(key)
    return (
        f"INSERT INTO {table} ({columns}, expires_at) VALUES ({', '.join(['%s'] * (len(key) + 1))}) "
        f"ON CONFLICT ({columns}) DO UPDATE SET expires_at = EXCLUDED.expires_at "
        f"WHERE {table}.expires_at < %s RETURNING id"
    )


def claim(statement: str, params: list) -> bool:
    """Run a `replay_claim` statement: True when the key was fresh, or its record past and taken
    over. The unique constraint is the lock: of concurrent claims of one key exactly one gets a
    row. Commits with the caller's transaction, or at once outside one."""
    with prepared_cursor() as cur:
        cur.execute(statement, params)
        return cur.fetchone() is not None


def _lock_key(key: str) -> int:
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big", signed=True)


def queue_depth(*, tenant_id: int, did: str) -> int:
    """The recipient's unacknowledged pending events: its counter row (no row: 0)."""
    # (no ORDER BY: the unique (tenant, recipient_did) index finds the one row)
    depth = PendingQueueDepth.objects.filter(tenant_id=tenant_id, recipient_did=did).values_list("depth", flat=True)
    return next(iter(depth[:1]), 0)


def serialise(key: str) -> None:
    """Hold `key` until the caller's transaction ends: other holders of `key` wait."""
    with connection.cursor() as cur:
        cur.execute("SELECT pg_advisory_xact_lock(%s)", [_lock_key(key)])
