"""A Tenant is one hosted mediator: its own did:web, keys, host and policy."""

from __future__ import annotations

import hashlib
from datetime import timedelta
from functools import cached_property

from django.conf import settings
from django.db import models
from django.utils import timezone

from apps.wire.crypto import Ed25519KeyPair, X25519KeyPair
from apps.wire.did import ResolvedDid, mediator_document
from apps.wire.display import utc_iso

from . import keystore


class Tenant(models.Model):
    class Status(models.TextChoices):
        ACTIVE = "active", "Active"
        SUSPENDED = "suspended", "Suspended"

    slug = models.SlugField(max_length=64, unique=True)
    name = models.CharField(max_length=200, blank=True)
    domain = models.CharField(
        "primary domain",
        max_length=255,
        unique=True,
        help_text="Host (with :port if not default) this mediator serves.",
    )
    did = models.CharField("DID", max_length=300, unique=True, editable=False)
    public_url = models.URLField(
        "public URL", max_length=300, help_text="HTTP URL published in the DID document's service."
    )
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.ACTIVE)

    signing_public = models.BinaryField(max_length=32, editable=False)
    signing_private_sealed = models.TextField(editable=False)
    prekey_public = models.BinaryField(max_length=32, editable=False)
    prekey_private_sealed = models.TextField(editable=False)

    # Policy (defaults: docs/protocol-readings.md §5).
    registration_open = models.BooleanField(default=True)
    # The Decentrl push-device commands, our extension outside DCTRL-0004 (docs/push.md, "Registration").
    decentrl_push_devices = models.BooleanField(default=True)
    max_identities = models.PositiveIntegerField(default=0, help_text="0 = unlimited")
    max_registration_days = models.PositiveIntegerField(default=365)
    pending_event_ttl_days = models.PositiveIntegerField(default=30)
    pending_queue_cap = models.PositiveIntegerField(default=10_000)
    max_events_per_save = models.PositiveIntegerField(default=100)
    max_tags_per_event = models.PositiveIntegerField(default=20)
    max_tag_length = models.PositiveIntegerField(default=256)
    max_page_size = models.PositiveIntegerField(default=100)
    max_body_bytes = models.PositiveIntegerField(default=6 * 1024 * 1024)
    # Rate limits per minute; null = the deployment default (MEDIATOR_RATE_LIMIT_PER_*), 0 = off.
    # Per IP: a token bucket, the rate sustained with bursts of up to _burst.
    rate_limit_per_did = models.PositiveIntegerField(null=True, blank=True)
    rate_limit_per_ip = models.PositiveIntegerField(null=True, blank=True)
    rate_limit_per_ip_burst = models.PositiveIntegerField(null=True, blank=True)
    contract_request_ttl_days = models.PositiveIntegerField(default=30)
    metering_retention_days = models.PositiveIntegerField(default=90)
    # Public channels (DCTRL-0007)
    public_event_max_bytes = models.PositiveIntegerField(default=64 * 1024)
    public_max_tags = models.PositiveIntegerField(default=20)
    public_channel_id_max_length = models.PositiveIntegerField(default=128)
    public_publish_per_minute = models.PositiveIntegerField(default=30)
    # Key rotation: a registration request encrypted to a retired pre-key is still
    # accepted for this many hours after the rotation.
    prekey_grace_hours = models.PositiveIntegerField(default=72)
    keys_rotated_at = models.DateTimeField("keys last rotated", null=True, blank=True, editable=False)

    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return f"{self.slug} ({self.domain})"

    @property
    def is_active(self) -> bool:
        return self.status == self.Status.ACTIVE

    @cached_property
    def signing_keypair(self) -> Ed25519KeyPair:
        """The tenant's Ed25519 signing pair, decrypted with the deployment key."""
        return Ed25519KeyPair.from_seed(keystore.unseal(self.signing_private_sealed, context=f"{self.slug}:signing"))

    @cached_property
    def prekey_pair(self) -> X25519KeyPair:
        """The tenant's X25519 pre-key pair, decrypted with the deployment key."""
        return X25519KeyPair.from_private(keystore.unseal(self.prekey_private_sealed, context=f"{self.slug}:prekey"))

    def set_keys(self, signing: Ed25519KeyPair, prekey: X25519KeyPair) -> None:
        """Seal and attach a new key set (callers save)."""
        self.signing_public = signing.public
        self.signing_private_sealed = keystore.seal(signing.seed, context=f"{self.slug}:signing")
        self.prekey_public = prekey.public
        self.prekey_private_sealed = keystore.seal(prekey.private, context=f"{self.slug}:prekey")
        self.__dict__.pop("signing_keypair", None)
        self.__dict__.pop("prekey_pair", None)

    def previous_prekeys(self, *, now=None) -> list[X25519KeyPair]:
        """Retired pre-keys still inside the grace period, newest first (messaging.tenant_prekeys)."""
        now = now or timezone.now()
        cutoff = now - timedelta(hours=self.prekey_grace_hours)
        rows = self.key_history.filter(purpose=TenantKey.Purpose.PREKEY, retired_at__gt=cutoff).order_by("-retired_at")
        return [row.x25519_pair(self.slug) for row in rows]

    def previous_signing_keys(self, *, now=None) -> list[bytes]:
        """Retired signing public keys whose contracts may still be live, newest first.

        A key retired at R signed nothing after R, so no contract it signed outlives
        R + max_registration_days; older keys are no longer accepted.
        """
        now = now or timezone.now()
        cutoff = now - timedelta(days=self.max_registration_days)
        rows = self.key_history.filter(purpose=TenantKey.Purpose.SIGNING, retired_at__gt=cutoff).order_by("-retired_at")
        return [bytes(row.public) for row in rows]

    def did_document(self) -> dict:
        """The DID document of DCTRL-0004 §3.2."""
        return mediator_document(self.did, bytes(self.signing_public), bytes(self.prekey_public), self.public_url)

    def resolved(self) -> ResolvedDid:
        """This tenant as a resolved DID (for signature checks on contracts it signed)."""
        return ResolvedDid(did=self.did, signing_key=bytes(self.signing_public), pre_key=bytes(self.prekey_public))


