"""Tenant lookups."""

from __future__ import annotations

from django.conf import settings

from .models import Tenant


def tenant_for_host(host: str) -> Tenant | None:
    """The tenant serving `host` (exact host[:port]), else the configured default tenant, else None."""
    host = host.lower()
    tenant = Tenant.objects.filter(domain=host).first()
    if tenant is None and ":" in host:
        name, _, port = host.rpartition(":")
        if port in ("80", "443"):
            tenant = Tenant.objects.filter(domain=name).first()
    if tenant is None and settings.MEDIATOR_DEFAULT_TENANT:
        tenant = Tenant.objects.filter(slug=settings.MEDIATOR_DEFAULT_TENANT).first()
    return tenant


def tenant_by_did(did: str) -> Tenant | None:
    """A tenant hosted by this deployment, by its did:web."""
    return Tenant.objects.filter(did=did).first()
