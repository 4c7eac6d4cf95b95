"""Tenant lookups, and the per-process cache of what is read from tenant-owned rows on every
request (`TenantCache`: the host's tenant here, a tenant's DIDComm policy and identities in
apps/didcomm/identity.py), one rule for every such cache.

`tenant_for_host` runs on every request, so it keeps host → Tenant in that cache, cleared by any
Tenant/TenantDomain save or delete (apps.py). Race accepted: a request that started before a save
may still be served from the entry it already read.

The cache: entries live MEDIATOR_TENANT_CACHE_SECONDS (0 = off). A save or delete of a model the
cache is built from clears it in this process now and again after commit (`clear_on_change`): the
second clear drops what another request may have cached from the pre-commit state. A load that a
clear overtook is returned but not kept. Other processes see a change within the TTL.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from django.conf import settings
from django.db import transaction
from django.db.models.base import ModelState
from django.db.models.signals import post_delete, post_save

from .models import Tenant, TenantDomain

V = TypeVar("V")


class TenantCache(Generic[V]):
    """Key → value for MEDIATOR_TENANT_CACHE_SECONDS, at most `max_entries` (past it, emptied)."""

    def __init__(self, name: str, *, max_entries: int):
        self.name, self.max_entries = name, max_entries
        self._entries: dict[Hashable, tuple[V, float]] = {}
        self._lock = threading.Lock()
        self._generation = 0

    def load(
        self, key: Hashable, loader: Callable[[], V], *, valid: Callable[[V], bool] | None = None, reload: bool = False
    ) -> tuple[V, bool]:
        """(the value of `key`, whether it came from the cache): a live entry that `valid` accepts
        (unless `reload`), else `loader()`, kept for the TTL unless a clear happened while it loaded."""
        ttl = settings.MEDIATOR_TENANT_CACHE_SECONDS
        if ttl <= 0:
            return loader(), False
        hit = None if reload else self._entries.get(key)
        if hit is not None and hit[1] > time.monotonic() and (valid is None or valid(hit[0])):
            return hit[0], True
        generation = self._generation
        value = loader()
        with self._lock:
            if generation == self._generation:
                if len(self._entries) >= self.max_entries:
                    self._entries.clear()
                self._entries[key] = (value, time.monotonic() + ttl)
        return value, False

    def _drop(self) -> None:
        with self._lock:
            self._entries.clear()
            self._generation += 1

    def clear(self, **_signal_kwargs) -> None:
        """Forget every entry now and after commit (a signal receiver)."""
        self._drop()
        transaction.on_commit(self._drop)

    def clear_on_change(self, *models: type) -> None:
        """Clear on every save or delete of `models` (from an AppConfig.ready; connected once)."""
        for model in models:
            for signal, verb in ((post_save, "save"), (post_delete, "delete")):
                signal.connect(self.clear, sender=model, dispatch_uid=f"{self.name}-{model.__name__}-{verb}")


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


def canonical_host(host: str) -> str:
    """`host` (host[:port]) lowercased, without the trailing dot of a DNS name's absolute form
    (`example.com.` is `example.com`, RFC 1034 §3.1), as Django's host checks read it: every host
    rule compares this form (docs/operators.md, "Hosts")."""
    host = host.lower()
    if "." not in host[-1:] and ".:" not in host:  # no dot to drop: every request but a few
        return host
    name, colon, port = host.rpartition(":") if not host.endswith("]") else ("", "", host)
    if not colon or not port.isdigit():
        name, colon, port = host, "", ""
    return f"{name[:-1] if name.endswith('.') else name}{colon}{port}"


def tenant_for_host(host: str) -> Tenant | None:
    """The tenant serving `host` (its domain or an alias, exact host[:port]), else the default tenant, else None."""
    host = canonical_host(host)
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