class TenantDomain(models.Model):
    """An extra host (alias) that serves a tenant; its did:web stays the one of `Tenant.domain`."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="aliases")
    domain = models.CharField(max_length=255, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["domain"]
        verbose_name = "domain alias"
        verbose_name_plural = "domain aliases"

    def __str__(self) -> str:
        return self.domain


class TenantKey(models.Model):
    """A retired key pair kept for rotation (its private half sealed exactly as it was)."""

    class Purpose(models.TextChoices):
        SIGNING = "signing", "Signing (Ed25519)"
        PREKEY = "prekey", "Pre-key (X25519)"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="key_history")
    purpose = models.CharField(max_length=16, choices=Purpose.choices)
    public = models.BinaryField(max_length=32)
    private_sealed = models.TextField()
    created_at = models.DateTimeField(null=True, blank=True, help_text="when the key became current, if known")
    retired_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [models.Index(fields=["tenant", "purpose", "retired_at"], name="tenantkey_recent")]

    def __str__(self) -> str:
        return f"{self.purpose} key retired {utc_iso(self.retired_at)}"

    def x25519_pair(self, slug: str) -> X25519KeyPair:
        """The retired pre-key pair; the sealed blob moved here unchanged, so its AAD is "<slug>:prekey"."""
        return X25519KeyPair.from_private(keystore.unseal(self.private_sealed, context=f"{slug}:{self.purpose}"))


class AuditEntry(models.Model):
    """One operator action: who, when, through what, and the state before and after (never secrets)."""

    at = models.DateTimeField(default=timezone.now, db_index=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    actor_name = models.CharField(max_length=150, blank=True)
    via = models.CharField(max_length=16, help_text="admin, api or cli")
    action = models.CharField(max_length=64)
    tenant = models.ForeignKey(Tenant, null=True, blank=True, on_delete=models.SET_NULL, related_name="audit_entries")
    tenant_slug = models.CharField(max_length=64, blank=True)
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)

    class Meta:
        ordering = ["-at", "-id"]
        verbose_name = "audit entry"
        verbose_name_plural = "audit log entries"
        indexes = [models.Index(fields=["tenant", "at"], name="audit_tenant_at")]

    def __str__(self) -> str:
        return f"{utc_iso(self.at)} {self.actor_name or '-'} {self.action} {self.tenant_slug}".rstrip()


class ApiToken(models.Model):
    """An operator API key (`Authorization: Token <key>`), stored only as its SHA-256 digest.

    The key is 160 random bits, so a fast digest is enough to make a stolen database useless for
    logging in; the console and the API show only `prefix`, the key's first characters, to tell
    tokens apart. The key itself is shown once, when it is issued (services.api_token_issue).
    """

    PREFIX_LENGTH = 8

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    prefix = models.CharField("key starts with", max_length=PREFIX_LENGTH, editable=False)
    digest = models.CharField(max_length=64, unique=True, editable=False)
    created_at = models.DateTimeField("created", default=timezone.now, editable=False)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name = "API token"
        verbose_name_plural = "API tokens"

    def __str__(self) -> str:
        return f"{self.prefix}… of {self.user}"

    @staticmethod
    def digest_of(key: str) -> str:
        """The stored form of a key: SHA-256, hex."""
        return hashlib.sha256(key.encode()).hexdigest()
