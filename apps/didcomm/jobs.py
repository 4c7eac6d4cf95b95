"""The DIDComm maintenance job (registered with apps.ops.jobs in DidcommConfig.ready)."""

from __future__ import annotations

from datetime import datetime

from apps.ops.jobs import Job

from .outbound import outbound_purge_expired
from .queue import messages_purge_expired
from .replay import seen_messages_prune


def _purge(*, now: datetime, dry_run: bool, tenant) -> int:
    return messages_purge_expired(tenant=tenant, now=now, dry_run=dry_run)


# UC-021 AF-5: queued messages past their tenant's message_ttl_hours are removed.
PURGE_JOB = Job("purge_didcomm_messages", "expired DIDComm messages", "purged", _purge, "didcomm_messages")


def _purge_outbound(*, now: datetime, dry_run: bool, tenant) -> int:
    return outbound_purge_expired(tenant=tenant, now=now, dry_run=dry_run)


# DIDComm v1: outbound POSTs past their expiry are given up (an attempt removes them too).
OUTBOUND_PURGE_JOB = Job(
    "purge_didcomm_outbound", "expired DIDComm v1 outbound messages", "purged", _purge_outbound, "didcomm_outbound"
)


def _prune_seen(*, now: datetime, dry_run: bool, tenant) -> int:
    return seen_messages_prune(tenant=tenant, now=now, dry_run=dry_run)


# Replay protection: message ids past their record's expiry (docs/didcomm.md "Replays").
SEEN_PRUNE_JOB = Job("prune_didcomm_message_ids", "DIDComm message ids", "pruned", _prune_seen, "didcomm_message_ids")
