"""Idle capacity of one Daphne process on /ws: how many authenticated, idle sockets it holds and
at what resident memory (RSS), in steps up to 10,000.

    .venv/bin/python -m bench.ws_idle_capacity                     # steps 1000 2500 5000 10000
    .venv/bin/python -m bench.ws_idle_capacity --steps 1000 10000 --identities 200 --runs 3

One run starts a fresh Daphne process (production settings module, PostgreSQL database
`mediator_bench_ws`, in-memory channel layer unless --redis), registers `--identities`
identities over HTTP and opens sockets round-robin over them (any number of sockets per DID is
allowed, PROTOCOL-DECISIONS §6). At each step it waits `--settle` seconds, checks that every
socket is still open, that a push still reaches a socket within a second, and records the
server's RSS. The open-file limit is raised to the hard limit for both ends.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time

from . import ws_common as wc_


async def one_run(steps: list[int], identities: int, redis: bool, settle_s: float) -> list[dict]:
    from apps.wire import contract as wc
    from apps.wire.client import Identity, MediatorClient
    from apps.wire.did import parse_decentrl
    from apps.wire.ws import open_authenticated

    port = wc_.free_port()
    host = f"127.0.0.1:{port}"
    tenant = await asyncio.to_thread(wc_.make_tenant, host)
    server = await asyncio.to_thread(wc_.start_daphne, port, redis=redis)
    pool = wc_.SocketPool()
    rows = []
    try:
        base = f"http://{host}"
        url = f"ws://{host}/ws"
        crowd = await asyncio.to_thread(wc_.register_many, base, tenant.did, identities, "idle")
        # A sender and a probe recipient, to check that pushes still flow at each step.
        http = MediatorClient(base, timeout=30)
        alice, probe = Identity.create("alice", tenant.did), Identity.create("probe", tenant.did)
        await asyncio.to_thread(http.register, alice)
        await asyncio.to_thread(http.register, probe)
        req = wc.build_request(
            requestor_did=alice.did,
            recipient_did=probe.did,
            recipient_prekey=parse_decentrl(probe.did).pre_key,
            signing=alice.signing,
            expires_at=int(time.time()) + 86_400,
        )
        signed, _ = wc.accept_request(req.request, probe.signing)
        await asyncio.to_thread(
            http.command, probe, {"type": "SAVE_COMMUNICATION_CONTRACT", "signed_communication_contract": signed}
        )
        await asyncio.sleep(settle_s)
        baseline = server.rss_kib()
        for target in steps:
            t0 = time.perf_counter()
            new = target - len(pool.sockets)
            await pool.open(url, crowd, new)
            open_s = time.perf_counter() - t0
            await asyncio.sleep(settle_s)
            alive = sum(1 for s in pool.sockets if s.close_code is None)
            push_ms: float | None = None
            probe_error = None
            try:
                probe_sock = await open_authenticated(url, probe, open_timeout=30)
                blob = "B" * 64
                env = alice.sign_command(recipient_did=probe.did, payload=blob, channel="TWO_WAY_PRIVATE")
                t_send = time.perf_counter()
                await asyncio.to_thread(http.send, env)
                frame = await probe_sock.next_of("PENDING_EVENTS", 10)
                push_ms = round((time.perf_counter() - t_send) * 1000, 1)
                await probe_sock.close()
                await asyncio.to_thread(http.ack_events, probe, [e["id"] for e in frame["events"]])
            except Exception as exc:  # noqa: BLE001 - recorded in the row
                probe_error = type(exc).__name__
            rss = server.rss_kib()
            row = {
                "target": target,
                "open": len(pool.sockets),
                "alive": alive,
                "open_failures": pool.failures,
                "failure_kinds": pool.failure_kinds,
                "open_rate_per_s": round(new / open_s, 1) if open_s else None,
                "rss_mib": round(rss / 1024, 1),
                "baseline_rss_mib": round(baseline / 1024, 1),
                "kib_per_socket": round((rss - baseline) / max(1, len(pool.sockets)), 1),
                "probe_push_ms": push_ms,
                "probe_error": probe_error,
                "server_alive": server.proc.poll() is None,
            }
            print(json.dumps(row), flush=True)
            rows.append(row)
        http.close()
    finally:
        await pool.close()
        await asyncio.to_thread(server.stop)
    return rows


def _median(values: list) -> float | str:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else "failed"


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, nargs="+", default=[1000, 2500, 5000, 10000])
    ap.add_argument("--identities", type=int, default=200)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--settle", type=float, default=5.0, help="seconds to wait at each step before measuring")
    ap.add_argument("--redis", action="store_true", help="use the Redis channel layer (REDIS_URL) in the server")
    args = ap.parse_args(argv)
    nofile = wc_.raise_nofile()
    wc_.prepare_database()
    wc_.django_setup()
    print(json.dumps({"machine": wc_.machine(), "nofile": nofile, "layer": "redis" if args.redis else "in-memory"}))
    runs = [asyncio.run(one_run(args.steps, args.identities, args.redis, args.settle)) for _ in range(args.runs)]
    layer = "redis" if args.redis else "in-memory"
    print("| layer | sockets | alive after settle | server RSS MiB | KiB per socket | probe push ms |")
    print("|---|---|---|---|---|---|")
    for i, target in enumerate(args.steps):
        col = [r[i] for r in runs if len(r) > i]
        print(
            f"| {layer} | {target} | {statistics.median(c['alive'] for c in col):.0f} | "
            f"{statistics.median(c['rss_mib'] for c in col)} | {statistics.median(c['kib_per_socket'] for c in col)} | "
            f"{_median([c['probe_push_ms'] for c in col])} |"
        )
    return runs


if __name__ == "__main__":
    main()
