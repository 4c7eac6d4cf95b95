"""Sliding-window rate limits (PROTOCOL-DECISIONS §7, UC-021 AF-2), shared through Redis.

A limit is "at most N hits in any 60 seconds" for one (scope, tenant, key). With Redis
(MEDIATOR_RATE_LIMIT_REDIS_URL, default REDIS_URL) every Daphne process shares one window per
key through an atomic Lua script over a sorted set; without it (the embedded default, one
process) an in-process window with the same semantics is used. Refused hits are not recorded,
so a client that backs off for Retry-After seconds gets through again.

Keys never contain a DID or an address in clear: they are hashed (PROTOCOL-DECISIONS §9).
If Redis is unreachable the limiter fails open and logs a warning: a broken limiter must not
turn into refused service (and never into a 500).
"""

from __future__ import annotations

import hashlib
import logging
import math
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass
from typing import Protocol

from django.conf import settings

log = logging.getLogger("mediator.ratelimit")

WINDOW_MS = 60_000

# KEYS[1] = window key; ARGV = now_ms, window_ms, limit, member.
# Returns {allowed (1/0), retry_after_ms}. Runs atomically in Redis: the lock is Redis' single
# script at a time, so concurrent processes can never admit more than `limit` per window.
_LUA = """
local key = KEYS[1]
local now = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', key, '-inf', now - window)
local count = redis.call('ZCARD', key)
if count < limit then
  redis.call('ZADD', key, now, ARGV[4])
  redis.call('PEXPIRE', key, window)
  return {1, 0}
end
local oldest = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
local retry = window
if oldest[2] then retry = tonumber(oldest[2]) + window - now end
return {0, retry}
"""


def _now_ms() -> int:
    """The limiter's clock (tests freeze it)."""
    return int(time.time() * 1000)


@dataclass(frozen=True)
class Decision:
    allowed: bool
    retry_after_s: int = 0


class Backend(Protocol):
    def hit(self, key: str, limit: int, now_ms: int, window_ms: int) -> Decision: ...


def _retry_seconds(retry_ms: int) -> int:
    return max(1, math.ceil(retry_ms / 1000))


class LocalBackend:
    """One process's sliding windows (the embedded default has one Daphne process)."""

    MAX_KEYS = 100_000

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._hits: dict[str, deque[int]] = {}

    def hit(self, key: str, limit: int, now_ms: int, window_ms: int) -> Decision:
        # One lock for all keys: the critical section is a few deque operations.
        with self._lock:
            hits = self._hits.get(key)
            if hits is None:
                if len(self._hits) >= self.MAX_KEYS:
                    self._sweep(now_ms, window_ms)
                hits = self._hits[key] = deque()
            while hits and hits[0] <= now_ms - window_ms:
                hits.popleft()
            if len(hits) < limit:
                hits.append(now_ms)
                return Decision(True)
            return Decision(False, _retry_seconds(hits[0] + window_ms - now_ms))

    def _sweep(self, now_ms: int, window_ms: int) -> None:
        """Drop idle keys so that the table stays bounded under address churn."""
        for k in [k for k, v in self._hits.items() if not v or v[-1] <= now_ms - window_ms]:
            del self._hits[k]

    def reset(self) -> None:
        with self._lock:
            self._hits.clear()


class RedisBackend:
    """Windows shared by every process through one Redis."""

    def __init__(self, url: str) -> None:
        import redis

        self.client = redis.Redis.from_url(url, socket_timeout=0.5, socket_connect_timeout=0.5)
        self.script = self.client.register_script(_LUA)

    def hit(self, key: str, limit: int, now_ms: int, window_ms: int) -> Decision:
        allowed, retry_ms = self.script(
            keys=[key], args=[now_ms, window_ms, limit, f"{now_ms}:{uuid.uuid4().hex[:12]}"]
        )
        if int(allowed):
            return Decision(True)
        return Decision(False, _retry_seconds(int(retry_ms)))


_backend: Backend | None = None
_backend_url: str | None = None
_backend_lock = threading.Lock()


def backend() -> Backend:
    """The configured backend, built once per process (and rebuilt if the setting changes)."""
    global _backend, _backend_url
    url = settings.MEDIATOR_RATE_LIMIT_REDIS_URL or ""
    if _backend is None or url != _backend_url:
        with _backend_lock:
            if _backend is None or url != _backend_url:
                _backend = RedisBackend(url) if url else LocalBackend()
                _backend_url = url
    return _backend


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode("utf-8")).hexdigest()[:32]


def hit(scope: str, tenant_id: int | None, ident: str, limit: int) -> Decision:
    """Count one hit of `ident` in `scope`; refuse if `limit` hits happened in the last minute."""
    if limit <= 0:
        return Decision(True)
    key = f"{settings.MEDIATOR_RATE_LIMIT_PREFIX}:{scope}:{tenant_id or 0}:{_digest(ident)}"
    try:
        return backend().hit(key, limit, _now_ms(), WINDOW_MS)
    except Exception:  # noqa: BLE001 - fail open: the limiter must never refuse service by itself
        log.warning("rate limiter unavailable; allowing (scope=%s)", scope)
        from . import metrics

        metrics.RATE_LIMIT_ERRORS.inc()
        return Decision(True)
