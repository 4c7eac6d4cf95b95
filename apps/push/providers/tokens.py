"""The per-process cache of provider bearer tokens (FCM's OAuth access token, APNs' provider JWT),
keyed by a digest of the tenant's credentials (docs/push.md, "Providers").

One entry per credential set, at most `CAP` of them (the least recently used goes first). Making
a token runs under that entry's own lock, so concurrent sends of one tenant make one token and a
slow token exchange of one tenant holds up no other tenant.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

CAP = 1024


@dataclass(frozen=True)
class Token:
    value: str
    issued_at: float
    expires_at: float


@dataclass
class _Slot:
    lock: threading.Lock = field(default_factory=threading.Lock)
    token: Token | None = None


def credentials_key(*parts: str) -> str:
    """The cache key of a credential set: a digest, so the cache holds no key material as a key."""
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()


class TokenCache:
    """Tokens by credential key; `get` returns the cached one while `fresh(token, now)` holds, else
    makes, stores and returns a new one."""

    def __init__(self, cap: int = CAP) -> None:
        self._cap = cap
        self._lock = threading.Lock()
        self._slots: OrderedDict[str, _Slot] = OrderedDict()

    def _slot(self, key: str) -> _Slot:
        with self._lock:
            slot = self._slots.get(key)
            if slot is None:
                slot = self._slots[key] = _Slot()
                while len(self._slots) > self._cap:
                    self._slots.popitem(last=False)
            else:
                self._slots.move_to_end(key)
            return slot

    def get(
        self, key: str, *, now: Callable[[], float], fresh: Callable[[Token, float], bool], make: Callable[[], Token]
    ) -> Token:
        slot = self._slot(key)
        with slot.lock:
            if slot.token is None or not fresh(slot.token, now()):
                slot.token = make()
            return slot.token

    def drop(self, key: str, token: Token) -> None:
        """Forget `token` (the provider refused it), unless another send already replaced it."""
        slot = self._slot(key)
        with slot.lock:
            if slot.token == token:
                slot.token = None
