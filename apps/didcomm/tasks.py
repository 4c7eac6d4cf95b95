"""Celery tasks of the DIDComm front door: thin adapters over apps.ops.jobs (STYLE §11)."""

from __future__ import annotations

from celery import shared_task

from apps.ops.jobs import run_job


@shared_task(name="apps.didcomm.tasks.purge_messages", ignore_result=True)
def purge_messages(tenant_id: int | None = None) -> str:
    """UC-021 AF-5: queued DIDComm messages past their tenant's TTL."""
    return run_job("purge_didcomm_messages", tenant_id=tenant_id)
