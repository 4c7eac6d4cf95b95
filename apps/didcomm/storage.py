"""The forward's storage seam: one call finds the granted recipient, applies the queue cap and stores.

The rule (UC-021 steps 6-8, AF-4): the recipient registered under `lookup_hash` in the tenant,
whose mediation is granted, is locked; if its queue holds `cap` messages or more, `reject` refuses
(nothing stored) and otherwise the oldest are evicted down to `cap - 1`; the message is inserted
with its TTL; for a DIDComm v1 connection with an HTTP endpoint (and a JSON envelope), an outbound
POST row for it as well; then the client's presence is read under its row's lock
(apps/messaging/presence.py): whether the wake should leave. Two backends give the same answers (tests/didcomm/app/test_forward_storage.py
checks both against one model of the rule):

- `PostgresForwardStore`: ONE prepared statement, `SELECT * FROM didcomm_forward_store(…)`, a
  plpgsql function (migrations 0004, 0005): lock, read the depth, evict, insert and commit in one
  round trip. The depth is the recipient's `QueueDepth` row, kept exact by statement-level
  triggers on the queue (migration 0005), so the cap costs the same at any queue length.
- `SqlForwardStore` (SQLite, the embedded default): the same steps through the ORM in a
  transaction (`select_for_update` is a no-op there; SQLite serialises writers); it counts the
  queue (SQLite has no counter triggers).

`store()` picks the backend once, from the database vendor, at first use. The pushes and the
outbound task are the caller's (services.forward_store), after commit, the same for both.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

from django.db import connection, transaction

from apps.messaging import presence
from apps.messaging.sql import prepared_cursor

from .models import Mediation, Outbound, QueuedMessage, RecipientKey, presence_key

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


class PostgresForwardStore:
    """One prepared statement per forward (see the module docstring)."""

    def forward(self, req: ForwardRequest) -> ForwardStored:
        params = [
            req.tenant_id, req.lookup_hash, req.cap, req.reject, req.message_id,
            req.data, req.now, req.expires_at, req.outbound,
        ]  # fmt: skip
        with prepared_cursor() as cur:
            cur.execute(FORWARD, params)
            outcome, evicted, client_did, outbound_id, live = cur.fetchone()
        woken = outcome == STORED and presence.may_have_socket(live)
        return ForwardStored(outcome, evicted, client_did, outbound_id, woken)


class SqlForwardStore:
    """The same rule through the ORM, in one transaction."""

    @transaction.atomic
    def forward(self, req: ForwardRequest) -> ForwardStored:
        recipient = (
            RecipientKey.objects.select_for_update(of=("self",))
            .select_related("mediation", "mediation__connection")
            .filter(tenant_id=req.tenant_id, lookup_hash=req.lookup_hash, mediation__state=Mediation.State.GRANTED)
            .first()
        )
        if recipient is None:
            return ForwardStored(UNKNOWN)
        queue = QueuedMessage.objects.filter(recipient=recipient)
        depth = queue.count()
        evicted = 0
        if depth >= req.cap:
            if req.reject:
                return ForwardStored(FULL)
            # UC-021 AF-4: FIFO eviction, the oldest first.
            oldest = list(queue.order_by("id").values_list("id", flat=True)[: depth - req.cap + 1])
            # Their v1 outbound rows go with them (the cascade), not counted as evicted messages.
            _, deleted = QueuedMessage.objects.filter(id__in=oldest).delete()
            evicted = deleted.get(QueuedMessage._meta.label, 0)
        mediation = recipient.mediation
        row = QueuedMessage.objects.create(
            tenant_id=req.tenant_id,
            mediation=mediation,
            recipient=recipient,
            message_id=req.message_id,
            data=req.data,
            size=len(req.data),
            received_at=req.now,
            expires_at=req.expires_at,
        )
        outbound_id = None
        conn = mediation.connection
        if req.outbound and conn is not None and conn.endpoint:
            outbound_id = Outbound.objects.create(
                tenant_id=req.tenant_id,
                connection=conn,
                queued=row,
                body="",
                next_attempt_at=req.now,
                expires_at=req.expires_at,
                created_at=req.now,
            ).pk
        live = presence.live_under_lock(
            tenant_id=req.tenant_id, did=presence_key(mediation.client_hash), now_s=int(req.now.timestamp())
        )
        return ForwardStored(STORED, evicted, mediation.client_did, outbound_id, live)


_chosen: list[PostgresForwardStore | SqlForwardStore] = []


def store() -> PostgresForwardStore | SqlForwardStore:
    """The backend for this deployment's database, chosen at first use."""
    if not _chosen:
        _chosen.append(PostgresForwardStore() if connection.vendor == "postgresql" else SqlForwardStore())
    return _chosen[0]
