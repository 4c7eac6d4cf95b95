"""The receiver of `messaging.notify.push_requested`: hands a push to the channel layer group of
(tenant, DID). Runs after the transaction has committed (notify uses on_commit), in whatever
thread committed it: a Daphne worker thread, an HTTP-tier (Granian) thread, a Celery task, a test.

How the send is made from that sync code:
- the in-memory layer keeps asyncio queues that belong to the ASGI server's event loop, so
  `async_to_sync` must hand the call to that loop (it does, from a thread asgiref started);
- channels_redis's `RedisChannelLayer` (hosts given as addresses, the deployment's setting) is
  sent to synchronously by the version-pinned adapter `channels_redis_adapter.SyncSender`, on a
  blocking redis-py connection, in one round trip when the group is empty and two when it has
  sockets. It writes exactly what the layer's own `group_send` writes, so Daphne's consumers
  receive it unchanged. The public `group_send` from sync code costs several times its worker
  CPU per push (bench/push_adapter_bench.py, docs/benchmarks.md), most recipients having no
  socket at all;
- any other layer goes to one long-lived background loop per process. Without it,
  `async_to_sync` in a plain WSGI worker would make a new event loop, and so a new Redis
  connection, for every single push.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading

from asgiref.sync import async_to_sync
from channels.layers import InMemoryChannelLayer, get_channel_layer
from django.db import transaction

from apps.wire.canonical import canonical_str

from .channels_redis_adapter import SEND_TIMEOUT_S, sync_sender
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


def _group_send(group: str, build, tenant_id: int, what) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        if (sync := sync_sender(layer)) is not None:
            # Most recipients have no socket: find out before serialising anything.
            channel_names = sync.members(group)
            if channel_names:
                sync.send(group, channel_names, build())
            return
        group_message = build()
        if isinstance(layer, InMemoryChannelLayer):
            async_to_sync(layer.group_send)(group, group_message)
        else:
            future = asyncio.run_coroutine_threadsafe(layer.group_send(group, group_message), _background_loop())
            try:
                future.result(timeout=SEND_TIMEOUT_S)
            except TimeoutError:
                future.cancel()
                raise
    except Exception:  # noqa: BLE001 - see push_to_sockets; never log the message (it carries payloads)
        log.exception("push to channel layer failed tenant_id=%s type=%s", tenant_id, what)
