"""Tenant write operations: create, edit, suspend/resume, rotate keys, and the audit log.

Every operator-facing service takes an `actor` and records one AuditEntry in the same
transaction as the change. Snapshots hold configuration and key fingerprints, never secrets.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import IntegrityError, models, transaction
from django.utils import timezone

from apps.wire.crypto import Ed25519KeyPair, X25519KeyPair
from apps.wire.did import web_did_for_host
from apps.wire.display import grouped

from .models import ApiToken, AuditEntry, Tenant, TenantDomain, TenantKey
from .selectors import domain_owner, tenant_cache_clear

# Editable policy and their bounds (the defaults, docs/protocol-readings.md §5, live on the model fields).
POLICY_BOUNDS: dict[str, tuple[int, int]] = {
    "max_identities": (0, 10_000_000),
    "max_registration_days": (1, 3650),
    "pending_event_ttl_days": (1, 3650),
    "pending_queue_cap": (1, 10_000_000),
    "max_events_per_save": (1, 10_000),
    "max_tags_per_event": (0, 1_000),
    "max_tag_length": (1, 1024),  # EventTag.tag is varchar(1024)
    "max_page_size": (1, 100),  # docs/protocol-readings.md §5: page_size 1-100
    "max_body_bytes": (1024, 64 * 1024 * 1024),
    "rate_limit_per_did": (0, 1_000_000),
    "rate_limit_per_ip": (0, 1_000_000),
    "rate_limit_per_ip_burst": (1, 1_000_000),
    "contract_request_ttl_days": (1, 3650),
    "metering_retention_days": (1, 3650),
    "public_event_max_bytes": (1, 16 * 1024 * 1024),
    "public_max_tags": (0, 1_000),
    "public_channel_id_max_length": (1, 1024),
    "public_publish_per_minute": (0, 1_000_000),
    "prekey_grace_hours": (0, 24 * 365),
}
# The policy's switches (true or false).
POLICY_BOOLEANS: tuple[str, ...] = ("registration_open", "decentrl_push_devices")
POLICY_FIELDS: tuple[str, ...] = (*POLICY_BOOLEANS, *POLICY_BOUNDS)
NULLABLE_POLICY = {"rate_limit_per_did", "rate_limit_per_ip", "rate_limit_per_ip_burst"}
EDITABLE_FIELDS: tuple[str, ...] = ("name", "public_url", *POLICY_FIELDS)

_HOST_RE = re.compile(
    r"^(?=.{1,253}(:|$))([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*(:[0-9]{1,5})?$"
)
# The same host rule as a pattern without look-ahead, in either case, with the port's 1 to 65535 spelled
# out, for the operator API's schema (docs/operators.md#operator-api): every value it matches,
# HOST_MAX_LENGTH characters at most, normalize_domain accepts. PUBLIC_URL: an http(s) URL on such a
# host, a URI as RFC 3986 has it; the one rule for a public URL, in the console and the API.
_LABEL = r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_PORT = r"(6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[1-9][0-9]{0,3})"
_HOSTPORT = rf"{_LABEL}(\.{_LABEL})*(:{_PORT})?"
# RFC 3986 after the authority: a path, a query, a fragment, of pchar (unreserved, %XX, sub-delims, ":", "@").
_PCHAR = r"([A-Za-z0-9._~!$&'()*+,;=:@-]|%[0-9A-Fa-f]{2})"
_AFTER_HOST = rf"(/({_PCHAR}|/)*)?(\?({_PCHAR}|[/?])*)?(#({_PCHAR}|[/?])*)?"
PUBLIC_URL_PATTERN = rf"[Hh][Tt][Tt][Pp][Ss]?://{_HOSTPORT}{_AFTER_HOST}"
# A domain or alias: host[:port], or an http(s) URL on it (normalize_domain keeps the host[:port]).
HOST_PATTERN = rf"({_HOSTPORT}|{PUBLIC_URL_PATTERN})"
HOST_MAX_LENGTH = 253
_PUBLIC_URL_RE = re.compile(PUBLIC_URL_PATTERN)
# Checked by normalize_public_url, not by the model's URLField (Django's rule is another one).
_CHECKED_HERE = ["public_url"]


@dataclass(frozen=True)
class Actor:
    """Who performs an operator action and through which console (admin, api, cli)."""

    user: Any
    via: str

    @property
    def name(self) -> str:
        return getattr(self.user, "get_username", lambda: "")() if self.user is not None else ""


def fingerprint(public: bytes | memoryview) -> str:
    """A short, non-secret identifier of a public key for audit and display."""
    return hashlib.sha256(bytes(public)).hexdigest()[:16]


def tenant_snapshot(tenant: Tenant) -> dict:
    """The audit-visible state of a tenant: configuration, aliases and key fingerprints only."""
    snap = {
        "slug": tenant.slug,
        "name": tenant.name,
        "domain": tenant.domain,
        "did": tenant.did,
        "public_url": tenant.public_url,
        "status": tenant.status,
        "aliases": sorted(tenant.aliases.values_list("domain", flat=True)) if tenant.pk else [],
        "signing_key": fingerprint(tenant.signing_public) if tenant.signing_public else None,
        "prekey": fingerprint(tenant.prekey_public) if tenant.prekey_public else None,
    }
    snap.update({f: getattr(tenant, f) for f in POLICY_FIELDS})
    return snap


def audit_record(
    *, actor: Actor, action: str, tenant: Tenant | None, before: dict | None, after: dict | None
) -> AuditEntry:
    """Append one audit entry (call inside the transaction of the change it describes)."""
    return AuditEntry.objects.create(
        actor=actor.user if getattr(actor.user, "pk", None) else None,
        actor_name=actor.name[:150],
        via=actor.via,
        action=action,
        tenant=tenant,
        tenant_slug=tenant.slug if tenant else "",
        before=before,
        after=after,
    )


def audited_edit(
    *, actor: Actor, action: str, tenant: Tenant, row: models.Model, changes: dict, check: Callable[[Any], None]
) -> Any:
    """Set `changes` (fields the caller allows) on `row` (locked by the caller), `check` it (raises ValidationError), then save
    only the fields whose value changed and audit them as `action` (those fields before and after).
    Nothing changed: no save, no entry. The one rule of the policy editors (DIDComm's, push's)."""
    before = {name: getattr(row, name) for name in changes}
    for name, value in changes.items():
        setattr(row, name, value)
    check(row)
    after = {name: getattr(row, name) for name in changes}
    changed = [name for name in changes if after[name] != before[name]]
    if changed:
        row.save(update_fields=changed)
        audit_record(
            actor=actor,
            action=action,
            tenant=tenant,
            before={n: before[n] for n in changed},
            after={n: after[n] for n in changed},
        )
    return row


def not_a_host_message(value: str) -> str:
    return f"{value!r} is not a host name (host or host:port)"


def normalize_domain(domain: str) -> str:
    """Lowercase host[:port], validated; a pasted URL (`https://Mediator.Example/path?q`) is reduced
    to its host[:port] (a URL with a user name or password is refused). Raises ValidationError."""
    value = (domain or "").strip()
    if "://" in value:
        parts = urlsplit(value)
        if parts.username or parts.password:
            raise ValidationError(f"{domain!r} carries a user name or password: give the host (and :port) only")
        value = parts.netloc
    value = value.lower().rstrip("/").rstrip(".")
    if not _HOST_RE.match(value):
        raise ValidationError(not_a_host_message(domain))
    if ":" in value and not (0 < int(value.rsplit(":", 1)[1]) < 65536):
        raise ValidationError(f"{domain!r} has an invalid port")
    return value


PUBLIC_URL_MESSAGE = "Enter a valid http or https URL."


def normalize_public_url(url: str) -> str:
    """An http(s) URL with its scheme and host lowercased and no trailing slash; raises ValidationError."""
    value = (url or "").strip()
    if not _PUBLIC_URL_RE.fullmatch(value):
        raise ValidationError({"public_url": [PUBLIC_URL_MESSAGE]})
    parts = urlsplit(value)
    path = parts.path.rstrip("/")
    query = f"?{parts.query}" if parts.query else ""
    return f"{parts.scheme.lower()}://{parts.netloc.lower()}{path}{query}"


def _served_elsewhere(host: str, *, tenant_id: int | None) -> ValidationError | None:
    """The conflict when another tenant serves `host`, naming that tenant (code "conflict": the
    operator API answers it 409); else None."""
    owner = domain_owner(host, exclude_tenant_id=tenant_id)
    return ValidationError(f"{host} is already served by tenant {owner}", code="conflict") if owner else None


def policy_range_message(field: str) -> str:
    """The one message for a policy value out of its bounds, in the console and the API alike."""
    lo, hi = POLICY_BOUNDS[field]
    return f"Must be between {grouped(lo)} and {grouped(hi)}."


def validate_policy(values: dict) -> dict:
    """Check policy values against POLICY_BOUNDS; returns them or raises a per-field ValidationError."""
    errors: dict[str, list[str]] = {}
    clean: dict = {}
    for field, value in values.items():
        if field in POLICY_BOOLEANS:
            if not isinstance(value, bool):
                errors[field] = ["Must be true or false."]
            else:
                clean[field] = value
            continue
        if field not in POLICY_BOUNDS:
            errors[field] = ["Unknown policy field."]
            continue
        if value is None and field in NULLABLE_POLICY:
            clean[field] = None
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            errors[field] = ["Must be an integer."]
            continue
        lo, hi = POLICY_BOUNDS[field]
        if not lo <= value <= hi:
            errors[field] = [policy_range_message(field)]
            continue
        clean[field] = value
    if errors:
        raise ValidationError(errors)
    return clean


def validate_aliases(aliases: list[str], *, primary: str, tenant_id: int | None) -> list[str]:
    """Normalise alias hosts, drop duplicates and the primary domain, refuse hosts another tenant serves."""
    out: list[str] = []
    errors: list[str | ValidationError] = []
    for raw in aliases:
        try:
            host = normalize_domain(raw)
        except ValidationError as exc:
            errors.extend(exc.messages)
            continue
        if host == primary or host in out:
            continue
        if conflict := _served_elsewhere(host, tenant_id=tenant_id):
            errors.append(conflict)
            continue
        out.append(host)
    if errors:
        raise ValidationError({"aliases": errors})
    return out


def _set_aliases(tenant: Tenant, aliases: list[str]) -> None:
    tenant.aliases.exclude(domain__in=aliases).delete()
    existing = set(tenant.aliases.values_list("domain", flat=True))
    TenantDomain.objects.bulk_create([TenantDomain(tenant=tenant, domain=d) for d in aliases if d not in existing])
    tenant_cache_clear()


def tenant_create(
    *,
    slug: str,
    domain: str,
    name: str = "",
    public_url: str | None = None,
    aliases: list[str] | None = None,
    actor: Actor | None = None,
    **policy,
) -> Tenant:
    """Create a tenant with fresh keys; its did:web follows its (primary) domain."""
    try:
        domain = normalize_domain(domain)
    except ValidationError as exc:
        raise ValidationError({"domain": exc.messages}) from exc
    clean_policy = validate_policy(policy)
    if conflict := _served_elsewhere(domain, tenant_id=None):
        raise ValidationError({"domain": [conflict]})
    alias_list = validate_aliases(aliases or [], primary=domain, tenant_id=None)
    tenant = Tenant(
        slug=slug,
        name=name or slug,
        domain=domain,
        did=web_did_for_host(domain),
        public_url=normalize_public_url(public_url) if public_url else f"{settings.MEDIATOR_PUBLIC_SCHEME}://{domain}",
        **clean_policy,
    )
    tenant.set_keys(Ed25519KeyPair.generate(), X25519KeyPair.generate())
    tenant.full_clean(exclude=_CHECKED_HERE)
    try:
        with transaction.atomic():
            tenant.save()
            _set_aliases(tenant, alias_list)
            if actor is not None:
                audit_record(
                    actor=actor, action="tenant.create", tenant=tenant, before=None, after=tenant_snapshot(tenant)
                )
    except IntegrityError as exc:
        # Two creates racing for one slug/domain: the unique constraints decide.
        raise ValidationError(
            {"slug": [ValidationError("A tenant with this slug or domain already exists.", code="unique")]}
        ) from exc
    return tenant


@transaction.atomic
def tenant_update(*, tenant: Tenant, actor: Actor, aliases: list[str] | None = None, **changes) -> Tenant:
    """Edit a tenant's name, public URL, policy and aliases (its slug, domain and DID are fixed)."""
    unknown = sorted(set(changes) - set(EDITABLE_FIELDS))
    if unknown:
        raise ValidationError({f: ["This field cannot be changed."] for f in unknown})
    locked = Tenant.objects.select_for_update().get(pk=tenant.pk)
    before = tenant_snapshot(locked)
    policy = validate_policy({k: v for k, v in changes.items() if k in POLICY_FIELDS})
    for field, value in policy.items():
        setattr(locked, field, value)
    if "name" in changes:
        locked.name = str(changes["name"])[:200]
    if "public_url" in changes:
        locked.public_url = normalize_public_url(changes["public_url"])
    locked.full_clean(exclude=_CHECKED_HERE)
    locked.save()
    if aliases is not None:
        _set_aliases(locked, validate_aliases(aliases, primary=locked.domain, tenant_id=locked.pk))
    after = tenant_snapshot(locked)
    if after != before:
        audit_record(actor=actor, action="tenant.update", tenant=locked, before=before, after=after)
    return locked


