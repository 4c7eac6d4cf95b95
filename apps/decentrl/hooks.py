"""Extension points of the command path, filled by other apps in AppConfig.ready().

- PRE_CHECKS run before parsing: (tenant, meta) -> None, may raise ProtocolError (per-IP limits, body caps).
- SENDER_CHECKS run after the envelope parses and its signature is checked, before replay checks:
  (tenant, command, meta, verified) -> None, may raise ProtocolError (per-DID limits). `verified`
  is True when the command's signature verified under its header's sender_did.

Every finished command's metadata goes to the observers of `apps.usage.records` (metering,
metrics), as every DIDComm message's does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class RequestMeta:
    transport: str  # "http" | "ws"
    remote_addr: str | None
    bytes_in: int


PRE_CHECKS: list[Callable[[Any, RequestMeta], None]] = []
SENDER_CHECKS: list[Callable[[Any, Any, RequestMeta, bool], None]] = []

# WebSocket admission (filled by the limits app, called by the realtime consumer):
# (tenant, ip) -> None, raising ProtocolError(RATE_LIMITED) to refuse.
WS_CONNECT_CHECKS: list[Callable[[Any, str | None], None]] = []
WS_AUTH_CHECKS: list[Callable[[Any, str | None], None]] = []
# WebSocket lifecycle observers (metrics): (event, tenant_slug) with event in
# {"connect", "authenticated", "disconnect"}. Must never raise.
WS_OBSERVERS: list[Callable[[str, str | None], None]] = []
