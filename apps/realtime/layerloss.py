"""A socket whose channel layer is lost (Redis down) is refused or closed in its protocol's words.

Channels runs every consumer as one loop over two receives, the client's and the channel layer's
(`AsyncConsumer.__call__`). When Redis goes away the layer's receive raises; out of the consumer
that became Daphne's close 1011 for an open socket, and a traceback and a failed handshake for an
upgrade made during the outage. `LayerLossMixin` catches that error where the consumer ends and
has the consumer say so instead (`layer_lost`: `/ws` an ERROR frame MEDIATOR_UNAVAILABLE and
close 4503, `/didcomm/ws` an `e.p.me.unavailable` problem report and close 4503), accepting the
socket first if the layer failed before the consumer did. A socket without the layer would get no
pushes; nothing is lost by closing it: events and messages stay queued for the next connection.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from redis.exceptions import RedisError

from apps.ops.outage import Outage

if TYPE_CHECKING:
    # What the mixin is put before, so its super() calls and the consumer's methods type-check.
    from channels.generic.websocket import AsyncWebsocketConsumer as _ConsumerBase
else:
    _ConsumerBase = object

log = logging.getLogger("mediator.realtime")

# What channels_redis raises when its Redis is unreachable (redis-py's errors, or the socket's).
LAYER_ERRORS = (RedisError, OSError)

# This process's view of the channel layer: its loss is logged once, its return with a count.
CHANNEL_LAYER = Outage("channel layer")


class LayerLossMixin(_ConsumerBase):
    """Put before AsyncWebsocketConsumer; the consumer defines `layer_lost()` and `disconnect()`."""

    accepted = False

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        except LAYER_ERRORS as exc:
            CHANNEL_LAYER.failed(exc, "a websocket was open (closed)")
            try:
                if not self.accepted:
                    await self.accept()
                await self.layer_lost()
            except Exception:  # noqa: BLE001 - the client left meanwhile (Daphne refuses to send)
                log.info("websocket gone before its channel-layer refusal")
            # The consumer's own cleanup (presence, memberships, metrics), as after any close.
            await self.disconnect(1011)

    async def accept(self, *args, **kwargs) -> None:
        await super().accept(*args, **kwargs)
        self.accepted = True

    async def layer_lost(self) -> None:
        raise NotImplementedError

    async def release_held(self) -> None:
        """Free what the socket holds as it closes, in either protocol: its place in the process's
        capacity, its send budget, its presence and its group memberships (each absent when the
        socket closed before taking it)."""
        ticket = getattr(self, "ticket", None)
        if ticket is not None:
            ticket.release()
        budget = getattr(self, "budget", None)
        if budget:
            budget.release()
        presence = getattr(self, "presence", None)
        if presence is not None:
            await presence.close()
        memberships = getattr(self, "memberships", None)
        if memberships is not None:
            await memberships.close()
