"""What each DIDComm policy field is called in the console: label with its unit, help with the
allowed range and the default, and the choices (the model's labels). The meaning, bounds and defaults are read
from the model (one source with the operator API's schema); a field missing from the table falls
back to the model's own name, so a new policy field shows up labelled without an entry here."""

from __future__ import annotations

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db.models import Field
from django.utils.text import capfirst

from apps.tenants.texts import described, unit_label
from apps.wire.display import grouped

from .models import DidcommPolicy

# name: (label, unit or ""). Units are plural nouns, as in apps/tenants/texts.py.
FIELDS: dict[str, tuple[str, str]] = {
    "enabled": ("DIDComm enabled", ""),
    "mediation": ("Mediation requests", ""),
    "max_grants": ("Maximum mediation grants", "clients"),
    "max_recipients_per_grant": ("Recipients per grant", "recipient DIDs"),
    "queue_cap": ("DIDComm queue cap", "messages per recipient"),
    "overflow": ("When a DIDComm queue is full", ""),
    "message_ttl_hours": ("DIDComm message lifetime", "hours"),
    "rate_limit_per_sender": ("DIDComm rate limit per sender", "messages per minute"),
    "rate_limit_per_ip": ("DIDComm rate limit per IP address", "requests per minute"),
    "rate_limit_per_ip_burst": ("DIDComm burst per IP address", "requests"),
    "unproven_recipients": ("Recipient DIDs without proof of control", ""),
}
# Nullable fields whose blank means a deployment setting.
DEPLOYMENT_DEFAULT = {
    "rate_limit_per_sender": "MEDIATOR_DIDCOMM_RATE_LIMIT_PER_SENDER",
    "rate_limit_per_ip": "MEDIATOR_DIDCOMM_RATE_LIMIT_PER_IP",
    "rate_limit_per_ip_burst": "MEDIATOR_DIDCOMM_RATE_LIMIT_PER_IP_BURST",
}


def _field(name: str) -> Field:
    """The policy's setting `name`: a column (no policy setting is a relation)."""
    field = DidcommPolicy._meta.get_field(name)
    assert isinstance(field, Field)
    return field


def label(name: str) -> str:
    """`DIDComm message lifetime (hours)`."""
    if name not in FIELDS:
        return str(capfirst(_field(name).verbose_name))
    text, unit = FIELDS[name]
    return unit_label(text, unit)


def _bounds(name: str) -> tuple[int | None, int | None]:
    lo = hi = None
    for v in _field(name).validators:
        if isinstance(v, MinValueValidator):
            lo = v.limit_value
        elif isinstance(v, MaxValueValidator):
            hi = v.limit_value
    return lo, hi


def _amount(value) -> str:
    return grouped(value) if isinstance(value, int) and not isinstance(value, bool) else str(value)


def help_text(name: str) -> str:
    """The meaning, then the allowed range and the default, e.g. "… Allowed 1–100 000; default 1 000."."""
    field = _field(name)
    lo, hi = _bounds(name)
    allowed = (_amount(lo), _amount(hi)) if lo is not None and hi is not None else None
    default = ""
    if field.has_default() and not callable(field.default):
        value = field.default
        if field.choices:
            value = choices(name).get(value, value)
        elif isinstance(value, bool):
            value = "on" if value else "off"
        default = f"Default: {value}." if isinstance(value, str) else f"Default {_amount(value)}."
    return described(str(field.help_text), allowed, field.null, DEPLOYMENT_DEFAULT.get(name), default)


def choices(name: str) -> dict[str, str]:
    """A choice field's values and their labels (the model's)."""
    return {value: str(text) for value, text in _field(name).choices or ()}
