"""A WebSocket client that authenticates and then never reads (tests/realtime/test_daphne.py,
tests/didcomm/app/test_e2e_socket.py): what the server does with a peer that stops reading.

A plain TCP socket with a tiny receive buffer (set before connecting, so the TCP window is small from
the start), the upgrade, one masked text frame, and the reply read up to the first frame. After that
nothing is read, so the server can only queue. `close_timeout_passed` waits, by the same
means, until the server's close-handshake timeout has run out for a close it queued.
"""

from __future__ import annotations

import base64
import os
import socket
import struct
import time

from apps.wire.canonical import canonical_str, loads_strict

TCP_ESTABLISHED = 1


class StalledSocket:
    """An authenticated `/ws` (or `/didcomm/ws`) client that never reads after its first reply."""

    def __init__(self, sock: socket.socket, reply: dict):
        self.sock = sock
        self.reply = reply

    @classmethod
    def open(
        cls,
        addr: tuple[str, int],
        host: str,
        authenticate: dict | str,
        *,
        rcvbuf: int = 4096,
        timeout: float = 10.0,
        path: str = "/ws",
    ) -> StalledSocket:
        """`authenticate` is the first frame: a dict (canonical JSON) or text sent as it is (a
        packed DIDComm live-delivery-change on `path="/didcomm/ws"`)."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        sock.settimeout(timeout)
        sock.connect(addr)
        key = base64.b64encode(os.urandom(16)).decode()
        sock.sendall(
            (
                f"GET {path} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
            ).encode()
        )
        buf = bytearray()
        while b"\r\n\r\n" not in buf:
            buf += _recv(sock)
        head, _, rest = bytes(buf).partition(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 101"):
            raise RuntimeError(f"upgrade refused: {head[:80]!r}")
        first = authenticate if isinstance(authenticate, str) else canonical_str(authenticate)
        sock.sendall(_masked_text_frame(first))
        _, reply = _read_frame(sock, bytearray(rest))
        return cls(sock, loads_strict(reply.decode()))

    def read_to_close(self, timeout: float = 5.0) -> list[tuple[int, bytes]]:
        """Start reading after all: every (opcode, payload) frame up to and including the close
        frame (opcode 8, payload = 2-byte code + reason), or up to the end of the connection."""
        self.sock.settimeout(timeout)
        buf = bytearray()
        frames: list[tuple[int, bytes]] = []
        try:
            while not frames or frames[-1][0] != 8:
                frames.append(_read_frame(self.sock, buf))
        except (ConnectionError, TimeoutError):
            pass
        return frames

    def closed_by_server(self) -> bool:
        """Whether the TCP connection is no longer established (the server reset or ended it),
        read from TCP_INFO so that nothing is read from the socket."""
        state = self.sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 1)[0]
        return state != TCP_ESTABLISHED

    def close(self) -> None:
        self.sock.close()


def close_timeout_passed(addr: tuple[str, int], host: str, timeout: float = 30.0) -> None:
    """Return once the server's close-handshake timeout has run out for a close it queues now:
    a `/ws` socket whose AUTHENTICATE is refused (AUTH_FAILED, then the close queued at once)
    never answers the close, and Daphne resets it when that timeout ends. A close the server
    queued before this call has been given up on by then too: an ordering, not a fixed wait."""
    control = StalledSocket.open(addr, host, {"type": "AUTHENTICATE"})
    try:
        assert control.reply["type"] == "AUTH_FAILED", control.reply
        deadline = time.monotonic() + timeout
        while not control.closed_by_server():
            assert time.monotonic() < deadline, "the server never reset a peer that did not answer its close"
            time.sleep(0.01)
    finally:
        control.close()


def _recv(sock: socket.socket) -> bytes:
    chunk = sock.recv(65536)
    if not chunk:
        raise ConnectionError("closed by the server")
    return chunk


def _take(sock: socket.socket, buf: bytearray, n: int) -> bytes:
    while len(buf) < n:
        buf += _recv(sock)
    out = bytes(buf[:n])
    del buf[:n]
    return out


def _read_frame(sock: socket.socket, buf: bytearray) -> tuple[int, bytes]:
    """One unmasked server-to-client frame: (opcode, payload); `buf` holds bytes read ahead."""
    head = _take(sock, buf, 2)
    length = head[1] & 0x7F
    if length == 126:
        (length,) = struct.unpack("!H", _take(sock, buf, 2))
    elif length == 127:
        (length,) = struct.unpack("!Q", _take(sock, buf, 8))
    return head[0] & 0x0F, _take(sock, buf, length)


def _masked_text_frame(text: str) -> bytes:
    """One client-to-server text frame (RFC 6455 §5.2: clients mask)."""
    data = text.encode()
    mask = os.urandom(4)
    n = len(data)
    if n < 126:
        head = bytes([0x81, 0x80 | n])
    elif n < 1 << 16:
        head = bytes([0x81, 0x80 | 126]) + struct.pack("!H", n)
    else:
        head = bytes([0x81, 0x80 | 127]) + struct.pack("!Q", n)
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data))
