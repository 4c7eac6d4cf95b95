"""The production layout against the lean reference (bench/lean_reference.py), side by side in one run:
TWO_WAY_PRIVATE (or QUERY_EVENTS by one tag) at 16 clients, same database, same world, same load
generator (issue 14).

    .venv/bin/python -m bench.lean_compare                          # 3 alternations x 10 s
    .venv/bin/python -m bench.lean_compare --alternations 5 --seconds 15
    .venv/bin/python -m bench.lean_compare --scenario query_events_by_tag --stored 1000000
    .venv/bin/python -m bench.lean_compare --variant-env HTTP_THREADS=4   # a second production layout too

With --probe the async entry probe (bench/async_entry_probe.py: the product's TWO_WAY_PRIVATE path on
Granian RSGI/ASGI + psycopg's async pool, issue 14 §2) runs too ("probe", on --port + 30, clients
straight to it like the lean reference, the production layout's environment); --probe-ladder adds
the probe without the push (+31), without push and observers (+32), and without push, observers and
the log call (+33), each its own server in every round; --probe-also asgi uvicorn adds the full probe
on other interfaces (+34, +35).

With --variant-env a second production layout ("variant", on --port + 20, the same database and
tenant) runs with those variables added, in every round beside the other two, so that a change
of the layout is measured against the current one in the same minutes.

1. a fresh PostgreSQL database (migrated, one tenant), as bench/run_standard.py makes it;
2. the production layout (scripts/run_production.sh: nginx → Granian, Daphne for /ws, no Celery)
   and the lean reference (uvicorn + asyncpg, one process per core, clients straight to it) both
   started and kept running; only the one under load does any work;
3. the world built once through the production layout (bench/loadgen.py: 64 registered
   sender/recipient pairs, each recipient holding a contract with its sender); for
   `--scenario query_events_by_tag`, `--stored` events seeded straight into PostgreSQL over 10
   owners as bench/run_standard.py seeds them (100 events per tag), each query asking for page 0
   of 10 by one tag;
4. a short unmeasured warm-up of each, then `--alternations` rounds of one run of each (the order
   reverses every round and rotates every two, so that each server runs in every place of a round
   equally often and a drift in the VM's speed falls on all), with fresh signed bodies
   for every run, and where the CPU went (bench/cpu.py): each server's process group, the
   PostgreSQL backends of the database, the load generator, the rest of the machine;
5. per run and as medians: req/s, p50/p99, CPU ms per command of each server and of PostgreSQL,
   nginx µs per request (how fast the VM ran, docs/benchmark-history.md "Third round"), the server's
   context switches per command (bench/cpu.py), and the ratio
   production / lean (per round, and its median). JSON and Markdown under bench/results/.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace

from bench import loadgen
from bench.cpu import CpuSampler
from bench.pg import db_url
from bench.run_standard import Layout, SessionServer, machine, prepare_database, server_env

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"


class LeanServer(SessionServer):
    """bench/lean_reference.py in its own session: its pid is the process group (CPU accounting)."""

    def __init__(self, *, port: int, database_url: str, workers: int, pool_size: int, env: dict | None = None):
        """`env`: the environment to start it in (default this process's; for forwards, the production
        layout's, whose settings hold the deployment key the mediator DID's key is sealed with)."""
        env = {**(os.environ if env is None else env), "DATABASE_URL": database_url, "PYTHONPATH": str(ROOT)}
        cmd = [sys.executable, "-m", "bench.lean_reference", "--port", str(port), "--workers", str(workers),
               "--pool-size", str(pool_size)]  # fmt: skip
        self.launch("the lean reference", cmd, env, f"lean-{port}.log", f"http://127.0.0.1:{port}")


class ProbeServer(SessionServer):
    """bench/async_entry_probe.py in its own session, with the production layout's environment."""

    def __init__(self, *, port: int, layout_args, interface: str, workers: int, pool_size: int, flags: list[str]):
        cmd = [sys.executable, "-m", "bench.async_entry_probe", "--port", str(port), "--interface", interface,
               "--workers", str(workers), "--pool-size", str(pool_size), *flags]  # fmt: skip
        self.launch("the probe", cmd, server_env(layout_args), f"probe-{port}.log", f"http://127.0.0.1:{port}")


# The probe's ladder: name, port offset from --port, flags.
PROBES = (
    ("probe", 30, []),
    ("probe-nopush", 31, ["--no-push"]),
    ("probe-noobs", 32, ["--no-push", "--no-observers"]),
    ("probe-bare", 33, ["--no-push", "--no-observers", "--no-log"]),
)


