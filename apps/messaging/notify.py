"""The one notify helper: services announce real-time pushes here, and they leave only after commit.

The realtime app (to our right in the layering) connects a receiver to `push_requested`; without
it, pushes are simply dropped, which is safe because a push is a wake-up, never the only copy.
The push app connects one to `wake_requested` (a stored message for a subject with a push device
and no open socket: wake.py), the same way, and one to `registrations_ended`.
"""

from __future__ import annotations

from django.db import transaction
from django.dispatch import Signal

# Sent with tenant_id: int, did: str, message: dict
push_requested = Signal()
# Sent after commit with tenant_id: int, count: int (events newly acknowledged; metrics count them).
pending_events_acknowledged = Signal()
# Sent by the realtime app with count: int when it drops pushes (its queue is full); metrics count
# them. The events themselves are stored: a dropped push delays a wake-up, nothing is lost.
pushes_dropped = Signal()
# Sent after commit with tenant_id: int, subject: str, due: bool, even_if_live: bool. due: a wake
# is to be claimed (wake.claim); not due: the store found the subject woken already (coalesced).
wake_requested = Signal()
# Sent with tenant_id: int, dids: list[str] when Decentrl identities' registrations are gone (the
# purge removed their last registration contracts and none is live): the push app forgets their
# devices. DIDComm's grants end in the front door, which calls the push app itself.
registrations_ended = Signal()


def notify_on_commit(*, tenant_id: int, did: str, message: dict) -> None:
    """Queue a push to every socket of (tenant, did), sent once the current transaction commits."""
    transaction.on_commit(lambda: push_requested.send(sender=None, tenant_id=tenant_id, did=did, message=message))


def notify_pending_event(*, tenant_id: int, did: str, event_id: str, sender_did: str, payload: str) -> None:
    """PENDING_EVENTS to the event recipient (DCTRL-0004 §10.6)."""
    notify_on_commit(
        tenant_id=tenant_id,
        did=did,
        message={"type": "PENDING_EVENTS", "events": [{"id": event_id, "sender_did": sender_did, "payload": payload}]},
    )


def notify_contracts_updated(*, tenant_id: int, did: str) -> None:
    """CONTRACTS_UPDATED to `did` (DCTRL-0004 §10.6)."""
    notify_on_commit(tenant_id=tenant_id, did=did, message={"type": "CONTRACTS_UPDATED"})


def announce_acknowledged(*, tenant_id: int, count: int) -> None:
    """Tell listeners (metrics) that `count` pending events were delivered, once committed."""
    if count > 0:
        transaction.on_commit(lambda: pending_events_acknowledged.send(sender=None, tenant_id=tenant_id, count=count))


def wake_on_commit(*, tenant_id: int, subject: str, due: bool, even_if_live: bool = False) -> None:
    """Announce, once committed, that a message was stored for a subject with a push device and
    no open socket (`due`: its wake is to be claimed; else it was coalesced)."""
    transaction.on_commit(
        lambda: wake_requested.send(
            sender=None, tenant_id=tenant_id, subject=subject, due=due, even_if_live=even_if_live
        )
    )
