"""Async WebSocket access to a mediator's `/ws` (DCTRL-0004 §10), for tests, benchmarks and the CLI.

Pure client code (no Django). Frames are parsed with the strict parser and sent in canonical form.

    async with await MediatorSocket.open("ws://127.0.0.1:8000/ws") as sock:
        reply = await sock.authenticate(identity)          # {"type": "AUTH_SUCCESS"}
        push = await sock.next_of("PENDING_EVENTS")         # PINGs are answered on the way
"""

from __future__ import annotations

import asyncio
from typing import Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from .canonical import canonical_str, loads_strict

# Backlog frames are built up to 1 MiB, but one pending event may be as large as a command body.
DEFAULT_MAX_SIZE = 16 * 1024 * 1024


class SocketClosed(Exception):
    """The server closed the socket; `code` is its close code (e.g. 4006)."""

    def __init__(self, code: int | None, reason: str = ""):
        super().__init__(f"closed {code} {reason}".strip())
        self.code = code
        self.reason = reason


class MediatorSocket:
    """One client WebSocket to `/ws`."""

    def __init__(self, conn: ClientConnection):
        self.conn = conn

    @classmethod
    async def open(
        cls,
        url: str,
        *,
        connect_to: tuple[str, int] | None = None,
        open_timeout: float = 10.0,
        max_size: int = DEFAULT_MAX_SIZE,
        **kwargs: Any,
    ) -> MediatorSocket:
        """Connect to `url` (ws://host[:port]/ws). `connect_to` dials another address while keeping
        `url`'s host in the Host header, so one server can be reached as any of its tenants."""
        if connect_to is not None:
            kwargs.update(host=connect_to[0], port=connect_to[1])
        conn = await connect(
            url,
            open_timeout=open_timeout,
            max_size=max_size,
            compression=None,
            proxy=None,
            # Keepalive is the server's job (§10.4 PING, plus the ASGI server's own pings).
            ping_interval=None,
            **kwargs,
        )
        return cls(conn)

    async def __aenter__(self) -> MediatorSocket:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def close_code(self) -> int | None:
        return self.conn.close_code

    async def send_json(self, obj: Any) -> None:
        await self.conn.send(canonical_str(obj))

    async def recv(self, timeout: float = 10.0) -> dict[str, Any]:
        """The next frame, parsed; SocketClosed if the server closed, TimeoutError if none came."""
        try:
            async with asyncio.timeout(timeout):
                raw = await self.conn.recv()
        except ConnectionClosed as exc:
            rcvd = exc.rcvd
            raise SocketClosed(rcvd.code if rcvd else None, rcvd.reason if rcvd else "") from exc
        frame: dict[str, Any] = loads_strict(raw)
        return frame

    async def next_of(self, frame_type: str, timeout: float = 10.0, *, answer_pings: bool = True) -> dict[str, Any]:
        """The next frame of `frame_type`, skipping (and answering) PINGs and other frames."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            frame = await self.recv(max(0.0, deadline - loop.time()))
            if frame.get("type") == frame_type:
                return frame
            if frame.get("type") == "PING" and answer_pings:
                await self.pong(frame)

    async def pong(self, ping: dict[str, Any]) -> None:
        """§10.4: answer a PING with its timestamp."""
        await self.send_json({"type": "PONG", "timestamp": ping.get("timestamp", 0)})

    async def authenticate(self, identity: Any, timeout: float = 10.0, **frame_kwargs: Any) -> dict[str, Any]:
        """Send `identity.ws_authenticate()` and return the server's answer (AUTH_SUCCESS or AUTH_FAILED)."""
        await self.send_json(identity.ws_authenticate(**frame_kwargs))
        return await self.recv(timeout)

    async def wait_closed(self, timeout: float = 10.0) -> int | None:
        """Read until the server closes; returns the close code."""
        try:
            async with asyncio.timeout(timeout):
                async for _ in self.conn:
                    pass
        except ConnectionClosed:
            pass
        return self.conn.close_code

    async def close(self) -> None:
        await self.conn.close()

    def abort(self) -> None:
        """Drop the TCP connection without a closing handshake (a device losing its network)."""
        self.conn.transport.abort()


async def open_authenticated(url: str, identity: Any, **kwargs: Any) -> MediatorSocket:
    """Open `/ws` and authenticate; raises SocketClosed with the close code if refused."""
    sock = await MediatorSocket.open(url, **kwargs)
    try:
        reply = await sock.authenticate(identity, timeout=kwargs.get("open_timeout", 10.0))
    except BaseException:
        sock.abort()
        raise
    if reply.get("type") != "AUTH_SUCCESS":
        code = await sock.wait_closed()
        raise SocketClosed(code, str(reply.get("code")))
    return sock
