"""An explicit, version-pinned adapter: `RedisChannelLayer.group_send` for blocking code.

The one place that knows channels_redis's internals. `SyncSender` writes, on a blocking redis-py
connection, exactly what `channels_redis.core.RedisChannelLayer.group_send` of channels_redis
`PINNED` writes: the group's sorted set (`layer._group_key`), each channel's message list
(`layer._map_channel_keys_to_connection`: key names, the layer's serializer, per-channel
capacity) and the layer's capacity script (`_GROUP_SEND_LUA`, copied verbatim). Daphne's
consumers receive what it sends unchanged.

Why not the public API: from a WSGI worker `group_send` is a coroutine, so every push needs an
event loop (a hop to a background loop thread, or `async_to_sync`'s new loop and Redis connection
per call) and it always writes (it prunes the group and reads it inside the send), while most
TWO_WAY_PRIVATE recipients have no socket at all. On the real layer the adapter's CPU per push
is a fraction of the public path's even on a long-lived loop (bench/push_bench.py, `make bench`),
so it is the only path to this layer, by address and through Sentinel.

The price is the coupling, kept explicit:
- requirements.txt pins channels-redis to exactly `PINNED` (tests/realtime/test_channels_redis_adapter.py
  checks the line);
- `check_version()` refuses another installed version: RealtimeConfig.ready() calls it when the
  deployment's layer is RedisChannelLayer, so no process starts with an adapter that may write
  what the layer no longer reads, and `SyncSender` itself refuses to be built;
- tests/realtime/test_channels_redis_adapter.py proves compatibility on the real layer and Redis:
  a real Daphne consumer receives the adapter's push, the per-channel capacity and the group
  expiry are the layer's.
Upgrading channels-redis: compare `RedisChannelLayer.group_send` of the new version with `send`
below and `_GROUP_SEND_LUA`, update both and `PINNED` and requirements.txt together, run those tests.
"""

from __future__ import annotations

import logging
import os
import threading
import time

import channels_redis
import redis
from django.core.exceptions import ImproperlyConfigured

from apps.ops.redisconn import RedisSentinel

log = logging.getLogger("mediator.realtime")

# The channels_redis version whose internals this module copies (requirements.txt pins it).
PINNED = "4.3.0"
# A push that Redis cannot take within this long is dropped (it is only a wake-up).
SEND_TIMEOUT_S = 2.0


def check_version(installed: str | None = None) -> None:
    """Refuse (ImproperlyConfigured) any channels_redis but `PINNED`."""
    installed = channels_redis.__version__ if installed is None else installed
    if installed != PINNED:
        raise ImproperlyConfigured(
            f"channels_redis {installed} is installed, apps/realtime/channels_redis_adapter.py is written "
            f"for {PINNED} exactly: install channels-redis=={PINNED} (requirements.txt) or port the adapter"
        )


# channels_redis 4.3.0 `RedisChannelLayer.group_send`'s script, verbatim: add the message to each
# channel's sorted set unless that channel is at its capacity.
_GROUP_SEND_LUA = """
    local over_capacity = 0
    local current_time = ARGV[#ARGV - 1]
    local expiry = ARGV[#ARGV]
    for i=1,#KEYS do
        if redis.call('ZCOUNT', KEYS[i], '-inf', '+inf') < tonumber(ARGV[i + #KEYS]) then
            redis.call('ZADD', KEYS[i], current_time, ARGV[i])
            redis.call('EXPIRE', KEYS[i], expiry)
        else
            over_capacity = over_capacity + 1
        end
    end
    return over_capacity
"""


