"""The forward's storage seam: one call finds the granted recipient, applies the queue cap and stores.

The rule (UC-021 steps 6-8, AF-4): the recipient registered under `lookup_hash` in the tenant,
whose mediation is granted, is locked; if its queue holds `cap` messages or more, `reject` refuses
(nothing stored) and otherwise the oldest are evicted down to `cap - 1`; the message is inserted
with its TTL; for a DIDComm v1 connection with an HTTP endpoint (and a JSON envelope), an outbound
POST row for it as well; then the client's presence is read under its row's lock
(apps/messaging/presence.py): whether the wake should leave (tests/didcomm/app/test_forward_storage.py
checks it against one model of the rule).

`forward` is ONE prepared statement, `SELECT * FROM didcomm_forward_store(…)`, a plpgsql function
(migrations 0004, 0005, 0008): lock, read the depth, evict, insert and commit in one round trip. The
depth is the recipient's `QueueDepth` row, kept exact by statement-level triggers on the queue
(migration 0005), so the cap costs the same at any queue length. The pushes and the outbound task
are the caller's (services.forward_store), after commit.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

from apps.messaging import presence
from apps.messaging.sql import prepared_cursor

FORWARD = (
    "SELECT o_outcome, o_evicted, o_client_did, o_outbound_id, o_live"
    " FROM didcomm_forward_store(%s, %s, %s, %s, %s, %s, %s, %s, %s)"
)

STORED, UNKNOWN, FULL = "stored", "unknown", "full"


@dataclass(frozen=True)
class ForwardStored:
    """What one forward store did: `outcome` stored | unknown (no granted recipient) | full (reject)."""

    outcome: str
    evicted: int = 0
    client_did: str | None = None  # the recipient's client (whose sockets get the wake)
    outbound_id: int | None = None  # the v1 outbound row to POST, if one was made
    # When stored: whether the client may have a live socket (its presence, messaging/presence.py,
    # read under its row's lock in the storing transaction); the wake leaves only if so.
    may_have_socket: bool = False


@dataclass(frozen=True)
class ForwardRequest:
    tenant_id: int
    lookup_hash: str
    cap: int
    reject: bool
    message_id: uuid.UUID
    data: str  # the attachment data object as JSON text, stored opaque
    now: datetime
    expires_at: datetime
    outbound: bool  # make a v1 outbound row when the client is a connection with an endpoint


def forward(req: ForwardRequest) -> ForwardStored:
    """Store one forward (see the module docstring)."""
    params = [
        req.tenant_id, req.lookup_hash, req.cap, req.reject, req.message_id,
        req.data, req.now, req.expires_at, req.outbound,
    ]  # fmt: skip
    with prepared_cursor() as cur:
        cur.execute(FORWARD, params)
        outcome, evicted, client_did, outbound_id, live = cur.fetchone()
    woken = outcome == STORED and presence.may_have_socket(live)
    return ForwardStored(outcome, evicted, client_did, outbound_id, woken)
