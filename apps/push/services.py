"""The push app's services (docs/push.md): devices, the wake subject, pickups and wake requests.

These are the functions the front doors' registration commands and the pickup paths call. Keyword-
only, typed, atomic at their boundary; a bad token is `DeviceInvalid(code, detail)` with a stable
code the caller maps to its protocol's error.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone

from apps.messaging import notify, presence, wake
from apps.messaging.models import PendingQueueDepth
from apps.tenants.models import Tenant
from apps.tenants.selectors import TenantCache
from apps.tenants.services import Actor, audit_record, audited_edit
from apps.wire.display import utc_iso

from .models import Device, PushPolicy, PushProvider, Service
from .providers import PROVIDERS, webpush
from .providers.base import Wake

# Caps (docs/push.md, "Devices"): FCM registration tokens are printable ASCII (FCM documents no
# length; they are ~160 characters today, 4096 leaves room); APNs device tokens are hex (32 bytes
# today, up to 100 bytes allowed for); a Web Push subscription's are its provider's rule's.
FCM_TOKEN_MAX = 4096
APNS_TOKEN_MAX = 200
SUBJECT_MAX = 2048

_FCM = re.compile(r"[\x21-\x7e]+")
_HEX = re.compile(r"[0-9a-fA-F]+")
_PLATFORM = re.compile(r"[a-z0-9][a-z0-9_.-]{0,31}")


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


# The registration error of each reason the Web Push rule refuses a subscription with.
_WEBPUSH_CODES = {"subscription_too_large": "token_too_large", "subscription_not_https": "endpoint_not_https"}


def _webpush_subscription(token: str) -> str:
    """A Web Push subscription checked by the provider's rule (`webpush.parse_subscription`), in
    its canonical stored form."""
    try:
        return webpush.parse_subscription(token).canonical()
    except ValueError as exc:
        reason = str(exc)
        raise DeviceInvalid(
            _WEBPUSH_CODES.get(reason, "token_invalid"), webpush.SUBSCRIPTION_REFUSALS[reason]
        ) from None


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


# Subjects per statement when many subjects end at once (a purge's expired registrations).
_FORGET_CHUNK = 500


def devices_forget(*, tenant_id: int, subjects: list[str]) -> int:
    """The subjects ended (a revoked grant, a removed v1 connection, a Decentrl identity whose
    registration is gone): their devices go, and each row's device count is zero again. How many
    devices went. Each subject is one short transaction under its row's lock."""
    removed = 0
    for start in range(0, len(subjects), _FORGET_CHUNK):
        chunk = subjects[start : start + _FORGET_CHUNK]
        with_devices = Device.objects.filter(tenant_id=tenant_id, subject__in=chunk).values_list("subject", flat=True)
        for subject in sorted(set(with_devices)):
            with transaction.atomic():
                wake.devices_lock(tenant_id=tenant_id, subject=subject)
                n, _ = Device.objects.filter(tenant_id=tenant_id, subject=subject).delete()
                _recount(tenant_id=tenant_id, subject=subject)
            removed += n
    return removed


def devices_to_wake(*, tenant_id: int, subject: str) -> list[Device]:
    """Every device of the subject while its claimed wake still stands (no pickup since the
    claim), in one query; none when the subject picked up (or has no device)."""
    still_woken = PendingQueueDepth.objects.filter(
        tenant_id=OuterRef("tenant_id"), recipient_did=OuterRef("subject"), woken=True
    )
    return list(
        Device.objects.filter(tenant_id=tenant_id, subject=subject).filter(Exists(still_woken)).order_by("service")
    )


def devices_words(*, tenant_id: int, subject: str) -> str:
    """What an operator page says of a subject's devices: each one's service, platform and when it
    was last woken, or "none registered". Never a token (the query does not read it)."""
    rows = (
        Device.objects.filter(tenant_id=tenant_id, subject=subject)
        .order_by("service")
        .values_list("service", "platform", "last_woken_at")
    )
    words = [
        f"{Service(service).label}{f' ({platform})' if platform else ''}: last woken "
        f"{utc_iso(woken) if woken else 'never'}"
        for service, platform, woken in rows
    ]
    return ", ".join(words) or "none registered"


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


