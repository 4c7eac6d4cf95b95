"""CPU cost of one DIDComm v2 forward against one TWO_WAY_PRIVATE, in-process and single-threaded.

    .venv/bin/python -m bench.forward_cpu                         # 5 alternate rounds of 2000 each
    .venv/bin/python -m bench.forward_cpu --profile forward        # + cProfile of 2000 forwards

Both kinds go through the production WSGI application (mediator_project/wsgi.py: POST / and
POST /didcomm on apps/decentrl/wsgi.py's CommandEntry), minus HTTP parsing, with metering and the
after-commit push to Redis on, as in production (rate limits off). The DIDComm world is made
through the protocol (wallets granted mediation, one recipient DID each); every forward is built
before it is sent (a fresh anoncrypt routing/2.0 forward to the mediator DID around a fixed ~256-byte
JWE for the recipient, as bench/didcomm_bench.py sends). Per request (bench/inprocess.py):
`py_us` (this process's CPU: what a Granian worker spends), `pg_us` (the database backends') and
`wall_us`; the rounds alternate the kinds, the order flipping every round. The queues are emptied
between runs. Uses its own database (BENCH_FORWARD_DB, default mediator_bench_forward_cpu).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import tempfile
import time

from bench.inprocess import measure, print_profile, registered_pairs, setup_django, wsgi_poster

DB = os.environ.get("BENCH_FORWARD_DB", "mediator_bench_forward_cpu")
HOST = "forward.bench:80"
ENCRYPTED = "application/didcomm-encrypted+json"


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=2000, help="requests per run")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--pairs", type=int, default=16)
    ap.add_argument("--redis-url", default=os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/13"))
    ap.add_argument(
        "--bare", action="store_true", help="diagnostic: no observers (metering, metrics) and no push, for both kinds"
    )
    ap.add_argument("--profile", choices=("forward", "two_way_private"), nargs="*", default=[])
    args = ap.parse_args(argv)
    os.environ.setdefault("MEDIATOR_DIDCOMM_RATE_LIMIT_PER_SENDER", "0")
    os.environ.setdefault("MEDIATOR_DIDCOMM_RATE_LIMIT_PER_IP", "0")
    # Persistent connections, as the production layout's Granian threads keep them.
    os.environ.setdefault("DB_CONN_MAX_AGE", "600")
    # Metrics as the production layout keeps them (one file per process, scripts/run_production.sh).
    os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR", tempfile.mkdtemp(prefix="forward-cpu-metrics-"))
    setup_django(DB, args.redis_url)

    from django.db import connection

    from apps.didcomm.core.agent import CM2, Agent, routed_did
    from apps.didcomm.core.resolver import resolve_did
    from apps.tenants.services import tenant_create
    from apps.wire.canonical import canonical_bytes
    from bench.didcomm_bench import forwards, inner_for
    from mediator_project.wsgi import application

    tenant = tenant_create(slug="fwdcpu", domain=HOST, rate_limit_per_did=0, rate_limit_per_ip=0)
    post_root = wsgi_poster(application, HOST)
    post_didcomm = wsgi_poster(application, HOST, path="/didcomm", content_type=ENCRYPTED)

    # Decentrl: registered pairs with contracts.
    senders, recipients = registered_pairs(post_root, tenant, args.pairs)

    # DIDComm: wallets granted mediation through the protocol, one recipient DID each.
    status, data = wsgi_poster(application, HOST, path="/didcomm/invitation", method="GET")(b"")
    mediator_did = json.loads(data)["from"]
    vm = resolve_did(mediator_did).key_agreement[0]

    class Med:
        did, kid, key = mediator_did, vm.id, vm.key

    def send(wallet: Agent, message: dict) -> dict:
        status, data = post_didcomm(wallet.pack(message, mediator_did))
        assert status.startswith("200"), (status, data[:200])
        return wallet.unpack(data)[0]

    targets = []
    for _ in range(args.pairs):
        wallet = Agent()
        assert send(wallet, wallet.message(CM2 + "mediate-request"))["type"] == CM2 + "mediate-grant"
        rcpt = routed_did(mediator_did)
        answer = send(
            wallet, wallet.message(CM2 + "keylist-update", {"updates": [{"recipient_did": rcpt.did, "action": "add"}]})
        )
        assert answer["body"]["updated"][0]["result"] == "success", answer
        targets.append((rcpt, inner_for(rcpt)))

    def ok(expected: str):
        def check(status: str, data: bytes) -> None:
            if not status.startswith(expected):
                raise SystemExit(f"{status} {data[:200]!r}")

        return check

    kinds = {
        "forward": (post_didcomm, lambda n: forwards(Med, targets, n), ok("202")),
        "two_way_private": (
            post_root,
            lambda n: [
                canonical_bytes(
                    senders[i % args.pairs].sign_command(
                        recipient_did=recipients[i % args.pairs].did, payload="A" * 256, channel="TWO_WAY_PRIVATE"
                    )
                )
                for i in range(n)
            ],
            ok("200"),
        ),
    }

    def empty_queues() -> None:
        with connection.cursor() as cur:
            cur.execute("DELETE FROM didcomm_queuedmessage")
            cur.execute(
                "UPDATE messaging_pendingevent SET acknowledged_at = now(), payload = '' WHERE acknowledged_at IS NULL"
            )

    if args.bare:
        from apps.decentrl import hooks as decentrl_hooks
        from apps.didcomm import hooks as didcomm_hooks
        from apps.messaging import notify

        decentrl_hooks.OBSERVERS[:] = []
        didcomm_hooks.OBSERVERS[:] = []
        notify.push_requested.receivers = []
        notify.push_requested.sender_receivers_cache.clear()
    # Time in the garbage collector (a kind that allocates more pays for more collections).
    gc_time, gc_runs, gc_started = [0.0], [0], [0.0]

    def on_gc(phase: str, info: dict) -> None:
        if phase == "start":
            gc_started[0] = time.perf_counter()
        else:
            gc_time[0] += time.perf_counter() - gc_started[0]
            gc_runs[0] += 1

    gc.callbacks.append(on_gc)
    results: dict[str, list[dict]] = {k: [] for k in kinds}
    for rnd in range(args.rounds):
        for name in list(kinds) if rnd % 2 == 0 else list(reversed(kinds)):
            post, make, check = kinds[name]
            batch = make(args.n)
            empty_queues()
            gc_time[0], gc_runs[0] = 0.0, 0
            results[name].append(measure(post, batch, DB, check))
            r = results[name][-1]
            r["gc_us"] = gc_time[0] / (args.n - 50) * 1e6  # the 50 warm-up requests' collections count too
            print(
                f"round {rnd + 1} {name:16s} py {r['py_us']:.0f} µs  pg {r['pg_us']:.0f} µs  wall {r['wall_us']:.0f} µs"
                f"  gc {r['gc_us']:.0f} µs ({gc_runs[0]} collections)"
            )
    table = {
        name: {k: round(statistics.median(r[k] for r in rows), 1) for k in ("py_us", "pg_us", "wall_us", "gc_us")}
        for name, rows in results.items()
    }
    ratios = [
        round((f["py_us"] + f["pg_us"]) / (t["py_us"] + t["pg_us"]), 3)
        for f, t in zip(results["forward"], results["two_way_private"], strict=True)
    ]
    py_ratios = [
        round(f["py_us"] / t["py_us"], 3) for f, t in zip(results["forward"], results["two_way_private"], strict=True)
    ]
    summary = {
        "n": args.n,
        "rounds": args.rounds,
        "loadavg": os.getloadavg(),
        "medians": table,
        "cpu_forward_over_two_way_per_round": ratios,
        "cpu_forward_over_two_way_median": statistics.median(ratios),
        "py_forward_over_two_way_per_round": py_ratios,
        "py_forward_over_two_way_median": statistics.median(py_ratios),
    }
    print(json.dumps(summary, indent=1))
    print("\n| kind | worker CPU µs | of which GC µs | PostgreSQL CPU µs | total CPU µs | wall µs |")
    print("|---|---|---|---|---|---|")
    for name, m in table.items():
        total = round(m["py_us"] + m["pg_us"], 1)
        print(f"| {name} | {m['py_us']} | {m['gc_us']} | {m['pg_us']} | {total} | {m['wall_us']} |")
    for name in args.profile:
        post, make, _ = kinds[name]
        empty_queues()
        print(f"\n### cProfile: {name}")
        print_profile(post, make(args.n))
    return summary


if __name__ == "__main__":
    main()
