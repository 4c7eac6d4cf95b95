"""Push devices and providers per tenant (docs/push.md).

A `Device` is one phone (or browser) that wants a wake-up when its subject's queue grows while
none of its sockets is open. Its `subject` is the key of the subject's queue-depth row
(`messaging.presence.wake_subject_*`): a Decentrl DID, or for DIDComm `didcomm:<client hash>`.
A `PushProvider` is a tenant's account with one push service, its credentials sealed at rest.
A `PushPolicy` is a tenant's choice of how often a subject may be woken and what a push says.
"""

from __future__ import annotations

import json
import uuid

from django.db import models
from django.utils import timezone

from apps.tenants import keystore


class Service(models.TextChoices):
    """The push service a device's token belongs to."""

    FCM = "fcm", "Firebase Cloud Messaging"
    APNS = "apns", "Apple Push Notification service"
    WEBPUSH = "webpush", "Web Push"


class PushProvider(models.Model):
    """A tenant's account with one push service (one per kind). `credentials_sealed` is the
    credentials' JSON sealed with the deployment key; `settings` holds what is not secret."""

    class Kind(models.TextChoices):
        FCM = "fcm", "Firebase Cloud Messaging"
        APNS = "apns", "Apple Push Notification service"
        WEBPUSH = "webpush", "Web Push (VAPID)"
        WEBHOOK = "webhook", "Webhook (the operator's own push gateway)"

    class State(models.TextChoices):
        UNCHECKED = "unchecked", "Not used yet"
        OK = "ok", "Working"
        FAILING = "failing", "Failing"

    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.CASCADE, related_name="+")
    kind = models.CharField(max_length=16, choices=Kind.choices)
    enabled = models.BooleanField(default=True)
    key_ref = models.UUIDField(default=uuid.uuid4, editable=False, help_text="binds the sealed credentials")
    credentials_sealed = models.TextField(blank=True, default="")
    settings = models.JSONField(default=dict, blank=True)
    state = models.CharField(max_length=16, choices=State.choices, default=State.UNCHECKED)
    last_error = models.CharField(max_length=200, blank=True, default="")
    last_success_at = models.DateTimeField(null=True, blank=True)
    last_failure_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        verbose_name = "push provider"
        constraints = [models.UniqueConstraint(fields=["tenant", "kind"], name="push_provider_kind")]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} ({'on' if self.enabled else 'off'})"

    def _context(self) -> str:
        return f"{self.tenant.slug}:push-{self.kind}:{self.key_ref}"

    def seal(self, credentials: dict) -> None:
        """Store `credentials` sealed (callers save)."""
        raw = json.dumps(credentials, sort_keys=True, separators=(",", ":")).encode()
        self.credentials_sealed = keystore.seal(raw, context=self._context())

    def credentials(self) -> dict:
        """The unsealed credentials ({} when none were entered)."""
        if not self.credentials_sealed:
            return {}
        return json.loads(keystore.unseal(self.credentials_sealed, context=self._context()))

    @property
    def has_credentials(self) -> bool:
        return bool(self.credentials_sealed)


class PushPolicy(models.Model):
    """A tenant's push choices (one row per tenant, none: the defaults). `wake_interval_s` null is
    the deployment's PUSH_WAKE_INTERVAL_S. `visible` asks for an alert built from the app's own
    localisation keys instead of a silent, content-free wake (docs/push.md, "Privacy")."""

    tenant = models.OneToOneField("tenants.Tenant", on_delete=models.CASCADE, related_name="+")
    wake_interval_s = models.PositiveIntegerField(null=True, blank=True)
    visible = models.BooleanField(default=False)
    title_loc_key = models.CharField(max_length=64, blank=True, default="")
    body_loc_key = models.CharField(max_length=64, blank=True, default="")
    collapse_id = models.CharField(max_length=64, blank=True, default="")

    class Meta:
        verbose_name = "push policy"
        verbose_name_plural = "push policies"

    def __str__(self) -> str:
        return "visible alert" if self.visible else "silent wake"


class Device(models.Model):
    """One device of a subject on one push service (so an FCM and an APNs device can share a
    subject). `token` is the service's token; for Web Push the subscription's JSON."""

    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.CASCADE, related_name="+")
    subject = models.CharField(max_length=2048)
    service = models.CharField(max_length=16, choices=Service.choices)
    token = models.TextField()
    platform = models.CharField(max_length=32, null=True, blank=True)  # noqa: DJ001 - absent differs from ""
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)
    last_woken_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "subject", "service"], name="push_device_subject_service")
        ]

    def __str__(self) -> str:
        return f"{self.get_service_display()} device"
