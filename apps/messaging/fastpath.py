"""TWO_WAY_PRIVATE on PostgreSQL in one statement (issue 8): nonce claim, delivery checks, enqueue.

The ORM path (`dispatch._authorize_two_way` + `services.pending_event_enqueue`) costs five
statements and ~1.5 ms of ORM CPU per command; this is the same work as one round trip:

    claim   the caller's nonce INSERT … ON CONFLICT (apps/decentrl/nonces.py), always executed:
            a data-modifying CTE runs to completion whether or not anything reads it
    chk     fresh nonce? then (only if the caller's CPU checks passed) recipient registered,
            live contract owned by the recipient naming both, recipient queue at its cap
    ins     the pending event, only if every flag allows it

The flags come back and the caller picks the error in protocol order (PROTOCOL-DECISIONS §3,
DCTRL-0004 §7.2). A nonce is consumed whenever its pair was fresh, including when a later check
fails: those checks never abort the statement, they only gate the INSERT. If the statement
itself fails (a database error), nothing of it commits; the caller then claims the nonce on its
own before answering 503 (dispatch._two_way_fast), so a nonce is never left reusable after a
command reached its nonce check. SQLite and the embedded default keep the ORM path.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from django.conf import settings
from django.db import connection

try:  # psycopg 3 only (the PostgreSQL backend defines it there)
    from django.db.backends.postgresql.base import ServerBindingCursor
except Exception:  # noqa: BLE001 - no psycopg: the fast path is never taken (dispatch checks the vendor)
    ServerBindingCursor = object  # type: ignore[assignment,misc]

from apps.tenants.models import Tenant

from . import notify
from .models import Contract, PendingEvent, PendingQueueDepth

_CONTRACT = Contract._meta.db_table
_PENDING = PendingEvent._meta.db_table
_DEPTH = PendingQueueDepth._meta.db_table

# Uncorrelated EXISTS sub-selects become InitPlans that PostgreSQL runs lazily, so inside a CASE
# they cost nothing when the nonce was a replay or a CPU check (signature…) already failed.
# Each probe is served by the index named beside it (docs/indexes.md).
_BODY = f"""
, chk AS (
    SELECT c.fresh,
        CASE WHEN c.fresh AND %s THEN EXISTS(
            SELECT 1 FROM {_CONTRACT} WHERE tenant_id = %s AND owner_did = %s AND requestor_did = %s
              AND recipient_did = %s AND expires_at > %s) END AS registered,            -- contract_parties
        CASE WHEN c.fresh AND %s THEN EXISTS(
            SELECT 1 FROM {_CONTRACT} WHERE tenant_id = %s AND owner_did = %s AND expires_at > %s
              AND ((requestor_did = %s AND recipient_did = %s)
                OR (requestor_did = %s AND recipient_did = %s))) END AS has_contract,   -- contract_parties(_rev)
        CASE WHEN c.fresh AND %s AND %s > 0 THEN COALESCE((
            SELECT depth >= %s FROM {_DEPTH} WHERE tenant_id = %s AND recipient_did = %s
            ), false) ELSE false END AS queue_full                                  -- queue_depth_recipient
    FROM (SELECT EXISTS(SELECT 1 FROM claim) AS fresh) c
), ins AS (
    INSERT INTO {_PENDING} (public_id, tenant_id, recipient_did, sender_did, payload, payload_bytes, created_at)
    SELECT %s, %s, %s, %s, %s, %s, now() FROM chk
    WHERE chk.fresh AND chk.registered AND chk.has_contract AND NOT chk.queue_full
    RETURNING id
)
SELECT chk.fresh, chk.registered, chk.has_contract, chk.queue_full, EXISTS(SELECT 1 FROM ins) FROM chk
"""


class _PreparedCursor(ServerBindingCursor):
    """Server-side binding, prepared on first use per connection.

    Django's default psycopg cursor binds client-side: it re-quotes every parameter into the SQL
    text in Python and PostgreSQL re-parses and re-plans it, which profiled at ~10% of a worker's
    CPU for this statement. Prepared, PostgreSQL parses and plans it once per pooled connection.
    """

    def execute(self, query, params=None, *, prepare=None, binary=None):
        return super().execute(query, params, prepare=True if prepare is None else prepare, binary=binary)


def prepared_cursor():
    """A _PreparedCursor inside Django's cursor wrapper, so that error translation
    (DatabaseError), execute wrappers and query logging (tests' query counts) still apply."""
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


_REGISTERED = (
    f"SELECT EXISTS(SELECT 1 FROM {_CONTRACT} WHERE tenant_id = %s AND owner_did = %s AND requestor_did = %s"
    " AND recipient_did = %s AND expires_at > %s)"  # contract_parties
)


def registration_exists(*, tenant: Tenant, did: str, now_s: int) -> bool:
    """Contract.objects.registrations(tenant, did, now_s).exists() as one prepared statement.

    Every DIRECT_AUTHENTICATED command asks this; building and compiling the ORM query profiled
    at ~20% of a QUERY_EVENTS worker's CPU. Same predicate, same index, same transaction.
    """
    with prepared_cursor() as cur:
        cur.execute(_REGISTERED, [tenant.pk, did, did, tenant.did, now_s])
        return bool(cur.fetchone()[0])


_CLAIM_AND_REGISTERED = (
    "WITH claim AS ({claim}) SELECT EXISTS(SELECT 1 FROM claim), CASE WHEN %s AND EXISTS(SELECT 1 FROM claim)"
    f" THEN EXISTS(SELECT 1 FROM {_CONTRACT} WHERE tenant_id = %s AND owner_did = %s AND requestor_did = %s"
    " AND recipient_did = %s AND expires_at > %s) END"  # contract_parties
)


def nonce_claim_and_registration(
    *, tenant: Tenant, claim: tuple[str, list], did: str | None, now_s: int
) -> tuple[bool, bool | None]:
    """The caller's nonce claim and, if the pair was fresh and `did` is given, whether `did` is
    registered (registration_exists), as one statement: (nonce fresh, registered or None).

    Every DIRECT_AUTHENTICATED command claims a nonce and then checks one registration (§6.2
    step 4); as one round trip they cost one statement and one commit instead of two. The claim
    is a data-modifying CTE, executed whatever the rest says, so the nonce is consumed as before.
    """
    claim_sql, claim_params = claim
    with prepared_cursor() as cur:
        cur.execute(
            _CLAIM_AND_REGISTERED.format(claim=claim_sql),
            [*claim_params, did is not None, tenant.pk, did or "", did or "", tenant.did, now_s],
        )
        fresh, registered = cur.fetchone()
    return bool(fresh), registered


@dataclass(frozen=True)
class Delivery:
    """What the one statement found; `event_id` is set only when the event was stored."""

    nonce_fresh: bool
    registered: bool
    has_contract: bool
    queue_full: bool
    event_id: str | None


def pending_event_enqueue_claiming(
    *,
    tenant: Tenant,
    claim: tuple[str, list],
    checks_passed: bool,
    sender_did: str,
    recipient_did: str,
    payload: str,
    now_s: int,
) -> Delivery:
    """Claim the nonce and, if fresh and `checks_passed`, run the §7.2 checks and store the event."""
    claim_sql, claim_params = claim
    public_id = uuid.uuid4()
    cap = tenant.pending_queue_cap or 0
    params = [
        *claim_params,
        # registered
        checks_passed, tenant.pk, recipient_did, recipient_did, tenant.did, now_s,
        # has_contract
        checks_passed, tenant.pk, recipient_did, now_s, sender_did, recipient_did, recipient_did, sender_did,
        # queue_full from the trigger-kept counter (models.PendingQueueDepth; race accepted as in
        # services.pending_event_enqueue: concurrent senders may overshoot the cap by the number
        # of in-flight sends; nothing is ever evicted)
        checks_passed, cap, cap, tenant.pk, recipient_did,
        # ins
        public_id, tenant.pk, recipient_did, sender_did, payload, len(payload.encode("utf-8")),
    ]  # fmt: skip
    # Autocommit (dispatch never runs inside atomic): the statement is its own transaction.
    with prepared_cursor() as cur:
        cur.execute(f"WITH claim AS ({claim_sql}){_BODY}", params)
        fresh, registered, has_contract, queue_full, stored = cur.fetchone()
    event_id = str(public_id) if stored else None
    if event_id is not None:
        notify.notify_pending_event(
            tenant_id=tenant.pk, did=recipient_did, event_id=event_id, sender_did=sender_did, payload=payload
        )
    return Delivery(bool(fresh), bool(registered), bool(has_contract), bool(queue_full), event_id)
