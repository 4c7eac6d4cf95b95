"""Device registration for push wake-ups, DIDComm v1 and v2 alike (docs/push.md, "Registration"):
Aries RFC 0734 (`push-notifications-fcm/1.0`) and RFC 0699 (`push-notifications-apns/1.0`), the
same URIs and bodies in both versions. The version's handler finds the caller's granted mediation
(v2: the authcrypt sender's; v1: its connection's) and its message's fields; this module checks
the fields and makes the one service call. A device belongs to the mediation's wake subject only,
so a token is never attached to somebody else's queue.

`set-device-info` sets, replaces, or (every field null) removes, and is not answered (docs/push.md
says why); `get-device-info` is answered `device-info`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from apps.push.models import Service
from apps.push.services import DeviceInvalid, device_get, device_remove, device_set, subject_for_mediation
from apps.tenants.models import Tenant

from .models import Mediation
from .problems import Problem
from .protocols import PUSH_APNS, PUSH_FCM, Code


@dataclass(frozen=True)
class Kind:
    """One registration protocol: its message type prefix, its push service and its body fields."""

    base: str
    service: str
    fields: tuple[str, ...]

    def problem(self, code: str, comment: str, status: int = 400) -> Problem:
        """A problem of this protocol (in v1, of its own problem-report type)."""
        return Problem(code, comment, status, report_type_v1=self.base + "problem-report")


FCM = Kind(PUSH_FCM, Service.FCM, ("device_token", "device_platform"))
APNS = Kind(PUSH_APNS, Service.APNS, ("device_token",))


def kind_of(message_type: str) -> Kind:
    return FCM if message_type.startswith(PUSH_FCM) else APNS


def info_set(tenant: Tenant, mediation: Mediation, kind: Kind, get: Callable[[str], object]) -> str:
    """`set-device-info`: the fields `get` reads (absent is null); what was done (set, removed)."""
    values = {name: get(name) for name in kind.fields}
    for name, value in values.items():
        if value is not None and not isinstance(value, str):
            raise kind.problem(Code.BAD_BODY, f"{name} must be a string or null")
    subject = subject_for_mediation(mediation.client_hash)
    if all(value is None for value in values.values()):
        device_remove(tenant=tenant, subject=subject, service=kind.service)
        return "removed"
    if any(value is None for value in values.values()):
        missing = ", ".join(name for name, value in values.items() if value is None)
        raise kind.problem(Code.MISSING_VALUE, f"{missing} is null: set every field, or every field null to remove")
    token = values["device_token"]
    assert isinstance(token, str)
    platform = values.get("device_platform")
    try:
        device_set(
            tenant=tenant,
            subject=subject,
            service=kind.service,
            token=token,
            platform=platform if isinstance(platform, str) else None,
        )
    except DeviceInvalid as exc:
        raise kind.problem(Code.BAD_BODY, exc.detail) from None
    return "set"


def info_get(tenant: Tenant, mediation: Mediation, kind: Kind) -> dict[str, str | None]:
    """`get-device-info`: the registered device's fields, or the protocol's not-registered problem."""
    device = device_get(tenant=tenant, subject=subject_for_mediation(mediation.client_hash), service=kind.service)
    if device is None:
        raise kind.problem(Code.NOT_REGISTERED, "no device is registered for push notifications", 404)
    values: dict[str, str | None] = {"device_token": device.token, "device_platform": device.platform}
    return {name: values[name] for name in kind.fields}
