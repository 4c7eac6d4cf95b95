"""Abuse limits wired into the command path and /ws (docs/protocol-readings.md §7, UC-021 AF-2).

- per IP, every POST / command (scope `ip`), and every POST /didcomm message (`didcomm_ip`): a token
  bucket, default 6 000 per minute (100 a second) with bursts of 50, a hosted mediator's (carrier NAT
  puts thousands of clients behind one address);
- per sender DID, every command whose signature verifies (`per_did`), default 60/min: the limit that
  stops one abusive client;
- per IP, /ws and /didcomm/ws upgrades (`ws_connect`, one bucket for both paths) and AUTHENTICATE
  attempts (`ws_auth`): token buckets, default 600 per minute with bursts of 100 (a failover
  reconnects every socket behind an address at once).

Every per-IP limit is one function, `per_ip`: the deployment's defaults for its scope
(`PER_IP_DEFAULTS`), a tenant's override where it has one (Tenant.rate_limit_per_ip / _burst,
DidcommPolicy's), and `effective`, the one rule of an override: None is the deployment default, 0
switches the limit off. A refusal is 429 RATE_LIMITED, always with Retry-After.

Two kinds of limit, shared through Redis:

- a sliding window, "at most N hits in any 60 seconds" for one (scope, tenant, key): the per-DID
  and per-sender limits (`hit`);
- a token bucket, "R hits per minute, sustained, with bursts of up to B" (GCRA: one theoretical
  arrival time per key): the per-IP limits and socket admission, which must let a burst through (one wallet's
  onboarding) and a high sustained rate (thousands of phones behind one carrier NAT address)
  (`take`).

With Redis (MEDIATOR_RATE_LIMIT_REDIS_URL, default REDIS_URL or REDIS_SENTINELS) every Daphne process shares one
state per key through an atomic Lua script; without it (the embedded default, one process) an
in-process state with the same semantics is used. Refused hits are not recorded, so a client
that backs off for Retry-After seconds gets through again.

Keys never contain a DID or an address in clear: they are hashed (docs/protocol-readings.md §9).
If Redis is unreachable the limiter fails open and logs the outage once (ops.outage): a broken limiter must not
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

import redis
from django.conf import settings

from apps.wire.errors import ErrorCode, ProtocolError

from . import metrics
from .outage import Outage
from .redisconn import RedisSentinel, fail_fast

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


# KEYS[1] = bucket key; ARGV = now_ms, interval_ms (60 000 / rate per minute), burst.
# Returns {allowed (1/0), retry_after_ms}. The key holds the theoretical arrival time (ms, three
# decimals) and lives until the bucket is full again. Atomic in Redis, as the window script.
_GCRA_LUA = """
local now = tonumber(ARGV[1])
local interval = tonumber(ARGV[2])
local burst = tonumber(ARGV[3])
local tat = tonumber(redis.call('GET', KEYS[1]) or now)
if tat < now then tat = now end
local new_tat = tat + interval
local allow_at = new_tat - burst * interval
if now < allow_at then
  return {0, math.ceil(allow_at - now)}
end
redis.call('SET', KEYS[1], string.format('%.3f', new_tat), 'PX', math.max(1, math.ceil(new_tat - now)))
return {1, 0}
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

    def take(self, key: str, interval_ms: float, burst: int, now_ms: int) -> Decision: ...


def _retry_seconds(retry_ms: int) -> int:
    return max(1, math.ceil(retry_ms / 1000))


class LocalBackend:
    """One process's sliding windows (the embedded default has one Daphne process)."""

    MAX_KEYS = 100_000

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._hits: dict[str, deque[int]] = {}
        self._tat: dict[str, float] = {}  # token buckets: each key's theoretical arrival time

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

    def take(self, key: str, interval_ms: float, burst: int, now_ms: int) -> Decision:
        with self._lock:
            if key not in self._tat and len(self._tat) >= self.MAX_KEYS:
                # A bucket whose arrival time has passed is full again: forgetting it changes nothing.
                for k in [k for k, t in self._tat.items() if t <= now_ms]:
                    del self._tat[k]
            new_tat = max(self._tat.get(key, now_ms), now_ms) + interval_ms
            allow_at = new_tat - burst * interval_ms
            if now_ms < allow_at:
                return Decision(False, _retry_seconds(math.ceil(allow_at - now_ms)))
            self._tat[key] = new_tat
            return Decision(True)

    def reset(self) -> None:
        with self._lock:
            self._hits.clear()
            self._tat.clear()


