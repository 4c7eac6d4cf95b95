"""Pruning the nonce store. The claim itself is in apps/decentrl/storage.py (CLAIM)."""

from __future__ import annotations

from apps.messaging.replay import past
from apps.ops.jobs import Job

from .models import Nonce


def nonces_prune(*, now_ms: int, tenant=None, dry_run: bool = False) -> int:
    """Delete (or count) expired nonces, of every tenant or one (DCTRL-0004 §5.3); safe to run concurrently.

    A pair is kept until `timestamp + window` inclusive (docs/protocol-notes.md §3): only rows
    past their expiry go (messaging.replay.past).
    """
    qs = past(Nonce.objects.all(), now_ms)
    if tenant is not None:
        qs = qs.filter(tenant=tenant)
    return qs.count() if dry_run else qs.delete()[0]


def nonce_count() -> int:
    """Rows in the replay store, every tenant (the /metrics gauge)."""
    return Nonce.objects.count()


def _prune_job(*, now, dry_run: bool, tenant) -> int:
    return nonces_prune(now_ms=int(now.timestamp() * 1000), tenant=tenant, dry_run=dry_run)


# Registered with the maintenance jobs (apps.ops.jobs) by DecentrlConfig.ready().
PRUNE_JOB = Job("prune_nonces", "nonces", "pruned", _prune_job, "nonces")
