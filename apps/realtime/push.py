"""The receiver of `messaging.notify.push_requested`: hands a push to the channel layer group of
(tenant, DID). Runs after the transaction has committed (notify uses on_commit), in whatever
thread committed it: a Daphne worker thread, an HTTP-tier (Granian) thread, a Celery task, a test.

How the send is made from that sync code:
- channels_redis's `RedisChannelLayer` (the deployment's layer, its hosts given as addresses or
  through Sentinel) is sent to by the version-pinned adapter `channels_redis_adapter.SyncSender`,
  on blocking redis-py connections, and only by it. The committing thread does not wait for Redis:
  it hands the push to this process's `Pusher` (one thread), which collects the pushes that
  arrive within PUSH_LINGER_S (2 ms), looks up every collected group's members in one pipeline
  (one round trip for the batch) and sends to the groups that have sockets (one more round trip
  each). It writes exactly what the layer's own `group_send` writes, so Daphne's consumers
  receive it unchanged. What that buys over the public `group_send` (on a long-lived loop of its
  own) is measured by `make bench` (bench/push_bench.py, docs/benchmarks.md). The queue holds at
  most PUSH_QUEUE_MAX pushes: past that a push is dropped, counted (`Pusher.dropped`) and logged
  (a push is a wake-up: the event is stored); pushes still queued when the process exits are
  sent by an atexit flush. A Redis that is down or failing over never holds a request;
- any other layer (the in-memory one of `make run`, whose asyncio queues belong to the ASGI
  server's event loop) gets its own `group_send` through `async_to_sync`, which hands the call
  to that loop.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from collections import deque

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

from apps.messaging.notify import pushes_dropped
from apps.wire.canonical import canonical_str

from .channels_redis_adapter import SyncSender, sync_sender
from .groups import group_name, tenant_group_name
from .layerloss import CHANNEL_LAYER, LAYER_ERRORS

log = logging.getLogger("mediator.realtime")

# The group message type handled by SocketConsumer.realtime_push: {"type": PUSH_TYPE, "group": the
# group it was sent to (a socket in several groups knows which one), "text": the serialised message}.
PUSH_TYPE = "realtime.push"
# The group message every socket of a tenant gets (its tenant group, groups.tenant_group_name) when the
# tenant is saved or deleted, or its DIDComm policy saved: {"type": TENANT_STATE_TYPE, "active": bool,
# "deleted": bool} or {"type": TENANT_STATE_TYPE, "didcomm": bool}. A socket whose tenant no longer
# serves it closes (docs/realtime.md, docs/didcomm.md); its own handler, never forwarded to a client.
TENANT_STATE_TYPE = "realtime.tenant_state"


def push_to_sockets(sender, *, tenant_id: int, did: str, message: dict, **kwargs) -> None:
    """Send `message` to every socket of (tenant_id, did); a failure is logged, never raised.

    The push is a wake-up, never the only copy (docs/protocol-readings.md §6): the event is already
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


class Pusher:
    """This process's pushes to channels_redis (see the module docstring): `put` queues one and
    returns at once; the pusher's thread sends them, oldest first. A push past PUSH_QUEUE_MAX is
    dropped, counted (`dropped`, and on /metrics) and logged every thousandth time."""

    def __init__(self, sender: SyncSender) -> None:
        self.pid = os.getpid()
        self.dropped = 0
        self.counting = threading.Lock()
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

    def _drop(self, tenant_id: int, what) -> None:
        with self.counting:
            self.dropped += 1
            dropped = self.dropped
        pushes_dropped.send(sender=None, count=1)
        if dropped % 1000 == 1:
            log.warning("push queue full: %s pushes dropped so far (tenant_id=%s type=%s)", dropped, tenant_id, what)

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
        except LAYER_ERRORS as exc:
            CHANNEL_LAYER.failed(exc, "pushing (pushes not sent)")
            return
        except Exception:  # noqa: BLE001 - see push_to_sockets; never log a message (it carries payloads)
            log.exception("push to channel layer failed: %s pushes not sent", len(batch))
            return
        CHANNEL_LAYER.recovered()
        for (group, build, tenant_id, what), channel_names in zip(batch, found, strict=True):
            if not channel_names:
                continue
            try:
                self.sender.send(group, channel_names, build())
            except LAYER_ERRORS as exc:
                CHANNEL_LAYER.failed(exc, "pushing (pushes not sent)")
            except Exception:  # noqa: BLE001 - idem
                log.exception("push to channel layer failed tenant_id=%s type=%s", tenant_id, what)


_pushers_lock = threading.Lock()


def pusher(sender: SyncSender) -> Pusher:
    """The sender's pusher in this process, made on first use (and again after a fork: threads do
    not survive it)."""
    current = sender.__dict__.get("_mediator_pusher")
    if current is None or current.pid != os.getpid():
        with _pushers_lock:
            current = sender.__dict__.get("_mediator_pusher")
            if current is None or current.pid != os.getpid():
                current = sender.__dict__["_mediator_pusher"] = Pusher(sender)
    return current


def _group_send(group: str, build, tenant_id: int, what) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        if (sync := sync_sender(layer)) is not None:
            pusher(sync).put(group, build, tenant_id, what)
            return
        async_to_sync(layer.group_send)(group, build())
    except LAYER_ERRORS as exc:
        CHANNEL_LAYER.failed(exc, "pushing (a push not sent)")
    except Exception:  # noqa: BLE001 - see push_to_sockets; never log the message (it carries payloads)
        log.exception("push to channel layer failed tenant_id=%s type=%s", tenant_id, what)