@transaction.atomic
def _set_status(*, tenant: Tenant, actor: Actor, status: str, action: str) -> Tenant:
    locked = Tenant.objects.select_for_update().get(pk=tenant.pk)
    before = {"status": locked.status}
    locked.status = status
    locked.save(update_fields=["status", "updated_at"])
    audit_record(actor=actor, action=action, tenant=locked, before=before, after={"status": status})
    return locked


def tenant_suspend(*, tenant: Tenant, actor: Actor) -> Tenant:
    """Suspend: POST / answers MEDIATOR_UNAVAILABLE (503) and /health 503; data is kept."""
    return _set_status(tenant=tenant, actor=actor, status=Tenant.Status.SUSPENDED, action="tenant.suspend")


def tenant_resume(*, tenant: Tenant, actor: Actor) -> Tenant:
    """Resume a suspended tenant."""
    return _set_status(tenant=tenant, actor=actor, status=Tenant.Status.ACTIVE, action="tenant.resume")


@transaction.atomic
def tenant_rotate_keys(*, tenant: Tenant, actor: Actor, signing: bool = True, prekey: bool = True) -> Tenant:
    """Replace the signing and/or pre-key pair; the old ones move to the key history.

    The DID document publishes the new keys at once. Old registrations stay valid (the
    registration check reads stored contracts only, and re-saved contracts verify against the
    key history); requests encrypted to the old pre-key work for `prekey_grace_hours`.
    """
    if not (signing or prekey):
        raise ValidationError({"keys": ["Choose the signing key, the pre-key, or both."]})
    # The row lock serialises concurrent rotations of one tenant.
    locked = Tenant.objects.select_for_update().get(pk=tenant.pk)
    before = {"signing_key": fingerprint(locked.signing_public), "prekey": fingerprint(locked.prekey_public)}
    now = timezone.now()
    since = locked.keys_rotated_at or locked.created_at
    new_signing = Ed25519KeyPair.generate() if signing else locked.signing_keypair
    new_prekey = X25519KeyPair.generate() if prekey else locked.prekey_pair
    retired = [
        (TenantKey.Purpose.SIGNING, locked.signing_public, locked.signing_private_sealed, signing),
        (TenantKey.Purpose.PREKEY, locked.prekey_public, locked.prekey_private_sealed, prekey),
    ]
    history = [
        TenantKey(
            tenant=locked,
            purpose=purpose,
            public=bytes(public),
            private_sealed=sealed,
            created_at=since,
            retired_at=now,
        )
        for purpose, public, sealed, rotated in retired
        if rotated
    ]
    TenantKey.objects.bulk_create(history)
    locked.set_keys(new_signing, new_prekey)
    locked.keys_rotated_at = now
    locked.save()
    after = {"signing_key": fingerprint(locked.signing_public), "prekey": fingerprint(locked.prekey_public)}
    audit_record(actor=actor, action="tenant.rotate_keys", tenant=locked, before=before, after=after)
    return locked


