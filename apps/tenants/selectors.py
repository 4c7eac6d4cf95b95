"""Tenant lookups. `tenant_for_host` runs on every request, so it keeps a small per-process cache.

Cache: host → (Tenant, expiry). Entries live MEDIATOR_TENANT_CACHE_SECONDS (default 5, 0 = off).
Any Tenant/TenantDomain save or delete in this process clears it (signals in apps.py); another
process sees the change within the TTL. Race accepted: a request that started before a save may
still be served from the entry it already read.
"""

from __future__ import annotations

import threading
import time

from django.conf import settings
from django.db import transaction
from django.db.models.base import ModelState

from .models import Tenant, TenantDomain

_cache: dict[str, tuple[Tenant | None, float]] = {}
_cache_lock = threading.Lock()
_MAX_ENTRIES = 1024  # unknown hosts are cached too; cap what a Host-header scan can grow


def _clear() -> None:
    with _cache_lock:
        _cache.clear()


def tenant_cache_clear(**_kwargs) -> None:
    """Forget every cached host now and again after commit (Tenant/TenantDomain save and delete signals).

    The second clear drops an entry another request may have cached from the pre-commit state.
    """
    _clear()
    transaction.on_commit(_clear)


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
    ttl = settings.MEDIATOR_TENANT_CACHE_SECONDS
    if ttl <= 0:
        return _resolve(host)
    now = time.monotonic()
    hit = _cache.get(host)
    if hit is not None and hit[1] > now:
        return _clone(hit[0])
    tenant = _resolve(host)
    with _cache_lock:
        if len(_cache) >= _MAX_ENTRIES:
            _cache.clear()
        _cache[host] = (tenant, now + ttl)
    return _clone(tenant)


def tenant_by_did(did: str) -> Tenant | None:
    """A tenant hosted by this deployment, by its did:web."""
    return Tenant.objects.filter(did=did).first()


def tenant_by_slug(slug: str) -> Tenant | None:
    """A tenant by its slug."""
    return Tenant.objects.filter(slug=slug).first()


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
