"""Purges of expired messaging data, shared by the operator console and the scheduled jobs.

Each function takes an optional tenant (None = every tenant, each with its own policy), an
optional `now` (an aware datetime, for tests and for one consistent cut-off per run) and
`dry_run` (count only). Each returns the number of rows it removed, or would remove. Deletes go
in primary-key batches so that no statement holds locks on a large table for long; rows that
become eligible while a purge runs are simply left for the next run.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import F, Q, QuerySet
from django.utils import timezone

from apps.tenants.models import Tenant

from . import notify
from .models import Contract, ContractRequest, PendingEvent

BATCH = 5_000


def _tenants(tenant: Tenant | None):
    if tenant is not None:
        return [tenant]
    return list(Tenant.objects.only("id", "slug", "did", "pending_event_ttl_days", "contract_request_ttl_days"))


def _purge(qs: QuerySet, *, dry_run: bool) -> int:
    if dry_run:
        return qs.count()
    model = qs.model
    total = 0
    while True:
        ids = list(qs.order_by("id").values_list("id", flat=True)[:BATCH])
        if not ids:
            return total
        _, per_model = model.objects.filter(id__in=ids).delete()
        total += per_model.get(model._meta.label, 0)


def purge_expired_pending_events(
    *, tenant: Tenant | None = None, now: datetime | None = None, dry_run: bool = False
) -> int:
    """Remove pending events older than their tenant's TTL, acknowledged or not (docs/protocol-readings.md §5)."""
    now = now or timezone.now()
    total = 0
    for t in _tenants(tenant):
        cutoff = now - timedelta(days=t.pending_event_ttl_days)
        total += _purge(PendingEvent.objects.filter(tenant=t, created_at__lt=cutoff), dry_run=dry_run)
    return total


def purge_contract_requests(*, tenant: Tenant | None = None, now: datetime | None = None, dry_run: bool = False) -> int:
    """Remove acknowledged contract requests and those left unacknowledged past the tenant's TTL."""
    now = now or timezone.now()
    total = 0
    for t in _tenants(tenant):
        cutoff = now - timedelta(days=t.contract_request_ttl_days)
        qs = ContractRequest.objects.filter(tenant=t).filter(
            Q(acknowledged_at__isnull=False) | Q(created_at__lt=cutoff)
        )
        total += _purge(qs, dry_run=dry_run)
    return total


def purge_expired_contracts(
    *,
    tenant: Tenant | None = None,
    now: datetime | None = None,
    dry_run: bool = False,
    retention_days: int | None = None,
) -> int:
    """Remove contracts expired more than `retention_days` ago (default MEDIATOR_EXPIRED_CONTRACT_RETENTION_DAYS).

    Expired contracts authorise nothing, but QUERY_COMMUNICATION_CONTRACTS still lists them
    (docs/protocol-readings.md §5), so they are kept for the retention period before they go.
    The identities whose last registration went with them, and that have no live one, are
    announced (`notify.registrations_ended`: the push app forgets their devices).
    """
    if retention_days is None:
        retention_days = getattr(settings, "MEDIATOR_EXPIRED_CONTRACT_RETENTION_DAYS", 0)
    live_s = int((now or timezone.now()).timestamp())
    now_s = live_s - retention_days * 86_400
    total = 0
    for t in _tenants(tenant):
        expired = Contract.objects.filter(tenant=t, expires_at__lte=now_s)
        ended = [] if dry_run else _registrations_ending(t, expired, live_s)
        total += _purge(expired, dry_run=dry_run)
        if ended:
            notify.registrations_ended.send(sender=None, tenant_id=t.pk, dids=ended)
    return total


def _registrations_ending(tenant: Tenant, expired: QuerySet, live_s: int) -> list[str]:
    """The owners of registration contracts among `expired` that have no live registration."""
    live = Contract.objects.live_registrations(tenant, live_s).values("owner_did")
    owners = (
        expired.filter(requestor_did=F("owner_did"), recipient_did=tenant.did)
        .exclude(owner_did__in=live)
        .values_list("owner_did", flat=True)
        .distinct()
    )
    return list(owners)
