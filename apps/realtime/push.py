"""The receiver of `messaging.notify.push_requested`: hands a push to the channel layer group of
(tenant, DID). Runs after the transaction has committed (notify uses on_commit), in whatever
thread committed it: a Daphne worker thread, an HTTP-tier (Granian) thread, a Celery task, a test.

How the send is made from that sync code:
- the in-memory layer keeps asyncio queues that belong to the ASGI server's event loop, so
  `async_to_sync` must hand the call to that loop (it does, from a thread asgiref started);
- channels_redis's `RedisChannelLayer` (hosts given as addresses, the deployment's setting) is
  sent to by the version-pinned adapter `channels_redis_adapter.SyncSender`, on blocking redis-py
  connections. The committing thread does not wait for Redis: it hands the push to this
  process's `Pusher` (one thread), which collects the pushes that arrive within PUSH_LINGER_S
  (2 ms), looks up every collected group's members in one pipeline (one round trip for the
  batch; most recipients have no socket) and sends to the groups that have sockets (one more
  round trip each). It writes exactly what the layer's own `group_send` writes, so Daphne's
  consumers receive it unchanged. The public `group_send` from sync code costs several times its
  worker CPU per push, and a round trip per push in the committing thread would cost about a tenth
  of a TWO_WAY_PRIVATE's worker CPU. The queue holds at
  most PUSH_QUEUE_MAX pushes: past that a push is dropped, counted (`Pusher.dropped`) and logged
  (a push is a wake-up: the event is stored). Pushes still queued when the process exits are
  sent by an atexit flush;
- any other layer (channels_redis through Sentinel, the pub/sub layer) is sent to by its own
  `group_send` on one long-lived background loop per process (`LoopPusher`): the committing
  thread only queues the push (bounded by PUSH_QUEUE_MAX, as above), so a Redis that is down or
  failing over never holds a request. Without that loop, `async_to_sync` in a plain WSGI worker
  would make a new event loop, and so a new Redis connection, for every single push.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import os
import threading
import time
from collections import deque

from asgiref.sync import async_to_sync
from channels.layers import InMemoryChannelLayer, get_channel_layer
from django.db import transaction

from apps.messaging.notify import pushes_dropped
from apps.wire.canonical import canonical_str

from .channels_redis_adapter import SEND_TIMEOUT_S, SyncSender, sync_sender
from .groups import group_name, tenant_group_name

log = logging.getLogger("mediator.realtime")

# The group message type handled by SocketConsumer.realtime_push: {"type": PUSH_TYPE, "group": the
# group it was sent to (a socket in several groups knows which one), "text": the serialised message}.
PUSH_TYPE = "realtime.push"
# The group message every socket of a tenant gets (its tenant group, groups.tenant_group_name) when the
# tenant is saved or deleted, or its DIDComm policy saved: {"type": TENANT_STATE_TYPE, "active": bool,
# "deleted": bool} or {"type": TENANT_STATE_TYPE, "didcomm": bool}. A socket whose tenant no longer
# serves it closes (docs/realtime.md, docs/didcomm.md); its own handler, never forwarded to a client.
TENANT_STATE_TYPE = "realtime.tenant_state"

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


def push_to_sockets(sender, *, tenant_id: int, did: str, message: dict, **kwargs) -> None:
    """Send `message` to every socket of (tenant_id, did); a failure is logged, never raised.

    The push is a wake-up, never the only copy (PROTOCOL-DECISIONS §6): the event is already
    stored, so a channel layer that is down must not turn a committed command into an error.
    """
    group = group_name(tenant_id, did)
    # Serialised once here, not once per socket.
    _group_send(
        group,
        lambda: {"type": PUSH_TYPE, "group": group, "text": canonical_str(message)},
        tenant_id,
        message.get("type"),
    )


def tenant_state_to_sockets(*, tenant_id: int, state: dict) -> None:
    """Send the tenant's state (TENANT_STATE_TYPE) to every socket of the tenant now; logged, never
    raised (a socket that misses it still finds the state on its next frame, docs/realtime.md)."""
    _group_send(tenant_group_name(tenant_id), lambda: {"type": TENANT_STATE_TYPE, **state}, tenant_id, "tenant_state")


def tenant_state_on_commit(*, tenant_id: int, state: dict) -> None:
    """tenant_state_to_sockets once the current transaction commits."""
    transaction.on_commit(lambda: tenant_state_to_sockets(tenant_id=tenant_id, state=state))


def tenant_saved(sender, instance, created: bool = False, raw: bool = False, update_fields=None, **kwargs) -> None:
    """Tenant post_save (apps.py): its sockets get its state after commit, whichever path saved it
    (a service, the admin, a shell); a new tenant has no socket yet, and a save of named fields
    other than `status` (key rotation) cannot change it."""
    if created or raw or (update_fields is not None and "status" not in update_fields):
        return
    tenant_state_on_commit(tenant_id=instance.pk, state={"active": instance.is_active, "deleted": False})


def tenant_deleted(sender, instance, **kwargs) -> None:
    """Tenant post_delete (apps.py): its sockets close after commit (deletion is not offered to
    operators, docs/operators.md, but a database-level delete must not leave sockets serving)."""
    tenant_state_on_commit(tenant_id=instance.pk, state={"active": False, "deleted": True})


# How long the pusher collects pushes before it looks their groups up (one round trip per batch),
# and how many pushes may wait for it.
PUSH_LINGER_S = 0.002
PUSH_QUEUE_MAX = 10_000


class _Dropping:
    """What both pushers share: a push past PUSH_QUEUE_MAX is dropped, counted (`dropped`, and on
    /metrics) and logged every thousandth time (a push is a wake-up: the event is stored)."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.dropped = 0
        self.counting = threading.Lock()

    def _drop(self, tenant_id: int, what) -> None:
        with self.counting:
            self.dropped += 1
            dropped = self.dropped
        pushes_dropped.send(sender=None, count=1)
        if dropped % 1000 == 1:
            log.warning("push queue full: %s pushes dropped so far (tenant_id=%s type=%s)", dropped, tenant_id, what)


