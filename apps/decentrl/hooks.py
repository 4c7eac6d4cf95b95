"""Extension points of the command path, filled by other apps in AppConfig.ready().

- PRE_CHECKS run before parsing: (tenant, meta) -> None, may raise ProtocolError (per-IP limits, body caps).
- SENDER_CHECKS run after the envelope parses and its signature is checked, before replay checks:
  (tenant, command, meta, verified) -> None, may raise ProtocolError (per-DID limits). `verified`
  is True when the command's signature verified under its header's sender_did.
- OBSERVERS see every finished command's metadata (metering, metrics). They must never raise
  and never receive payloads, tags or signatures, nor a sender DID whose signature did not verify.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any


@dataclass(frozen=True)
class RequestMeta:
    transport: str  # "http" | "ws"
    remote_addr: str | None
    bytes_in: int


@dataclass(frozen=True)
class CommandRecord:
    """Metadata of one command: what metering and metrics may see, nothing more."""

    tenant_id: int | None
    tenant_slug: str | None
    at: datetime
    transport: str
    channel: str | None
    command_type: str | None
    code: str
    http_status: int
    bytes_in: int
    bytes_out: int
    duration_ms: float
    # Only once the command's signature verified over a fresh nonce; None for every command that
    # failed before (unparsed, replayed, unknown sender or key, bad signature): a claimed DID is
    # anybody's to write (issue 13 item 9).
    sender_did: str | None
    remote_addr: str | None


PRE_CHECKS: list[Callable[[Any, RequestMeta], None]] = []
SENDER_CHECKS: list[Callable[[Any, Any, RequestMeta, bool], None]] = []
OBSERVERS: list[Callable[[CommandRecord], None]] = []

# WebSocket admission (filled by the limits app, called by the realtime consumer):
# (tenant, ip) -> None, raising ProtocolError(RATE_LIMITED) to refuse.
WS_CONNECT_CHECKS: list[Callable[[Any, str | None], None]] = []
WS_AUTH_CHECKS: list[Callable[[Any, str | None], None]] = []
# WebSocket lifecycle observers (metrics): (event, tenant_slug) with event in
# {"connect", "authenticated", "disconnect"}. Must never raise.
WS_OBSERVERS: list[Callable[[str, str | None], None]] = []