@dataclass(frozen=True)
class Choices:
    """A tenant's push choices as the claim and the sender read them (models.PushPolicy)."""

    wake_interval_s: int
    wake: Wake


# Per process, per tenant (the one rule of such caches, tenants.selectors.TenantCache); cleared on
# every save or delete of a policy (PushConfig.ready).
POLICIES: TenantCache[Choices] = TenantCache("push-policy-cache", max_entries=4096)


def _choices(tenant_id: int) -> Choices:
    policy = PushPolicy.objects.filter(tenant_id=tenant_id).first()
    interval = settings.PUSH_WAKE_INTERVAL_S
    if policy is None:
        return Choices(interval, Wake())
    return Choices(
        interval if policy.wake_interval_s is None else policy.wake_interval_s,
        Wake(
            visible=policy.visible,
            title_loc_key=policy.title_loc_key or None,
            body_loc_key=policy.body_loc_key or None,
            collapse_id=policy.collapse_id or None,
        )
        if policy.visible
        else Wake(),
    )


def choices_of(*, tenant_id: int) -> Choices:
    """The tenant's wake interval (default PUSH_WAKE_INTERVAL_S) and what its pushes say
    (a silent, content-free wake unless it chose a visible alert)."""
    return POLICIES.load(tenant_id, lambda: _choices(tenant_id))[0]


@dataclass(frozen=True)
class Senders:
    """What the sender needs of a tenant: its slug (the webhook's body names it) and its enabled
    providers by kind (their credentials still sealed)."""

    tenant_slug: str
    providers: dict[str, PushProvider]


# Per process, per tenant, like POLICIES; cleared on every save or delete of a provider or a tenant
# (PushConfig.ready), so a provider saved on the tenant page sends within the cache's TTL everywhere.
SENDERS: TenantCache[Senders | None] = TenantCache("push-sender-cache", max_entries=4096)


def _senders(tenant_id: int) -> Senders | None:
    tenant = Tenant.objects.filter(pk=tenant_id).only("slug").first()
    if tenant is None:
        return None
    enabled = PushProvider.objects.filter(tenant_id=tenant_id, enabled=True)
    return Senders(tenant.slug, {p.kind: p for p in enabled})


def senders_of(*, tenant_id: int) -> Senders | None:
    """The tenant's slug and enabled providers (None: no such tenant), cached per process."""
    return SENDERS.load(tenant_id, lambda: _senders(tenant_id))[0]


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


# What an audit entry says of a provider beside its kind (credentials only as "changed or not").
PROVIDER_AUDITED = ("enabled", "settings")


@transaction.atomic
def provider_save(
    *, provider: PushProvider, actor: Actor, enabled: bool, settings_: dict, credentials: dict | None
) -> PushProvider:
    """Save a tenant's provider (new or not): `credentials` None keeps the sealed ones; both are
    checked with the provider's own `check` first (ProviderInvalid), and the state starts over as
    unchecked. A save that changes nothing is not written. Audited as `push.save_provider`: the
    kind, the changed fields before and after, and `credentials_changed` (never the credentials).
    A kind the tenant already has is a ValidationError with the code "conflict"."""
    provider_check(provider=provider, settings_=settings_, credentials=credentials)
    stored = PushProvider.objects.select_for_update().filter(pk=provider.pk).first() if provider.pk else None
    before = {name: getattr(stored, name) for name in PROVIDER_AUDITED} if stored else {}
    credentials_changed = credentials is not None and (stored is None or credentials != stored.credentials())
    provider.enabled = enabled
    provider.settings = settings_
    after = {name: getattr(provider, name) for name in PROVIDER_AUDITED}
    changed = [name for name in PROVIDER_AUDITED if stored is None or after[name] != before[name]]
    if not (changed or credentials_changed):
        return provider
    if credentials is not None and credentials_changed:
        provider.seal(credentials)
    provider.state, provider.last_error = PushProvider.State.UNCHECKED, ""
    provider.updated_at = timezone.now()
    try:
        with transaction.atomic():
            provider.save()
    except IntegrityError:
        # A provider of this kind added meanwhile (the tenant's one per kind: the constraint decides).
        raise ValidationError({"kind": [ValidationError(_already(provider), code="conflict")]}) from None
    audit_record(
        actor=actor,
        action="push.save_provider",
        tenant=provider.tenant,
        before=None if stored is None else {"kind": provider.kind, **{n: before[n] for n in changed}},
        after={"kind": provider.kind, **{n: after[n] for n in changed}, "credentials_changed": credentials_changed},
    )
    return provider


