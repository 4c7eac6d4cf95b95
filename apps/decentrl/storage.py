"""The command path's nonce claim, and the statements that claim it for commands other than
TWO_WAY_PRIVATE: one call per command claims its nonce and returns flags.

Each call is ONE prepared statement, the nonce claim (`CLAIM`, messaging's one replay claim) first
(tests/decentrl/test_storage.py checks the calls against one model of the rules). The claim is a
data-modifying CTE, executed to completion whatever the rest of the statement says, so the nonce
is consumed even when a later check fails; the checks only gate what follows. If the statement
itself fails (a database error) nothing of it commits: the dispatcher then claims the nonce on its
own (`messaging.replay.consumed`) before the error goes up (docs/protocol-readings.md §3: consumed after every
outcome).

TWO_WAY_PRIVATE's statement is messaging's (`sql.deliver`: `CLAIM`, then the §7.2 checks, the
INSERT, the recipient's presence); the dispatcher runs it with this claim. DIRECT_AUTHENTICATED and
ONE_WAY_PUBLIC: the claim and the registration check (`sql.REGISTERED`). QUERY_EVENTS' page comes from here too,
read by the same call after the claim (`read`, an `EventsQuery`) and only when the nonce was fresh
and the sender registered: the tags and time-range filters put eventquery's page statement in the
claim's statement (one round trip), every other filter runs the ORM query `services.events_query`
after the claim; tests/messaging/test_eventquery.py checks both against a brute force.

The dispatcher (apps/decentrl/dispatch.py) never runs inside `atomic`: each statement here commits by itself.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from functools import cache
from typing import NamedTuple

from apps.messaging import eventquery, replay
from apps.messaging.services import Page, events_query
from apps.messaging.sql import REGISTERED, Found, prepared_cursor, registered_params
from apps.tenants.models import Tenant
from apps.wire.envelope import EventFilter, Pagination

from .models import Nonce

_NONCE = Nonce._meta.db_table

# The claim (messaging.replay, the one replay rule): a row comes back only for a fresh pair, or one whose
# record has expired (kept through `expires_at` inclusive, DCTRL-0004 §5.4). The pair is the
# deployment's, not the tenant's: no envelope names the mediator it is for (an AUTHENTICATE frame
# neither), so a command or frame accepted by one tenant is refused by every other tenant of the
# deployment (docs/protocol-notes.md, "Nonces"). The tenant is kept with the record.
CLAIM = replay.claim_statement(_NONCE, ("sender_did", "nonce"), scope=("tenant_id",))

_CLAIM_CHECKING_REGISTRATION = (
    f"WITH claim AS ({CLAIM}) SELECT EXISTS(SELECT 1 FROM claim),"
    f" CASE WHEN %s AND EXISTS(SELECT 1 FROM claim) THEN {REGISTERED} ELSE false END"
)

# The same claim and registration check, then QUERY_EVENTS' page (eventquery.page_statement) in
# the same statement. `chk` is computed once (MATERIALIZED); the page's `WHERE (SELECT registered
# FROM chk)` is an uncorrelated sub-select, which PostgreSQL runs first as a One-Time Filter over
# the page: after a replay or for an unregistered sender the page is never read. One row of NULLs
# follows the flags when the page is empty or was not read.
_CLAIM_CHECKING_REGISTRATION_AND_READING = (
    f"WITH claim AS ({CLAIM}), chk AS MATERIALIZED (SELECT c.fresh, CASE WHEN c.fresh THEN {REGISTERED} ELSE false END"
    " AS registered FROM (SELECT EXISTS(SELECT 1 FROM claim) AS fresh) c)"
    " SELECT chk.fresh, chk.registered, p.public_id, p.payload, p.encrypted_tags, p.timestamp, p.total"
    " FROM chk LEFT JOIN (SELECT * FROM ({page}) q WHERE (SELECT registered FROM chk)) p ON true"
    " ORDER BY p.timestamp, p.event_id"
)


@cache
def _claim_and_read_sql(page_sql: str) -> str:
    """The claim, the check and the page as one text: built once per page text (eventquery builds
    one page text per filter shape), so every query of a shape passes psycopg the same string."""
    return _CLAIM_CHECKING_REGISTRATION_AND_READING.format(page=page_sql)


def _by_statement(flt: EventFilter) -> bool:
    """Whether eventquery's statements serve this filter (tags, time range); the
    participant and unprocessed filters take the ORM query."""
    return flt.participant_did is None and not flt.unprocessed_only


def _items(rows: list[tuple]) -> list[dict]:
    """QUERY_EVENTS' items from (public_id, payload, tags, timestamp) rows, the tags as PostgreSQL's
    JSON text (Django loads jsonb as text): parsed in one call for the whole page, as one JSON
    array of the rows' arrays, instead of one parse per row."""
    texts = [r[2] for r in rows]
    tags = json.loads(f"[{','.join(texts)}]") if all(isinstance(t, str) for t in texts) else texts
    return [
        {"id": str(pid), "payload": p, "encrypted_tags": t, "timestamp": ts}
        for (pid, p, _, ts), t in zip(rows, tags, strict=True)
    ]


