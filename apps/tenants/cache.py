"""The per-process cache of what is read from tenant-owned rows on every request (the host's tenant,
a tenant's DIDComm policy and identities): one rule for every such cache.

Entries live MEDIATOR_TENANT_CACHE_SECONDS (0 = off). A save or delete of a model the cache is
built from clears it in this process now and again after commit (`clear_on_change`): the second
clear drops what another request may have cached from the pre-commit state. A load that a clear
overtook is returned but not kept. Other processes see a change within the TTL.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from django.conf import settings
from django.db import transaction
from django.db.models.signals import post_delete, post_save

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
