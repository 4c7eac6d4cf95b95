"""The DIDComm message queue (v1 and v2 share it): messages queued to a client by the mediator
itself, Pickup reads and acknowledgements, the TTL purge, and the wake a client's live sockets get
after a message is stored (a push is a wake-up, never the only copy). A forward's store is the
forward handlers' (forward.store_forward: one call of the forward's statement)."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.db import transaction
from django.db.models import Count, Max, Min, Sum
from django.dispatch import Signal
from django.utils import timezone

from apps.messaging.notify import notify_on_commit
from apps.push import services as push
from apps.tenants.models import Tenant

from .models import DidcommPolicy, Mediation, QueuedMessage, RecipientKey
from .recipients import did_hash

# The wake-up a socket in live mode gets when a message for one of its client's recipients is stored:
# {"type": WAKE, "ids": [id], "items": [{"id": id, "data": <the stored JSON text>}]}, `items` left
# out when the text is over WAKE_ITEMS_MAX (the socket then reads the queue).
WAKE = "DIDCOMM_WAKE"
WAKE_ITEMS_MAX = 64 * 1024
# To a client's live sockets when its grant is revoked or its mediator identity rotated: they load
# their push state again (apps/didcomm/consumers.py) before the next push.
LIVE_REFRESH = "DIDCOMM_LIVE_REFRESH"
# Rows per DELETE of the TTL purge (as apps/messaging/maintenance.py: short locks on a big table).
PURGE_BATCH = 5_000
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


# A queued message as a read returns it: (message id, stored data, received at).
Row = tuple[str, dict, datetime]

# The one place that says "this client's live delivery stayed unacknowledged" (docs/didcomm.md,
# "Live deliveries are acknowledged"): sent, outside any transaction, by the socket that pushed
# `message_ids` live and found them still queued once MEDIATOR_DIDCOMM_LIVE_ACK_TIMEOUT_S passed
# without a messages-received. Sent with tenant_id: int, mediation_id: int, client_did: str,
# message_ids: list[str]. A wake-up sender (a push to the client's phone) connects a receiver;
# without one the signal is a no-op: the messages stay queued and are delivered again either way.
live_unacknowledged = Signal()


def wake_message(message_id: str, text: str) -> dict:
    """The after-commit wake of the sockets of a stored message's client."""
    wake: dict = {"type": WAKE, "ids": [message_id]}
    if len(text) <= WAKE_ITEMS_MAX:  # the stored text is ASCII (json.dumps escapes the rest): length = bytes
        wake["items"] = [{"id": message_id, "data": text}]
    return wake


def enqueue_for_client(*, tenant: Tenant, policy: DidcommPolicy, mediation: Mediation, data: dict) -> str:
    """Queue a message of ours to the client itself (no recipient DID, no cap): a rotation announcement."""
    text = json.dumps(data, separators=(",", ":"))
    now = timezone.now()
    row = QueuedMessage.objects.create(
        tenant=tenant,
        mediation=mediation,
        recipient=None,
        data=text,
        size=len(text),
        received_at=now,
        expires_at=now + timedelta(hours=policy.message_ttl_hours),
    )
    message_id = str(row.message_id)
    notify_on_commit(tenant_id=tenant.pk, did=mediation.client_did, message=wake_message(message_id, text))
    return message_id


def _queue(mediation: Mediation, recipient: RecipientKey | None):
    qs = QueuedMessage.objects.filter(mediation=mediation)
    return qs.filter(recipient=recipient) if recipient is not None else qs


def _picked_up(mediation: Mediation) -> None:
    """The client reads or acknowledges its queue: it is awake, a next message may wake it again
    (docs/push.md, "When a wake leaves"). Every pickup path reads through here."""
    push.picked_up(tenant_id=mediation.tenant_id, subject=push.subject_for_mediation(mediation.client_hash))


def messages_rows(
    *, mediation: Mediation, recipient: RecipientKey | None, limit: int, ids: list[str] | None = None
) -> list[Row]:
    """Up to `limit` queued messages, oldest first: (message id, stored data, received at); they stay
    queued. The client read its queue: a pickup."""
    _picked_up(mediation)
    return _rows(_queue(mediation, recipient), limit=limit, ids=ids)


def _rows(qs, *, limit: int, ids: list[str] | None) -> list[Row]:
    qs = qs.order_by("id")
    if ids is not None:
        qs = qs.filter(message_id__in=_uuids(ids))
    rows = qs.values_list("message_id", "data", "received_at")[:limit]
    return [(str(mid), json.loads(data), at) for mid, data, at in rows]


