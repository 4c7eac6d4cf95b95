"""The messaging database seam: the SQL every statement shares, and what PostgreSQL does its own way.

`REGISTERED` is the one text of "registered" (PROTOCOL-DECISIONS §4: `did` owns a live contract
whose parties are itself, as requestor, and this tenant's DID). `services.is_registered` runs it,
and every command statement of apps/decentrl/storage.py embeds it. `Contract.objects.registrations`
is the same predicate for listings that need rows (tests/decentrl/test_storage.py compares them).

The services (services.py, public.py) are one implementation each. Where PostgreSQL answers the
same question its own way, they ask `backend()`, chosen once per process from the database:

| | `PostgresBackend` | `SqliteBackend` (the embedded default) |
|---|---|---|
| `cursor()` | prepared statements (`prepared_cursor`) | Django's cursor |
| `queue_depth()` | the counter row its triggers keep (`PendingQueueDepth`) | COUNT of the unacknowledged rows |
| `serialise()` | `pg_advisory_xact_lock` until the transaction ends | nothing: transactions begin IMMEDIATE (settings), so writers already run one at a time |

tests/decentrl/test_messaging_backend.py drives both against one model of the answers.
"""

from __future__ import annotations

import hashlib

from django.conf import settings
from django.db import connection

try:  # psycopg 3 only (the PostgreSQL backend defines it there)
    from django.db.backends.postgresql.base import ServerBindingCursor
except Exception:  # noqa: BLE001 - no psycopg: prepared_cursor never builds one (SQLite)
    ServerBindingCursor = object  # type: ignore[assignment,misc]

from .models import Contract, PendingEvent, PendingQueueDepth

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


def prepared_cursor():
    """PostgreSQL: a prepared-statement cursor inside Django's cursor wrapper (so error translation,
    execute wrappers and query logging still apply). The same statements go unprepared (Django's
    cursor) when the operator turned preparation off (DB_PREPARED_STATEMENTS=0, docs/operations.md)
    or while queries are logged."""
    if not settings.DB_PREPARED_STATEMENTS or connection.queries_logged:
        # Logged queries (DEBUG, tests' query capture) need the interpolated SQL text, which only
        # client-side binding has: same statement, same results, just not prepared.
        return connection.cursor()
    connection.ensure_connection()
    raw = connection.connection
    if raw.prepare_threshold is None:
        # Django turns psycopg's statement preparation off (None) for transaction-mode poolers;
        # a threshold no query reaches leaves the ORM's statements unprepared while this
        # cursor's explicit prepare=True works.
        raw.prepare_threshold = 2**31 - 1
    return connection._prepare_cursor(_PreparedCursor(raw))


def _lock_key(key: str) -> int:
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big", signed=True)


class PostgresBackend:
    """Prepared statements, the trigger-kept queue counters, advisory locks."""

    cursor = staticmethod(prepared_cursor)

    def queue_depth(self, *, tenant_id: int, did: str) -> int:
        """The recipient's unacknowledged pending events: its counter row (no row: 0)."""
        # (no ORDER BY: the unique (tenant, recipient_did) index finds the one row)
        depth = PendingQueueDepth.objects.filter(tenant_id=tenant_id, recipient_did=did).values_list("depth", flat=True)
        return next(iter(depth[:1]), 0)

    def serialise(self, key: str) -> None:
        """Hold `key` until the caller's transaction ends: other holders of `key` wait."""
        with connection.cursor() as cur:
            cur.execute("SELECT pg_advisory_xact_lock(%s)", [_lock_key(key)])


class SqliteBackend:
    """Django's cursor, counted queues, and SQLite's one writer at a time."""

    def cursor(self):
        return connection.cursor()

    def queue_depth(self, *, tenant_id: int, did: str) -> int:
        """The recipient's unacknowledged pending events, counted (SQLite has no counter triggers)."""
        return PendingEvent.objects.filter(tenant_id=tenant_id, recipient_did=did, acknowledged_at__isnull=True).count()

    def serialise(self, key: str) -> None:
        """Nothing to do: a transaction that writes begins IMMEDIATE (settings.DATABASES), so it
        already holds SQLite's one write lock until it ends."""


_chosen: list[PostgresBackend | SqliteBackend] = []


def backend() -> PostgresBackend | SqliteBackend:
    """The backend for this deployment's database, chosen at first use."""
    if not _chosen:
        _chosen.append(PostgresBackend() if connection.vendor == "postgresql" else SqliteBackend())
    return _chosen[0]
