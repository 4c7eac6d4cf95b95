"""A per-socket send budget: how many bytes the server may hold for a peer that is not reading.

Daphne writes each frame into the socket's Twisted transport at once. The kernel takes bytes from
there only as fast as the peer's TCP window opens, so for a client that never reads, every push
stays in the process, and a few such sockets can grow Daphne by hundreds of MiB. The
budget caps those unsent bytes per socket:

- a frame the server *pushes* (an event, a PING) is queued only if the unsent bytes plus the
  frame fit within the budget, or if nothing is unsent (one frame larger than the budget still
  goes alone); otherwise the consumer queues its ERROR frame, waits for what is queued to leave
  (`drained`: while the peer takes bytes, or up to `DRAIN_BEFORE_CLOSE_S` without one) and closes
  the socket (`CLOSE_CODE`), so that a client that reads again late is told why. A push is a wake-up, never the only copy: the events
  stay pending and come back as backlog after AUTHENTICATE;
- a stream the server *pulls* (the backlog, read from the database) waits for room instead,
  so a large backlog reaches a slow reader at its own pace.

So the server never holds more than max(budget, one frame) plus a close frame for a socket.

The unsent bytes are read, not estimated: Daphne gives every application instance the ASGI
`send` callable `functools.partial(Server.handle_reply, protocol)` (daphne/server.py,
create_application), and the protocol's transport is a Twisted `FileDescriptor` whose write
buffer is `dataBuffer[offset:]` plus the `_tempDataBuffer` list (`_tempDataLen` bytes), the same
sum Twisted's own `_isSendBufferFull` reads. Under TLS the transport wraps the TCP one, which
holds the encrypted bytes. The Daphne end-to-end tests (tests/realtime/test_daphne.py) pin
this down. Under any other ASGI server nothing can be read and the budget is not enforced (a
warning says so, once per process).

`SendBudget` is transport-level and knows nothing about `/ws` frames, so every WebSocket
consumer of the deployment applies the same rule.
"""

from __future__ import annotations

import asyncio
import functools
import logging

from twisted.internet.abstract import FileDescriptor

log = logging.getLogger("mediator.realtime")

# Extension close code and ERROR code of a socket closed for exceeding its budget (docs/realtime.md).
CLOSE_CODE = 4509
ERROR_CODE = "SEND_BUDGET_EXCEEDED"

# How often a paced sender (the backlog) looks whether the peer has taken enough bytes.
PACE_POLL_S = 0.05

# How long a socket closed over its budget waits for its peer to take a byte of what is queued
# (the ERROR frame last) before the close frame is queued: Daphne resets a peer that has not
# answered its close 1 s after the close was *queued*, not written, which would drop the ERROR
# frame of a client that reads again late. Every byte taken restarts the wait, so a slow reader
# gets the frame however long its backlog takes; a peer that reads nothing is cut off
# DRAIN_BEFORE_CLOSE_S + 1 s after going over budget, holding at most the budget meanwhile.
DRAIN_BEFORE_CLOSE_S = 5.0

_warned = False


def frame_bytes(frame: str | bytes) -> int:
    """The size of a frame's payload on the wire: a binary frame's bytes, a text frame's UTF-8
    (without encoding ASCII text)."""
    if isinstance(frame, bytes) or frame.isascii():
        return len(frame)
    return len(frame.encode("utf-8"))


def _daphne_transport(send: object) -> FileDescriptor | None:
    """The TCP transport behind Daphne's ASGI `send` callable, or None if `send` is not Daphne's."""
    if not isinstance(send, functools.partial) or not send.args:
        return None
    transport = getattr(send.args[0], "transport", None)
    # TLS (and any other protocol wrapper) sits on top of the TCP transport.
    for _ in range(4):
        if transport is None or isinstance(transport, FileDescriptor):
            return transport
        transport = getattr(transport, "transport", None)
    return None


class SendBudget:
    """The unsent bytes of one socket against `limit` (see the module docstring)."""

    def __init__(self, limit: int, transport: FileDescriptor | None):
        self.limit = limit
        self.transport = transport

    @classmethod
    def for_send(cls, send: object, limit: int) -> SendBudget:
        """The budget of the socket behind an ASGI `send` callable."""
        global _warned
        transport = _daphne_transport(send)
        if transport is None and not _warned:
            _warned = True
            log.warning("websocket send budget not enforced: the ASGI server does not expose its write buffer")
        return cls(limit, transport)

    def unsent(self) -> int:
        """Bytes written to the socket that the kernel has not taken yet (0 once it is closed)."""
        t = self.transport
        if t is None or not t.connected:
            return 0
        return len(t.dataBuffer) - t.offset + t._tempDataLen

    def release(self) -> None:
        """Drop what a closed connection still buffers. Twisted keeps a lost connection's unsent
        bytes on its transport, and the transport lives in a reference cycle with its protocol,
        which only the cyclic garbage collector frees; large byte strings do not make that run,
        so without this a few stalled sockets keep hundreds of MiB after they close."""
        t = self.transport
        if t is None or t.connected:
            return
        # A lost transport never writes again (FileDescriptor.write returns early).
        t.dataBuffer, t.offset, t._tempDataBuffer, t._tempDataLen = b"", 0, [], 0

    def is_open(self) -> bool:
        return self.transport is None or bool(self.transport.connected)

    def admits(self, size: int) -> bool:
        """Whether a frame of `size` bytes may be queued now."""
        unsent = self.unsent()
        return unsent == 0 or unsent + size <= self.limit

    async def drained(self, timeout: float = DRAIN_BEFORE_CLOSE_S) -> bool:
        """Wait until every byte written so far has left the process: False once `timeout` passed
        without the peer taking a byte, or if the connection ends first. The deadline moves with
        the peer's progress, so a client that reads again, however slowly (a small receive window,
        a loaded machine), gets everything up to the ERROR frame; one that reads nothing is given up
        on after `timeout`, holding no more than it did."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        unsent = self.unsent()
        while unsent:
            if not self.is_open() or loop.time() >= deadline:
                return False
            await asyncio.sleep(PACE_POLL_S)
            left = self.unsent()
            if left < unsent:
                deadline = loop.time() + timeout
            unsent = left
        return self.is_open()

    async def room_for(self, size: int) -> bool:
        """Wait until a frame of `size` bytes is admitted; False if the connection ends first."""
        while not self.admits(size):
            if not self.is_open():
                return False
            await asyncio.sleep(PACE_POLL_S)
        return self.is_open()
