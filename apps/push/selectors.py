"""What the operator API reads of a tenant's push devices: counts only, never a token or a subject."""

from __future__ import annotations

from django.db.models import Count

from apps.tenants.models import Tenant

from .models import Device, Service


def device_counts(*, tenant: Tenant) -> dict[str, int]:
    """The tenant's registered devices per service, every service named (0 when none)."""
    rows = Device.objects.filter(tenant=tenant).order_by().values_list("service").annotate(n=Count("id"))
    counts = dict.fromkeys(Service.values, 0)
    counts.update(dict(rows))
    return counts
