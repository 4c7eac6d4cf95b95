"""Channel-layer groups: their names (one per (tenant, DID), one per tenant), and a socket's memberships
kept joined while it is open (`Memberships`)."""

from __future__ import annotations

import asyncio
import hashlib
import logging

from .layerloss import CHANNEL_LAYER

log = logging.getLogger("mediator.realtime")


def group_name(tenant_id: int, did: str) -> str:
    """`t<tenant>.<sha256(did)[:40]>`: ASCII, under 100 chars, as the channel layer requires.

    A DID can be kilobytes of base64url and colons, which a group name may not hold; 160 bits of
    its hash keep groups of different DIDs apart.
    """
    return f"t{int(tenant_id)}.{hashlib.sha256(did.encode('utf-8')).hexdigest()[:40]}"


def tenant_group_name(tenant_id: int) -> str:
    """`t<tenant>`: every open socket of the tenant, on every front door (the tenant-state message);
    never a per-DID group, whose names always carry a `.<hash>`."""
    return f"t{int(tenant_id)}"


class Memberships:
    """One socket's channel-layer groups, kept joined while it is open.

    Both layers (channels_redis and the in-memory one) drop a member `group_expiry` after it joined
    (settings.MEDIATOR_CHANNEL_GROUP_EXPIRY_S), and a socket may stay open for days: it re-joins
    every group every quarter of that, so three refreshes in a row may fail (Redis away) before a
    push is lost. The cost per idle socket is one asyncio timer handle (no task, no coroutine);
    a task lives only while the refresh runs.
    """

    __slots__ = ("layer", "channel", "groups", "interval", "_timer", "_task", "_closed")

    def __init__(self, layer, channel: str):
        self.layer = layer
        self.channel = channel
        self.groups: set[str] = set()
        self.interval = refresh_interval_s(layer)
        self._timer: asyncio.TimerHandle | None = None
        self._task: asyncio.Task | None = None
        self._closed = False

    async def add(self, group: str) -> None:
        """Join `group` (the layer's errors propagate: the caller decides what a socket without it is)."""
        await self.layer.group_add(group, self.channel)
        CHANNEL_LAYER.recovered()
        self.groups.add(group)
        if self._timer is None and self._task is None and not self._closed:
            self._timer = asyncio.get_running_loop().call_later(self.interval, self._due)

    async def discard(self, group: str) -> None:
        """Leave `group`; a failure is logged (the membership then expires by itself)."""
        self.groups.discard(group)
        try:
            await self.layer.group_discard(group, self.channel)
        except Exception as exc:  # noqa: BLE001 - e.g. Redis down: the membership expires by itself
            CHANNEL_LAYER.failed(exc, "leaving a group")

    async def close(self) -> None:
        """Stop refreshing and leave every group (the socket disconnected)."""
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
        if self._task is not None:
            self._task.cancel()
        for group in list(self.groups):
            await self.discard(group)

    def _due(self) -> None:
        self._timer = None
        self._task = asyncio.get_running_loop().create_task(self._refresh())

    async def _refresh(self) -> None:
        try:
            for group in list(self.groups):
                try:
                    await self.layer.group_add(group, self.channel)
                    CHANNEL_LAYER.recovered()
                    if group not in self.groups:  # left while we re-joined it: leave again
                        await self.layer.group_discard(group, self.channel)
                except Exception as exc:  # noqa: BLE001 - retried at the next refresh, well before expiry
                    CHANNEL_LAYER.failed(exc, "renewing a group membership")
                    break
        finally:
            self._task = None
            if not self._closed and self.groups:
                self._timer = asyncio.get_running_loop().call_later(self.interval, self._due)


def refresh_interval_s(layer) -> float:
    """How often a socket re-joins its groups: a quarter of the layer's group expiry."""
    return getattr(layer, "group_expiry", 86400) / 4
