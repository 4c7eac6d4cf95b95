"""Contracts, pending contract requests, pending events, stored events and their encrypted tags.

Every row belongs to a tenant and, where it has one, an owner DID; every query filters on both.
Public ids are random UUIDs (DCTRL-0004 §12.6); the bigint pk only orders rows by arrival.
"""

from __future__ import annotations

import uuid

from django.db import models
from django.utils import timezone


class PublicRow(models.Model):
    """A row clients name by its random `public_id`; it reads as its kind and that id, metadata only
    (never payloads, tags or signatures)."""

    public_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)

    class Meta:
        abstract = True

    def __str__(self) -> str:
        return f"{self._meta.verbose_name} {self.public_id}"


class OwnedQuerySet(models.QuerySet):
    def owned_by(self, tenant, did: str):
        return self.filter(tenant=tenant, owner_did=did)


class Owned(PublicRow):
    """A row stored on behalf of its owner DID, who alone reads it."""

    owner_did = models.CharField(max_length=2048)

    class Meta:
        abstract = True


class ContractQuerySet(OwnedQuerySet):
    def live_registrations(self, tenant, now_s: int):
        """Every live registration contract with this tenant (docs/protocol-readings.md §4): owned by its
        requestor, the tenant's DID as recipient. The rows of what sql.REGISTERED asks for one DID."""
        return self.filter(
            tenant=tenant, requestor_did=models.F("owner_did"), recipient_did=tenant.did, expires_at__gt=now_s
        )

    def registrations(self, tenant, did: str, now_s: int):
        """Live registration contracts of `did` with this tenant."""
        return self.live_registrations(tenant, now_s).filter(owner_did=did)


class Contract(Owned):
    """A SignedCommunicationContract stored on behalf of `owner_did`, verbatim as received."""

    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.CASCADE, related_name="contracts", db_index=False)
    requestor_did = models.CharField(max_length=2048)
    recipient_did = models.CharField(max_length=2048)
    expires_at = models.BigIntegerField(help_text="Unix seconds")
    contract_hash = models.CharField(max_length=64)
    signed_contract = models.TextField(help_text="canonical JSON of the signed contract")
    created_at = models.DateTimeField(auto_now_add=True)

    objects = ContractQuerySet.as_manager()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "owner_did", "contract_hash"], name="contract_unique_per_owner"),
        ]
        indexes = [
            # registration check, TWO_WAY_PRIVATE contract check, and DID filter
            models.Index(
                fields=["tenant", "owner_did", "requestor_did", "recipient_did", "expires_at"], name="contract_parties"
            ),
            models.Index(fields=["tenant", "owner_did", "recipient_did", "requestor_did"], name="contract_parties_rev"),
            # QUERY_COMMUNICATION_CONTRACTS listing by arrival
            models.Index(fields=["tenant", "owner_did", "id"], name="contract_owner_seq"),
            # identity quota: distinct owners of live registrations (recipient = the tenant's DID). The owner
            # before the expiry: a registration check planned generically (a prepared statement) may take
            # this index instead of contract_parties, and must then find one owner's rows, not range over
            # every live registration of the tenant.
            models.Index(fields=["tenant", "recipient_did", "owner_did", "expires_at"], name="contract_registrations"),
        ]

    def __str__(self) -> str:
        return f"contract {self.public_id} (expires {self.expires_at})"


class AwaitingQuerySet(models.QuerySet):
    def awaiting(self, tenant, did: str):
        """The recipient's unacknowledged rows (its `unacknowledged` index)."""
        return self.filter(tenant=tenant, recipient_did=did, acknowledged_at__isnull=True)

    def acknowledge(self, tenant, did: str, ids: list[uuid.UUID], **also) -> int:
        """Acknowledge the recipient's own rows among `ids` (setting `also` too); others' are ignored."""
        return self.awaiting(tenant, did).filter(public_id__in=ids).update(acknowledged_at=timezone.now(), **also)