def _already(provider: PushProvider) -> str:
    return f"The tenant already has a {provider.kind} provider."


@transaction.atomic
def provider_delete(*, provider: PushProvider, actor: Actor) -> bool:
    """Remove a tenant's provider (its sealed credentials with it); whether it was there. Its
    devices stay registered and are woken again once a provider of their service is configured.
    Audited as `push.delete_provider` with the kind and the audited fields before."""
    stored = PushProvider.objects.select_for_update().filter(pk=provider.pk, tenant_id=provider.tenant_id).first()
    if stored is None:
        return False
    stored.delete()
    audit_record(
        actor=actor,
        action="push.delete_provider",
        tenant=provider.tenant,
        before={"kind": stored.kind, **{n: getattr(stored, n) for n in PROVIDER_AUDITED}},
        after=None,
    )
    return True


# A tenant's push policy (models.PushPolicy): what an operator edits, in the admin and the API.
POLICY_FIELDS = ("wake_interval_s", "visible", "title_loc_key", "body_loc_key", "collapse_id")
POLICY_KEYS = ("title_loc_key", "body_loc_key", "collapse_id")
# The wake interval an operator may choose, in seconds (a day at most: a phone asleep longer than
# that is woken by its user).
WAKE_INTERVAL_MAX_S = 86_400
# A localisation key or collapse id: the names apps use for their strings (APNs' collapse id is at
# most 64 bytes; FCM's tag and collapse key take these too). Empty: none.
KEY_PATTERN = r"[A-Za-z0-9_.-]{0,64}"
KEY_MESSAGE = "1 to 64 of A-Z a-z 0-9 _ . -"
_KEY = re.compile(KEY_PATTERN)


def policy_errors(values: dict) -> dict[str, list[str]]:
    """What is wrong with a push policy's `values` (every field of POLICY_FIELDS), field by field;
    the rule the admin's form and `policy_update` both apply."""
    errors: dict[str, list[str]] = {}
    interval = values.get("wake_interval_s")
    if interval is not None and interval > WAKE_INTERVAL_MAX_S:
        errors["wake_interval_s"] = [f"the wake interval is at most {WAKE_INTERVAL_MAX_S} seconds"]
    for name in POLICY_KEYS:
        if not _KEY.fullmatch(values.get(name) or ""):
            errors[name] = [KEY_MESSAGE]
    if values.get("visible") and not values.get("body_loc_key") and "body_loc_key" not in errors:
        errors["body_loc_key"] = ["a visible alert needs the body's localisation key"]
    return errors


def policy_of(*, tenant: Tenant) -> PushPolicy:
    """The tenant's push policy; with none stored, the defaults (unsaved: no row is created)."""
    return PushPolicy.objects.filter(tenant=tenant).first() or PushPolicy(tenant=tenant)


@transaction.atomic
def policy_update(*, tenant: Tenant, actor: Actor, **changes) -> PushPolicy:
    """Edit the tenant's push policy (fields of POLICY_FIELDS; the row is created on the first
    edit), checked by `policy_errors` (a ValidationError); audited as `push.update_policy` with
    the changed fields before and after, only when something changed."""
    unknown = sorted(set(changes) - set(POLICY_FIELDS))
    if unknown:
        raise ValidationError({name: ["Unknown field."] for name in unknown})
    PushPolicy.objects.get_or_create(tenant=tenant)
    # The row lock serialises two edits of one tenant's policy.
    policy = PushPolicy.objects.select_for_update().get(tenant=tenant)

    def check(row: PushPolicy) -> None:
        row.full_clean(exclude=["tenant"])  # the model's own bounds (types, lengths, not negative)
        errors = policy_errors({name: getattr(row, name) for name in POLICY_FIELDS})
        if errors:
            raise ValidationError(errors)

    return audited_edit(
        actor=actor, action="push.update_policy", tenant=tenant, row=policy, changes=changes, check=check
    )
