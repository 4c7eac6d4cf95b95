"""The messaging database seam: the pending-event statement, the SQL every statement shares, the prepared cursor.

`REGISTERED` is the one text of "registered" (docs/protocol-readings.md §4: `did` owns a live contract
whose parties are itself, as requestor, and this tenant's DID). `services.is_registered` runs it,
and every command statement of apps/decentrl/storage.py embeds it. `Contract.objects.registrations`
is the same predicate for listings that need rows (tests/decentrl/test_storage.py compares them).
The replay claim that a command's statement starts with is messaging.replay's (the one replay rule).

Statements run on this thread's prepared cursor (`prepared_cursor`); a recipient's queue depth is
the counter row its triggers keep (`queue_depth`, `PendingQueueDepth`); `serialise` holds an
advisory lock until the caller's transaction ends. tests/messaging/test_sql.py checks
them against one model of the answers.

The pending-event write (TWO_WAY_PRIVATE) is here, ONE prepared statement: `deliver_statement`
is the caller's replay claim (a data-modifying CTE executed to completion whatever the rest says,
so the claim holds even when a later check fails), then DCTRL-0004 §7.2's checks, which only gate
the INSERT: the recipient registered, a live contract between both parties, the tenant's queue cap
on the recipient's counter row (`PendingQueueDepth`, which triggers on messaging_pendingevent keep
equal to its unacknowledged count); when stored, the same row's presence read under its lock
(presence.py). Its text, parameters and the reading of its row (`delivered`) are pure functions
(tests/messaging/test_deliver_statement.py); `deliver` runs it and sends the push.

The DIDComm forward's statement is the DIDComm app's, beside its tables (apps/didcomm/forward.py);
it runs on `prepared_cursor`, embeds presence.py's read of its client's row and announces a due
wake with `announce_wake`.
"""

from __future__ import annotations

import functools
import hashlib
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connection, connections
from django.db.backends.postgresql.base import ServerBindingCursor

from apps.tenants.models import Tenant

from . import notify, presence
from .models import Contract, PendingEvent, PendingQueueDepth

if TYPE_CHECKING:
    from .services import Page

_CONTRACT = Contract._meta.db_table
_PENDING = PendingEvent._meta.db_table
_DEPTH = PendingQueueDepth._meta.db_table

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
    text in Python and PostgreSQL re-parses and re-plans it on every statement. Prepared,
    PostgreSQL parses and plans it once per connection.
    """

    def execute(self, query, params=None, *, prepare=None, binary=None):
        return super().execute(query, params, prepare=True if prepare is None else prepare, binary=binary)


class _Statements:
    """What Django's CursorWrapper does for an `execute` (its execute wrappers, the broken-transaction
    check, its error translation around execute and fetch), on ONE `_PreparedCursor` kept for the
    life of the thread's connection instead of a cursor and a wrapper built and closed per
    statement. Used as a context manager like Django's cursor; leaving it keeps the cursor open
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


# --- the Decentrl pending-event queue -------------------------------------------------------

# DCTRL-0004 §7.2 step 6: a live contract owned by the recipient naming both parties, either
# role (contract_parties / contract_parties_rev).
HAS_CONTRACT = (
    f"EXISTS(SELECT 1 FROM {_CONTRACT} WHERE tenant_id = %s AND owner_did = %s AND expires_at > %s"
    " AND ((requestor_did = %s AND recipient_did = %s) OR (requestor_did = %s AND recipient_did = %s)))"
)

# After `WITH claim AS (<the claim>)`. Uncorrelated EXISTS sub-selects become InitPlans that
# PostgreSQL runs lazily, so inside a CASE they cost nothing when the claim was a replay or a CPU
# check (signature…) already failed.
_DELIVER_AFTER_CLAIM = f"""
, chk AS (
    SELECT c.fresh,
        CASE WHEN c.fresh AND %s THEN {REGISTERED} ELSE false END AS registered,
        CASE WHEN c.fresh AND %s THEN {HAS_CONTRACT} ELSE false END AS has_contract,
        CASE WHEN c.fresh AND %s AND %s > 0 THEN COALESCE((
            SELECT depth >= %s FROM {_DEPTH} WHERE tenant_id = %s AND recipient_did = %s
            ), false) ELSE false END AS queue_full
    FROM (SELECT EXISTS(SELECT 1 FROM claim) AS fresh) c
), ins AS (
    INSERT INTO {_PENDING} (public_id, tenant_id, recipient_did, sender_did, payload, payload_bytes, created_at)
    SELECT %s, %s, %s, %s, %s, %s, now() FROM chk
    WHERE chk.registered AND chk.has_contract AND NOT chk.queue_full
    RETURNING id
)
SELECT chk.fresh, chk.registered, chk.has_contract, chk.registered AND chk.has_contract AND chk.queue_full,
    EXISTS(SELECT 1 FROM ins), CASE WHEN EXISTS(SELECT 1 FROM ins) THEN {presence.STATE_UNDER_LOCK} END
FROM chk
"""