def unacknowledged(name: str, *fields: str) -> models.Index:
    """A recipient's unacknowledged rows in arrival order: (tenant, recipient_did, *fields, id)."""
    return models.Index(
        fields=["tenant", "recipient_did", *fields, "id"], name=name, condition=models.Q(acknowledged_at__isnull=True)
    )


class Awaiting(PublicRow):
    """A row addressed to a recipient DID, queued until the recipient acknowledges it."""

    recipient_did = models.CharField(max_length=2048)
    sender_did = models.CharField(max_length=2048)
    created_at = models.DateTimeField(auto_now_add=True)
    acknowledged_at = models.DateTimeField(null=True, blank=True)

    objects = AwaitingQuerySet.as_manager()

    class Meta:
        abstract = True


class ContractRequest(Awaiting):
    """An encrypted contract request waiting for its recipient (DCTRL-0004 §8.1, forwarded)."""

    tenant = models.ForeignKey(
        "tenants.Tenant", on_delete=models.CASCADE, related_name="contract_requests", db_index=False
    )
    encrypted_contract_request = models.TextField()
    requestor_ephemeral_public_key = models.CharField(max_length=64)

    class Meta:
        indexes = [unacknowledged("creq_pending")]


class PendingEvent(Awaiting):
    """A TWO_WAY_PRIVATE payload awaiting its recipient. ACK drops the payload (docs/protocol-readings.md §5)."""

    tenant = models.ForeignKey(
        "tenants.Tenant", on_delete=models.CASCADE, related_name="pending_events", db_index=False
    )
    payload = models.TextField(blank=True)
    payload_bytes = models.PositiveIntegerField(default=0)

    class Meta:
        indexes = [
            unacknowledged("pending_unacked"),
            unacknowledged("pending_unacked_sender", "sender_did"),
            models.Index(fields=["created_at"], name="pending_created"),
        ]


class PendingQueueDepth(models.Model):
    """How many unacknowledged pending events a recipient has.

    Triggers on PendingEvent (migration 0005) keep `depth` exact whatever writes the
    events: the send statement, ACKNOWLEDGE, the TTL job, a tenant purge, raw SQL. The queue-cap
    check and QUERY_PENDING_EVENTS totals read this one row instead of walking the recipient's
    queue, which cost one heap fetch per queued event on every send.

    The same row holds the recipient's `/ws` presence (presence.py): how many of its sockets are
    open (`live`) and until when the youngest of them vouches for it (`live_until`, epoch
    seconds, renewed while a socket stays open). A stored event is pushed unless this row, read
    under its lock in the storing transaction, says no socket is open. And its wake state
    (wake.py): push devices, woken since the last pickup, when the last wake left.
    """

    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.CASCADE, db_index=False)
    recipient_did = models.CharField(max_length=2048)
    depth = models.IntegerField(default=0)
    # Database defaults: the queue triggers create rows naming only (tenant_id, recipient_did, depth).
    live = models.IntegerField(db_default=0)
    live_until = models.BigIntegerField(db_default=0)
    # The subject's wake state (wake.py): its push devices, a wake since its last pickup, when
    # the last wake leaves (epoch seconds).
    devices = models.IntegerField(db_default=0)
    woken = models.BooleanField(db_default=False)
    woken_at = models.BigIntegerField(db_default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "recipient_did"], name="queue_depth_recipient")]

    def __str__(self) -> str:
        return f"queue depth {self.depth}"


