"""DIDComm v2 mediation state per tenant: policy, the mediator identity, grants, recipients, the queue.

DIDs are stored as text (a routed did:peer:2 embeds the mediator DID: ~600 characters and more);
uniqueness and lookups go through a SHA-256 of the normalised form (`*_hash`), never a text index.
"""

from __future__ import annotations

import uuid
from functools import cached_property

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q
from django.utils import timezone

from apps.didcomm.core.did_peer import mediator_legacy_did
from apps.didcomm.core.keys import ED25519, X25519, PrivateKey, PublicKey
from apps.messaging import presence
from apps.tenants import keystore

# The prefix of a DIDComm client's presence key: what tells its rows from Decentrl DIDs' rows
# (the one rule: apps/messaging/presence.py, which the push app's wake subject is too).
PRESENCE_PREFIX = presence.DIDCOMM_PREFIX
presence_key = presence.didcomm_key


def _bounds(lo: int, hi: int) -> list:
    """The policy bounds, one rule for the admin form and the operator API (full_clean)."""
    return [MinValueValidator(lo), MaxValueValidator(hi)]


class DidcommPolicy(models.Model):
    """A tenant's DIDComm policy, v2 and v1 (one row per tenant, created with the defaults on first use)."""

    class Mediation(models.TextChoices):
        OPEN = "open", "Open: anyone who asks is granted"
        CLOSED = "closed", "Closed: every request is denied"

    class Overflow(models.TextChoices):
        EVICT = "evict", "Evict the oldest queued message (the sender gets 202)"
        REJECT = "reject", "Refuse the new message (the sender gets a problem report, HTTP 507)"

    class UnprovenRecipients(models.TextChoices):
        ACCEPT = "accept", "Accept: first come, first served (wallets registering fresh DIDs)"
        REFUSE = "refuse", "Refuse: a problem report (e.p.req.recipient-unproven), HTTP 403"

    tenant = models.OneToOneField("tenants.Tenant", on_delete=models.CASCADE, primary_key=True, related_name="+")
    enabled = models.BooleanField(
        default=True,
        help_text=(
            "Serve DIDComm v2 and v1 (POST /didcomm, /didcomm/ws, the invitations). Off: they answer "
            "e.p.xfer.unknown-mediator (404) and open DIDComm sockets close; Decentrl is not affected."
        ),
    )
    mediation = models.CharField(
        max_length=8,
        choices=Mediation.choices,
        default=Mediation.OPEN,
        help_text="Who is granted mediation when a wallet or agent asks.",
    )
    max_grants = models.PositiveIntegerField(
        default=0, validators=_bounds(0, 1_000_000), help_text="Granted mediation clients at once; 0 = unlimited."
    )
    max_recipients_per_grant = models.PositiveIntegerField(
        default=100,
        validators=_bounds(1, 10_000),
        help_text="Recipient DIDs (keys) one mediation client may register.",
    )
    queue_cap = models.PositiveIntegerField(
        default=1000,
        validators=_bounds(1, 100_000),
        help_text=(
            "Queued DIDComm messages one recipient DID may hold; beyond it the overflow rule applies. "
            "Decentrl events have their own cap (Queues and storage: Pending queue cap)."
        ),
    )
    overflow = models.CharField(
        max_length=8,
        choices=Overflow.choices,
        default=Overflow.EVICT,
        help_text="What a forward to a recipient at its queue cap does.",
    )
    message_ttl_hours = models.PositiveIntegerField(
        default=72,
        validators=_bounds(1, 24 * 366),
        help_text="Queued DIDComm messages not picked up within this many hours are purged.",
    )
    # Per minute; null = the deployment default (MEDIATOR_DIDCOMM_RATE_LIMIT_PER_*), 0 = off. Per IP:
    # a token bucket, the rate sustained with bursts of up to _burst.
    rate_limit_per_sender = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=_bounds(0, 1_000_000),
        help_text=("Messages per minute per authenticated sender DID; beyond it a problem report (HTTP 429); 0 = off."),
    )
    rate_limit_per_ip = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=_bounds(0, 1_000_000),
        help_text=(
            "Requests per minute per client address (carrier NAT puts many wallets behind one), sustained "
            "after its burst, counted before decryption; beyond it HTTP 429 with Retry-After; 0 = off."
        ),
    )
    rate_limit_per_ip_burst = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=_bounds(1, 1_000_000),
        help_text="Requests one address may send at once before the sustained per-IP rate applies.",
    )
    unproven_recipients = models.CharField(
        max_length=8,
        choices=UnprovenRecipients.choices,
        default=UnprovenRecipients.ACCEPT,
        db_default=UnprovenRecipients.ACCEPT,
        help_text=(
            "Recipient DIDs a request registers without being authcrypted or signed with one of their keys. "
            "Another client's own DID always needs the proof."
        ),
    )

    # What an operator may edit (the admin form and PATCH /api/v1/didcomm/policies/<slug>/).
    EDITABLE = (
        "enabled",
        "mediation",
        "max_grants",
        "max_recipients_per_grant",
        "queue_cap",
        "overflow",
        "message_ttl_hours",
        "rate_limit_per_sender",
        "rate_limit_per_ip",
        "rate_limit_per_ip_burst",
        "unproven_recipients",
    )

    class Meta:
        verbose_name = "DIDComm policy"
        verbose_name_plural = "DIDComm policies"

    def __str__(self) -> str:
        return f"DIDComm policy of tenant {self.tenant_id}"


