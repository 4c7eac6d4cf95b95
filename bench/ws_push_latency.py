"""Push latency on /ws: from the TWO_WAY_PRIVATE HTTP response to the PENDING_EVENTS frame on the
recipient's socket, with 1, 100 and 1,000 other authenticated sockets connected.

    .venv/bin/python -m bench.ws_push_latency                  # in-memory layer, 3 runs
    .venv/bin/python -m bench.ws_push_latency --redis          # Redis channel layer
    .venv/bin/python -m bench.ws_push_latency --others 1 100 1000 --sends 200 --runs 3

Each run starts a fresh Daphne process (production settings module, PostgreSQL database
`mediator_bench_ws`), registers the sender, the recipient and 100 identities for the other
sockets over HTTP, opens the sockets, and sends TWO_WAY_PRIVATE commands one at a time (a
short pause between them) from one keep-alive HTTP connection.

Two figures per send: `response->frame` (the issue's definition; negative when the push
overtakes the HTTP response, since the push leaves on commit, before the response is written)
and `request->frame` (from just before the request is written). Reported: p50 and p99 per run
and the median of those over runs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time

import httpx

from . import ws_common as wc_


async def one_run(others: int, sends: int, redis: bool, pause_s: float) -> dict:

    from apps.wire.client import Identity, MediatorClient
    from apps.wire.ws import open_authenticated

    from .loadgen import save_contract

    port = wc_.free_port()
    host = f"127.0.0.1:{port}"
    tenant = await asyncio.to_thread(wc_.make_tenant, host)
    server = await asyncio.to_thread(wc_.start_daphne, port, redis=redis)
    pool = wc_.SocketPool()
    try:
        base = f"http://{host}"
        http = MediatorClient(base, timeout=30)
        alice = Identity.create("alice", tenant.did)
        bob = Identity.create("bob", tenant.did)
        await asyncio.to_thread(http.register, alice)
        await asyncio.to_thread(http.register, bob)
        await asyncio.to_thread(save_contract, http, alice, bob)
        crowd = await asyncio.to_thread(wc_.register_many, base, tenant.did, min(100, others), "o")
        await pool.open(f"ws://{host}/ws", crowd, others)
        rss_with_sockets = server.rss_kib()

        bob_sock = await open_authenticated(f"ws://{host}/ws", bob)
        recorder = wc_.PushRecorder(bob_sock)
        bodies = wc_.presigned_sends(alice, bob, sends + 10)
        resp_to_frame: list[float] = []
        req_to_frame: list[float] = []
        async with httpx.AsyncClient(base_url=base, timeout=30) as client:
            for i, body in enumerate(bodies):
                t_req = time.perf_counter()
                r = await client.post("/", content=body, headers={"Content-Type": "application/json"})
                t_resp = time.perf_counter()
                assert r.status_code == 200, r.text
                t_frame = await recorder.arrival(r.json()["pendingEventId"])
                if i >= 10:  # the first ten warm up connections and caches
                    resp_to_frame.append((t_frame - t_resp) * 1000)
                    req_to_frame.append((t_frame - t_req) * 1000)
                await asyncio.sleep(pause_s)
        recorder.stop()
        await bob_sock.close()
        http.close()
        return {
            "others": others,
            "others_open": len(pool.sockets),
            "open_failures": pool.failures,
            "failure_kinds": pool.failure_kinds,
            "rss_mib_with_sockets": round(rss_with_sockets / 1024, 1),
            "resp_to_frame_p50_ms": round(wc_.percentile(resp_to_frame, 50), 2),
            "resp_to_frame_p99_ms": round(wc_.percentile(resp_to_frame, 99), 2),
            "req_to_frame_p50_ms": round(wc_.percentile(req_to_frame, 50), 2),
            "req_to_frame_p99_ms": round(wc_.percentile(req_to_frame, 99), 2),
            "push_before_response": sum(1 for v in resp_to_frame if v < 0),
            "sends": len(resp_to_frame),
        }
    finally:
        await pool.close()
        await asyncio.to_thread(server.stop)


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--others", type=int, nargs="+", default=[1, 100, 1000])
    ap.add_argument("--sends", type=int, default=200)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--pause-ms", type=float, default=10)
    ap.add_argument("--redis", action="store_true", help="use the Redis channel layer (REDIS_URL) in the server")
    args = ap.parse_args(argv)
    wc_.raise_nofile()
    wc_.prepare_database()
    wc_.django_setup()
    print(json.dumps({"machine": wc_.machine(), "layer": "redis" if args.redis else "in-memory"}))
    summary = []
    for others in args.others:
        runs = []
        for _ in range(args.runs):
            result = asyncio.run(one_run(others, args.sends, args.redis, args.pause_ms / 1000))
            print(json.dumps(result), flush=True)
            runs.append(result)
        numeric = [k for k, v in runs[0].items() if isinstance(v, (int, float)) and k != "others"]
        med = {k: statistics.median(r[k] for r in runs) for k in numeric}
        med["others"] = others
        summary.append(med)
    print("| layer | other sockets | response→frame p50 ms | p99 ms | request→frame p50 ms | p99 ms | server RSS MiB |")
    print("|---|---|---|---|---|---|---|")
    layer = "redis" if args.redis else "in-memory"
    for m in summary:
        print(
            f"| {layer} | {m['others']} | {m['resp_to_frame_p50_ms']} | {m['resp_to_frame_p99_ms']} | "
            f"{m['req_to_frame_p50_ms']} | {m['req_to_frame_p99_ms']} | {m['rss_mib_with_sockets']} |"
        )
    return summary


if __name__ == "__main__":
    main()