class Pusher(_Dropping):
    """This process's pushes to channels_redis (see the module docstring): `put` queues one and
    returns at once; the pusher's thread sends them, oldest first."""

    def __init__(self, sender: SyncSender) -> None:
        super().__init__()
        self.sender = sender
        self.queue: deque[tuple] = deque()
        self.wake = threading.Event()
        # Held for a whole drain and send, so that `flush()` returns only once every push queued
        # before it was sent (the pusher thread's batch in flight included).
        self.flushing = threading.Lock()
        threading.Thread(target=self._run, name="realtime-pusher", daemon=True).start()
        atexit.register(self._flush_at_exit)

    def put(self, group: str, build, tenant_id: int, what) -> None:
        """Queue a push of `build()` to `group` (built only if the group has sockets)."""
        if len(self.queue) >= PUSH_QUEUE_MAX:
            self._drop(tenant_id, what)
            return
        self.queue.append((group, build, tenant_id, what))
        if not self.wake.is_set():
            self.wake.set()

    def _run(self) -> None:
        while True:
            self.wake.wait()
            # The commands in flight commit within this: their pushes share the lookup.
            time.sleep(PUSH_LINGER_S)
            self.wake.clear()
            try:
                self.flush()
            except Exception:  # noqa: BLE001 - the pusher outlives any failure (flush logs its own)
                log.exception("realtime pusher failed")

    def _flush_at_exit(self) -> None:
        # A forked child inherits this registration but not the thread: only the owner flushes.
        if self.pid == os.getpid():
            self.flush()

    def flush(self) -> None:
        """Send every queued push now, in the calling thread; returns once every push queued before
        the call has been sent (or failed and been logged)."""
        with self.flushing:
            # Only this lock's holder takes from the queue; producers only append meanwhile.
            batch = [self.queue.popleft() for _ in range(len(self.queue))]
            if batch:
                self._send(batch)

    def _send(self, batch: list[tuple]) -> None:
        try:
            found = self.sender.members_of([push[0] for push in batch])
        except Exception:  # noqa: BLE001 - see push_to_sockets; never log a message (it carries payloads)
            log.exception("push to channel layer failed: %s pushes not sent", len(batch))
            return
        for (group, build, tenant_id, what), channel_names in zip(batch, found, strict=True):
            if not channel_names:
                continue
            try:
                self.sender.send(group, channel_names, build())
            except Exception:  # noqa: BLE001 - idem
                log.exception("push to channel layer failed tenant_id=%s type=%s", tenant_id, what)


