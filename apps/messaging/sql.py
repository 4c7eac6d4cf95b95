"""SQL shared by every statement that asks it: the registration predicate, and prepared cursors.

`REGISTERED` is the one text of "registered" (PROTOCOL-DECISIONS §4: `did` owns a live contract
whose parties are itself, as requestor, and this tenant's DID). `services.is_registered` runs it,
and every command statement of apps/decentrl/storage.py embeds it. `Contract.objects.registrations`
is the same predicate for listings that need rows (tests/decentrl/test_storage.py compares them).
"""

from __future__ import annotations

from django.conf import settings
from django.db import connection

try:  # psycopg 3 only (the PostgreSQL backend defines it there)
    from django.db.backends.postgresql.base import ServerBindingCursor
except Exception:  # noqa: BLE001 - no psycopg: prepared_cursor never builds one (SQLite)
    ServerBindingCursor = object  # type: ignore[assignment,misc]

from .models import Contract

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
    """A prepared-statement cursor on PostgreSQL inside Django's cursor wrapper (so error
    translation, execute wrappers and query logging still apply); Django's own cursor elsewhere."""
    if connection.vendor != "postgresql" or not settings.MEDIATOR_FASTPATH_PREPARE or connection.queries_logged:
        # Logged queries (DEBUG, tests' query capture) need the interpolated SQL text, which only
        # client-side binding has: same statement, same results, just not prepared.
        return connection.cursor()
    connection.ensure_connection()
    raw = connection.connection
    if raw.prepare_threshold is None:
        # Django turns psycopg's statement preparation off (None) for transaction-mode poolers;
        # a threshold no query reaches leaves the ORM's statements unprepared while this
        # cursor's explicit prepare=True works. MEDIATOR_FASTPATH_PREPARE=0 behind such a pooler.
        raw.prepare_threshold = 2**31 - 1
    return connection._prepare_cursor(_PreparedCursor(raw))