class SyncSender:
    """`RedisChannelLayer.group_send` for blocking code, one per layer object (a new layer, e.g.
    after CHANNEL_LAYERS changes, gets its own).

    Each thread keeps one redis-py `Connection` per host and writes packed pipelines on it
    directly: redis-py's client and pipeline objects (pool checkout, retry and observability
    wrappers) cost more CPU per call than the loopback round trip itself (docs/benchmarks.md).
    """

    def __init__(self, layer):
        check_version()
        self.layer = layer
        self.pools = []
        for host in layer.hosts:
            options = {
                k: v for k, v in host.items() if k not in ("address", "sentinels", "master_name", "sentinel_kwargs")
            }
            # A push is a wake-up: a Redis that hangs must not hold the worker for the layer's
            # own 30 s read timeout (Daphne's BZPOPMIN needs that, we do not).
            for name in ("socket_timeout", "socket_connect_timeout"):
                options[name] = min(options.get(name) or SEND_TIMEOUT_S, SEND_TIMEOUT_S)
            if "address" in host:
                self.pools.append(redis.ConnectionPool.from_url(host["address"], **options))
            else:
                # The layer's sentinel form (REDIS_SENTINELS): each new connection asks the
                # sentinels for the master, so after a failover the next push finds the new one.
                self.pools.append(RedisSentinel.from_channel_layer_host(host).master_pool(**options))
        self._local = threading.local()

    def _round_trip(self, index: int, commands: list[tuple]) -> list:
        """Send `commands` as one pipeline on this thread's connection to host `index`; their
        replies in order. After any error the connection is dropped (its stream state is unknown);
        a kept connection that turns out broken (Redis restarted, or failed over: the sentinels
        then name another master) is replaced once, at once, so the push is not lost."""
        conns = self._local.__dict__.setdefault("conns", {})
        conn = conns.get(index)
        kept = conn is not None and conn.pid == os.getpid()
        while True:
            if not kept:
                conn = self.pools[index].make_connection()
                # Connected here, as the pool does: `send_packed_command` would connect by itself
                # without a sentinel-managed connection's master lookup.
                conn.connect()
                conns[index] = conn
            try:
                conn.send_packed_command(conn.pack_commands(commands), check_health=False)
                return [conn.read_response() for _ in commands]
            except BaseException as exc:
                conns.pop(index, None)
                conn.disconnect()
                if not (kept and isinstance(exc, redis.ConnectionError)):
                    raise
                kept = False

    def members(self, group: str) -> list[str]:
        """The group's live channels (joined within group_expiry), in one command."""
        return self.members_of([group])[0]

    def members_of(self, groups: list[str]) -> list[list[str]]:
        """Each group's live channels (joined within group_expiry), in `groups`' order: one
        pipeline, so one round trip, per Redis host."""
        layer = self.layer
        live_since = f"({int(time.time()) - layer.group_expiry}"
        by_host: dict[int, list[int]] = {}
        for i, group in enumerate(groups):
            by_host.setdefault(layer.consistent_hash(group), []).append(i)
        found: list[list[str]] = [[] for _ in groups]
        for index, positions in by_host.items():
            commands = [("ZRANGEBYSCORE", layer._group_key(groups[i]), live_since, "+inf") for i in positions]
            for i, members in zip(positions, self._round_trip(index, commands), strict=True):
                found[i] = [m.decode("utf8") for m in members]
        return found

    def send(self, group: str, channel_names: list[str], message: dict) -> None:
        """The rest of group_send: drop the group's stale members (channels_redis does that first;
        here it waits until there is something to send) and expired messages, then the capacity
        script, per host."""
        layer = self.layer
        now = time.time()
        by_connection, messages, capacities = layer._map_channel_keys_to_connection(channel_names, message)
        pipelines: dict[int, list[tuple]] = {}
        group_index = layer.consistent_hash(group)
        pipelines[group_index] = [("ZREMRANGEBYSCORE", layer._group_key(group), 0, int(now) - layer.group_expiry)]
        for index, channel_keys in by_connection.items():
            commands = pipelines.setdefault(index, [])
            commands += [("ZREMRANGEBYSCORE", k, 0, int(now) - int(layer.expiry)) for k in channel_keys]
            args = [messages[k] for k in channel_keys] + [capacities[k] for k in channel_keys] + [now, layer.expiry]
            commands.append(("EVAL", _GROUP_SEND_LUA, len(channel_keys), *channel_keys, *args))
        for index, commands in pipelines.items():
            replies = self._round_trip(index, commands)
            if index in by_connection and replies[-1]:
                log.info("%s of %s channels over capacity in a push group", replies[-1], len(channel_names))


def is_redis_layer(layer) -> bool:
    """channels_redis's RedisChannelLayer itself (the pub/sub layer proxies attributes to a loop)."""
    return type(layer).__module__ == "channels_redis.core" and type(layer).__name__ == "RedisChannelLayer"


def sync_sender(layer) -> SyncSender | None:
    """The layer's SyncSender; None unless it is channels_redis's RedisChannelLayer (hosts given as
    addresses or as sentinels; another layer, e.g. the pub/sub one, keeps its own group_send)."""
    if not is_redis_layer(layer):
        return None
    if not hasattr(layer, "_mediator_sync_sender"):
        layer._mediator_sync_sender = SyncSender(layer)
    return layer._mediator_sync_sender
