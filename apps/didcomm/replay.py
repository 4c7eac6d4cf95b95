"""Replay protection of DIDComm v2 messages (docs/didcomm.md "Replays"): a sender's message id is
claimed once, for as long as the message itself would be accepted."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

from django.conf import settings
from django.db import DatabaseError, transaction

from apps.didcomm.core.message import PlainMessage
from apps.messaging import sql
from apps.tenants.models import Tenant

from .models import SeenMessage
from .problems import Problem
from .protocols import Code
from .recipients import did_hash

T = TypeVar("T")

# The replay claim (messaging.sql.replay_claim): RETURNING nothing means the sender used this id
# within its record's life, which ends at its `expires_at` (the prune's `<=`).
SEEN_CLAIM = sql.replay_claim(SeenMessage._meta.db_table, ("tenant_id", "sender_hash", "id_hash"))


def message_id_claim(*, tenant: Tenant, sender_did: str, message_id: str, keep_until: int, now: int) -> bool:
    """Record that `sender_did` used `message_id` (compared case-insensitively, DIDComm v2 "Message
    IDs") until `keep_until` (Unix s); False when it already did (a replay). Commits with the
    caller's transaction (claimed_run), or at once outside one."""
    id_hash = hashlib.sha256(message_id.lower().encode("utf-8")).hexdigest()
    # A record is past once `now` reaches its expiry: before `now + 1` in whole seconds.
    return sql.claim(SEEN_CLAIM, [tenant.pk, did_hash(sender_did), id_hash, keep_until, now + 1])


def seen_messages_prune(*, tenant: Tenant | None, now: datetime, dry_run: bool) -> int:
    """Delete (or count) remembered message ids past their expiry."""
    qs = SeenMessage.objects.filter(expires_at__lte=int(now.timestamp()))
    if tenant is not None:
        qs = qs.filter(tenant=tenant)
    return qs.count() if dry_run else qs.delete()[0]


def claimed_run(ctx: Any, message: PlainMessage, run: Callable[[Any, PlainMessage], T]) -> T:
    """Replay protection of an authcrypt message other than a forward (docs/didcomm.md "Replays"):
    its id claimed, then the handler (`run`), in ONE transaction, so that the message pays one commit (one
    WAL flush) whether its handler writes or only reads.

    The id stays claimed whatever the handler answers, as a Decentrl nonce (DCTRL-0004 §5.4): a
    client retries with a new message id. A handler's problem report commits the claim with what
    the handler did before it (each service is atomic at its boundary: a savepoint here), and a
    database error, which rolls the whole transaction back, claims the id on its own before the
    503, as apps/decentrl/storage.py does for its nonce. A replay or a timing header refused
    writes nothing.
    """
    failed: Problem | None = None
    keep: tuple[int, int] | None = None
    try:
        with transaction.atomic():
            keep = claim_message_id(ctx, message)
            try:
                outcome = run(ctx, message)
            except Problem as problem:
                failed = problem
    except DatabaseError:
        if keep is not None:  # the id was fresh: claim it again, on its own
            try:
                message_id_claim(
                    tenant=ctx.tenant,
                    sender_did=ctx.caller_did,
                    message_id=message.id,
                    keep_until=keep[0],
                    now=keep[1],
                )
            except DatabaseError:
                pass
        raise
    if failed is not None:
        raise failed
    return outcome


def claim_message_id(ctx: Any, message: PlainMessage) -> tuple[int, int]:
    """Its timing headers first, then the message's id claimed for its sender (in the caller's
    transaction: `claimed_run`). A record lives until the message itself would be refused: its
    created_time out of the window, or its expires_time past, or (neither given) for the window.
    Returns the claim's (keep_until, now)."""
    now = int(time.time())
    window = settings.MEDIATOR_DIDCOMM_REPLAY_WINDOW_S
    if message.expires_time is not None and message.expires_time <= now:
        raise Problem(Code.EXPIRED, "message expired (expires_time)")
    created = message.created_time
    if created is not None and abs(created - now) > window:
        raise Problem(Code.OUT_OF_WINDOW, f"created_time is more than {window} s from the mediator's clock")
    keep_until = max(now, created or now) + window
    if message.expires_time is not None:
        keep_until = min(keep_until, message.expires_time)
    if not message_id_claim(
        tenant=ctx.tenant, sender_did=ctx.caller_did, message_id=message.id, keep_until=keep_until, now=now
    ):
        raise Problem(Code.REPLAY, "this message id was already used by its sender", 409)
    return keep_until, now
