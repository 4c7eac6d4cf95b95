"""Extension points of the DIDComm message path, filled in DidcommConfig.ready().

OBSERVERS see every finished DIDComm message's metadata (metering, metrics). They must never
raise and never receive a payload, an attachment, a key or any DID other than a verified sender.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

# The usage channel of every DIDComm v2 record (beside Decentrl's DCTRL-0004 channels).
CHANNEL = "didcomm-v2"
CHANNEL_V1 = "didcomm-v1"  # the same records for the DIDComm v1 (RFC 0019) front door


@dataclass(frozen=True)
class MessageRecord:
    """Metadata of one DIDComm message, the same fields as Decentrl's CommandRecord (usage metering)."""

    tenant_id: int | None
    tenant_slug: str | None
    at: datetime
    transport: str  # "http" | "ws"
    channel: str | None
    command_type: str | None  # the short message type, e.g. "routing/2.0/forward"
    code: str  # "SUCCESS", "EVICTED" (stored after evicting the oldest) or a problem code
    http_status: int
    bytes_in: int
    bytes_out: int
    duration_ms: float
    sender_did: str | None  # only an authcrypt-verified sender
    remote_addr: str | None


OBSERVERS: list[Callable[[Any], None]] = []
