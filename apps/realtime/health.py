"""Is the configured channel layer reachable? Used by /health."""

from __future__ import annotations

import logging
import threading

import redis
from django.conf import settings

from apps.ops.redisconn import RedisSentinel, fail_fast

from .layerloss import CHANNEL_LAYER

log = logging.getLogger("mediator.realtime")

PING_TIMEOUT_S = 0.5
_clients: dict[str, redis.Redis] = {}
_lock = threading.Lock()


def _redis_host() -> dict | None:
    """The first Redis host of the default channel layer as channels_redis reads it (a dict: an
    address, or sentinels and a master's name), or None for a layer with no server."""
    layer = (getattr(settings, "CHANNEL_LAYERS", {}) or {}).get("default") or {}
    if "redis" not in str(layer.get("BACKEND", "")).lower():
        return None
    hosts = (layer.get("CONFIG") or {}).get("hosts") or []
    if not hosts:
        return {"address": "redis://localhost:6379/0"}
    host = hosts[0]
    if isinstance(host, dict):
        return host if "master_name" in host or host.get("address") else None
    if isinstance(host, (tuple, list)):
        return {"address": f"redis://{host[0]}:{host[1]}/0"}
    return {"address": str(host)} if host else None


def _client(host: dict) -> redis.Redis:
    """A pooled client for `host`: through Sentinel, one that asks the sentinels for the current
    master on each new connection (a promoted replica is found without a restart)."""
    key = repr(sorted(host.items()))
    with _lock:
        client = _clients.get(key)
        if client is None:
            if "master_name" in host:
                client = RedisSentinel.from_channel_layer_host(host).client(**fail_fast(PING_TIMEOUT_S))
            else:
                client = redis.Redis.from_url(str(host["address"]), **fail_fast(PING_TIMEOUT_S))
            _clients[key] = client
    return client


def channel_layer_reachable() -> bool:
    """True for the in-memory layer; for Redis, one PING with a short timeout on a pooled client."""
    host = _redis_host()
    if host is None:
        return True
    try:
        answered = bool(_client(host).ping())
    except (redis.RedisError, OSError) as exc:
        CHANNEL_LAYER.failed(exc, "answering /health")
        return False
    CHANNEL_LAYER.recovered()
    return answered