class MediatorIdentity(models.Model):
    """One DIDComm v2 mediator DID of a tenant (did:peer:2, V then E, http then ws service).

    The current one has `retired_at` NULL; a retired one keeps decrypting and answering for the
    tenant's `prekey_grace_hours` after its rotation.
    """

    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.CASCADE, related_name="+")
    key_ref = models.UUIDField(default=uuid.uuid4, unique=True, editable=False, help_text="binds the sealed keys")
    did = models.TextField()
    http_uri = models.TextField()
    ws_uri = models.TextField()
    authentication_public = models.BinaryField(max_length=32)
    authentication_private_sealed = models.TextField()
    agreement_public = models.BinaryField(max_length=32)
    agreement_private_sealed = models.TextField()
    created_at = models.DateTimeField(default=timezone.now)
    retired_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "DIDComm mediator identity"
        verbose_name_plural = "DIDComm mediator identities"
        constraints = [
            models.UniqueConstraint(fields=["tenant"], condition=Q(retired_at__isnull=True), name="didcomm_one_current")
        ]
        indexes = [models.Index(fields=["tenant", "retired_at"], name="didcomm_identity_recent")]

    def __str__(self) -> str:
        return f"{self.did[:40]}… ({'current' if self.retired_at is None else 'retired'})"

    def _context(self, purpose: str) -> str:
        return f"{self.tenant.slug}:didcomm-{purpose}:{self.key_ref}"

    def seal(self, *, authentication: PrivateKey, agreement: PrivateKey) -> None:
        """Attach freshly generated keys, sealed like the tenant's own (callers save)."""
        self.authentication_public = authentication.public.raw
        self.authentication_private_sealed = keystore.seal(authentication.secret, context=self._context("auth"))
        self.agreement_public = agreement.public.raw
        self.agreement_private_sealed = keystore.seal(agreement.secret, context=self._context("agreement"))

    @cached_property
    def authentication_key(self) -> PrivateKey:
        secret = keystore.unseal(self.authentication_private_sealed, context=self._context("auth"))
        return PrivateKey.from_secret(ED25519, secret)

    @cached_property
    def agreement_key(self) -> PrivateKey:
        secret = keystore.unseal(self.agreement_private_sealed, context=self._context("agreement"))
        return PrivateKey.from_secret(X25519, secret)

    @property
    def agreement_kid(self) -> str:
        """`<did>#key-2`: V is key-1, E is key-2 (did:peer:2 numbering in segment order)."""
        return f"{self.did}#key-2"

    @cached_property
    def legacy_did(self) -> str:
        """The same keys as `did` with one http(s) service in the string form, for older did:peer:2
        libraries (`core.did_peer.mediator_legacy_did`); a message to either DID reaches this identity."""
        return mediator_legacy_did(
            authentication=PublicKey(ED25519, bytes(self.authentication_public)),
            agreement=PublicKey(X25519, bytes(self.agreement_public)),
            http_uri=self.http_uri,
        )

    @property
    def dids(self) -> tuple[str, str]:
        """Both DIDs of this identity: the one it publishes, then the legacy one."""
        return self.did, self.legacy_did