def _row(name: str, r: dict) -> dict:
    c = r.get("cpu") or {}
    kinds = c.get("server_cpu_ms_per_req_by_process") or {}
    return {
        "server": name,
        "requests": r["requests"],
        "throughput_rps": r["throughput_rps"],
        "p50_ms": r["p50_ms"],
        "p99_ms": r["p99_ms"],
        "server_cpu_ms_per_req": c.get("server_cpu_ms_per_req"),
        "server_cpu_ms_per_req_by_process": kinds,
        "postgres_cpu_ms_per_req": c.get("postgres_cpu_ms_per_req"),
        "client_cpu_share": c.get("client_cpu_share"),
        "other_cpu_share": c.get("other_cpu_share"),
        "nginx_us_per_req": loadgen.nginx_us(c),
        "server_switches_per_req": c.get("server_switches_per_req"),
        "loadavg_1m": c.get("loadavg_1m"),
        "codes": r["codes"],
    }


def _median(rows: list[dict], key: str):
    vals = [r[key] for r in rows if isinstance(r.get(key), int | float)]
    return round(statistics.median(vals), 3) if vals else None


def summarize(runs: list[dict]) -> dict:
    """Medians per server, and each production layout / lean: per round, and the median of the rounds."""
    out: dict = {}
    names = list(dict.fromkeys(r["server"] for r in runs))
    for name in names:
        rows = [r for r in runs if r["server"] == name]
        out[name] = {
            k: _median(rows, k)
            for k in ("throughput_rps", "p50_ms", "p99_ms", "server_cpu_ms_per_req", "postgres_cpu_ms_per_req",
                      "other_cpu_share", "nginx_us_per_req")
        }  # fmt: skip

    def cpu(r):
        return (r["server_cpu_ms_per_req"] or 0) + (r["postgres_cpu_ms_per_req"] or 0)

    for name in [n for n in names if n != "lean"]:
        prefix = "" if name == "production" else f"{name}_"
        ratios, cpu_ratios = [], []
        for rnd in sorted({r["round"] for r in runs}):
            by = {r["server"]: r for r in runs if r["round"] == rnd}
            if by.get(name) and by.get("lean") and by["lean"]["throughput_rps"]:
                ratios.append(round(by[name]["throughput_rps"] / by["lean"]["throughput_rps"], 3))
                if cpu(by[name]):
                    cpu_ratios.append(round(cpu(by["lean"]) / cpu(by[name]), 3))
        out[prefix + "ratio_per_round"] = ratios
        out[prefix + "cpu_ratio_per_round"] = cpu_ratios
        out[prefix + "ratio_median"] = round(statistics.median(ratios), 3) if ratios else None
        out[prefix + "cpu_ratio_median"] = round(statistics.median(cpu_ratios), 3) if cpu_ratios else None
        p, lean = out[name], out.get("lean") or {}
        if lean.get("throughput_rps"):
            out[prefix + "ratio_of_medians"] = round(p["throughput_rps"] / lean["throughput_rps"], 3)
        # CPU per command does not depend much on who else runs on the box: lean (server + PostgreSQL)
        # over production (server + PostgreSQL), i.e. the throughput ratio if each had the box alone.
        total = {n: (out[n]["server_cpu_ms_per_req"] or 0) + (out[n]["postgres_cpu_ms_per_req"] or 0)
                 for n in (name, "lean") if n in out}  # fmt: skip
        out[prefix + "cpu_ratio"] = (
            round(total["lean"] / total[name], 3) if total.get(name) and "lean" in total else None
        )
    return out


