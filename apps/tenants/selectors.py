"""Tenant lookups. `tenant_for_host` runs on every request, so it keeps host → Tenant in a
per-process cache (apps/tenants/cache.py), cleared by any Tenant/TenantDomain save or delete (apps.py).
Race accepted: a request that started before a save may still be served from the entry it already read.
"""

from __future__ import annotations

from django.conf import settings
from django.db.models.base import ModelState

from .cache import TenantCache
from .models import Tenant, TenantDomain

# Unknown hosts are cached too: the cap bounds what a Host-header scan can grow.
HOSTS: TenantCache[Tenant | None] = TenantCache("tenant-cache", max_entries=1024)
tenant_cache_clear = HOSTS.clear


def _clone(tenant: Tenant | None) -> Tenant | None:
    """A per-request copy of a cached tenant (callers may set attributes); cheaper than copy.copy."""
    if tenant is None:
        return None
    clone = Tenant.__new__(Tenant)
    clone.__dict__.update(tenant.__dict__)
    state = clone._state = ModelState()
    state.__dict__.update(tenant._state.__dict__)
    state.fields_cache = {}
    return clone


def _lookup(host: str) -> Tenant | None:
    tenant = Tenant.objects.filter(domain=host).first()
    if tenant is None:
        alias = TenantDomain.objects.select_related("tenant").filter(domain=host).first()
        tenant = alias.tenant if alias else None
    return tenant


def _resolve(host: str) -> Tenant | None:
    tenant = _lookup(host)
    if tenant is None and ":" in host:
        name, _, port = host.rpartition(":")
        if port in ("80", "443"):
            tenant = _lookup(name)
    if tenant is None and settings.MEDIATOR_DEFAULT_TENANT:
        tenant = Tenant.objects.filter(slug=settings.MEDIATOR_DEFAULT_TENANT).first()
    return tenant


def tenant_for_host(host: str) -> Tenant | None:
    """The tenant serving `host` (its domain or an alias, exact host[:port]), else the default tenant, else None."""
    host = host.lower()
    return _clone(HOSTS.load(host, lambda: _resolve(host))[0])


def domain_owner(domain: str, *, exclude_tenant_id: int | None = None) -> str | None:
    """The slug of the tenant serving `domain` as its domain or an alias (other than
    `exclude_tenant_id`), or None when no tenant does."""
    tenants = Tenant.objects.filter(domain=domain)
    aliases = TenantDomain.objects.filter(domain=domain)
    if exclude_tenant_id is not None:
        tenants = tenants.exclude(pk=exclude_tenant_id)
        aliases = aliases.exclude(tenant_id=exclude_tenant_id)
    slug = tenants.values_list("slug", flat=True).first()
    return slug or aliases.values_list("tenant__slug", flat=True).first()
