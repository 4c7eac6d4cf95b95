"""The receiver of `messaging.notify.push_requested`: hands a push to the channel layer group of
(tenant, DID). Runs after the transaction has committed (notify uses on_commit)."""

from __future__ import annotations

import logging

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from apps.protocol.wire.canonical import canonical_str

from .groups import group_name

log = logging.getLogger("mediator.realtime")

# The group message type handled by SocketConsumer.realtime_push.
PUSH_TYPE = "realtime.push"


def push_to_sockets(sender, *, tenant_id: int, did: str, message: dict, **kwargs) -> None:
    """Send `message` to every socket of (tenant_id, did); a failure is logged, never raised.

    The push is a wake-up, never the only copy (PROTOCOL-DECISIONS §6): the event is already
    stored, so a channel layer that is down must not turn a committed command into an error.
    """
    layer = get_channel_layer()
    if layer is None:
        return
    # Serialised once here, not once per socket.
    text = canonical_str(message)
    try:
        async_to_sync(layer.group_send)(group_name(tenant_id, did), {"type": PUSH_TYPE, "text": text})
    except Exception:  # noqa: BLE001 - see docstring; never log the message (it carries payloads)
        log.exception("push to channel layer failed tenant_id=%s type=%s", tenant_id, message.get("type"))
