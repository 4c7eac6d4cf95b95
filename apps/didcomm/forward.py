"""The forward of both versions: routing 2.0's and 1.0's handlers (`forward`, `forward_v1`), their
one store (`store_forward`), and the statement it runs on this app's tables (`store`, the plpgsql
function `didcomm_forward_store` whose text is `FORWARD_FUNCTION`).

`store` (UC-021 steps 6-8, AF-4) is one prepared call of the function, applied by a migration
(didcomm 0016; a change of the text is a new migration applying it with the text's new hash, which
tests/didcomm/app/test_forward_storage.py checks): the recipient registered under `lookup_hash` in
the tenant, whose mediation is granted, is locked; if its queue holds `cap` messages or more,
`reject` refuses (nothing stored) and otherwise the oldest are evicted down to `cap - 1`; the message
is inserted with its TTL; for a DIDComm v1 connection with an HTTP endpoint, an outbound POST row as
well; then the client's presence and wake state are read under its row's lock. That row is
messaging's (apps/messaging/presence.py: the rule, the key and the statements on it, which the
function embeds: `state_under_share_lock_plpgsql`); a due wake is announced after commit
(`messaging.sql.announce_wake`). The depth is the recipient's `didcomm_queuedepth` row, kept exact
by statement-level triggers on the queue (migration 0005), so the cap costs the same at any queue
length. It stays a function because each of its statements reads in a new snapshot after the
recipient's lock: one plain statement would read the depth, the queue and the presence row as they
were when it began, before it waited for a concurrent forward to the same recipient. The
statement runs on messaging's prepared cursor (`messaging.sql.prepared_cursor`); the pushes and the
outbound task are the caller's, after commit.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.utils import timezone

from apps.didcomm.core import message_v1
from apps.didcomm.core.errors import DidcommError
from apps.didcomm.core.message import PlainMessage
from apps.didcomm.core.message_v1 import V1Message
from apps.messaging import presence, sql
from apps.messaging.notify import notify_on_commit

from . import metrics
from .models import DidcommPolicy
from .outbound import outbound_send_on_commit
from .problems import Outcome, Problem
from .protocols import Code
from .queue import wake_message
from .recipients import did_hash, lookup_form

# A stored attachment's text: compact JSON of what a client sent (parsed JSON: never circular).
_compact_json = json.JSONEncoder(separators=(",", ":"), check_circular=False).encode


def forward(ctx, msg: PlainMessage) -> Outcome:
    """UC-021: find body.next among granted recipients, store attachment[0].data opaque, 202."""
    next_did = msg.body.get("next")
    if not isinstance(next_did, str) or not next_did:
        raise Problem(Code.BAD_BODY, "forward needs body.next")
    if not msg.attachments or not isinstance(msg.attachments[0].get("data"), dict):
        raise Problem(Code.BAD_BODY, "forward needs one attachment with data")
    data = msg.attachments[0]["data"]
    if not (isinstance(data.get("json"), dict) or isinstance(data.get("base64"), str)):
        raise Problem(Code.BAD_BODY, "forward attachment data must be json or base64")
    store_forward(ctx, next_did, {k: data[k] for k in ("json", "base64") if k in data})
    return Outcome()


def forward_v1(ctx, msg: V1Message) -> Outcome:
    """Routing 1.0: store `msg` for the key `to` names (base58 or did:key) before answering;
    delivery follows."""
    to, inner = msg.get("to"), msg.get("msg")
    if not isinstance(to, str) or not to:
        raise Problem(Code.BAD_BODY, "forward needs to")
    if not isinstance(inner, dict):
        raise Problem(Code.BAD_BODY, "forward needs msg (an envelope object)")
    try:
        target = message_v1.key_to_did_key(to)
    except DidcommError:
        target = to  # a DID names a recipient registered as that DID
    store_forward(ctx, target, {"json": inner})
    return Outcome()


def store_forward(ctx, next_did: str, data: dict) -> str:
    """A forward's store, v1 and v2 (UC-021 steps 6-8, AF-4): the attachment `data` queued for the
    granted recipient `next_did` names (any of its forms), durably, before any answer or push;
    counted and noted for the log line; its message id. The problem report when nobody here
    mediates it or its queue is full under the `reject` policy.

    One round trip (`store`). When the recipient's client is a DIDComm v1
    connection with an HTTP endpoint (ACA-Py), the stored message is also queued for an outbound
    POST of `data.json` unchanged. The wake (only if the client may have a live socket) and the
    outbound task leave after commit.
    """
    try:
        form = lookup_form(next_did)
    except DidcommError:
        form = None
    text = _compact_json(data)
    now = timezone.now()
    message_id = uuid.uuid4()
    policy = ctx.policy
    done = None
    if form is not None:
        done = store(
            ForwardRequest(
                tenant_id=ctx.tenant.pk,
                lookup_hash=did_hash(form),
                cap=policy.queue_cap,
                reject=policy.overflow == DidcommPolicy.Overflow.REJECT,
                message_id=message_id,
                data=text,
                now=now,
                expires_at=now + timedelta(hours=policy.message_ttl_hours),
                outbound=isinstance(data.get("json"), dict),
            )
        )
    if done is None or done.outcome == UNKNOWN:
        raise Problem(Code.NOT_FOUND, "Recipient not registered with this mediator")
    if done.outcome == FULL:
        raise Problem(Code.STORAGE_FULL, "recipient queue is full", 507)
    mid = str(message_id)
    if done.may_have_socket and done.client_did:  # most clients have no live socket: then no wake leaves
        notify_on_commit(tenant_id=ctx.tenant.pk, did=done.client_did, message=wake_message(mid, text))
    if done.outbound_id is not None:
        outbound_send_on_commit(done.outbound_id)
    metrics.FORWARDED.inc()
    metrics.STORED.inc()
    if done.evicted:
        metrics.EVICTED.inc(done.evicted)
        ctx.code = "EVICTED"
    ctx.extra.update(message_id=mid, evicted=done.evicted)
    return mid


# --- the statement --------------------------------------------------------------------------

FORWARD_FUNCTION = """CREATE OR REPLACE FUNCTION didcomm_forward_store(
    p_tenant bigint, p_lookup varchar, p_cap integer, p_reject boolean, p_message_id uuid,
    p_data text, p_now timestamptz, p_expires timestamptz, p_outbound boolean
) RETURNS TABLE (o_outcome text, o_evicted integer, o_client_did text, o_outbound_id bigint, o_state integer,
    o_subject text)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_recipient bigint;
    v_mediation bigint;
    v_client text;
    v_connection bigint;
    v_endpoint text;
    v_depth bigint;
    v_evicted integer := 0;
    v_queued bigint;
    v_outbound bigint;
    v_presence text;
    v_state integer;