def messages_batch(
    *, mediation: Mediation, recipient: RecipientKey | None, limit: int, ids: list[str] | None = None
) -> list[dict]:
    """Up to `limit` queued messages, oldest first, as Pickup 3.0 attachments (they stay queued)."""
    rows = messages_rows(mediation=mediation, recipient=recipient, limit=limit, ids=ids)
    return [{"id": mid, "data": data} for mid, data, _ in rows]


@dataclass(frozen=True)
class Figures:
    """What a Pickup status says of a queue: how many messages, the oldest and newest arrival
    (None when empty), their stored bytes."""

    count: int
    oldest: datetime | None
    newest: datetime | None
    total_bytes: int


def messages_figures(*, mediation: Mediation, recipient: RecipientKey | None) -> Figures:
    """The client's queue (or one recipient's) in one aggregate query."""
    _picked_up(mediation)
    agg = _queue(mediation, recipient).aggregate(
        n=Count("id"), oldest=Min("received_at"), newest=Max("received_at"), size=Sum("size")
    )
    return Figures(agg["n"], agg["oldest"], agg["newest"], agg["size"] or 0)


def messages_status(*, mediation: Mediation, recipient: RecipientKey | None) -> dict:
    """Pickup 3.0 status figures of the client's queue (or one recipient's), times in epoch seconds."""
    figures = messages_figures(mediation=mediation, recipient=recipient)
    out: dict = {"message_count": figures.count}
    if figures.count and figures.oldest is not None and figures.newest is not None:
        now = timezone.now()
        out.update(
            longest_waited_seconds=int((now - figures.oldest).total_seconds()),
            newest_received_time=int(figures.newest.timestamp()),
            oldest_received_time=int(figures.oldest.timestamp()),
            total_bytes=figures.total_bytes,
        )
    return out


def epoch_ms(at: datetime) -> int:
    """UTC epoch milliseconds (Pickup 4.0's times), exact: no float rounding."""
    return (at - EPOCH) // timedelta(milliseconds=1)


def live_unacked(*, tenant_id: int, mediation_id: int, client_did: str, ids: list[str]) -> list[Row]:
    """Of `ids`, pushed live to the client and not acknowledged within the ack timeout, the ones
    still queued (oldest first), announced once as `live_unacknowledged` and a wake of the client's
    devices asked for (its socket may be asleep: docs/push.md); the rest were acknowledged (or
    expired, evicted) and are never delivered again. The read is the tenant's own, and it is the
    socket's check, not the client reading its queue: no pickup (so the wake asked for stays
    coalesced across the resends)."""
    queued = QueuedMessage.objects.filter(tenant_id=tenant_id, mediation_id=mediation_id)
    rows = _rows(queued, limit=len(ids), ids=ids)
    if rows:
        live_unacknowledged.send(
            sender=None,
            tenant_id=tenant_id,
            mediation_id=mediation_id,
            client_did=client_did,
            message_ids=[mid for mid, _, _ in rows],
        )
        push.wake_request(tenant_id=tenant_id, subject=push.subject_for_mediation(did_hash(client_did)))
    return rows


def _uuids(ids: list) -> list[uuid.UUID]:
    out = []
    for value in ids:
        try:
            out.append(uuid.UUID(str(value)))
        except ValueError:
            continue  # not one of ours: nothing to remove
    return out


@transaction.atomic
def messages_received(*, mediation: Mediation, ids: list) -> int:
    """messages-received: the client's listed messages leave the queue; returns how many did."""
    _picked_up(mediation)
    return _delete_queued(QueuedMessage.objects.filter(mediation=mediation, message_id__in=_uuids(ids)))


def _delete_queued(qs) -> int:
    """Delete the queued messages of `qs`; how many of them: a v1 message waiting for its outbound
    POST takes its Outbound row along (on_delete CASCADE), which Django's total would count too."""
    _, per_model = qs.delete()
    return per_model.get(QueuedMessage._meta.label, 0)


def messages_purge_expired(*, tenant: Tenant | None, now: datetime, dry_run: bool) -> int:
    """TTL expiry (UC-021 AF-5): delete (or count) queued messages past `expires_at`, in batches."""
    qs = QueuedMessage.objects.filter(expires_at__lte=now)
    if tenant is not None:
        qs = qs.filter(tenant=tenant)
    if dry_run:
        return qs.count()
    total = 0
    while True:
        batch = list(qs.values_list("id", flat=True)[:PURGE_BATCH])
        if not batch:
            return total
        total += _delete_queued(QueuedMessage.objects.filter(id__in=batch))


def queue_sizes() -> list[tuple[str, int]]:
    """(tenant slug, queued messages) for every tenant with a queue: the per-tenant gauge."""
    rows = QueuedMessage.objects.values("tenant__slug").annotate(n=Count("id")).order_by("tenant__slug")
    return [(r["tenant__slug"], r["n"]) for r in rows]
