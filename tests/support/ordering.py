"""Ordering proofs instead of fixed waits: a `/ws` socket was sent nothing, shown by a marker that
must arrive next (tests/realtime: test_auth, test_push, test_tenant_state).

Waiting a while and then finding nothing received passes wrongly when the frame comes late (a
loaded box) and costs the wait. Instead, after the action that must not produce a frame, the test
pushes a marker to the socket through the channel layer and asserts that the very next frame is
that marker: whatever the action had the socket send came first. That holds because Channels'
consumer takes one message at a time, from its client or from its channel layer, and runs its
handler to the end before taking the next (channels.utils.await_many_dispatch), and the layer
hands a channel its messages in the order they were sent. So the socket has answered, before the
marker, every group message sent before it and a client frame sent before it. One client frame
per marker: when two wait, the layer's marker may be taken between them.
"""

from __future__ import annotations

import uuid

from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator

from apps.realtime.groups import group_name
from apps.realtime.push import PUSH_TYPE
from apps.wire.canonical import canonical_str


async def nothing_before_a_push(comm: WebsocketCommunicator, tenant_id: int, did: str) -> None:
    """Push a marker to (tenant_id, did)'s group, as apps.realtime.push does, and assert that it is
    the next frame `comm` (an authenticated socket of that DID) receives."""
    group = group_name(tenant_id, did)
    marker = canonical_str({"type": "ORDERING_MARKER", "id": str(uuid.uuid4())})
    await get_channel_layer().group_send(group, {"type": PUSH_TYPE, "group": group, "text": marker})
    received = await comm.receive_from(timeout=10)
    assert received == marker, f"received {received} before the marker"