@functools.cache
def deliver_sql(claim_sql: str) -> str:
    """The pending-event statement after `claim_sql`: one text per claim text, so every call passes
    psycopg the same string (prepared once per connection)."""
    return f"WITH claim AS ({claim_sql}){_DELIVER_AFTER_CLAIM}"


@dataclass(frozen=True)
class Found:
    """What one claiming statement found. A flag is False when it was not asked: after a replay,
    after a failed CPU check, or (queue_full) when the recipient is not registered or has no
    contract. `event_id` is set only when the event was stored; `page` only when a read was asked,
    the nonce was fresh and the sender registered."""

    nonce_fresh: bool
    registered: bool = False
    has_contract: bool = False
    queue_full: bool = False
    event_id: str | None = None
    page: Page | None = None
    may_have_socket: bool = True  # when stored: whether the recipient may have a socket to push to
    # When stored for a recipient with a push device and no socket: presence.WAKE_DUE or WOKEN.
    wake: int | None = None


@dataclass(frozen=True)
class Delivery:
    """A TWO_WAY_PRIVATE event for `deliver`: from `sender_did` to `recipient_did` on `tenant` at
    `now_s`; `checks_passed` is False when a CPU check (the signature…) already failed, so that
    only the caller's claim runs."""

    tenant: Tenant
    sender_did: str
    recipient_did: str
    payload: str
    now_s: int
    checks_passed: bool = True


def deliver_statement(
    claim_sql: str, claim_params: Sequence, event: Delivery, public_id: uuid.UUID
) -> tuple[str, list]:
    """The pending-event statement after `claim_sql` and its parameters (pure: no I/O). The checks and
    the INSERT run only when the claim was fresh and `event.checks_passed`."""
    tenant, recipient_did, sender_did, ok = event.tenant, event.recipient_did, event.sender_did, event.checks_passed
    cap = tenant.pending_queue_cap or 0
    params = [
        *claim_params,
        ok,
        *registered_params(tenant_id=tenant.pk, tenant_did=tenant.did, did=recipient_did, now_s=event.now_s),
        ok,
        tenant.pk, recipient_did, event.now_s, sender_did, recipient_did, recipient_did, sender_did,
        # Race accepted: concurrent senders may overshoot
        # the cap by the number of in-flight sends; nothing is ever evicted.
        ok, cap, cap, tenant.pk, recipient_did,
        public_id, tenant.pk, recipient_did, sender_did, event.payload, len(event.payload.encode("utf-8")),
        *presence.live_params(tenant_id=tenant.pk, did=recipient_did, now_s=event.now_s),
    ]  # fmt: skip
    return deliver_sql(claim_sql), params


def delivered(row: tuple, public_id: uuid.UUID) -> Found:
    """What `deliver_statement`'s row says; `event_id` only when the event was stored."""
    fresh, registered, has_contract, queue_full, stored, state = row
    return Found(
        bool(fresh),
        bool(registered),
        bool(has_contract),
        bool(queue_full),
        str(public_id) if stored else None,
        may_have_socket=presence.may_have_socket(state),
        wake=state if stored and state in (presence.WAKE_DUE, presence.WOKEN) else None,
    )


def deliver(claim_sql: str, claim_params: Sequence, event: Delivery) -> Found:
    """Run the caller's claim and, if fresh and the checks passed, DCTRL-0004 §7.2's checks and the
    INSERT: one statement, which commits by itself outside a transaction (the command path runs
    none), so a stored event's push to the recipient's sockets leaves at once, and only when its
    presence row says one may be open. A database error goes up: nothing of the statement, its
    claim included, committed."""
    public_id = uuid.uuid4()
    statement, params = deliver_statement(claim_sql, claim_params, event, public_id)
    with prepared_cursor() as cur:
        cur.execute(statement, params)
        found = delivered(cur.fetchone(), public_id)
    if found.event_id is not None and found.may_have_socket:
        notify.notify_pending_event(
            tenant_id=event.tenant.pk,
            did=event.recipient_did,
            event_id=found.event_id,
            sender_did=event.sender_did,
            payload=event.payload,
        )
    if found.wake is not None:
        announce_wake(tenant_id=event.tenant.pk, subject=event.recipient_did, state=found.wake)
    return found


def announce_wake(*, tenant_id: int, subject: str, state: int) -> None:
    """After a store whose subject has a push device and no socket: the wake to claim, or the
    coalesced one (wake.py), once committed."""
    notify.wake_on_commit(tenant_id=tenant_id, subject=subject, due=presence.wake_due(state))
