"""A marker for `/didcomm/ws` tests that something did NOT reach a socket (issue 42): instead of
waiting a while and seeing nothing, the test sends a marker after the event it fears and asserts
that the socket's very next frame is the marker's.

The marker is a wake (queue.WAKE) for a client live on the socket, carrying a message no queue
holds: the socket packs it from the wake alone and pushes exactly that attachment
(apps/didcomm/consumers.py, DidcommConsumer._wake). It travels the channel layer to the socket's
channel, behind every event sent there before it (both layers keep a channel's events in the order
they were sent), and the consumer handles one event to its end before the next; so whatever an
earlier event made the socket send would have come before the marker's delivery.
"""

from __future__ import annotations

import json
import uuid

from channels.layers import get_channel_layer

from apps.didcomm import queue
from apps.realtime.groups import group_name
from apps.realtime.push import PUSH_TYPE

DELIVERY = "https://didcomm.org/messagepickup/3.0/delivery"


async def send_marker(tenant_id: int, did: str) -> dict:
    """Send the marker to the live client `did` of tenant `tenant_id`; the attachment its socket
    must push next (see `is_marker`)."""
    mid = str(uuid.uuid4())
    data = {"json": {"protected": "marker", "ciphertext": mid}}
    group = group_name(tenant_id, did)
    wake = {"type": queue.WAKE, "ids": [mid], "items": [{"id": mid, "data": json.dumps(data)}]}
    await get_channel_layer().group_send(group, {"type": PUSH_TYPE, "group": group, "text": json.dumps(wake)})
    return {"id": mid, "data": data}


def is_marker(delivery: dict, marker: dict) -> bool:
    """Whether the decrypted frame `delivery` is the marker's push, and only that."""
    return (delivery.get("type"), delivery.get("attachments")) == (DELIVERY, [marker])
