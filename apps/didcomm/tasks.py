"""Celery tasks of the DIDComm front door: thin adapters over apps.ops.jobs (docs/contributing.md §11)."""

from __future__ import annotations

from celery import shared_task
from django.conf import settings
from django.utils import timezone

from apps.ops.jobs import run_job

from .outbound import outbound_deliver, outbound_deliver_due


@shared_task(name="apps.didcomm.tasks.purge_messages", ignore_result=True, counts_itself=True)
def purge_messages(tenant_id: int | None = None) -> str:
    """UC-021 AF-5: queued DIDComm messages past their tenant's TTL."""
    return run_job("purge_didcomm_messages", tenant_id=tenant_id)


@shared_task(name="apps.didcomm.tasks.prune_message_ids", ignore_result=True, counts_itself=True)
def prune_message_ids(tenant_id: int | None = None) -> str:
    """Replay protection: remembered message ids past their expiry."""
    return run_job("prune_didcomm_message_ids", tenant_id=tenant_id)


@shared_task(name="apps.didcomm.tasks.deliver_outbound", ignore_result=True)
def deliver_outbound(outbound_id: int) -> str:
    """DIDComm v1: POST one queued reply or forwarded message to its agent; re-queue itself on failure."""
    attempt = outbound_deliver(outbound_id=outbound_id)
    if attempt.retry_in is not None:
        # The retry goes to the outbound queue, as the first attempt did (outbound.outbound_create).
        deliver_outbound.apply_async(
            args=[outbound_id], countdown=attempt.retry_in, queue=settings.MEDIATOR_DIDCOMM_OUTBOUND_QUEUE
        )
    return attempt.outcome


@shared_task(name="apps.didcomm.tasks.deliver_due_outbound", ignore_result=True)
def deliver_due_outbound() -> str:
    """DIDComm v1: the retry sweep (rows whose task was lost: broker down, worker killed)."""
    return f"delivered {outbound_deliver_due(now=timezone.now())} DIDComm v1 outbound messages"
