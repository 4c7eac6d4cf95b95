"""The provider interface every push service implements (docs/push.md, "Providers").

A provider is stateless about tenants: `send` gets the tenant's unsealed credentials, its
non-secret settings and one device token, and answers a `Result`. What the sender does with the
answer (apps/push/sender.py) is the same for every provider:

- `sent`: the device was woken.
- `dead_token`: the provider says this token will never work again (FCM UNREGISTERED, APNs 410,
  Web Push 404/410, a webhook's 410). The device is deleted, and only on this outcome.
- `retry`: the provider is down, slow or throttling; try again later (`retry_after_s` when it
  said how long, else exponential backoff with jitter).
- `failed`: our side is wrong (credentials refused, a payload the provider rejects). The device
  is kept and the provider's state records the reason; retrying would fail the same way.

`reason` is a short bounded code (it becomes a metric label and the tenant page's last error):
never a token, a credential, a payload or text the provider sent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

Outcome = Literal["sent", "dead_token", "retry", "failed"]


@dataclass(frozen=True)
class Wake:
    """What a push says. By default nothing identifying: a silent, content-free wake-up; `visible`
    asks for an alert built from the tenant's localisation keys (docs/push.md, "Privacy")."""

    visible: bool = False
    title_loc_key: str | None = None
    body_loc_key: str | None = None
    collapse_id: str | None = None


@dataclass(frozen=True)
class Result:
    """One send's outcome (see the module docstring)."""

    outcome: Outcome
    reason: str = ""  # short code, no secrets
    retry_after_s: float | None = None


class Provider(Protocol):
    """One push service. `check` validates credentials and settings when an operator saves them
    (raises ValueError(reason), a short text fit for the form); `send` delivers one wake."""

    kind: str

    def check(self, credentials: dict, settings: dict) -> None: ...

    def send(self, credentials: dict, settings: dict, token: str, wake: Wake) -> Result: ...


# The registry by kind, filled by the provider modules when imported (apps/push/providers/__init__.py).
PROVIDERS: dict[str, Provider] = {}


def register(provider: Provider) -> Provider:
    """Add `provider` to PROVIDERS under its kind (one per kind)."""
    if provider.kind in PROVIDERS:
        raise ValueError(f"push provider {provider.kind!r} registered twice")
    PROVIDERS[provider.kind] = provider
    return provider
