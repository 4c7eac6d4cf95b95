"""Redis connections that follow the deployment's settings: a client that fails fast (/health,
the rate limits) and a Redis reached through Sentinel (REDIS_SENTINELS, docs/serving.md). The
settings module builds its channel layer and Celery broker from these, and the apps their clients;
importable before Django is set up."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlsplit

import redis
import redis.asyncio.retry
import redis.backoff
import redis.retry
import redis.sentinel
from django.core.exceptions import ImproperlyConfigured

# How long the channel layer waits for one sentinel's answer before it asks the next.
SENTINEL_TIMEOUT_S = 2


def fail_fast(timeout_s: float) -> dict[str, Any]:
    """redis-py options of a client that must answer within `timeout_s` or fail (/health, the
    rate limits): no retries, as redis-py retries a refused connection ten times with backoff
    (seconds) by default."""
    return {
        "socket_timeout": timeout_s,
        "socket_connect_timeout": timeout_s,
        "retry": redis.retry.Retry(redis.backoff.NoBackoff(), 0),
    }


@dataclass(frozen=True)
class RedisSentinel:
    """A Redis reached through Sentinel (REDIS_SENTINELS, docs/serving.md): the sentinels' addresses,
    the name they monitor the master under, its database and passwords. Every user of Redis (the
    channel layer, Celery's broker, the rate limits, /health) asks the sentinels for the master on
    each new connection, so after a failover it reconnects to the promoted replica by itself."""

    sentinels: tuple[tuple[str, int], ...]
    master: str
    db: int = 0
    # Never in a repr (settings may be printed or logged).
    password: str | None = field(default=None, repr=False)
    sentinel_password: str | None = field(default=None, repr=False)

    def _sentinel_kwargs(self) -> dict[str, Any]:
        return {"password": self.sentinel_password} if self.sentinel_password else {}

    def _master_kwargs(self) -> dict[str, Any]:
        return {"db": self.db, **({"password": self.password} if self.password else {})}

    def channel_layer_host(self, **options: Any) -> dict[str, Any]:
        """channels_redis's `hosts` entry for this master (its sentinel form)."""
        return {
            "sentinels": [list(s) for s in self.sentinels],
            "master_name": self.master,
            # A sentinel that is down or hangs is skipped at once for the next (redis-py would
            # retry it for seconds): a failover often takes a sentinel's host with the master.
            "sentinel_kwargs": {
                "socket_timeout": SENTINEL_TIMEOUT_S,
                "socket_connect_timeout": SENTINEL_TIMEOUT_S,
                "retry": redis.asyncio.retry.Retry(redis.backoff.NoBackoff(), 0),
                **self._sentinel_kwargs(),
            },
            **self._master_kwargs(),
            **options,
        }

    @classmethod
    def from_channel_layer_host(cls, host: dict[str, Any]) -> RedisSentinel:
        """The inverse of channel_layer_host (for /health, which reads the layer's setting)."""
        return cls(
            tuple((str(h), int(p)) for h, p in host["sentinels"]),
            host["master_name"],
            int(host.get("db") or 0),
            host.get("password"),
            (host.get("sentinel_kwargs") or {}).get("password"),
        )

    def celery_broker(self) -> tuple[str, dict[str, Any]]:
        """kombu's broker URL (`sentinel://…;sentinel://…`) and the transport options naming the master."""
        auth = f":{quote(self.password, safe='')}@" if self.password else ""
        url = ";".join(f"sentinel://{auth}{_netloc(h, p)}/{self.db}" for h, p in self.sentinels)
        options: dict[str, Any] = {"master_name": self.master}
        if self.sentinel_password:
            options["sentinel_kwargs"] = self._sentinel_kwargs()
        return url, options

    def master_pool(self, **options: Any) -> redis.sentinel.SentinelConnectionPool:
        """A blocking connection pool of the current master: each new connection asks the sentinels
        for it; `options` apply to the master's connections, a sentinel that is down is skipped at
        once for the next."""
        timeouts = {k: v for k, v in options.items() if k in ("socket_timeout", "socket_connect_timeout")}
        sentinel_kwargs = {**timeouts, "retry": redis.retry.Retry(redis.backoff.NoBackoff(), 0)}
        manager = redis.sentinel.Sentinel(
            self.sentinels, sentinel_kwargs={**sentinel_kwargs, **self._sentinel_kwargs()}
        )
        return redis.sentinel.SentinelConnectionPool(self.master, manager, **{**self._master_kwargs(), **options})

    def client(self, **options: Any) -> redis.Redis:
        """A blocking redis-py client of the current master; `options` (e.g. fail_fast()) apply to
        the master's connections; a sentinel that is down is skipped at once for the next."""
        return redis.Redis.from_pool(self.master_pool(**options))


def _netloc(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def redis_sentinel(
    sentinels: str | None,
    master: str | None,
    db: str | None = None,
    password: str | None = None,
    sentinel_password: str | None = None,
) -> RedisSentinel | None:
    """REDIS_SENTINELS (`host:port,host:port`, an IPv6 address in brackets, the port 26379 when
    omitted), REDIS_SENTINEL_MASTER, REDIS_DB, REDIS_PASSWORD and REDIS_SENTINEL_PASSWORD as a
    RedisSentinel; None when REDIS_SENTINELS is empty."""
    if not (sentinels or "").strip():
        return None
    addresses = []
    for item in (s.strip() for s in (sentinels or "").split(",")):
        if not item:
            continue
        parts = urlsplit(f"//{item}")
        try:
            port = parts.port or 26379
        except ValueError as exc:
            raise ImproperlyConfigured(f"REDIS_SENTINELS: bad port in {item!r}") from exc
        if not parts.hostname or parts.path or parts.username or parts.password:
            raise ImproperlyConfigured(f"REDIS_SENTINELS: {item!r} is not host:port")
        addresses.append((parts.hostname, port))
    if not addresses:
        raise ImproperlyConfigured("REDIS_SENTINELS: no sentinel address")
    if not (master or "").strip():
        raise ImproperlyConfigured("REDIS_SENTINEL_MASTER: the master's name the sentinels monitor is required")
    if db not in (None, "") and not db.isdigit():
        raise ImproperlyConfigured(f"REDIS_DB must be a number, got {db!r}")
    return RedisSentinel(
        tuple(addresses), (master or "").strip(), int(db or 0), password or None, sentinel_password or None
    )