class Mediation(models.Model):
    """A mediation client (the DID that sent mediate-request, authenticated by authcrypt)."""

    class State(models.TextChoices):
        GRANTED = "granted", "Granted"
        DENIED = "denied", "Denied"
        REVOKED = "revoked", "Revoked by an operator"

    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.CASCADE, related_name="+")
    client_did = models.TextField()
    client_hash = models.CharField(max_length=64)
    state = models.CharField(max_length=8, choices=State.choices)
    # DIDComm v1 (CM 1.0): the connection the client asked over; NULL for a DIDComm v2 client.
    connection = models.OneToOneField(
        "Connection", null=True, blank=True, on_delete=models.CASCADE, related_name="mediation"
    )
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "DIDComm mediation grant"
        verbose_name_plural = "DIDComm mediation grants"
        constraints = [models.UniqueConstraint(fields=["tenant", "client_hash"], name="didcomm_mediation_client")]
        indexes = [models.Index(fields=["tenant", "state"], name="didcomm_mediation_state")]

    def __str__(self) -> str:
        return f"Grant to {self.client_did[:40]}… ({self.get_state_display().lower()})"


class Connection(models.Model):
    """A DIDComm v1 connection (DID Exchange 1.0/1.1) between an agent and a tenant's mediator.

    The agent is known by the base58 verkey it authcrypts from (`their_verkey`); our side is the
    identity's Ed25519 key, which is also the invitation key and the routing key.
    """

    class State(models.TextChoices):
        RESPONSE_SENT = "response", "Response sent"
        COMPLETED = "completed", "Completed"

    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.CASCADE, related_name="+")
    identity = models.ForeignKey(MediatorIdentity, on_delete=models.CASCADE, related_name="+")
    their_did = models.TextField()
    their_verkey = models.CharField(max_length=64)
    endpoint = models.TextField(blank=True, help_text="their http(s) DIDComm endpoint; blank: return routes only")
    routing_keys = models.JSONField(default=list, blank=True, help_text="base58 verkeys, outermost last")
    thread_id = models.TextField(help_text="the DID Exchange request's thread")
    protocol = models.CharField(max_length=24)
    state = models.CharField(max_length=12, choices=State.choices)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)
    # Outbound delivery to `endpoint` (apps/didcomm/outbound.py), for the operator: no payload.
    last_delivery_error = models.CharField(
        max_length=120, blank=True, help_text="why the last failed POST failed: refused (and why), HTTP status or error"
    )
    last_delivery_error_at = models.DateTimeField(null=True, blank=True)
    last_delivered_at = models.DateTimeField(null=True, blank=True)
    delivery_failures = models.PositiveIntegerField(default=0, help_text="failed or refused POSTs, ever")

    class Meta:
        verbose_name = "DIDComm v1 connection"
        constraints = [models.UniqueConstraint(fields=["tenant", "their_verkey"], name="didcomm_connection_key")]

    def __str__(self) -> str:
        return f"{self.their_did[:48]}… ({self.state})"


class RecipientKey(models.Model):
    """A recipient DID (or key) a client registered (keylist-update / recipient-update).

    `lookup_hash` is the hash of `routing.normalise(recipient_did)`: the same for the DID, its
    `did#key` URLs and, for an Ed25519 did:key, its X25519 did:key form.
    """

    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.CASCADE, related_name="+")
    mediation = models.ForeignKey(Mediation, on_delete=models.CASCADE, related_name="recipients")
    recipient_did = models.TextField(help_text="exactly as the client sent it")
    lookup_hash = models.CharField(max_length=64)
    created_at = models.DateTimeField(default=timezone.now)
    proven = models.BooleanField(
        default=False,
        db_default=False,
        help_text="the request that registered it was authcrypted or signed with one of the DID's keys",
    )
    # Claims of other clients refused while this client holds it (docs/didcomm.md "Who may register").
    contested = models.PositiveIntegerField(
        default=0, db_default=0, help_text="times another client asked for it and was refused"
    )
    last_contested_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "DIDComm recipient DID"
        constraints = [models.UniqueConstraint(fields=["tenant", "lookup_hash"], name="didcomm_recipient_unique")]
        indexes = [models.Index(fields=["mediation", "id"], name="didcomm_recipient_page")]

    def __str__(self) -> str:
        return self.recipient_did[:64]


