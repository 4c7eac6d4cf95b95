"""What replay protection costs a DIDComm v2 admin message (docs/didcomm.md "Replays"): the one
statement that claims a message id (`services.message_id_claim`, INSERT … ON CONFLICT on
PostgreSQL), against a whole authcrypt trust ping through the one message path
(`apps.didcomm.dispatch.handle`, in-process, real PostgreSQL; the ping includes its claim).

    .venv/bin/python -m bench.didcomm_replay_cost [--messages 2000] [--rounds 5]

Each round times three series alternately (order flipping every round): `--messages` pre-packed
pings through `handle` (read-only: the claim is the one write), as many keylist-updates adding and
removing one recipient in turn (a writing message: the claim and the handler's writes share one
transaction, dispatch.claimed_run), then as many bare claims with fresh ids; the medians per round,
the median of the rounds and the claim's share of a ping are printed and written to bench/results/
(`--out`). Forwards do not claim (docs/didcomm.md), so the forward benchmarks are unaffected.
Database: BENCH_REPLAY_DB (default mediator_bench_replay), dropped and recreated.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DB = os.environ.get("BENCH_REPLAY_DB", "mediator_bench_replay")
PG = os.environ.get("BENCH_PG", "postgresql://postgres@127.0.0.1:5432")


def setup_django() -> None:
    for sql in (f"DROP DATABASE IF EXISTS {DB}", f"CREATE DATABASE {DB}"):
        subprocess.run(
            ["psql", f"{PG}/postgres", "-qc", sql], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
    os.environ.update(
        {
            "DJANGO_SETTINGS_MODULE": "mediator_project.settings",
            "DATABASE_URL": f"{PG}/{DB}",
            "LOG_LEVEL": "WARNING",
            "USAGE_METERING_MODE": "off",
            "REDIS_URL": "",
            "MEDIATOR_DIDCOMM_RATE_LIMIT_PER_SENDER": "0",
            "MEDIATOR_DIDCOMM_RATE_LIMIT_PER_IP": "0",
        }
    )
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", default="didcomm_replay_cost.json", help="file name under bench/results/")
    args = parser.parse_args()
    setup_django()

    from apps.didcomm import dispatch, services
    from apps.didcomm.core.agent import CM2, Agent
    from apps.tenants.services import tenant_create

    tenant = tenant_create(slug="replay", domain="replay.bench")
    mediator = services.invitation_for(tenant=tenant)[0]["from"]
    wallet = Agent()

    def handle(raw: bytes) -> int:
        return dispatch.handle(
            raw, tenant=tenant, transport="http", remote_addr=None, content_type=dispatch.ENCRYPTED_MEDIA
        ).status

    assert handle(wallet.pack(wallet.message(CM2 + "mediate-request"), mediator)) == 200
    ping_type = "https://didcomm.org/trust-ping/2.0/ping"

    def pings() -> float:
        packed = [
            wallet.pack(wallet.message(ping_type, {"response_requested": True}), mediator) for _ in range(args.messages)
        ]
        started = time.perf_counter()
        for raw in packed:
            assert handle(raw) == 200
        return (time.perf_counter() - started) / args.messages * 1e6

    def updates() -> float:
        # A writing admin message: keylist-update adding, then removing, one recipient (claim + a write).
        update, rcpt = CM2 + "keylist-update", Agent().did
        packed = [
            wallet.pack(
                wallet.message(update, {"updates": [{"recipient_did": rcpt, "action": ("add", "remove")[i % 2]}]}),
                mediator,
            )
            for i in range(args.messages)
        ]
        started = time.perf_counter()
        for raw in packed:
            assert handle(raw) == 200
        return (time.perf_counter() - started) / args.messages * 1e6

    def claims() -> float:
        ids = [str(uuid.uuid4()) for _ in range(args.messages)]
        now = int(time.time())
        started = time.perf_counter()
        for mid in ids:
            assert services.message_id_claim(
                tenant=tenant, sender_did=wallet.did, message_id=mid, keep_until=now + 3600, now=now
            )
        return (time.perf_counter() - started) / args.messages * 1e6

    rows = []
    for n in range(args.rounds):
        order = [("ping", pings), ("update", updates), ("claim", claims)]
        if n % 2:
            order.reverse()
        row = {name: fn() for name, fn in order}
        row["load1"] = os.getloadavg()[0]
        rows.append(row)
        print(
            f"round {n + 1}: ping {row['ping']:.0f} µs, update {row['update']:.0f} µs, claim {row['claim']:.0f} µs,"
            f" load {row['load1']:.1f}",
            flush=True,
        )
    ping = statistics.median(r["ping"] for r in rows)
    update = statistics.median(r["update"] for r in rows)
    claim = statistics.median(r["claim"] for r in rows)
    share = statistics.median(r["claim"] / r["ping"] for r in rows)
    print(
        f"median: ping {ping:.0f} µs, update {update:.0f} µs, claim {claim:.0f} µs, claim share of a ping {share:.1%}"
    )
    out = ROOT / "bench" / "results" / args.out
    out.write_text(
        json.dumps(
            {"rounds": rows, "ping_us": ping, "update_us": update, "claim_us": claim, "claim_share": share}, indent=1
        )
    )
    print(f"written to {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