class RedisBackend:
    """Windows shared by every process through one Redis: a URL, or the master of a Sentinel
    deployment (settings.MEDIATOR_RATE_LIMIT_REDIS_SENTINEL, asked for the master on each new
    connection, so the limits follow a failover)."""

    def __init__(self, target: str | RedisSentinel) -> None:
        options = fail_fast(settings.MEDIATOR_RATE_LIMIT_REDIS_TIMEOUT_MS / 1000)
        self.client = redis.Redis.from_url(target, **options) if isinstance(target, str) else target.client(**options)
        self.script = self.client.register_script(_LUA)
        self.gcra = self.client.register_script(_GCRA_LUA)

    def hit(self, key: str, limit: int, now_ms: int, window_ms: int) -> Decision:
        allowed, retry_ms = self.script(
            keys=[key], args=[now_ms, window_ms, limit, f"{now_ms}:{uuid.uuid4().hex[:12]}"]
        )
        if int(allowed):
            return Decision(True)
        return Decision(False, _retry_seconds(int(retry_ms)))

    def take(self, key: str, interval_ms: float, burst: int, now_ms: int) -> Decision:
        allowed, retry_ms = self.gcra(keys=[key], args=[now_ms, repr(interval_ms), burst])
        if int(allowed):
            return Decision(True)
        return Decision(False, _retry_seconds(int(retry_ms)))


_backend: Backend | None = None
_backend_target: object = None
_backend_lock = threading.Lock()


def backend() -> Backend:
    """The configured backend, built once per process (and rebuilt if the setting changes)."""
    global _backend, _backend_target
    target = settings.MEDIATOR_RATE_LIMIT_REDIS_URL or getattr(settings, "MEDIATOR_RATE_LIMIT_REDIS_SENTINEL", None)
    if _backend is None or target != _backend_target:
        with _backend_lock:
            if _backend is None or target != _backend_target:
                _backend = RedisBackend(target) if target else LocalBackend()
                _backend_target = target
    return _backend


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode("utf-8")).hexdigest()[:32]


def _key(scope: str, tenant_id: int | None, ident: str) -> str:
    return f"{settings.MEDIATOR_RATE_LIMIT_PREFIX}:{scope}:{tenant_id or 0}:{_digest(ident)}"


# This process's view of the limiter's Redis: an outage is logged once, its end with a count.
LIMITER = Outage("rate limiter")


def _failing_open(scope: str, exc: Exception) -> Decision:
    LIMITER.failed(exc, f"limiting (scope={scope}; allowing)")
    metrics.RATE_LIMIT_ERRORS.inc()
    return Decision(True)


def hit(scope: str, tenant_id: int | None, ident: str, limit: int) -> Decision:
    """Count one hit of `ident` in `scope`; refuse if `limit` hits happened in the last minute."""
    if limit <= 0:
        return Decision(True)
    try:
        decision = backend().hit(_key(scope, tenant_id, ident), limit, _now_ms(), WINDOW_MS)
    except Exception as exc:  # noqa: BLE001 - fail open: the limiter must never refuse service by itself
        return _failing_open(scope, exc)
    LIMITER.recovered()
    return decision


def take(scope: str, tenant_id: int | None, ident: str, per_minute: int, burst: int) -> Decision:
    """One hit of `ident` from its `scope` bucket: `per_minute` sustained, up to `burst` at once
    (a full bucket); refused while the bucket is empty, with the seconds until it holds one."""
    if per_minute <= 0:
        return Decision(True)
    try:
        decision = backend().take(
            _key(f"{scope}:tb", tenant_id, ident), WINDOW_MS / per_minute, max(1, burst), _now_ms()
        )
    except Exception as exc:  # noqa: BLE001 - fail open: the limiter must never refuse service by itself
        return _failing_open(scope, exc)
    LIMITER.recovered()
    return decision


