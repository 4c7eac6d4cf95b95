"""Data growth: what a command costs as identities and queued messages grow, side by side.

    .venv/bin/python -m bench.data_bench --quick        # 10k beside 1M, ~15 min on 2 cores
    .venv/bin/python -m bench.data_bench                # 10k beside 1M, then beside 10M (~60 GB of disk)

Two sites, each its own PostgreSQL database (`--db`_base and `--db`_grown, dropped and made afresh)
and its own production layout (bench/run_standard.py's: nginx → Granian, Daphne, no Celery,
metering on, rate limits off), running at once on two ports. On each, built through the protocol:
a Decentrl world (bench/loadgen.py: `--pairs` pairs with contracts, and 100,000 stored events over
ten of its owners, ten events per tag) and a DIDComm world (bench/didcomm_bench.py: `--pairs` wallets
granted mediation, one recipient DID each). Then both are filled in bulk with other identities
(`INSERT … SELECT generate_series` into the real tables with their indexes dropped and re-created,
bench.pg.indexes_dropped, then VACUUM ANALYZE), each one's rows shaped like the worlds' real ones
(their DIDs, signed contracts and key sizes, with the DID's alias or tail replaced):

- a Decentrl identity: its registration (a contract with the tenant), a contract with a peer, one
  unacknowledged pending event (256 bytes) and one stored event with one encrypted tag;
- a DIDComm client: its granted mediation, one recipient DID and one queued message of ~1 KiB.

The base site holds the first size (10k) throughout; the grown site is filled to each larger size
in turn. At every size, `--alternations` rounds of one run of each scenario on each site (the order
flipping every round), with the same load generator (raw keep-alive sockets, `--clients`) and CPU
accounting (bench/cpu.py: the server's processes and the site database's PostgreSQL backends):

- two_way_private: TWO_WAY_PRIVATE between the world's pairs;
- query_events: QUERY_EVENTS by one encrypted tag (a page of 10 over 10 matches);
- didcomm_forward: routing/2.0 forwards to the world's recipients (their queues emptied first);
- pickup: Pickup 3.0 delivery-request (limit 10) then messages-received of those 10, per wallet on
  one connection (each wallet's queue filled with that many messages first, in SQL).

Reported per scenario and size: server and PostgreSQL CPU ms per request, p99, and grown / base per
round with the median (1.00 = no growth). JSON + Markdown under bench/results/data-*.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from datetime import UTC, datetime
from types import SimpleNamespace

import psycopg

from bench import loadgen, write_results
from bench.didcomm_bench import NO_LIMITS, Mediator, alternate, forwards, granted_wallets, inner_for
from bench.pg import db_url, indexes_dropped
from bench.run_standard import Layout, machine, prepare_database
from tests.support import bulk
from tests.support.didcomm_agent import ENCRYPTED, PICKUP

SIZES = (10_000, 1_000_000, 10_000_000)
QUICK_SIZES = (10_000, 1_000_000)
STORED = 100_000  # the world's stored events for QUERY_EVENTS (10 owners x 1,000 tags x 10 events)
CHUNK = 1_000_000  # filler identities per INSERT statement
# Disk per filler identity of each protocol, measured at 1M (16.7 GB: tables and indexes); the full
# run refuses to start without the room.
BYTES_PER_IDENTITY = 16_500
SCENARIOS = ("two_way_private", "query_events", "didcomm_forward", "pickup")


class Site:
    """One database and its production layout, the worlds measured on it, and its filler count."""

    def __init__(self, name: str, args, port: int, redis_db: int):
        self.name, self.db = name, f"{args.db}_{name}"
        self.la = SimpleNamespace(db=self.db, redis_url=f"redis://127.0.0.1:6379/{redis_db}", port=port,
                                  env=NO_LIMITS + args.env, no_celery=True, layout="production")  # fmt: skip
        self.filled = 0
        self.seed_s: list[tuple[int, float]] = []

    def start(self, args) -> None:
        print(f"== {self.name}: fresh database {self.db}", file=sys.stderr)
        prepare_database(self.la)
        self.layout = Layout(self.la)
        self.url = db_url(self.db)
        self.world = loadgen.build_world(self.layout.url, self.layout.host, args.pairs)
        ns = SimpleNamespace(tag_owners=10, stored=STORED, seed="sql", database_url=self.url)
        self.qe_state = loadgen.setup_query_events_by_tag(self.world, ns)
        self.med = Mediator(self.layout.url, self.layout.host)
        self.wallets = granted_wallets(self.med, args.pairs)
        self.targets = [(rcpt, inner_for(rcpt)) for _, rcpt in self.wallets]
        with psycopg.connect(self.url, autocommit=True) as conn:
            self.tenant_id = conn.execute("SELECT id FROM tenants_tenant").fetchone()[0]
            rows = conn.execute(
                "SELECT m.client_did, m.id, r.id FROM didcomm_mediation m "
                "JOIN didcomm_recipientkey r ON r.mediation_id = m.id WHERE m.client_did = ANY(%s)",
                [[w.did for w, _ in self.wallets]],
            ).fetchall()
        self.mediation_of = {did: m for did, m, _ in rows}
        self.mediations = [m for _, m, _ in rows]
        self.recipients = [r for _, _, r in rows]

    def stop(self) -> None:
        self.layout.stop()

    # --- bulk filling ------------------------------------------------------------------------------

    def templates(self) -> dict:
        """Real rows of the worlds, whose shapes the filler rows copy."""
        s, r = self.world.senders[0], self.world.recipients[0]
        wallet, rcpt = self.wallets[0]
        with psycopg.connect(self.url) as conn:
            tenant_did = conn.execute("SELECT did FROM tenants_tenant").fetchone()[0]
            reg = conn.execute(
                "SELECT signed_contract FROM messaging_contract WHERE owner_did = %s AND requestor_did = %s "
                "AND recipient_did = %s",
                [s.did, s.did, tenant_did],
            ).fetchone()[0]
            peer = conn.execute(
                "SELECT signed_contract FROM messaging_contract WHERE owner_did = %s AND requestor_did = %s "
                "AND recipient_did = %s",
                [r.did, s.did, r.did],
            ).fetchone()[0]
        return bulk.params(
            tenant_id=self.tenant_id, tenant_did=tenant_did, sender_did=s.did,
            recipient_did=r.did, registration=reg, contract=peer, tag_len=len(r.tag("t0")),
            client_did=wallet.did, rcpt_did=rcpt.did,
            # What a forward stores: the attachment's data object, a JWE for the recipient (~1 KiB).
            data=json.dumps({"json": inner_for(rcpt, 600)}, separators=(",", ":")),
        )  # fmt: skip

    def fill(self, target: int) -> None:
        """Add filler identities until there are `target` of each protocol; VACUUM ANALYZE."""
        if target <= self.filled:
            return
        tpl = self.templates()
        started = time.perf_counter()
        with psycopg.connect(self.url, autocommit=True) as conn:
            with indexes_dropped(conn, bulk.FILLED_TABLES):
                for lo in range(self.filled, target, CHUNK):
                    hi = min(target, lo + CHUNK)
                    for sql in bulk.FILL_SQL:
                        conn.execute(sql, {**tpl, "lo": lo, "hi": hi - 1})
                    print(f"   {self.name}: filled identities {lo}..{hi - 1} "
                          f"({time.perf_counter() - started:.0f} s)", file=sys.stderr)  # fmt: skip
            for table in [*bulk.FILLED_TABLES, "messaging_pendingqueuedepth", "didcomm_queuedepth"]:
                conn.execute(f"VACUUM ANALYZE {table}")
        seconds = round(time.perf_counter() - started, 1)
        self.seed_s.append((target, seconds))
        print(f"== {self.name}: {target} identities of each protocol, +{target - self.filled} in {seconds} s",
              file=sys.stderr)  # fmt: skip
        self.filled = target

    def size_mb(self) -> int:
        with psycopg.connect(self.url) as conn:
            return conn.execute("SELECT pg_database_size(current_database()) / 1048576").fetchone()[0]

    # --- what each scenario's runs send ---------------------------------------------------------------

    def query_events(self, n: int) -> list[bytes]:
        return loadgen.bodies_query_events_by_tag(self.world, SimpleNamespace(requests=n, stored=STORED, seed="sql"),
                                                  self.qe_state)[0]  # fmt: skip

    def empty_queues(self) -> None:
        """The measured wallets' queues emptied (the filler queues stay)."""
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute("DELETE FROM didcomm_queuedmessage WHERE mediation_id = ANY(%s)", [self.mediations])

    def pickups(self, n: int, clients: int) -> list[bytes]:
        """About `n` pickups: per wallet, delivery-request (limit 10) then messages-received of the
        10 messages it returns, its queue filled with that many first; ordered so that each wallet's
        requests go in turn on one client (loadgen.drive deals body k to client k % clients)."""
        rounds = max(1, -(-n // (2 * len(self.wallets))))
        self.empty_queues()
        with psycopg.connect(self.url, autocommit=True) as conn:
            data = json.dumps({"json": self.targets[0][1]}, separators=(",", ":"))
            conn.execute(
                "INSERT INTO didcomm_queuedmessage (tenant_id, mediation_id, recipient_id, message_id, data, size, "
                "received_at, expires_at) SELECT %s, m, r, gen_random_uuid(), %s, length(%s), now(), "
                "now() + interval '7 days' FROM unnest(%s::bigint[], %s::bigint[]) AS u(m, r), "
                "generate_series(1, %s) ORDER BY 1",
                [self.tenant_id, data, data, self.mediations, self.recipients, rounds * 10],
            )
            ids: dict[int, list[str]] = {}
            for m, mid in conn.execute(
                "SELECT mediation_id, message_id FROM didcomm_queuedmessage WHERE mediation_id = ANY(%s) ORDER BY id",
                [self.mediations],
            ):
                ids.setdefault(m, []).append(str(mid))
        by_client: list[list[bytes]] = [[] for _ in range(clients)]
        for k, (wallet, _) in enumerate(self.wallets):
            mine = ids[self.mediation_of[wallet.did]]
            seq = by_client[k % clients]
            for i in range(rounds):
                ask = wallet.message(PICKUP + "delivery-request", {"limit": 10})
                seq.append(wallet.pack(ask, self.med.did))
                done = wallet.message(PICKUP + "messages-received", {"message_id_list": mine[i * 10 : i * 10 + 10]})
                seq.append(wallet.pack(done, self.med.did))
        out = []
        for k in range(max(len(s) for s in by_client)):
            out += [s[k] for s in by_client if k < len(s)]  # (a client whose wallets ran out shifts the deal)
        return out

    def kinds(self, clients: int) -> tuple[dict, dict, dict]:
        srv = {"server": self.layout, "database": self.db}
        fwd = {"path": "/didcomm", "content_type": ENCRYPTED, "ok_status": 202}
        pick = {"path": "/didcomm", "content_type": ENCRYPTED, "ok_status": 200}
        kinds = {
            f"{self.name}:two_way_private": lambda n: loadgen.gen_two_way(self.world, n),
            f"{self.name}:query_events": self.query_events,
            f"{self.name}:didcomm_forward": lambda n: forwards(self.med, self.targets, n),
            f"{self.name}:pickup": lambda n: self.pickups(n, clients),
        }
        target = {
            f"{self.name}:two_way_private": srv,
            f"{self.name}:query_events": srv,
            f"{self.name}:didcomm_forward": srv | fwd,
            f"{self.name}:pickup": srv | pick,
        }
        return kinds, target, {f"{self.name}:didcomm_forward": self.empty_queues}


# --- the runs --------------------------------------------------------------------------------------


def summarize(runs: list[dict], size: int, base: int) -> dict:
    """Per scenario: medians on each site, and grown / base per round (CPU: server + PostgreSQL)."""
    out = {}
    for sc in SCENARIOS:
        rows = {site: [r for r in runs if r["kind"] == f"{site}:{sc}"] for site in ("base", "grown")}

        def med(site: str, key: str, rows=rows):
            vals = [r[key] for r in rows[site] if isinstance(r.get(key), int | float)]
            return round(statistics.median(vals), 3) if vals else None

        cpu, p99, server = [], [], []
        for rnd in sorted({r["round"] for r in runs}):
            b = next((r for r in rows["base"] if r["round"] == rnd), None)
            g = next((r for r in rows["grown"] if r["round"] == rnd), None)
            if not (b and g):
                continue
            bc = (b["server_cpu_ms_per_req"] or 0) + (b["postgres_cpu_ms_per_req"] or 0)
            gc = (g["server_cpu_ms_per_req"] or 0) + (g["postgres_cpu_ms_per_req"] or 0)
            if bc and b["server_cpu_ms_per_req"] and b["p99_ms"]:
                cpu.append(round(gc / bc, 3))
                server.append(round(g["server_cpu_ms_per_req"] / b["server_cpu_ms_per_req"], 3))
                p99.append(round(g["p99_ms"] / b["p99_ms"], 3))
        out[sc] = {
            "base_identities": base, "grown_identities": size,
            **{f"{site}_{k}": med(site, k) for site in ("base", "grown")
               for k in ("throughput_rps", "p99_ms", "server_cpu_ms_per_req", "postgres_cpu_ms_per_req")},
            "cpu_ratio_per_round": cpu, "cpu_ratio_median": round(statistics.median(cpu), 3) if cpu else None,
            "server_cpu_ratio_median": round(statistics.median(server), 3) if server else None,
            "p99_ratio_per_round": p99, "p99_ratio_median": round(statistics.median(p99), 3) if p99 else None,
            "codes": [r["codes"] for r in rows["base"] + rows["grown"]],
        }  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="10k beside 1M only, one round")
    ap.add_argument(
        "--sizes", type=int, nargs="+", default=None, help="identities of each protocol; the first is the base"
    )
    ap.add_argument("--db", default=os.environ.get("BENCH_DB", "mediator_bench_data"))
    ap.add_argument("--port", type=int, default=int(os.environ.get("BENCH_PORT", "8420")))
    ap.add_argument("--alternations", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--warmup", type=float, default=3)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--pairs", type=int, default=64)
    ap.add_argument("--requests", type=int, default=15_000, help="bodies built for a kind's first run")
    ap.add_argument("--env", nargs="*", action="extend", default=[], help="extra KEY=VALUE for both layouts")
    args = ap.parse_args(argv)
    if args.quick:
        args.alternations, args.seconds, args.warmup, args.requests = 2, 6, 1, 5000
    sizes = args.sizes or (QUICK_SIZES if args.quick else SIZES)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mediator_project.settings")
    need = (sizes[0] + sizes[-1]) * BYTES_PER_IDENTITY
    free = shutil.disk_usage("/var/lib/postgresql" if os.path.isdir("/var/lib/postgresql") else "/").free
    if need > free * 0.8:
        sys.exit(f"data_bench: {need / 2**30:.0f} GiB needed for {sizes[-1]} identities, {free / 2**30:.0f} GiB free")
    started = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    report: dict = {"started": started, "command": "python -m bench.data_bench " + " ".join(argv or sys.argv[1:]),
                    "machine": machine(), "sizes": list(sizes), "steps": []}  # fmt: skip
    base, grown = Site("base", args, args.port, 10), Site("grown", args, args.port + 10, 11)
    try:
        base.start(args)
        grown.start(args)
        base.fill(sizes[0])
        kinds, target, before = {}, {}, {}
        for site in (base, grown):
            k, t, b = site.kinds(args.clients)
            kinds |= k
            target |= t
            before |= b
        # One scenario at a time on each site in turn: base then grown, grown then base next round.
        order = {f"{s}:{sc}": kinds[f"{s}:{sc}"] for sc in SCENARIOS for s in ("base", "grown")}
        for size in sizes[1:]:
            grown.fill(size)
            step: dict = {"identities": size, "runs": [], "loadavg_before": os.getloadavg(),
                          "db_mb": {"base": base.size_mb(), "grown": grown.size_mb()}}  # fmt: skip
            alternate(base.layout, args, order, target, step, before)
            step["summary"] = summarize(step["runs"], size, sizes[0])
            step["loadavg_after"] = os.getloadavg()
            report["steps"].append(step)
    finally:
        for site in (base, grown):
            if hasattr(site, "layout"):
                site.stop()
    report["seed_s"] = {"base": base.seed_s, "grown": grown.seed_s}
    lines = [f"# data growth — {started}", "", "Command: `" + report["command"] + "`", "",
             f"Seeding (identities of each protocol, seconds): base {base.seed_s}, grown {grown.seed_s}", "",
             "| scenario | identities | server CPU ms/req | PG CPU ms/req | p99 ms | req/s "
             "| CPU ratio to base (per round) | p99 ratio (per round) | DB MB | load avg |",
             "|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for step in report["steps"]:
        la = ", ".join(f"{x:.1f}" for x in step["loadavg_after"])
        for sc, s in step["summary"].items():
            lines.append(
                f"| {sc} | {sizes[0]:,} | {s['base_server_cpu_ms_per_req']} | {s['base_postgres_cpu_ms_per_req']} "
                f"| {s['base_p99_ms']} | {s['base_throughput_rps']} | 1 | 1 | {step['db_mb']['base']} | {la} |"
            )
            lines.append(f"| {sc} | {step['identities']:,} | {s['grown_server_cpu_ms_per_req']} "
                         f"| {s['grown_postgres_cpu_ms_per_req']} | {s['grown_p99_ms']} | {s['grown_throughput_rps']} "
                         f"| **{s['cpu_ratio_median']}** {s['cpu_ratio_per_round']} "
                         f"| **{s['p99_ratio_median']}** {s['p99_ratio_per_round']} | {step['db_mb']['grown']} | {la} |")  # fmt: skip
    write_results("data", report, lines)
    return report


if __name__ == "__main__":
    main()