BEGIN
    SELECT r.id, r.mediation_id, m.client_did, '{prefix}' || m.client_hash, m.connection_id, c.endpoint
      INTO v_recipient, v_mediation, v_client, v_presence, v_connection, v_endpoint
      FROM didcomm_recipientkey r
      JOIN didcomm_mediation m ON m.id = r.mediation_id
      LEFT JOIN didcomm_connection c ON c.id = m.connection_id
     WHERE r.tenant_id = p_tenant AND r.lookup_hash = p_lookup AND m.state = 'granted'
       FOR UPDATE OF r;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 'unknown'::text, 0, NULL::text, NULL::bigint, NULL::integer, NULL::text;
        RETURN;
    END IF;
    SELECT d.depth INTO v_depth FROM didcomm_queuedepth d WHERE d.recipient_id = v_recipient;
    v_depth := coalesce(v_depth, 0);
    IF v_depth >= p_cap THEN
        IF p_reject THEN
            RETURN QUERY SELECT 'full'::text, 0, NULL::text, NULL::bigint, NULL::integer, NULL::text;
            RETURN;
        END IF;
        -- UC-021 AF-4: FIFO eviction, the oldest first, with their v1 outbound rows (as Django's
        -- cascade would; the foreign key has no ON DELETE of its own).
        WITH gone AS (
            SELECT q.id FROM didcomm_queuedmessage q WHERE q.recipient_id = v_recipient
             ORDER BY q.id LIMIT v_depth - p_cap + 1
        ), outbound AS (
            DELETE FROM didcomm_outbound WHERE queued_id IN (SELECT id FROM gone)
        )
        DELETE FROM didcomm_queuedmessage WHERE id IN (SELECT id FROM gone);
        GET DIAGNOSTICS v_evicted = ROW_COUNT;
    END IF;
    INSERT INTO didcomm_queuedmessage
        (tenant_id, mediation_id, recipient_id, message_id, data, size, received_at, expires_at)
    VALUES (p_tenant, v_mediation, v_recipient, p_message_id, p_data, length(p_data), p_now, p_expires)
    RETURNING id INTO v_queued;
    IF p_outbound AND v_connection IS NOT NULL AND coalesce(v_endpoint, '') <> '' THEN
        INSERT INTO didcomm_outbound
            (tenant_id, connection_id, queued_id, body, attempts, last_status, next_attempt_at, expires_at, created_at)
        VALUES (p_tenant, v_connection, v_queued, '', 0, '', p_now, p_expires, p_now)
        RETURNING id INTO v_outbound;
    END IF;
    -- The client's presence and wake state (apps/messaging/presence.py, wake.py), read under its
    -- row's share lock: a socket marking the client present waits for this commit, and one that
    -- marked it first is read here. A missing row is made with nobody live and no device (a
    -- socket's write then waits for this commit too).
    {state}
    RETURN QUERY SELECT 'stored'::text, v_evicted, v_client, v_outbound, v_state, v_presence;
END $$;
""".format(
    prefix=presence.DIDCOMM_PREFIX,
    state=presence.state_under_share_lock_plpgsql(
        into="v_state", tenant="p_tenant", key="v_presence", now="extract(epoch FROM p_now)::bigint"
    ),
)

FORWARD = (
    "SELECT o_outcome, o_evicted, o_client_did, o_outbound_id, o_state, o_subject"
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
    # When stored: whether the client may have a live socket (its presence, read under its row's
    # lock in the storing transaction); the wake leaves only if so.
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


def store(req: ForwardRequest) -> ForwardStored:
    """Store one forward (see the module docstring): one round trip."""
    params = [
        req.tenant_id, req.lookup_hash, req.cap, req.reject, req.message_id,
        req.data, req.now, req.expires_at, req.outbound,
    ]  # fmt: skip
    with sql.prepared_cursor() as cur:
        cur.execute(FORWARD, params)
        outcome, evicted, client_did, outbound_id, state, subject = cur.fetchone()
    stored = outcome == STORED
    if stored and state in (presence.WAKE_DUE, presence.WOKEN):
        sql.announce_wake(tenant_id=req.tenant_id, subject=subject, state=state)
    return ForwardStored(outcome, evicted, client_did, outbound_id, stored and presence.may_have_socket(state))
