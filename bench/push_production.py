"""Push latency through the production layout, against a running deployment:
TWO_WAY_PRIVATE over nginx → Granian (WSGI threads) → after-commit push → Redis channel
layer → Daphne → the recipient's socket through nginx, with `--others` more authenticated
sockets open on the same Daphne.

    python -m bench.push_production --url http://127.0.0.1:8300 --host localhost:8300 --others 1000

Figures per send as in bench/ws_push_latency.py: `response->frame` (the issue's definition,
negative when the push overtakes the HTTP response) and `request->frame`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

from . import ws_common as wc_


async def measure(url: str, host: str | None, others: int, sends: int, pause_s: float) -> dict:
    import http.client
    from urllib.parse import urlparse

    from apps.wire.client import Identity, MediatorClient
    from apps.wire.ws import open_authenticated

    from .loadgen import save_contract

    u = urlparse(url)
    ws_url = f"ws://{u.hostname}:{u.port}/ws"
    http_client = MediatorClient(url, host=host, timeout=30)
    did = http_client.did
    alice = Identity.create("alice", did)
    bob = Identity.create("bob", did)
    await asyncio.to_thread(http_client.register, alice)
    await asyncio.to_thread(http_client.register, bob)
    await asyncio.to_thread(save_contract, http_client, alice, bob)
    pool = wc_.SocketPool()
    crowd = await asyncio.to_thread(_register_many, url, host, did, min(100, max(others, 1)))
    opened = time.perf_counter()
    await pool.open(ws_url, crowd, others)
    open_s = time.perf_counter() - opened
    others_open = len(pool.sockets)
    bob_sock = await open_authenticated(ws_url, bob)
    recorder = wc_.PushRecorder(bob_sock)
    bodies = wc_.presigned_sends(alice, bob, sends + 10)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    headers = {"Content-Type": "application/json", "Host": host or f"{u.hostname}:{u.port}"}
    resp_to_frame: list[float] = []
    req_to_frame: list[float] = []
    try:
        for i, body in enumerate(bodies):
            t_req = time.perf_counter()
            # The keep-alive POST runs in a thread so that the reader stamps frames as they come.
            status, data = await asyncio.to_thread(_post, conn, body, headers)
            t_resp = time.perf_counter()
            if status != 200:
                raise RuntimeError(f"send failed: {status} {data[:200]!r}")
            t_frame = await recorder.arrival(json.loads(data)["pendingEventId"])
            if i >= 10:
                resp_to_frame.append((t_frame - t_resp) * 1000)
                req_to_frame.append((t_frame - t_req) * 1000)
            await asyncio.sleep(pause_s)
    finally:
        recorder.stop()
        await bob_sock.close()
        await pool.close()
        conn.close()
        http_client.close()
    return {
        "layout": "nginx -> granian -> redis -> daphne",
        "others": others,
        "others_open": others_open,
        "open_failures": pool.failures,
        "open_s": round(open_s, 1),
        "resp_to_frame_p50_ms": round(wc_.percentile(resp_to_frame, 50), 2),
        "resp_to_frame_p99_ms": round(wc_.percentile(resp_to_frame, 99), 2),
        "req_to_frame_p50_ms": round(wc_.percentile(req_to_frame, 50), 2),
        "req_to_frame_p99_ms": round(wc_.percentile(req_to_frame, 99), 2),
        "push_before_response": sum(1 for v in resp_to_frame if v < 0),
        "sends": len(resp_to_frame),
    }


def _post(conn, body: bytes, headers: dict) -> tuple[int, bytes]:
    conn.request("POST", "/", body=body, headers=headers)
    resp = conn.getresponse()
    return resp.status, resp.read()


def _register_many(url: str, host: str | None, did: str, n: int) -> list:
    from apps.wire.client import Identity, MediatorClient

    client = MediatorClient(url, host=host, timeout=30)
    out = []
    for i in range(n):
        who = Identity.create(f"o{i}", did)
        client.register(who, lifetime_s=86_400)
        out.append(who)
    client.close()
    return out


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", required=True)
    ap.add_argument("--host", default=None)
    ap.add_argument("--others", type=int, default=1000)
    ap.add_argument("--sends", type=int, default=200)
    ap.add_argument("--pause-ms", type=float, default=10)
    args = ap.parse_args(argv)
    wc_.raise_nofile()
    res = asyncio.run(measure(args.url, args.host, args.others, args.sends, args.pause_ms / 1000))
    print(json.dumps(res))
    return res


if __name__ == "__main__":
    main()