class NonceClaim(NamedTuple):
    """The (sender, nonce) pair to consume for `tenant_id`, kept until `expires_at_ms` (DCTRL-0004
    §5.4): `CLAIM`'s parameters, in its order (messaging.replay's rule)."""

    tenant_id: int
    sender_did: str
    nonce: str
    expires_at_ms: int
    now_ms: int


@dataclass(frozen=True)
class EventsQuery:
    """QUERY_EVENTS' read (DCTRL-0004 §8.10), run by the storage call after a fresh claim of a
    registered `owner_did`."""

    owner_did: str
    flt: EventFilter
    page: Pagination


def claim(nonce: NonceClaim) -> bool:
    """Consume the pair on its own: True if it was fresh."""
    return replay.claim(CLAIM, nonce)


def _claiming(statement: str, params: list) -> tuple:
    with prepared_cursor() as cur:
        cur.execute(statement, params)
        return cur.fetchone()


def claim_checking_registration(
    nonce: NonceClaim, *, tenant: Tenant, did: str | None, now_s: int, read: EventsQuery | None = None
) -> Found:
    """Claim the pair and, if it was fresh and `did` is given, whether `did` is registered; with
    `read` (whose owner is `did`), then its page. One statement, unless the read takes the ORM
    query or needs a COUNT (an empty page past the end, a full page without tags)."""
    reg = registered_params(tenant_id=tenant.pk, tenant_did=tenant.did, did=did or "", now_s=now_s)
    if read is not None and _by_statement(read.flt):
        return _claim_and_read(nonce, reg, tenant, read)
    fresh, registered = _claiming(_CLAIM_CHECKING_REGISTRATION, [*nonce, did is not None, *reg])
    found = Found(bool(fresh), registered=bool(registered))
    if read is None or not found.registered:
        return found
    return replace(found, page=events_query(tenant=tenant, owner_did=read.owner_did, flt=read.flt, page=read.page))


def _claim_and_read(nonce: NonceClaim, reg: list, tenant: Tenant, read: EventsQuery) -> Found:
    owner_did, tags = read.owner_did, list(read.flt.encrypted_tags)
    after, before = read.flt.after_timestamp, read.flt.before_timestamp
    offset, limit = read.page.offset, read.page.page_size
    page_sql, page_params = eventquery.page_statement(
        tenant=tenant, owner_did=owner_did, after=after, before=before, tags=tags, offset=offset, limit=limit
    )
    with prepared_cursor() as cur:
        cur.execute(_claim_and_read_sql(page_sql), [*nonce, *reg, *page_params])
        rows = cur.fetchall()
    fresh, registered = bool(rows[0][0]), bool(rows[0][1])
    if not registered:
        return Found(fresh)
    page = [r[2:] for r in rows if r[2] is not None]
    total = eventquery.page_total(
        page, tenant=tenant, owner_did=owner_did, after=after, before=before, tags=tags, offset=offset, limit=limit
    )
    return Found(True, registered=True, page=Page(_items([r[:4] for r in page]), total))