class StoredEvent(Owned):
    """An owner's storage-encrypted event (DCTRL-0004 §8.9)."""

    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.CASCADE, related_name="stored_events", db_index=False)
    sender_did = models.CharField(max_length=2048)
    recipient_did = models.CharField(max_length=2048)
    contract_id = models.CharField(max_length=256, null=True, blank=True)  # noqa: DJ001 - absent differs from ""
    timestamp = models.BigIntegerField()
    payload = models.TextField()
    payload_bytes = models.PositiveIntegerField(default=0)
    encrypted_tags = models.JSONField(default=list, help_text="tags in the order saved")
    processed = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = OwnedQuerySet.as_manager()

    class Meta:
        indexes = [
            models.Index(fields=["tenant", "owner_did", "timestamp", "id"], name="event_owner_ts"),
            models.Index(fields=["tenant", "owner_did", "sender_did", "timestamp", "id"], name="event_owner_sender"),
            models.Index(
                fields=["tenant", "owner_did", "recipient_did", "timestamp", "id"], name="event_owner_recipient"
            ),
            models.Index(
                fields=["tenant", "owner_did", "timestamp", "id"],
                name="event_owner_unprocessed",
                condition=models.Q(processed=False),
            ),
        ]


class EventTag(models.Model):
    """One encrypted tag of a stored event, indexed for exact-match lookups (DCTRL-0004 §8.10).

    `timestamp` is a copy of the event's timestamp, so that QUERY_EVENTS by tag takes its page
    order, its time range and its total from `tag_ts` alone and reads only the page's events
    (apps/messaging/eventquery.py). Every writer of tags sets it from the event; nothing changes
    an event's timestamp after SAVE_EVENTS (tests/messaging/test_eventquery.py checks both).

    `tag_ts` is unique: an event carries a tag at most once (its writers keep the first of
    repeated tags), and tenant, owner and timestamp are the event's, so one tag's index entries
    are distinct events and the query by one tag needs no DISTINCT.
    """

    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.CASCADE, db_index=False)
    owner_did = models.CharField(max_length=2048)
    event = models.ForeignKey(StoredEvent, on_delete=models.CASCADE, related_name="tags")
    tag = models.CharField(max_length=1024)
    timestamp = models.BigIntegerField(help_text="the event's timestamp (denormalised for tag_ts)")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "owner_did", "tag", "timestamp", "event"], name="tag_ts")
        ]

    def __str__(self) -> str:  # metadata only: never payloads, tags or signatures
        return f"tag of event {self.event_id}"


class PublicEventQuerySet(models.QuerySet):
    def live(self):
        """Not deleted: deletion keeps a content-free tombstone for the publish-rate window."""
        return self.filter(deleted_at__isnull=True)

    def published_by(self, tenant, did: str):
        return self.filter(tenant=tenant, publisher_did=did)


class PublicEvent(PublicRow):
    """A signed public event (DCTRL-0007), stored verbatim so that every reader can re-verify it.

    Deleting wipes `event`, `tags` and `signature` and sets `deleted_at`: the row stays only as a
    tombstone so that publish-then-delete cannot dodge the per-minute publish cap; tombstones are
    pruned by `apps.messaging.public.public_tombstones_prune`.
    """

    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.CASCADE, related_name="public_events", db_index=False)
    publisher_did = models.CharField(max_length=2048)
    channel_id = models.CharField(max_length=256)
    event = models.TextField(blank=True, help_text="the publisher's event string, verbatim")
    event_bytes = models.PositiveIntegerField(default=0)
    tags = models.JSONField(default=list, help_text="plaintext tags in the order published")
    timestamp = models.BigIntegerField(help_text="publisher-set Unix seconds (signed)")
    signature = models.CharField(max_length=128, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    deleted_at = models.DateTimeField(null=True, blank=True)

    objects = PublicEventQuerySet.as_manager()

    class Meta:
        indexes = [
            # GET /public/<did>, newest first, with and without the channel filter
            models.Index(
                fields=["tenant", "publisher_did", "-id"],
                name="pubev_feed",
                condition=models.Q(deleted_at__isnull=True),
            ),
            models.Index(
                fields=["tenant", "publisher_did", "channel_id", "-id"],
                name="pubev_channel",
                condition=models.Q(deleted_at__isnull=True),
            ),
            # publish-rate window (counts tombstones too)
            models.Index(fields=["tenant", "publisher_did", "created_at"], name="pubev_rate"),
            models.Index(fields=["deleted_at"], name="pubev_tombstones", condition=models.Q(deleted_at__isnull=False)),
        ]
