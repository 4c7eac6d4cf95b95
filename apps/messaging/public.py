"""Public channel services (DCTRL-0007, docs/protocol-readings.md §8): publish, delete, list, prune.

Readings this module implements (docs/public-channels.md):
- Caps are per tenant; 0 means "no tenant cap" (the envelope's structural caps still apply).
  Event over `public_event_max_bytes` (UTF-8 bytes of `event`) is PAYLOAD_TOO_LARGE; too many
  tags, a tag over `max_tag_length` or a channel id over `public_channel_id_max_length`
  (characters) is INVALID_COMMAND.
- The publish rate counts the publisher's events created in the last 60 s, deleted ones included,
  so that publish-then-delete cannot dodge the cap. Over it: 429 RATE_LIMITED with Retry-After.
- Deleting someone else's (or an unknown, or an already deleted) id is a silent no-op, like
  ACKNOWLEDGE (DCTRL-0004 §8.4): only the publisher's own events can ever be deleted.
- Lists are newest first by arrival (the signed `timestamp` is publisher-chosen and not trusted
  for ordering), and only a registered publisher's events are listed.
"""

from __future__ import annotations

import math
import uuid
from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from apps.tenants.models import Tenant
from apps.tenants.resolver import resolve_did
from apps.wire.did import DidError
from apps.wire.envelope import MAX_DID_LEN, Pagination
from apps.wire.errors import ErrorCode, ProtocolError
from apps.wire.public import public_event_signature_ok

from .models import PublicEvent
from .services import Page, is_registered
from .sql import serialise

RATE_WINDOW = timedelta(seconds=60)
# Tombstones only matter for the rate window; keep them a little longer than it.
TOMBSTONE_RETENTION = timedelta(minutes=5)


def _bad(detail: str) -> ProtocolError:
    return ProtocolError(ErrorCode.INVALID_COMMAND, detail)


def _has_nul(*values: str) -> bool:
    # PostgreSQL text and jsonb cannot store U+0000; refuse it at the door instead of a DB error.
    return any("\x00" in v for v in values)


def _check_caps(tenant: Tenant, ev: dict) -> None:
    """Tenant caps on one public event (shape was already validated by the envelope)."""
    channel_id, event, tags = ev["channel_id"], ev["event"], ev["tags"]
    if tenant.public_channel_id_max_length and len(channel_id) > tenant.public_channel_id_max_length:
        raise _bad("channel_id too long")
    if tenant.public_max_tags and len(tags) > tenant.public_max_tags:
        raise _bad("too many tags on one public event")
    if tenant.max_tag_length and any(len(t) > tenant.max_tag_length for t in tags):
        raise _bad("public tag too long")
    if _has_nul(channel_id, event, *tags):
        raise _bad("NUL characters are not accepted")
    if tenant.public_event_max_bytes and len(event.encode("utf-8")) > tenant.public_event_max_bytes:
        raise ProtocolError(ErrorCode.PAYLOAD_TOO_LARGE, "public event too large")


def _check_rate(tenant: Tenant, did: str) -> None:
    cap = tenant.public_publish_per_minute
    if not cap:
        return
    now = timezone.now()
    # The cap-th newest publish inside the window: once it leaves the window, one more fits.
    blocking = (
        PublicEvent.objects.published_by(tenant, did)
        .filter(created_at__gt=now - RATE_WINDOW)
        .order_by("-created_at")
        .values_list("created_at", flat=True)[cap - 1 : cap]
    )
    for created_at in blocking:
        wait = (created_at + RATE_WINDOW - now).total_seconds()
        raise ProtocolError(ErrorCode.RATE_LIMITED, "public publish rate", retry_after=max(1, math.ceil(wait)))


@transaction.atomic
def public_event_publish(*, tenant: Tenant, publisher_did: str, public_event: dict) -> PublicEvent:
    """Verify and store one signed public event verbatim (DCTRL-0007 §5, §8)."""
    _check_caps(tenant, public_event)
    try:
        publisher = resolve_did(publisher_did)
    except DidError as exc:  # authenticated already, so this cannot normally happen
        raise ProtocolError(ErrorCode.SENDER_NOT_FOUND) from exc
    if not public_event_signature_ok(public_event, publisher.signing_key):
        raise ProtocolError(ErrorCode.INVALID_SIGNATURE, "public event signature")
    # Serialise publishes of one (tenant, publisher) until this transaction commits, so that
    # concurrent publishes of one DID count each other and the rate cap is exact (an advisory lock
    # per publisher: different publishers never wait).
    serialise(f"public:{tenant.pk}:{publisher_did}")
    _check_rate(tenant, publisher_did)
    return PublicEvent.objects.create(
        tenant=tenant,
        publisher_did=publisher_did,
        channel_id=public_event["channel_id"],
        event=public_event["event"],
        event_bytes=len(public_event["event"].encode("utf-8")),
        tags=list(public_event["tags"]),
        timestamp=int(public_event["timestamp"]),
        signature=public_event["signature"],
    )


def public_event_delete(*, tenant: Tenant, publisher_did: str, public_event_id: str) -> bool:
    """Delete the publisher's own event (content wiped, tombstone kept); others' ids are a no-op."""
    try:
        pid = uuid.UUID(public_event_id)
    except (ValueError, AttributeError, TypeError):
        return False
    # One conditional UPDATE: the publisher filter is the authorization, and a repeat is a no-op.
    changed = (
        PublicEvent.objects.published_by(tenant, publisher_did)
        .live()
        .filter(public_id=pid)
        .update(deleted_at=timezone.now(), event="", event_bytes=0, tags=[], signature="")
    )
    return changed == 1


def public_events_list(*, tenant: Tenant, did: str, channel_id: str | None, page: Pagination) -> Page:
    """A registered publisher's live events, newest first; anyone else's feed is empty."""
    if len(did) > MAX_DID_LEN or _has_nul(did) or not is_registered(tenant=tenant, did=did):
        return Page([], 0)
    qs = PublicEvent.objects.published_by(tenant, did).live()
    if channel_id is not None:
        qs = qs.filter(channel_id=channel_id)
    rows = qs.order_by("-id").values_list("public_id", "channel_id", "event", "tags", "timestamp", "signature")[
        page.offset : page.offset + page.page_size
    ]
    items = [
        {
            "id": str(pid),
            "publisher_did": did,
            "channel_id": ch,
            "event": event,
            "tags": tags,
            "timestamp": ts,
            "signature": sig,
        }
        for pid, ch, event, tags, ts, sig in rows
    ]
    # A short first page is the whole feed: skip the COUNT.
    total = len(items) if page.offset == 0 and len(items) < page.page_size else qs.count()
    return Page(items, total)


def public_tombstones_prune(
    *, older_than: timedelta = TOMBSTONE_RETENTION, tenant=None, now=None, dry_run: bool = False
) -> int:
    """Drop deleted events' tombstones once they no longer count for the publish rate."""
    qs = PublicEvent.objects.filter(deleted_at__lt=(now or timezone.now()) - older_than)
    if tenant is not None:
        qs = qs.filter(tenant=tenant)
    return qs.count() if dry_run else qs.delete()[0]