@transaction.atomic
def tenant_ensure_default(*, port: int, host: str = "localhost") -> tuple[Tenant, bool]:
    """Create the development default tenant, or move it to the current port (its DID follows)."""
    domain = f"{host}:{port}" if port not in (80, 443) else host
    slug = settings.MEDIATOR_DEFAULT_TENANT or "default"
    tenant = Tenant.objects.select_for_update().filter(slug=slug).first()
    if tenant is None:
        return tenant_create(slug=slug, domain=domain, name="Default (development)"), True
    if tenant.domain != domain:
        tenant.domain = domain
        tenant.did = web_did_for_host(domain)
        tenant.public_url = f"{settings.MEDIATOR_PUBLIC_SCHEME}://{domain}"
        tenant.save(update_fields=["domain", "did", "public_url", "updated_at"])
    return tenant, False


@dataclass(frozen=True)
class IssuedToken:
    """A new API token and its key: the only moment the key exists outside the client."""

    token: ApiToken
    key: str


@transaction.atomic
def api_token_issue(*, user, replace: bool = False) -> IssuedToken:
    """Issue an API token for `user` (with `replace`, after deleting the user's other tokens); the
    key is returned once and only its digest is stored."""
    if replace:
        ApiToken.objects.filter(user=user).delete()
    key = secrets.token_hex(20)
    token = ApiToken.objects.create(user=user, prefix=key[: ApiToken.PREFIX_LENGTH], digest=ApiToken.digest_of(key))
    return IssuedToken(token=token, key=key)
