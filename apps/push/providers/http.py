"""What the three push providers share about HTTP (docs/push.md, "Providers"): the Retry-After
header, the reasons of failures that never reached the provider, and the bounded reason codes.

A `Result.reason` ends up in a metric label and on the tenant page, so it is always one of a
bounded set of short codes: the provider's own error code when it is one the provider documents,
`other` otherwise, never text the provider sent.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from email.utils import parsedate_to_datetime

import httpx

from .base import Result

# A wake is small and a provider is either up or not: a request that takes longer than this is
# retried later rather than holding a worker.
TIMEOUT = httpx.Timeout(10.0, connect=5.0)
# Retry-After above this is taken as this: a provider never parks a device for longer.
RETRY_AFTER_CAP_S = 3600.0


class LazyClient:
    """A provider's one HTTP client in this process, made on first use under a lock (the push worker
    sends from several threads): its connections stay open between sends, so a wake costs a request,
    not a TCP (and TLS) handshake. `make` builds the client (an httpx.Client, or a requests.Session
    per thread when `per_thread`, requests' sessions not being thread-safe)."""

    def __init__(self, make: Callable[[], object], *, per_thread: bool = False) -> None:
        self._make = make
        self._lock = threading.Lock()
        self._shared: object | None = None
        self._local = threading.local() if per_thread else None

    def get(self):
        if self._local is not None:
            client = getattr(self._local, "client", None)
            if client is None:
                client = self._local.client = self._make()
            return client
        if self._shared is None:
            with self._lock:
                if self._shared is None:
                    self._shared = self._make()
        return self._shared


def retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or an HTTP-date, RFC 9110 §10.2.3),
    capped; None when absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return min(float(value), RETRY_AFTER_CAP_S)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        return None
    delta = when.timestamp() - (time.time() if now is None else now)
    return min(max(delta, 0.0), RETRY_AFTER_CAP_S)


def bounded(reason: str, known: frozenset[str]) -> str:
    """The provider's reason code if it is a documented one, else `other` (a metric label's values
    stay bounded whatever a provider answers)."""
    return reason if reason in known else "other"


def transport_failure(exc: Exception) -> Result:
    """A request that got no answer (refused, reset, timed out): the provider may be down; retry."""
    return Result("retry", "timeout" if isinstance(exc, httpx.TimeoutException) else "unreachable")
