"""Is the configured channel layer reachable? Used by /health (issue 3)."""

from __future__ import annotations

import logging
import threading

import redis
from django.conf import settings

log = logging.getLogger("mediator.realtime")

PING_TIMEOUT_S = 0.5
_clients: dict[str, redis.Redis] = {}
_lock = threading.Lock()


def _redis_url() -> str | None:
    """The first Redis host of the default channel layer, or None for a layer with no server."""
    layer = (getattr(settings, "CHANNEL_LAYERS", {}) or {}).get("default") or {}
    if "redis" not in str(layer.get("BACKEND", "")).lower():
        return None
    hosts = (layer.get("CONFIG") or {}).get("hosts") or []
    if not hosts:
        return "redis://localhost:6379/0"
    host = hosts[0]
    if isinstance(host, dict):
        host = host.get("address")
    if isinstance(host, (tuple, list)):
        host = f"redis://{host[0]}:{host[1]}/0"
    return str(host) if host else None


def channel_layer_reachable() -> bool:
    """True for the in-memory layer; for Redis, one PING with a short timeout on a pooled client."""
    url = _redis_url()
    if url is None:
        return True
    with _lock:
        client = _clients.get(url)
        if client is None:
            client = redis.Redis.from_url(url, socket_timeout=PING_TIMEOUT_S, socket_connect_timeout=PING_TIMEOUT_S)
            _clients[url] = client
    try:
        return bool(client.ping())
    except (redis.RedisError, OSError):
        log.warning("channel layer unreachable")
        return False
