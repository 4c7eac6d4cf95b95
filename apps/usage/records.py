"""One finished request's metadata, for every protocol, and the one list of observers that see it.

Both front doors publish a `Record` after every command (Decentrl: HTTP commands and the socket's
AUTHENTICATE) and every DIDComm message (v2 and v1); metering (`metering.observe`, registered by
UsageConfig.ready) and metrics (`ops.metrics.observe`, registered by the front doors) receive it.
An observer must never receive a payload, an attachment, a tag, a signature or a key, nor a sender
DID whose signature did not verify; one that raises is logged and the request goes on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

log = logging.getLogger("mediator.usage.records")

# The usage report's protocol dimension: each front door names its own.
DECENTRL = "decentrl"
DIDCOMM_V2 = "didcomm-v2"
DIDCOMM_V1 = "didcomm-v1"


@dataclass(frozen=True)
class Record:
    """Metadata of one command or message: what metering and metrics may see, nothing more."""

    protocol: str  # DECENTRL | DIDCOMM_V2 | DIDCOMM_V1
    tenant_id: int | None
    tenant_slug: str | None
    at: datetime
    transport: str  # "http" | "ws"
    channel: str | None  # Decentrl's command channel; DIDComm's records carry their protocol
    command_type: str | None  # a Decentrl command type, or a DIDComm short message type
    code: str  # "SUCCESS", an error or problem code (DIDComm: "EVICTED" when stored after evicting)
    http_status: int  # the socket's close code for a refused AUTHENTICATE
    bytes_in: int
    bytes_out: int
    duration_ms: float
    # Only once the request's signature (or authcrypt) verified over a fresh nonce or message id;
    # None for every request that failed before: a claimed DID is anybody's to write.
    sender_did: str | None
    remote_addr: str | None


OBSERVERS: list[Callable[[Record], None]] = []


def subscribe(observer: Callable[[Record], None]) -> None:
    """Add `observer` once (AppConfig.ready() may run more than once in some test setups)."""
    if observer not in OBSERVERS:
        OBSERVERS.append(observer)


def publish(record: Record) -> None:
    """Hand `record` to every observer; an observer's exception never reaches the request."""
    for observer in OBSERVERS:
        try:
            observer(record)
        except Exception:  # noqa: BLE001 - an observer must never break a request
            log.exception("request observer failed")
