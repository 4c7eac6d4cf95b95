"""Operator-console operations that span apps: a tenant's live figures and its purge, called by
the tenant pages (admin.py) and the operator API (api.py)."""

from __future__ import annotations

from dataclasses import dataclass

from django.utils import timezone

from apps.messaging.selectors import TenantStatistics
from apps.messaging.selectors import tenant_statistics as stats
from apps.ops.jobs import JOBS, tenant_purge
from apps.tenants.models import Tenant
from apps.tenants.services import Actor, audit_record


def tenant_statistics(*, tenant: Tenant) -> TenantStatistics:
    """Live figures for one tenant."""
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


def purge_kinds() -> tuple[str, ...]:
    """The keys of a purge's counts, in the order the jobs run."""
    return tuple(job.key or job.name for job in JOBS.values())


def tenant_purge_expired(*, tenant: Tenant, actor: Actor, dry_run: bool) -> PurgeResult:
    """Count (dry run) or remove what every maintenance job would remove for this tenant now."""
    # No enclosing transaction: each purge deletes in its own short batches (maintenance.py).
    counts = tenant_purge(tenant=tenant, now=timezone.now(), dry_run=dry_run)
    if not dry_run:
        audit_record(actor=actor, action="tenant.purge_expired", tenant=tenant, before=None, after=counts)
    return PurgeResult(dry_run=dry_run, counts=counts)