class LoopPusher(_Dropping):
    """Pushes through the layer's own `group_send` on this process's push loop (`_background_loop`):
    `put` queues one and returns at once, so the committing thread never waits for Redis (nor
    for a Sentinel failover); one coroutine sends them, oldest first, each within SEND_TIMEOUT_S.
    Pushes still queued when the process exits are sent by an atexit flush."""

    def __init__(self, layer) -> None:
        super().__init__()
        self.layer = layer
        self.loop = _background_loop()
        self.queue: asyncio.Queue[tuple] = asyncio.Queue()  # touched only on the loop
        self.pending = 0  # queued or being sent
        self.idle = threading.Condition()
        asyncio.run_coroutine_threadsafe(self._run(), self.loop)
        atexit.register(self._flush_at_exit)

    def put(self, group: str, build, tenant_id: int, what) -> None:
        """Queue a push of `build()` to `group`."""
        with self.idle:
            if self.pending >= PUSH_QUEUE_MAX:
                full = True
            else:
                full = False
                self.pending += 1
        if full:
            self._drop(tenant_id, what)
            return
        self.loop.call_soon_threadsafe(self.queue.put_nowait, (group, build, tenant_id, what))

    async def _run(self) -> None:
        while True:
            group, build, tenant_id, what = await self.queue.get()
            try:
                await asyncio.wait_for(self.layer.group_send(group, build()), SEND_TIMEOUT_S)
            except Exception:  # noqa: BLE001 - see push_to_sockets; never log the message (it carries payloads)
                log.exception("push to channel layer failed tenant_id=%s type=%s", tenant_id, what)
            finally:
                with self.idle:
                    self.pending -= 1
                    if not self.pending:
                        self.idle.notify_all()

    def flush(self, timeout_s: float | None = None) -> bool:
        """Wait until every push queued before the call was sent (or failed and was logged)."""
        with self.idle:
            return self.idle.wait_for(lambda: self.pending == 0, timeout_s)

    def _flush_at_exit(self) -> None:
        if self.pid == os.getpid():
            self.flush(SEND_TIMEOUT_S)


_pushers_lock = threading.Lock()


def _owned(owner, make):
    """The pusher `owner` (a SyncSender, or a layer) has in this process, made by `make(owner)` on
    first use (and again after a fork: threads do not survive it)."""
    current = owner.__dict__.get("_mediator_pusher")
    if current is None or current.pid != os.getpid():
        with _pushers_lock:
            current = owner.__dict__.get("_mediator_pusher")
            if current is None or current.pid != os.getpid():
                current = owner.__dict__["_mediator_pusher"] = make(owner)
    return current


def pusher(sender: SyncSender) -> Pusher:
    """The sender's pusher in this process."""
    return _owned(sender, Pusher)


def loop_pusher(layer) -> LoopPusher:
    """The layer's pusher in this process."""
    return _owned(layer, LoopPusher)


def _group_send(group: str, build, tenant_id: int, what) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        if (sync := sync_sender(layer)) is not None:
            pusher(sync).put(group, build, tenant_id, what)
            return
        if isinstance(layer, InMemoryChannelLayer):
            async_to_sync(layer.group_send)(group, build())
        else:
            loop_pusher(layer).put(group, build, tenant_id, what)
    except Exception:  # noqa: BLE001 - see push_to_sockets; never log the message (it carries payloads)
        log.exception("push to channel layer failed tenant_id=%s type=%s", tenant_id, what)
