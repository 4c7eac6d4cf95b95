"""One socket's presence marks (apps/messaging/presence.py), kept while it is open.

A socket that takes pushes for a DID (a `/ws` socket for its authenticated DID, a `/didcomm/ws`
socket for each client in live mode) marks the DID present after joining its group and before
reading its backlog, and unmarks it before leaving the group: a stored message is pushed only to
a DID that may have such a socket. While the socket is open it renews every mark every third of
the lease (one asyncio timer per socket, a task only while the renewal runs). If the database
stays away until a mark would lapse, `on_lapse` runs: the socket closes rather than stay open
while counted absent (its client reconnects and gets its backlog).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from django.db import DatabaseError

from apps.messaging import presence

from .admission import db_hop

log = logging.getLogger("mediator.realtime")


def _renew_all(*, tenant_id: int, dids: list[str], now_s: int) -> None:
    for did in dids:
        presence.socket_renewed(tenant_id=tenant_id, did=did, now_s=now_s)


class Presence:
    """The DIDs one socket is marked present for (see the module docstring)."""

    __slots__ = ("tenant_id", "on_lapse", "dids", "until", "_timer", "_task", "_closed")

    def __init__(self, tenant_id: int, on_lapse: Callable[[], Awaitable[None]]):
        self.tenant_id = tenant_id
        self.on_lapse = on_lapse
        self.dids: set[str] = set()
        self.until: float | None = None  # monotonic: when the oldest mark's lease runs out
        self._timer: asyncio.TimerHandle | None = None
        self._task: asyncio.Task | None = None
        self._closed = False

    async def enter(self, did: str) -> None:
        """Mark `did` present (once per socket); a DatabaseError propagates (the caller refuses
        what needed the mark)."""
        if did in self.dids or self._closed:
            return
        started = time.monotonic()
        await db_hop(presence.socket_entered)(tenant_id=self.tenant_id, did=did, now_s=int(time.time()))
        self.dids.add(did)
        if self.until is None:
            self.until = started + presence.lease_s()
        if self._timer is None and self._task is None:
            self._schedule()

    async def leave(self, did: str) -> None:
        """Unmark `did`, after a renewal in flight (which would mark it again); a failure is
        logged (the mark then lapses by itself)."""
        if did not in self.dids:
            return
        await self._settled()
        self.dids.discard(did)
        try:
            await db_hop(presence.socket_left)(tenant_id=self.tenant_id, did=did)
        except DatabaseError:
            log.warning("database unreachable while releasing a socket's presence")
        if not self.dids:
            self.until = None
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

    async def close(self) -> None:
        """The socket closed: no more renewals, every mark released."""
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for did in list(self.dids):
            await self.leave(did)

    async def _settled(self) -> None:
        if self._task is not None and not self._task.done() and self._task is not asyncio.current_task():
            await asyncio.wait([self._task])

    def _schedule(self) -> None:
        self._timer = asyncio.get_running_loop().call_later(presence.lease_s() / 3, self._due)

    def _due(self) -> None:
        self._timer = None
        if self.dids and not self._closed:
            self._task = asyncio.get_running_loop().create_task(self._renew())

    async def _renew(self) -> None:
        started = time.monotonic()
        try:
            await db_hop(_renew_all)(tenant_id=self.tenant_id, dids=sorted(self.dids), now_s=int(time.time()))
            self.until = started + presence.lease_s()
        except DatabaseError:
            log.warning("database unreachable while renewing a socket's presence")
            if self.until is not None and time.monotonic() + presence.lease_s() / 3 >= self.until:
                self._task = None
                if not self._closed:
                    await self.on_lapse()
                return
        self._task = None
        if self.dids and not self._closed:
            self._schedule()
