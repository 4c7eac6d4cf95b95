"""A TCP tap for the end-to-end tests: agents talk to 127.0.0.1:<tap port>, every byte goes on unchanged to
the real server, and what the agents sent is kept, so that a run can record the exact messages real
agents send (HTTP request bodies and WebSocket client frames) as fixtures."""

from __future__ import annotations

import asyncio
import struct
import threading
import time
from dataclasses import dataclass

import h11

from tests.support.servers import free_port


@dataclass(frozen=True)
class Sent:
    """One thing an agent sent: an HTTP request (`method`, `target`, `content_type`, `body`) or a WebSocket frame
    (`method` "WS", `target` the socket's path, `content_type` "binary" or "text"). `at` orders them."""

    at: float
    method: str
    target: str
    content_type: str
    body: bytes


class WireTap:
    def __init__(self, upstream_port: int, port: int | None = None):
        self.port, self.upstream_port = port or free_port(), upstream_port
        self._chunks: list[tuple[float, int, bytes]] = []  # (time, connection, client bytes)
        self._connections = 0
        self.loop = asyncio.new_event_loop()
        started = threading.Event()
        threading.Thread(target=self._run, args=(started,), daemon=True).start()
        started.wait(10)

    def _run(self, started: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        self.server = self.loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", self.port))
        started.set()
        self.loop.run_forever()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        n, self._connections = self._connections, self._connections + 1
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        except OSError:
            writer.close()
            return

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter, record: bool) -> None:
            try:
                while data := await src.read(65536):
                    if record:
                        self._chunks.append((time.monotonic(), n, data))
                    dst.write(data)
                    await dst.drain()
            except (ConnectionError, asyncio.CancelledError):
                pass
            finally:
                dst.close()

        await asyncio.gather(pipe(reader, up_writer, True), pipe(up_reader, writer, False))

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.server.close)
        self.loop.call_soon_threadsafe(self.loop.stop)

    def sent(self) -> list[Sent]:
        """Everything the clients sent so far, in the order it was complete."""
        out: list[Sent] = []
        for conn in {c for _, c, _ in self._chunks}:
            out.extend(_parse([(t, d) for t, c, d in self._chunks if c == conn]))
        return sorted(out, key=lambda s: s.at)


def _parse(chunks: list[tuple[float, bytes]]) -> list[Sent]:
    """HTTP/1.1 requests with h11; after a WebSocket upgrade, the client's (masked) frames."""
    parser, out, request, body = h11.Connection(h11.SERVER), [], None, b""
    ws_target, ws_buffer = None, b""
    for at, data in chunks:
        if ws_target is not None:
            ws_buffer += data
            ws_buffer = _frames(ws_buffer, at, ws_target, out)
            continue
        parser.receive_data(data)
        while True:
            event = parser.next_event()
            if event in (h11.NEED_DATA, h11.PAUSED) or isinstance(event, h11.ConnectionClosed):
                break
            if isinstance(event, h11.Request):
                request, body = event, b""
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                headers = dict(request.headers)
                out.append(
                    Sent(
                        at,
                        request.method.decode(),
                        request.target.decode(),
                        headers.get(b"content-type", b"").decode(),
                        body,
                    )
                )
                if headers.get(b"upgrade", b"").lower() == b"websocket":
                    ws_target = request.target.decode()
                    ws_buffer = _frames(parser.trailing_data[0], at, ws_target, out)
                    break
                parser.send(h11.Response(status_code=200, headers=[("content-length", "0")]))
                parser.send(h11.EndOfMessage())
                parser.start_next_cycle()
    return out


def _frames(buffer: bytes, at: float, target: str, out: list[Sent]) -> bytes:
    """Take whole client frames (RFC 6455 §5.2) off `buffer`; keep data frames; return the rest."""
    while len(buffer) >= 2:
        opcode, length, pos = buffer[0] & 0x0F, buffer[1] & 0x7F, 2
        if length == 126:
            if len(buffer) < 4:
                break
            length, pos = struct.unpack(">H", buffer[2:4])[0], 4
        elif length == 127:
            if len(buffer) < 10:
                break
            length, pos = struct.unpack(">Q", buffer[2:10])[0], 10
        masked = buffer[1] & 0x80
        mask = buffer[pos : pos + 4] if masked else b"\0\0\0\0"
        pos += 4 if masked else 0
        if len(buffer) < pos + length:
            break
        payload = bytes(b ^ mask[i % 4] for i, b in enumerate(buffer[pos : pos + length]))
        if opcode in (1, 2):
            out.append(Sent(at, "WS", target, "text" if opcode == 1 else "binary", payload))
        buffer = buffer[pos + length :]
    return buffer
