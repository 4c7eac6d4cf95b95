"""The DIDComm maintenance job (registered with apps.ops.jobs in DidcommConfig.ready)."""

from __future__ import annotations

from datetime import datetime

from apps.ops.jobs import Job

from .services import messages_purge_expired


def _purge(*, now: datetime, dry_run: bool, tenant) -> int:
    return messages_purge_expired(tenant=tenant, now=now, dry_run=dry_run)


# UC-021 AF-5: queued messages past their tenant's message_ttl_hours are removed.
PURGE_JOB = Job("purge_didcomm_messages", "expired DIDComm messages", "purged", _purge, "didcomm_messages")