# The limits of the command path and the sockets.
def effective(override: int | None, default: int) -> int:
    """A tenant's limit: its override, or the deployment's `default` where it has none (None); 0 is off."""
    return default if override is None else override


def enforce(scope: str, tenant_id: int | None, ident: str, limit: int) -> None:
    """One hit of `ident` in the (scope, tenant) window; RATE_LIMITED with Retry-After past `limit`
    (0 = off). Front doors call it with their own scopes (DIDComm: didcomm_ip, didcomm_sender)."""
    decision = hit(scope, tenant_id, ident, limit)
    if not decision.allowed:
        metrics.RATE_LIMITED.labels(scope).inc()
        raise ProtocolError(ErrorCode.RATE_LIMITED, f"{scope} limit", retry_after=decision.retry_after_s)


def enforce_rate(scope: str, tenant_id: int | None, ident: str, per_minute: int, burst: int) -> None:
    """One hit of `ident` from the (scope, tenant) token bucket: `per_minute` sustained, bursts of
    up to `burst` (0 per minute = off); RATE_LIMITED with Retry-After when it is empty. Front doors
    call it with their own scopes (DIDComm: didcomm_ip)."""
    decision = take(scope, tenant_id, ident, per_minute, burst)
    if not decision.allowed:
        metrics.RATE_LIMITED.labels(scope).inc()
        raise ProtocolError(ErrorCode.RATE_LIMITED, f"{scope} limit", retry_after=decision.retry_after_s)


# Each per-IP scope's deployment defaults: the settings of its rate per minute and its burst.
PER_IP_DEFAULTS = {
    "ip": ("MEDIATOR_RATE_LIMIT_PER_IP", "MEDIATOR_RATE_LIMIT_PER_IP_BURST"),
    "didcomm_ip": ("MEDIATOR_DIDCOMM_RATE_LIMIT_PER_IP", "MEDIATOR_DIDCOMM_RATE_LIMIT_PER_IP_BURST"),
    "ws_connect": ("MEDIATOR_WS_CONNECT_PER_IP", "MEDIATOR_WS_CONNECT_PER_IP_BURST"),
    "ws_auth": ("MEDIATOR_WS_AUTH_PER_IP", "MEDIATOR_WS_AUTH_PER_IP_BURST"),
}


def per_ip(scope: str, tenant_id: int, ip: str | None, rate: int | None = None, burst: int | None = None) -> None:
    """The per-IP policy: one hit of `ip` from the (scope, tenant) token bucket, at the tenant's
    `rate` per minute and `burst` where they override the scope's defaults (`effective`); every
    request counts, whatever its outcome. No address (a Unix socket, a test client) is not limited."""
    if not ip:
        return
    rate_setting, burst_setting = PER_IP_DEFAULTS[scope]
    enforce_rate(
        scope,
        tenant_id,
        ip,
        effective(rate, getattr(settings, rate_setting)),
        effective(burst, getattr(settings, burst_setting)),
    )


def per_did(tenant, sender_did: str, verified: bool) -> None:
    """Only commands that really come from the DID count against it.

    The DID in a header is a claim until the signature is checked; counting unsigned claims would
    let anyone exhaust someone else's budget. `verified` is dispatch's one signature check of this
    command. Commands whose signature fails are left for dispatch to refuse (INVALID_SIGNATURE
    etc.) and are still covered by the per-IP limit. This runs before the nonce is consumed, so a
    refused command can be sent again unchanged after Retry-After.
    """
    limit = effective(tenant.rate_limit_per_did, settings.MEDIATOR_RATE_LIMIT_PER_DID)
    if limit <= 0 or not verified:
        return
    enforce("did", tenant.pk, sender_did, limit)
