"""Operator-console operations that reach into apps to the right of tenants.

Layering (ARCHITECTURE.md): tenants ← messaging ← protocol. The admin and the operator API are
adapters on the outside of the stack, so this one module imports messaging and protocol *lazily*
(inside functions, at call time); the tenants models, services and selectors never do.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from django.utils import timezone

from .models import Tenant
from .services import Actor, audit_record

PURGE_KINDS = ("nonces", "pending_events", "contract_requests", "contracts")


def tenant_statistics(*, tenant: Tenant):
    """Live figures (apps.messaging.selectors.TenantStatistics) for one tenant."""
    from apps.messaging.selectors import tenant_statistics as stats

    return stats(tenant=tenant)


@dataclass(frozen=True)
class PurgeResult:
    dry_run: bool
    counts: dict[str, int]

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def summary(self) -> str:
        verb = "would purge" if self.dry_run else "purged"
        parts = ", ".join(f"{n} {kind.replace('_', ' ')}" for kind, n in self.counts.items())
        return f"{verb} {parts}"


def tenant_purge_expired(*, tenant: Tenant, actor: Actor, dry_run: bool) -> PurgeResult:
    """Count (dry run) or remove a tenant's expired nonces, pending events, contract requests and contracts."""
    from apps.messaging import maintenance
    from apps.protocol.models import Nonce

    now = timezone.now()
    now_ms = int(time.time() * 1000)
    # No enclosing transaction: each purge deletes in its own short batches (maintenance.py).
    nonces = Nonce.objects.filter(tenant=tenant, expires_at__lte=now_ms)
    counts = {
        "nonces": nonces.count() if dry_run else nonces.delete()[0],
        "pending_events": maintenance.purge_expired_pending_events(tenant=tenant, now=now, dry_run=dry_run),
        "contract_requests": maintenance.purge_contract_requests(tenant=tenant, now=now, dry_run=dry_run),
        "contracts": maintenance.purge_expired_contracts(tenant=tenant, now=now, dry_run=dry_run),
    }
    if not dry_run:
        audit_record(actor=actor, action="tenant.purge_expired", tenant=tenant, before=None, after=counts)
    return PurgeResult(dry_run=dry_run, counts=counts)
