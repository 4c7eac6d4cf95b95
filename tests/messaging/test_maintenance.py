"""apps/messaging/maintenance.py: each tenant's own TTLs, dry runs that delete nothing, tenant scoping."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from apps.messaging import maintenance
from apps.messaging.models import Contract, ContractRequest, PendingEvent


def _pending(tenant, age_days: float, acked: bool = False) -> PendingEvent:
    ev = PendingEvent.objects.create(tenant=tenant, recipient_did="did:r", sender_did="did:s", payload="p")
    PendingEvent.objects.filter(pk=ev.pk).update(
        created_at=timezone.now() - timedelta(days=age_days), acknowledged_at=timezone.now() if acked else None
    )
    return ev


def test_pending_events_follow_each_tenants_ttl(tenant_a, tenant_b, actor):
    from apps.tenants.services import tenant_update

    tenant_update(tenant=tenant_a, actor=actor, pending_event_ttl_days=1)
    tenant_a.refresh_from_db()
    _pending(tenant_a, 2)
    _pending(tenant_a, 2, acked=True)
    keep_a = _pending(tenant_a, 0.5)
    _pending(tenant_b, 31)
    keep_b = _pending(tenant_b, 2)

    assert maintenance.purge_expired_pending_events(dry_run=True) == 3
    assert PendingEvent.objects.count() == 5
    assert maintenance.purge_expired_pending_events(tenant=tenant_b) == 1
    assert maintenance.purge_expired_pending_events() == 2
    assert set(PendingEvent.objects.values_list("pk", flat=True)) == {keep_a.pk, keep_b.pk}


def test_contract_requests_go_when_acknowledged_or_stale(tenant_a, tenant_b):
    def req(tenant, age_days: float, acked: bool) -> ContractRequest:
        r = ContractRequest.objects.create(
            tenant=tenant,
            recipient_did="did:r",
            sender_did="did:s",
            encrypted_contract_request="e",
            requestor_ephemeral_public_key="k",
        )
        ContractRequest.objects.filter(pk=r.pk).update(
            created_at=timezone.now() - timedelta(days=age_days), acknowledged_at=timezone.now() if acked else None
        )
        return r

    req(tenant_a, 0, acked=True)
    req(tenant_a, 31, acked=False)
    fresh = req(tenant_a, 1, acked=False)
    other = req(tenant_b, 0, acked=True)
    assert maintenance.purge_contract_requests(tenant=tenant_a, dry_run=True) == 2
    assert maintenance.purge_contract_requests(tenant=tenant_a) == 2
    assert set(ContractRequest.objects.values_list("pk", flat=True)) == {fresh.pk, other.pk}


def test_expired_contracts_are_kept_for_the_retention_period(tenant_a, settings):
    settings.MEDIATOR_EXPIRED_CONTRACT_RETENTION_DAYS = 30
    now_s = int(timezone.now().timestamp())

    def contract(expires_at: int, h: str) -> Contract:
        return Contract.objects.create(
            tenant=tenant_a,
            owner_did="did:o",
            requestor_did="did:o",
            recipient_did="did:p",
            expires_at=expires_at,
            contract_hash=h,
            signed_contract="{}",
        )

    contract(now_s - 31 * 86_400, "old")
    recent = contract(now_s - 86_400, "recent")
    live = contract(now_s + 86_400, "live")
    assert maintenance.purge_expired_contracts(dry_run=True) == 1
    assert maintenance.purge_expired_contracts() == 1
    assert maintenance.purge_expired_contracts(retention_days=0) == 1
    assert list(Contract.objects.values_list("pk", flat=True)) == [live.pk]
    assert recent.pk not in Contract.objects.values_list("pk", flat=True)
