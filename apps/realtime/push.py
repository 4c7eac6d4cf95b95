"""The receiver of `messaging.notify.push_requested`: hands a push to the channel layer group of
(tenant, DID). Runs after the transaction has committed (notify uses on_commit), in whatever
thread committed it: a Daphne worker thread, a gunicorn worker, a Celery task, a test.

How the send is made from that sync code:
- the in-memory layer keeps asyncio queues that belong to the ASGI server's event loop, so
  `async_to_sync` must hand the call to that loop (it does, from a thread asgiref started);
- channels_redis's `RedisChannelLayer` (hosts given as addresses, the deployment's setting) is
  sent to synchronously, on a blocking redis-py connection, in one pipelined round trip when the
  group is empty and two when it has sockets (`SyncSender`). It writes exactly what the
  layer's own `group_send` writes (its key names, serializer and capacity script), so Daphne's
  consumers receive it unchanged. Issue 8: the asyncio hop to a background loop and the async
  client's two round trips cost ~0.77 ms of worker CPU per TWO_WAY_PRIVATE, most recipients
  having no socket at all (docs/benchmarks.md);
- any other layer goes to one long-lived background loop per process. Without it,
  `async_to_sync` in a plain WSGI worker would make a new event loop, and so a new Redis
  connection, for every single push.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time

import redis
from asgiref.sync import async_to_sync
from channels.layers import InMemoryChannelLayer, get_channel_layer

from apps.wire.canonical import canonical_str

from .groups import group_name

log = logging.getLogger("mediator.realtime")

# The group message type handled by SocketConsumer.realtime_push: {"type": PUSH_TYPE, "group": the
# group it was sent to (a socket in several groups knows which one), "text": the serialised message}.
PUSH_TYPE = "realtime.push"
# A push that the layer cannot take within this long is dropped (it is only a wake-up).
SEND_TIMEOUT_S = 2.0

_loop: asyncio.AbstractEventLoop | None = None
_loop_pid: int | None = None
_loop_lock = threading.Lock()


def _background_loop() -> asyncio.AbstractEventLoop:
    """This process's push loop, started on first use (and again after a fork)."""
    global _loop, _loop_pid
    with _loop_lock:
        if _loop is None or _loop_pid != os.getpid() or _loop.is_closed():
            _loop = asyncio.new_event_loop()
            _loop_pid = os.getpid()
            threading.Thread(target=_loop.run_forever, name="realtime-push", daemon=True).start()
        return _loop


# channels_redis 4.x `RedisChannelLayer.group_send`'s script, verbatim: add the message to each
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
    wrappers) cost ~70 µs of CPU per call over the ~50 µs a loopback round trip costs here.
    """

    def __init__(self, layer):
        self.layer = layer
        self.pools = []
        for host in layer.hosts:
            options = {k: v for k, v in host.items() if k != "address"}
            # A push is a wake-up: a Redis that hangs must not hold the worker for the layer's
            # own 30 s read timeout (Daphne's BZPOPMIN needs that, we do not).
            for name in ("socket_timeout", "socket_connect_timeout"):
                options[name] = min(options.get(name) or SEND_TIMEOUT_S, SEND_TIMEOUT_S)
            self.pools.append(redis.ConnectionPool.from_url(host["address"], **options))
        self._local = threading.local()

    def _round_trip(self, index: int, commands: list[tuple]) -> list:
        """Send `commands` as one pipeline on this thread's connection to host `index`; their
        replies in order. After any error the connection is dropped (its stream state is unknown)."""
        conns = self._local.__dict__.setdefault("conns", {})
        conn = conns.get(index)
        if conn is None or conn.pid != os.getpid():
            conn = conns[index] = self.pools[index].make_connection()
        try:
            conn.send_packed_command(conn.pack_commands(commands), check_health=False)
            return [conn.read_response() for _ in commands]
        except BaseException:
            conns.pop(index, None)
            conn.disconnect()
            raise

    def members(self, group: str) -> list[str]:
        """The group's live channels (joined within group_expiry), in one command."""
        layer = self.layer
        live_since = int(time.time()) - layer.group_expiry
        (members,) = self._round_trip(
            layer.consistent_hash(group), [("ZRANGEBYSCORE", layer._group_key(group), f"({live_since}", "+inf")]
        )
        return [m.decode("utf8") for m in members]

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


def sync_sender(layer) -> SyncSender | None:
    """The layer's SyncSender; None unless it is channels_redis's RedisChannelLayer with every
    host given as an address (sentinels and the pub/sub layer keep the asyncio path)."""
    if type(layer).__module__ != "channels_redis.core":  # (the pub/sub layer proxies attributes to a loop)
        return None
    sender = getattr(layer, "_mediator_sync_sender", False)
    if sender is False:
        hosts = getattr(layer, "hosts", None) or []
        sender = SyncSender(layer) if hosts and all("address" in h for h in hosts) else None
        layer._mediator_sync_sender = sender
    return sender


def push_to_sockets(sender, *, tenant_id: int, did: str, message: dict, **kwargs) -> None:
    """Send `message` to every socket of (tenant_id, did); a failure is logged, never raised.

    The push is a wake-up, never the only copy (PROTOCOL-DECISIONS §6): the event is already
    stored, so a channel layer that is down must not turn a committed command into an error.
    """
    layer = get_channel_layer()
    if layer is None:
        return
    group = group_name(tenant_id, did)
    try:
        if (sync := sync_sender(layer)) is not None:
            # Most recipients have no socket: find out before serialising anything.
            channel_names = sync.members(group)
            if channel_names:
                sync.send(group, channel_names, {"type": PUSH_TYPE, "group": group, "text": canonical_str(message)})
            return
        # Serialised once here, not once per socket.
        group_message = {"type": PUSH_TYPE, "group": group, "text": canonical_str(message)}
        if isinstance(layer, InMemoryChannelLayer):
            async_to_sync(layer.group_send)(group, group_message)
        else:
            future = asyncio.run_coroutine_threadsafe(layer.group_send(group, group_message), _background_loop())
            try:
                future.result(timeout=SEND_TIMEOUT_S)
            except TimeoutError:
                future.cancel()
                raise
    except Exception:  # noqa: BLE001 - see docstring; never log the message (it carries payloads)
        log.exception("push to channel layer failed tenant_id=%s type=%s", tenant_id, message.get("type"))