class QueuedMessage(models.Model):
    """One stored message for a recipient: the forward's attachment `data`, opaque, as JSON text.

    It leaves the table only on messages-received, TTL expiry or eviction (UC-021).
    """

    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.CASCADE, related_name="+")
    # No index of their own: didcomm_queue_client / didcomm_queue_recipient lead with them (and
    # serve the cascades); every index is one more write per forward (migration 0007).
    mediation = models.ForeignKey(Mediation, on_delete=models.CASCADE, related_name="+", db_index=False)
    recipient = models.ForeignKey(
        RecipientKey, null=True, blank=True, on_delete=models.CASCADE, related_name="+", db_index=False
    )
    message_id = models.UUIDField(default=uuid.uuid4, unique=True)
    data = models.TextField(help_text="attachment data object (json or base64), never read")
    size = models.PositiveIntegerField()
    received_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField()

    class Meta:
        verbose_name = "DIDComm queued message"
        indexes = [
            models.Index(fields=["mediation", "id"], name="didcomm_queue_client"),
            models.Index(fields=["recipient", "id"], name="didcomm_queue_recipient"),
            models.Index(fields=["expires_at"], name="didcomm_queue_expiry"),
        ]

    def __str__(self) -> str:
        return f"message {self.message_id}"


class QueueDepth(models.Model):
    """How many messages a recipient has queued: the forward's cap reads this row.

    Statement-level triggers on QueuedMessage (migration 0005) keep `depth` exact
    whatever removes or adds the rows: the forward, its eviction, messages-received, the TTL purge,
    a revoke, a cascade, raw SQL. A row that reaches 0 is deleted, so a missing row means 0. No
    foreign key: the recipient's deletion needs no ordering against this row, and Django's flush
    truncates it. Messages queued to the client itself (no recipient) are not counted (they have no cap).
    """

    recipient_id = models.BigIntegerField(primary_key=True)
    depth = models.IntegerField(default=0)

    class Meta:
        verbose_name = "DIDComm queue depth"

    def __str__(self) -> str:
        return f"queue depth {self.depth}"


class Outbound(models.Model):
    """A DIDComm v1 message waiting to be POSTed to an agent's endpoint (ACA-Py never asks for a
    return route): a packed reply (`body`) or a forwarded message (`queued`, sent as stored).
    Retried with backoff until `expires_at`."""

    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.CASCADE, related_name="+")
    connection = models.ForeignKey(Connection, on_delete=models.CASCADE, related_name="+")
    queued = models.ForeignKey(QueuedMessage, null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    body = models.TextField(blank=True, help_text="the packed envelope of a reply; blank for a forwarded message")
    attempts = models.PositiveIntegerField(default=0)
    last_status = models.CharField(max_length=32, blank=True, help_text="HTTP status or error class; no payload")
    next_attempt_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField()
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        verbose_name = "DIDComm v1 outbound message"
        indexes = [models.Index(fields=["next_attempt_at"], name="didcomm_outbound_due")]

    def __str__(self) -> str:
        return f"outbound {self.pk} ({self.attempts} attempts)"


class SeenMessage(models.Model):
    """An authcrypt message id a sender used lately: replay protection of admin messages
    (docs/didcomm.md "Replays"). Kept until `expires_at`, after which the message itself would be
    refused (its created_time or expires_time out of range), or, without those, for the window."""

    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.CASCADE, db_index=False, related_name="+")
    sender_hash = models.CharField(max_length=64, help_text="did_hash of the authcrypt sender's DID")
    id_hash = models.CharField(
        max_length=64, help_text="SHA-256 of the message id, lowercased (compared case-insensitively)"
    )
    expires_at = models.BigIntegerField(help_text="Unix ms, kept through it (apps/messaging/replay.py)")

    class Meta:
        verbose_name = "DIDComm seen message id"
        constraints = [models.UniqueConstraint(fields=["tenant", "sender_hash", "id_hash"], name="didcomm_seen_unique")]
        indexes = [models.Index(fields=["expires_at"], name="didcomm_seen_expiry")]

    def __str__(self) -> str:
        return f"seen message (expires {self.expires_at})"
