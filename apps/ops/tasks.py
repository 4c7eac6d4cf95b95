"""Celery tasks: thin adapters over apps.ops.jobs (docs/contributing.md §1, §11). They take ids, not objects,
re-fetch what they need, and are idempotent: a retried or duplicated delivery deletes nothing
twice (the jobs delete by condition and skip when another run holds the job's lock)."""

from __future__ import annotations

from celery import shared_task

from .jobs import run_job


@shared_task(name="apps.ops.tasks.prune_nonces", ignore_result=True, counts_itself=True)
def prune_nonces(tenant_id: int | None = None) -> str:
    """DCTRL-0004 §5.3: drop nonces whose timestamp window has passed."""
    return run_job("prune_nonces", tenant_id=tenant_id)


@shared_task(name="apps.ops.tasks.purge_pending_events", ignore_result=True, counts_itself=True)
def purge_pending_events(tenant_id: int | None = None) -> str:
    """docs/protocol-readings.md §5: pending events past their tenant's TTL."""
    return run_job("purge_pending_events", tenant_id=tenant_id)


@shared_task(name="apps.ops.tasks.purge_contract_requests", ignore_result=True, counts_itself=True)
def purge_contract_requests(tenant_id: int | None = None) -> str:
    """Acknowledged contract requests, and unacknowledged ones past the tenant's TTL."""
    return run_job("purge_contract_requests", tenant_id=tenant_id)


@shared_task(name="apps.ops.tasks.purge_expired_contracts", ignore_result=True, counts_itself=True)
def purge_expired_contracts(tenant_id: int | None = None) -> str:
    """Contracts whose expires_at has passed."""
    return run_job("purge_expired_contracts", tenant_id=tenant_id)


@shared_task(name="apps.ops.tasks.prune_public_tombstones", ignore_result=True, counts_itself=True)
def prune_public_tombstones(tenant_id: int | None = None) -> str:
    """DCTRL-0007 deletes leave tombstones that count for the publish rate for a while; then they go."""
    return run_job("prune_public_tombstones", tenant_id=tenant_id)