def markdown(report: dict) -> str:
    out = [f"# lean_compare — {report['started']}", "", "Command: `" + report["command"] + "`", "",
           "| round | server | req/s | p50 ms | p99 ms | server CPU ms/req (by process) | PG CPU ms/req "
           "| other CPU share | nginx µs/req | server context switches/req (voluntary, involuntary) | codes |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in report["runs"]:
        kinds = ", ".join(f"{k} {v}" for k, v in r["server_cpu_ms_per_req_by_process"].items() if v)
        out.append(
            f"| {r['round']} | {r['server']} | {r['throughput_rps']} | {r['p50_ms']} | {r['p99_ms']} "
            f"| {r['server_cpu_ms_per_req']} ({kinds}) | {r['postgres_cpu_ms_per_req']} | {r['other_cpu_share']} "
            f"| {r['nginx_us_per_req']} | {r.get('server_switches_per_req')} | {r['codes']} |"
        )
    s = report["summary"]
    out += ["", "| medians | req/s | p50 ms | p99 ms | server CPU ms/req | PG CPU ms/req | other CPU share |",
            "|---|---|---|---|---|---|---|"]  # fmt: skip
    names = list(dict.fromkeys(r["server"] for r in report["runs"]))
    for name in names:
        m = s[name]
        out.append(
            f"| {name} | {m['throughput_rps']} | {m['p50_ms']} | {m['p99_ms']} | {m['server_cpu_ms_per_req']} "
            f"| {m['postgres_cpu_ms_per_req']} | {m['other_cpu_share']} |"
        )
    out += ["", f"production / lean req/s per round: {s['ratio_per_round']}; median **{s['ratio_median']}**; "
            f"ratio of the medians {s.get('ratio_of_medians')}; CPU per command (server + PostgreSQL) lean / "
            f"production {s['cpu_ratio']} (per round {s['cpu_ratio_per_round']}); nginx µs/req (production runs) "
            f"median {s['production']['nginx_us_per_req']}"]  # fmt: skip
    for name in [n for n in names if n not in ("production", "lean")]:
        out.append(f"{name} / lean req/s per round: {s[name + '_ratio_per_round']}; median **{s[name + '_ratio_median']}**; "
                   f"CPU per command lean / {name} {s[name + '_cpu_ratio']} (per round {s[name + '_cpu_ratio_per_round']})")  # fmt: skip
    return "\n".join(out) + "\n"


def _bodies(args, world, database_url: str):
    """n -> n fresh signed bodies of the scenario (seeding its events first, for queries)."""
    if args.scenario == "two_way_private":
        return lambda n: loadgen.gen_two_way(world, n)
    ns = SimpleNamespace(stored=args.stored, seed="sql", tag_owners=10, database_url=database_url,
                         clients=args.clients, url=None, host=None)  # fmt: skip
    state = loadgen.setup_query_events_by_tag(world, ns)
    print(f"== seeded {args.stored} events in {state['seed_s']} s", file=sys.stderr)

    def make(n: int) -> list[bytes]:
        return loadgen.bodies_query_events_by_tag(world, SimpleNamespace(**vars(ns), requests=n), state)[0]

    return make


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--alternations", type=int, default=3, help="rounds of one production and one lean run")
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--warmup", type=float, default=3, help="unmeasured seconds of load on each server first")
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--pairs", type=int, default=64)
    ap.add_argument("--scenario", choices=("two_way_private", "query_events_by_tag"), default="two_way_private")
    ap.add_argument("--stored", type=int, default=1_000_000, help="events seeded for query_events_by_tag")
    ap.add_argument("--requests", type=int, default=25_000, help="bodies signed for a server's first run")
    ap.add_argument("--db", default=os.environ.get("BENCH_DB", "mediator_bench_lean"))
    ap.add_argument("--redis-url", default=os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/12"))
    ap.add_argument("--port", type=int, default=int(os.environ.get("BENCH_PORT", "8320")), help="production")
    ap.add_argument("--lean-port", type=int, default=None, help="default: --port + 10")
    ap.add_argument("--lean-workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--lean-pool-size", type=int, default=8, help="PostgreSQL connections per lean process")
    ap.add_argument("--env", nargs="*", action="extend", default=[], help="extra KEY=VALUE for the production layout")
    ap.add_argument("--variant-env", nargs="*", action="extend", default=[],
                    help="KEY=VALUE: also run a second production layout ('variant', on --port + 20) with these "
                         "variables in every round, to compare a change of the layout against it")  # fmt: skip
    ap.add_argument("--probe", action="store_true", help="also run bench/async_entry_probe.py (--port + 30)")
    ap.add_argument("--probe-ladder", action="store_true", help="and the probe without push/observers/log (+31..33)")
    ap.add_argument("--probe-rungs", nargs="*", default=None, choices=[p[0] for p in PROBES],
                    help="with --probe-ladder: only these rungs (each probe holds workers x pool-size connections)")  # fmt: skip
    ap.add_argument("--probe-interface", choices=["rsgi", "asgi", "uvicorn"], default="rsgi")
    ap.add_argument("--probe-also", choices=["rsgi", "asgi", "uvicorn"], nargs="*", default=[],
                    help="the full probe on these interfaces too ('probe-<interface>', --port + 34…)")  # fmt: skip
    ap.add_argument("--probe-pool-size", type=int, default=8, help="PostgreSQL connections per probe worker")
    args = ap.parse_args(argv)
    started = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mediator_project.settings")
    layout_args = SimpleNamespace(db=args.db, redis_url=args.redis_url, port=args.port, env=args.env,
                                  no_celery=True, layout="production")  # fmt: skip
    report: dict = {
        "started": started,
        "command": "python -m bench.lean_compare " + " ".join(argv if argv is not None else sys.argv[1:]),
        "scenario": args.scenario,
        "machine": machine(),
        "runs": [],
    }
    print(f"== fresh database {args.db}", file=sys.stderr)
    prepare_database(layout_args)
    layout = Layout(layout_args)
    lean = None
    servers: dict = {}
    try:
        lean = LeanServer(port=args.lean_port or args.port + 10, database_url=db_url(args.db),
                          workers=args.lean_workers, pool_size=args.lean_pool_size)  # fmt: skip
        servers = {"production": layout, "lean": lean}
        if args.variant_env:
            variant_args = SimpleNamespace(**{**vars(layout_args), "port": args.port + 20,
                                              "env": [*args.env, *args.variant_env]})  # fmt: skip
            servers["variant"] = variant = Layout(variant_args)
            variant.host = layout.host  # the tenant is the one of --port
        if args.probe or args.probe_ladder or args.probe_also:
            rungs = [p for p in PROBES if args.probe_rungs is None or p[0] in args.probe_rungs]
            for name, offset, flags in rungs if args.probe_ladder else PROBES[:1]:
                servers[name] = ProbeServer(port=args.port + offset, layout_args=layout_args,
                                            interface=args.probe_interface, workers=args.lean_workers,
                                            pool_size=args.probe_pool_size, flags=flags)  # fmt: skip
            for i, interface in enumerate(args.probe_also):
                servers[f"probe-{interface}"] = ProbeServer(port=args.port + 34 + i, layout_args=layout_args,
                                                            interface=interface, workers=args.lean_workers,
                                                            pool_size=args.probe_pool_size, flags=[])  # fmt: skip
        world = loadgen.build_world(layout.url, layout.host, args.pairs)
        print(f"== world: {args.pairs} pairs", file=sys.stderr)
        make_bodies = _bodies(args, world, db_url(args.db))
        for srv in servers.values():
            if args.warmup > 0:
                loadgen.drive(srv.url, layout.host, make_bodies(3000), args.clients, args.warmup)
        last: dict[str, float] = {}
        for rnd in range(1, args.alternations + 1):
            order = [n for n in ("production", "variant", *(p[0] for p in PROBES), *(f"probe-{i}" for i in args.probe_also), "lean")
                     if n in servers]  # fmt: skip
            # Each server takes every place in the round equally often (a round's later runs can find
            # the VM slower: measured ±15-25 %, docs/benchmark-history.md): rotated every two rounds,
            # reversed every other round; with three servers, 6 rounds put each in each place twice.
            shift = (rnd - 1) // 2 % len(order)
            order = order[shift:] + order[:shift]
            order = order if rnd % 2 else order[::-1]
            for name in order:
                srv = servers[name]
                n = (
                    args.requests
                    if name not in last
                    else min(args.requests, int(last[name] * args.seconds * 1.5) + 500)
                )
                bodies = make_bodies(n)
                time.sleep(2.0)  # let the other server's buffers (metering flush) settle
                cpu = CpuSampler(server_pgid=srv.pgid, database=args.db)
                res = loadgen.drive(srv.url, layout.host, bodies, args.clients, args.seconds, cpu)
                last[name] = res["throughput_rps"]
                row = {"round": rnd, **_row(name, res)}
                report["runs"].append(row)
                print(
                    f"   round {rnd} {name:10s} {row['throughput_rps']:7.1f} req/s  p50 {row['p50_ms']} ms  "
                    f"p99 {row['p99_ms']} ms  server {row['server_cpu_ms_per_req']} + PG "
                    f"{row['postgres_cpu_ms_per_req']} CPU ms/req  other share {row['other_cpu_share']}  "
                    f"nginx {row['nginx_us_per_req']} µs  switches/req {row['server_switches_per_req']}  {row['codes']}",
                    file=sys.stderr,
                )
    finally:
        if lean is not None:
            lean.stop()
        for name in list(servers):
            if name not in ("production", "lean"):
                servers[name].stop()
        layout.stop()
    report["summary"] = summarize(report["runs"])
    RESULTS.mkdir(parents=True, exist_ok=True)
    base = RESULTS / f"lean_compare-{started}"
    base.with_suffix(".json").write_text(json.dumps(report, indent=2, default=str))
    md = markdown(report)
    base.with_suffix(".md").write_text(md)
    print(md)
    print(f"results: {base}.json / .md", file=sys.stderr)
    return report


if __name__ == "__main__":
    main()
