"""WebSocket clients that never read (hardening issue 13, item 1): Daphne's RSS under the attack.

    .venv/bin/python -m bench.ws_slow_reader                       # the default budget, then none
    .venv/bin/python -m bench.ws_slow_reader --budgets default 1099511627776 --sockets 8 --seconds 15

Per run: a fresh Daphne process (production settings module, PostgreSQL database
`mediator_bench_ws`, in-memory channel layer) started with `MEDIATOR_WS_SEND_BUDGET_BYTES` set to
the run's budget (`default` leaves it unset; 1 TiB means no budget). bob opens `--sockets` raw
sockets with a tiny receive buffer (SO_RCVBUF 4 096), authenticates each and never reads again,
plus one ordinary socket that reads everything (his phone). alice sends him TWO_WAY_PRIVATE events
of `--payload-kib` KiB, one after another from one HTTP connection, for `--seconds` seconds. A
sampler reads the server's VmRSS every 0.25 s. Then the stalled sockets are checked (closed by the
server or not) and closed, and sampling goes on for `--after` seconds.

Printed per run, as a JSON line: RSS at the start, the peak, at the end of the attack and after the
sockets closed; events sent; stalled sockets the server closed; events the reading socket got.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import socket
import struct
import time

from . import ws_common as wc_

NO_BUDGET = str(1 << 40)
TCP_ESTABLISHED = 1


class StalledSocket:
    """A `/ws` client that authenticates and then never reads: the attack of issue 13, item 1.

    A plain TCP socket with a tiny receive buffer (set before connecting, so the TCP window is
    small from the start), the upgrade, one masked AUTHENTICATE text frame, and the reply read
    up to the first frame. After that nothing is read, so the server can only queue.
    """

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
        from apps.wire.canonical import canonical_str, loads_strict

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


def _send_for(http, alice, bob, seconds: float, payload: str) -> dict:
    """TWO_WAY_PRIVATE events from alice to bob, one after another, for `seconds`."""
    sent = refused = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        env = alice.sign_command(recipient_did=bob.did, payload=payload, channel="TWO_WAY_PRIVATE")
        reply = http.send(env, raise_errors=False)
        if reply.get("type") == "SUCCESS":
            sent += 1
        else:
            refused += 1
    return {"sent": sent, "refused": refused}


async def _sample(server: wc_.Daphne, out: list[tuple[float, int]], t0: float) -> None:
    while True:
        out.append((time.monotonic() - t0, server.rss_kib()))
        await asyncio.sleep(0.25)


async def _read_all(sock, got: list[int]) -> None:
    from apps.wire.ws import SocketClosed

    try:
        while True:
            frame = await sock.recv(timeout=3600)
            if frame.get("type") == "PENDING_EVENTS":
                got[0] += len(frame["events"])
            elif frame.get("type") == "PING":
                await sock.pong(frame)
    except (SocketClosed, asyncio.CancelledError):
        return


async def one_run(budget: str, sockets: int, seconds: float, payload_kib: int, after_s: float) -> dict:
    from apps.wire.client import Identity, MediatorClient
    from apps.wire.ws import open_authenticated

    from .loadgen import save_contract

    port = wc_.free_port()
    host = f"127.0.0.1:{port}"
    tenant = await asyncio.to_thread(wc_.make_tenant, host)
    env = {} if budget == "default" else {"MEDIATOR_WS_SEND_BUDGET_BYTES": budget}
    server = await asyncio.to_thread(wc_.start_daphne, port, redis=False, env=env)
    http = MediatorClient(f"http://{host}", timeout=60)
    stalled: list[StalledSocket] = []
    try:
        alice = Identity.create("alice", tenant.did)
        bob = Identity.create("bob", tenant.did)
        await asyncio.to_thread(http.register, alice)
        await asyncio.to_thread(http.register, bob)
        await asyncio.to_thread(save_contract, http, alice, bob)
        for _ in range(sockets):
            s = await asyncio.to_thread(StalledSocket.open, ("127.0.0.1", port), host, bob.ws_authenticate())
            assert s.reply == {"type": "AUTH_SUCCESS"}, s.reply
            stalled.append(s)
        phone = await open_authenticated(f"ws://{host}/ws", bob)
        got = [0]
        reader = asyncio.create_task(_read_all(phone, got))

        samples: list[tuple[float, int]] = []
        t0 = time.monotonic()
        sampler = asyncio.create_task(_sample(server, samples, t0))
        await asyncio.sleep(0.5)
        rss_start = server.rss_kib()
        sends = await asyncio.to_thread(_send_for, http, alice, bob, seconds, "A" * (payload_kib * 1024))
        rss_attack_end = server.rss_kib()
        await asyncio.sleep(2)  # pushes still in flight reach the phone; a budget close completes
        closed = sum(s.closed_by_server() for s in stalled)
        for s in stalled:
            s.close()
        stalled.clear()
        await asyncio.sleep(after_s)
        sampler.cancel()
        rss_after = server.rss_kib()
        reader.cancel()
        await phone.close()
        peak = max(kib for _, kib in samples)
        return {
            "budget": budget,
            "stalled_sockets": sockets,
            "payload_kib": payload_kib,
            "seconds": seconds,
            **sends,
            "stalled_closed_by_server": closed,
            "phone_received": got[0],
            "rss_mib_start": round(rss_start / 1024, 1),
            "rss_mib_peak": round(peak / 1024, 1),
            "rss_mib_attack_end": round(rss_attack_end / 1024, 1),
            "rss_mib_after_close": round(rss_after / 1024, 1),
            "rss_mib_series": [[round(t, 1), round(kib / 1024)] for t, kib in samples[::4]],
        }
    finally:
        for s in stalled:
            s.close()
        http.close()
        await asyncio.to_thread(server.stop)


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--budgets", nargs="+", default=["default", NO_BUDGET], help="'default' or bytes, one run each")
    ap.add_argument("--sockets", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=15)
    ap.add_argument("--payload-kib", type=int, default=256)
    ap.add_argument("--after", type=float, default=5, help="seconds of sampling after the sockets closed")
    args = ap.parse_args(argv)
    wc_.prepare_database()
    wc_.django_setup()
    print(json.dumps({"machine": wc_.machine(), "loadavg_at_start": os.getloadavg()}), flush=True)
    results = []
    for budget in args.budgets:
        result = asyncio.run(one_run(budget, args.sockets, args.seconds, args.payload_kib, args.after))
        print(json.dumps(result), flush=True)
        results.append(result)
    print(json.dumps({"loadavg_at_end": os.getloadavg()}))
    print("| budget | events sent | stalled closed | phone got | RSS start | peak | attack end | after close |")
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        print(
            f"| {r['budget']} | {r['sent']} | {r['stalled_closed_by_server']}/{r['stalled_sockets']} | "
            f"{r['phone_received']} | {r['rss_mib_start']} | {r['rss_mib_peak']} | {r['rss_mib_attack_end']} | "
            f"{r['rss_mib_after_close']} |"
        )
    return results


if __name__ == "__main__":
    main()
