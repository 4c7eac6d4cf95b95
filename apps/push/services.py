"""The push app's services (docs/push.md): devices, the wake subject, pickups and wake requests.

These are the functions the front doors' registration commands and the pickup paths call. Keyword-
only, typed, atomic at their boundary; a bad token is `DeviceInvalid(code, detail)` with a stable
code the caller maps to its protocol's error.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from apps.messaging import notify, presence, wake
from apps.tenants.models import Tenant

from .models import Device, PushProvider, Service
from .providers import PROVIDERS

# Caps (docs/push.md, "Devices"): FCM registration tokens are printable ASCII (FCM documents no
# length; they are ~160 characters today, 4096 leaves room); APNs device tokens are hex (32 bytes
# today, up to 100 bytes allowed for); a Web Push subscription is small JSON.
FCM_TOKEN_MAX = 4096
APNS_TOKEN_MAX = 200
WEBPUSH_SUBSCRIPTION_MAX = 4096
WEBPUSH_ENDPOINT_MAX = 2048
SUBJECT_MAX = 2048

_FCM = re.compile(r"[\x21-\x7e]+")
_HEX = re.compile(r"[0-9a-fA-F]+")
_PLATFORM = re.compile(r"[a-z0-9][a-z0-9_.-]{0,31}")
_B64URL = re.compile(r"[A-Za-z0-9_-]+={0,2}")


class DeviceInvalid(Exception):
    """A device registration the push app refuses. `code` is one of DEVICE_ERRORS (stable, for the
    protocol's error); `detail` is a short human text without the token."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(f"{code}: {detail}")
        self.code = code
        self.detail = detail


# Every code DeviceInvalid carries.
DEVICE_ERRORS = frozenset(
    {"service_unknown", "token_invalid", "token_too_large", "endpoint_not_https", "platform_invalid", "subject_invalid"}
)


def subject_for_did(did: str) -> str:
    """The wake subject of a Decentrl DID: its queue-depth row's key, the DID itself."""
    return presence.decentrl_key(did)


def subject_for_mediation(mediation_client_hash: str) -> str:
    """The wake subject of a DIDComm mediation (or v1 connection) from its `client_hash`: its
    client's presence key, `didcomm:<hash>` (one rule, messaging.presence)."""
    return presence.didcomm_key(mediation_client_hash)


def _b64url_bytes(value: Any) -> bytes | None:
    if not isinstance(value, str) or not _B64URL.fullmatch(value):
        return None
    try:
        return base64.urlsafe_b64decode(value + "=" * (-len(value) % 4))
    except (binascii.Error, ValueError):
        return None


def _loopback_allowed(host: str | None) -> bool:
    return bool(settings.PUSH_WEBPUSH_ALLOW_HTTP) and host in {"127.0.0.1", "localhost", "::1"}


def _webpush_subscription(token: str) -> str:
    """A Web Push subscription's JSON, checked and in one canonical form: the endpoint (https) and
    its keys (p256dh: an uncompressed P-256 point, 65 bytes; auth: 16 bytes), nothing else."""
    if len(token.encode()) > WEBPUSH_SUBSCRIPTION_MAX:
        raise DeviceInvalid("token_too_large", f"a Web Push subscription is at most {WEBPUSH_SUBSCRIPTION_MAX} bytes")
    try:
        sub = json.loads(token)
    except ValueError:
        raise DeviceInvalid("token_invalid", "a Web Push subscription is a JSON object") from None
    keys = sub.get("keys") if isinstance(sub, dict) else None
    endpoint = sub.get("endpoint") if isinstance(sub, dict) else None
    if not isinstance(endpoint, str) or not isinstance(keys, dict):
        raise DeviceInvalid("token_invalid", "a Web Push subscription has an endpoint and keys")
    if len(endpoint) > WEBPUSH_ENDPOINT_MAX:
        raise DeviceInvalid("token_too_large", f"the endpoint is at most {WEBPUSH_ENDPOINT_MAX} characters")
    try:
        url = urlsplit(endpoint)
        host = url.hostname
    except ValueError:
        raise DeviceInvalid("token_invalid", "the endpoint is not a URL") from None
    if not host:
        raise DeviceInvalid("token_invalid", "the endpoint is not a URL")
    if url.scheme != "https" and not (url.scheme == "http" and _loopback_allowed(host)):
        raise DeviceInvalid("endpoint_not_https", "the endpoint must be https")
    p256dh, auth = _b64url_bytes(keys.get("p256dh")), _b64url_bytes(keys.get("auth"))
    if p256dh is None or len(p256dh) != 65 or p256dh[0] != 4:
        raise DeviceInvalid("token_invalid", "keys.p256dh is an uncompressed P-256 point, base64url")
    if auth is None or len(auth) != 16:
        raise DeviceInvalid("token_invalid", "keys.auth is 16 bytes, base64url")
    canonical = {"endpoint": endpoint, "keys": {"auth": keys["auth"], "p256dh": keys["p256dh"]}}
    return json.dumps(canonical, sort_keys=True, separators=(",", ":"))


def device_token_normalised(*, service: str, token: str) -> str:
    """`token` checked for `service` and in its stored form; DeviceInvalid otherwise."""
    if not isinstance(token, str) or not token:
        raise DeviceInvalid("token_invalid", "the token is empty")
    if service == Service.FCM:
        if len(token) > FCM_TOKEN_MAX:
            raise DeviceInvalid("token_too_large", f"an FCM token is at most {FCM_TOKEN_MAX} characters")
        if not _FCM.fullmatch(token):
            raise DeviceInvalid("token_invalid", "an FCM token is printable ASCII")
        return token
    if service == Service.APNS:
        if len(token) > APNS_TOKEN_MAX:
            raise DeviceInvalid("token_too_large", f"an APNs token is at most {APNS_TOKEN_MAX} hex digits")
        if not _HEX.fullmatch(token) or len(token) % 2 or len(token) < 64:
            raise DeviceInvalid("token_invalid", "an APNs token is hex, at least 32 bytes")
        return token.lower()
    if service == Service.WEBPUSH:
        return _webpush_subscription(token)
    raise DeviceInvalid("service_unknown", "the service is one of fcm, apns, webpush")


def _check_subject(subject: str) -> None:
    if not isinstance(subject, str) or not subject or len(subject) > SUBJECT_MAX:
        raise DeviceInvalid("subject_invalid", f"the subject is 1 to {SUBJECT_MAX} characters")


def _recount(*, tenant_id: int, subject: str) -> None:
    """The subject's device count on its queue-depth row (the storing statements' wake gate);
    the caller holds the row's lock (`wake.devices_lock`)."""
    count = Device.objects.filter(tenant_id=tenant_id, subject=subject).count()
    wake.devices_set(tenant_id=tenant_id, subject=subject, count=count)


@transaction.atomic
def device_set(*, tenant: Tenant, subject: str, service: str, token: str, platform: str | None) -> Device:
    """Register the subject's device on `service`, replacing the one it had there."""
    if service not in Service.values:
        raise DeviceInvalid("service_unknown", "the service is one of fcm, apns, webpush")
    _check_subject(subject)
    stored = device_token_normalised(service=service, token=token)
    if platform is not None and (not isinstance(platform, str) or not _PLATFORM.fullmatch(platform)):
        raise DeviceInvalid("platform_invalid", "the platform is 1 to 32 of a-z 0-9 _ . -")
    # Lock: the subject's queue-depth row, held to commit, so concurrent registrations of one
    # subject count its devices one after the other.
    wake.devices_lock(tenant_id=tenant.pk, subject=subject)
    now = timezone.now()
    device, _ = Device.objects.update_or_create(
        tenant=tenant,
        subject=subject,
        service=service,
        defaults={"token": stored, "platform": platform, "updated_at": now},
        create_defaults={"token": stored, "platform": platform, "updated_at": now, "created_at": now},
    )
    _recount(tenant_id=tenant.pk, subject=subject)
    return device


@transaction.atomic
def device_remove(*, tenant: Tenant, subject: str, service: str) -> bool:
    """Forget the subject's device on `service`; whether there was one."""
    wake.devices_lock(tenant_id=tenant.pk, subject=subject)
    removed, _ = Device.objects.filter(tenant=tenant, subject=subject, service=service).delete()
    _recount(tenant_id=tenant.pk, subject=subject)
    return removed > 0


def device_get(*, tenant: Tenant, subject: str, service: str) -> Device | None:
    """The subject's device on `service`, if any."""
    return Device.objects.filter(tenant=tenant, subject=subject, service=service).first()


def devices_of(*, tenant: Tenant, subject: str) -> list[Device]:
    """Every device of the subject (one per service)."""
    return list(Device.objects.filter(tenant=tenant, subject=subject).order_by("service"))


@transaction.atomic
def device_prune(*, tenant_id: int, device_id: int, token: str) -> bool:
    """Delete a device whose token the provider called dead, unless it was re-registered with
    another token meanwhile; whether it was deleted."""
    device = Device.objects.filter(tenant_id=tenant_id, pk=device_id).first()
    if device is None:
        return False
    wake.devices_lock(tenant_id=tenant_id, subject=device.subject)
    removed, _ = Device.objects.filter(tenant_id=tenant_id, pk=device_id, token=token).delete()
    _recount(tenant_id=tenant_id, subject=device.subject)
    return removed > 0


def picked_up(*, tenant_id: int, subject: str) -> None:
    """The subject fetched or acknowledged its queue: its next stored message may wake it again
    (at most one wake per subject between pickups)."""
    wake.picked_up(tenant_id=tenant_id, subject=subject)


def wake_request(*, tenant_id: int, subject: str) -> None:
    """Ask for a wake of the subject once the current transaction commits, whether or not a socket
    says it is open (a live delivery that stayed unacknowledged: the socket is asleep), under the
    same coalescing as a stored message."""
    notify.wake_on_commit(tenant_id=tenant_id, subject=subject, due=True, even_if_live=True)


class ProviderInvalid(Exception):
    """Provider credentials or settings its `check` refused; the message is the reason."""


def provider_check(*, provider: PushProvider, settings_: dict, credentials: dict | None) -> None:
    """The provider's own `check` of the credentials (None: the sealed ones) and settings."""
    impl = PROVIDERS.get(provider.kind)
    if impl is None:
        raise ProviderInvalid("no such provider")
    current = credentials if credentials is not None else provider.credentials()
    try:
        impl.check(current, settings_)
    except ValueError as exc:
        raise ProviderInvalid(str(exc)) from None


@transaction.atomic
def provider_save(*, provider: PushProvider, enabled: bool, settings_: dict, credentials: dict | None) -> PushProvider:
    """Save a tenant's provider: `credentials` None keeps the sealed ones; both are checked with
    the provider's own `check` first (ProviderInvalid), and the state starts over as unchecked."""
    provider_check(provider=provider, settings_=settings_, credentials=credentials)
    provider.enabled = enabled
    provider.settings = settings_
    if credentials is not None:
        provider.seal(credentials)
    provider.state, provider.last_error = PushProvider.State.UNCHECKED, ""
    provider.updated_at = timezone.now()
    provider.save()
    return provider
