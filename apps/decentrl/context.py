"""The typed result of authentication, passed explicitly to every handler (docs/contributing.md §9)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from apps.tenants.models import Tenant
from apps.wire.envelope import Command


@dataclass(frozen=True)
class CommandContext:
    tenant: Tenant
    command: Command
    transport: str  # "http" or "ws"
    now_ms: int
    # What the storage call read after claiming the nonce (handlers.READS: QUERY_EVENTS' page).
    read: Any = None

    @property
    def sender_did(self) -> str:
        return self.command.header.sender_did

    @property
    def recipient_did(self) -> str:
        return self.command.header.recipient_did

    @property
    def body(self):
        """The typed payload (wire.envelope: RequestContract, QueryEvents, …)."""
        return self.command.body
