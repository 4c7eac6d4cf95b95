"""What each tenant field is called and means, in words, with its unit, bounds and default: one
table read by the console's form and the operator API's schema."""

from __future__ import annotations

from django.conf import settings
from django.db.models import Field

from apps.wire.display import grouped, human_bytes

from .models import Tenant
from .services import NULLABLE_POLICY, POLICY_BOUNDS

# name: (label, unit or "", meaning). Units are plural nouns: "days", "bytes", "per minute".
FIELDS: dict[str, tuple[str, str, str]] = {
    "slug": ("Slug", "", "Short name in URLs and the API (letters, digits, - and _). Cannot be changed later."),
    "name": ("Display name", "", "Shown in the console; defaults to the slug."),
    "domain": (
        "Primary domain",
        "",
        "Host this mediator serves, with :port unless 80/443, e.g. mediator.globex.example. Its did:web "
        "follows it, so it cannot be changed later (add an alias instead). A pasted URL is reduced to its host.",
    ),
    "aliases": ("Alias hosts", "", "Extra hosts that serve the same mediator, one per line (host or host:port)."),
    "public_url": (
        "Public URL",
        "",
        "Published as the DID document's service endpoint. Blank: the primary domain's URL with the "
        "deployment's scheme (MEDIATOR_PUBLIC_SCHEME).",
    ),
    "did": ("DID", "", "The tenant's did:web, derived from the primary domain."),
    "status": ("Status", "", "Suspended mediators answer 503 MEDIATOR_UNAVAILABLE and keep their data."),
    "registration_open": ("Registration open", "", "New identities may register; existing ones are not affected."),
    "decentrl_push_devices": (
        "Decentrl push devices",
        "",
        "Registered identities may register a device for wake-up pushes (PUSH_DEVICE_SET, our extension outside "
        "DCTRL-0004). Off: those commands are refused as unknown (INVALID_COMMAND). DIDComm's RFC 0734/0699 "
        "registration is not affected.",
    ),
    "max_identities": ("Maximum identities", "identities", "Registered identities at once; 0 = unlimited."),
    "max_registration_days": ("Longest registration", "days", "The longest registration a client may ask for."),
    "pending_event_ttl_days": ("Pending event lifetime", "days", "Undelivered events older than this are purged."),
    "pending_queue_cap": (
        "Pending queue cap",
        "events per recipient",
        "Unacknowledged events one recipient may hold; beyond it senders get 507 RECIPIENT_QUEUE_FULL.",
    ),
    "contract_request_ttl_days": (
        "Contract request lifetime",
        "days",
        "Unanswered requests older than this are purged.",
    ),
    "metering_retention_days": ("Metering retention", "days", "How long usage-metering rows are kept."),
    "rate_limit_per_did": ("Rate limit per DID", "commands per minute", "429 RATE_LIMITED beyond it; 0 = off."),
    "rate_limit_per_ip": (
        "Rate limit per IP address",
        "commands per minute",
        "Sustained rate from one address (carrier NAT puts many clients behind one), after its burst; "
        "429 RATE_LIMITED with Retry-After beyond it; 0 = off.",
    ),
    "rate_limit_per_ip_burst": (
        "Burst per IP address",
        "commands at once",
        "How many commands one address may send at once before the per-minute rate applies.",
    ),
    "max_body_bytes": (
        "Largest request body",
        "bytes",
        "413 PAYLOAD_TOO_LARGE beyond it; never more than the deployment's MEDIATOR_MAX_BODY_BYTES.",
    ),
    "max_page_size": ("Largest page", "items per list", "The largest page_size a list command accepts."),
    "max_events_per_save": ("Events per save", "events", "SAVE_EVENTS may carry at most this many events."),
    "max_tags_per_event": ("Tags per event", "tags", "Tags one stored event may carry."),
    "max_tag_length": ("Longest tag", "characters", "The longest tag a stored event may carry."),
    "public_event_max_bytes": ("Largest public event", "bytes", "Public channels (DCTRL-0007)."),
    "public_max_tags": ("Tags per public event", "tags", "Public channels (DCTRL-0007)."),
    "public_channel_id_max_length": ("Longest channel id", "characters", "Public channels (DCTRL-0007)."),
    "public_publish_per_minute": ("Public publishes per DID", "per minute", "Public channels (DCTRL-0007); 0 = off."),
    "prekey_grace_hours": (
        "Old pre-key grace period",
        "hours",
        "After a key rotation, registration requests encrypted to the previous pre-key still work this long.",
    ),
}
_BYTES = {"max_body_bytes", "public_event_max_bytes"}
_DEPLOYMENT_DEFAULT = {
    "rate_limit_per_did": "MEDIATOR_RATE_LIMIT_PER_DID",
    "rate_limit_per_ip": "MEDIATOR_RATE_LIMIT_PER_IP",
    "rate_limit_per_ip_burst": "MEDIATOR_RATE_LIMIT_PER_IP_BURST",
}


def unit_label(text: str, unit: str) -> str:
    """`Pending event lifetime (days)`: a setting's label with its unit, in every console form."""
    return f"{text} ({unit})" if unit else text


def label(name: str) -> str:
    """`Pending event lifetime (days)`."""
    text, unit, _ = FIELDS[name]
    return unit_label(text, unit)


def _amount(name: str, value: int) -> str:
    if name in _BYTES:
        return f"{value} ({human_bytes(value)})"
    return grouped(value)


def described(meaning: str, allowed: tuple[str, str] | None, nullable: bool, setting: str | None, default: str) -> str:
    """A setting's help, in every console form and the operator API's schema: its meaning, the
    allowed range, then what a blank means (the deployment's `setting`, with its value now) or
    the `default` sentence."""
    parts = [meaning] if meaning else []
    if allowed is not None:
        parts.append(f"Allowed {allowed[0]}–{allowed[1]}.")
    if nullable and setting and hasattr(settings, setting):
        parts.append(f"Blank = the deployment default ({setting}, now {getattr(settings, setting)}).")
    elif nullable:
        parts.append("Blank = the deployment default.")
    elif default:
        parts.append(default)
    return " ".join(parts)


def help_text(name: str) -> str:
    """The meaning, then the allowed range and the default, e.g. "… Allowed 1–3650; default 30."."""
    _, _, meaning = FIELDS[name]
    if name not in POLICY_BOUNDS:
        return meaning
    lo, hi = POLICY_BOUNDS[name]
    field = Tenant._meta.get_field(name)
    assert isinstance(field, Field)  # a policy setting is a column, not a relation
    nullable = name in NULLABLE_POLICY
    default = "" if nullable else f"Default {_amount(name, field.default)}."
    return described(meaning, (_amount(name, lo), _amount(name, hi)), nullable, _DEPLOYMENT_DEFAULT.get(name), default)
