"""Replay protection of DIDComm v2 messages (docs/didcomm.md "Replays"): a sender's message id is
claimed once, for as long as the message itself would be accepted."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from datetime import datetime
from typing import TypeVar

from django.conf import settings
from django.db import transaction

from apps.didcomm.core.message import PlainMessage
from apps.messaging import replay
from apps.tenants.models import Tenant

from .models import SeenMessage
from .problems import Problem
from .protocols import Code
from .recipients import did_hash

T = TypeVar("T")

# The replay claim on this table (messaging.replay, the one replay rule).
SEEN_CLAIM = replay.claim_statement(SeenMessage._meta.db_table, ("tenant_id", "sender_hash", "id_hash"))


def _key(tenant: Tenant, sender_did: str, message_id: str) -> tuple[int, str, str]:
    """The record's key: the sender's hash and the message id's, compared case-insensitively
    (DIDComm v2 "Message IDs")."""
    return tenant.pk, did_hash(sender_did), hashlib.sha256(message_id.lower().encode("utf-8")).hexdigest()


def seen_messages_prune(*, tenant: Tenant | None, now: datetime, dry_run: bool) -> int:
    """Delete (or count) remembered message ids past their expiry."""
    qs = replay.past(SeenMessage.objects.all(), int(now.timestamp() * 1000))
    if tenant is not None:
        qs = qs.filter(tenant=tenant)
    return qs.count() if dry_run else qs.delete()[0]


def claimed_run(tenant: Tenant, sender_did: str, message: PlainMessage, run: Callable[[], T]) -> T:
    """Replay protection of `sender_did`'s authcrypt message other than a forward (docs/didcomm.md
    "Replays"): its timing headers, then its id claimed and its handler (`run`) in ONE transaction, so that the
    message pays one commit (one WAL flush) whether its handler writes or only reads.

    The id stays claimed whatever the handler answers, as a Decentrl nonce (DCTRL-0004 §5.4): a
    client retries with a new message id. A handler's problem report commits the claim with what
    the handler did before it (each service is atomic at its boundary: a savepoint here), and a
    database error, which rolls the whole transaction back, claims the id on its own before the
    503 (messaging.replay.consumed). A replay or a timing header refused writes nothing.
    """
    now_ms = int(time.time() * 1000)
    keep_until_ms = message_lifetime_ms(message, now_ms)
    params = [*_key(tenant, sender_did, message.id), keep_until_ms, now_ms]
    failed: list[Problem] = []

    def claim_and_run() -> T:
        with transaction.atomic():
            if not replay.claim(SEEN_CLAIM, params):
                raise Problem(Code.REPLAY, "this message id was already used by its sender", 409)
            try:
                return run()
            except Problem as problem:  # the claim commits with what the handler did before it
                failed.append(problem)
        raise failed[0]

    return replay.consumed(SEEN_CLAIM, params, claim_and_run)


def message_lifetime_ms(message: PlainMessage, now_ms: int) -> int:
    """Its timing headers checked (Unix seconds), then how long its id must be remembered: until the
    message itself would be refused, its created_time out of the window or its expires_time past,
    or (neither given) for the window."""
    width_ms = settings.MEDIATOR_DIDCOMM_REPLAY_WINDOW_S * 1000
    expires_ms = None if message.expires_time is None else message.expires_time * 1000
    if expires_ms is not None and expires_ms <= now_ms:
        raise Problem(Code.EXPIRED, "message expired (expires_time)")
    created_ms = None if message.created_time is None else message.created_time * 1000
    if created_ms is not None and not replay.Window(width_ms).admits(created_ms, now_ms):
        raise Problem(
            Code.OUT_OF_WINDOW,
            f"created_time is more than {settings.MEDIATOR_DIDCOMM_REPLAY_WINDOW_S} s from the mediator's clock",
        )
    keep_until_ms = max(now_ms, created_ms or now_ms) + width_ms
    return keep_until_ms if expires_ms is None else min(keep_until_ms, expires_ms)
