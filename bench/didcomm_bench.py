"""DIDComm v2: forwards per second beside Decentrl's TWO_WAY_PRIVATE on the production layout, and
forward-to-live-push latency with live recipients.

    .venv/bin/python -m bench.didcomm_bench forwards --alternations 3 --seconds 10   # ~4 min
    .venv/bin/python -m bench.didcomm_bench push --live 1000 --sends 200               # ~3 min

`forwards`: a fresh database (bench/run_standard.py's), the production layout
(scripts/run_production.sh: nginx → Granian, Daphne, no Celery, metering on, rate limits off), a
Decentrl world (bench/loadgen.py: 64 pairs with contracts) and a DIDComm world built through the
protocol (64 wallets granted mediation, each with one recipient DID). Every forward is built before
the run (a fresh anoncrypt routing/2.0 forward to the mediator DID around a fixed JWE for the
recipient, ~256-byte body as in TWO_WAY_PRIVATE), so the load generator only sends bytes. Then
`--alternations` rounds of one run of each at `--clients` (the order flips every round), the same
load generator (raw keep-alive sockets; POST /didcomm, 202 = success) and CPU accounting
(bench/cpu.py): req/s, p50/p99, server and PostgreSQL CPU ms per request, DIDComm / Decentrl
ratios per round and their medians.

`push`: the production layout again; `--live` wallets each granted, each with a recipient DID
and one socket on /didcomm/ws through nginx in live mode (Pickup 3.0 live-delivery-change). One
forward at a time (`--pause-ms` apart) to the next live recipient in turn, over a keep-alive
connection to nginx; the recipient's socket stamps the pushed `delivery` (then unpacks it to check
it carries one attachment). request→frame = from just before the POST to the frame (the whole
path: nginx, Granian, decrypt, store, commit, Redis channel layer, Daphne, pack, socket);
response→frame = from the 202 to the frame (negative when the push overtakes the response).

JSON + Markdown under bench/results/didcomm-<part>-<UTC time>.*
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import http.client
import json
import os
import resource
import statistics
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace

import httpx

from apps.didcomm.core import jwe
from apps.didcomm.core.resolver import resolve_did
from bench import loadgen
from bench.cpu import CpuSampler
from bench.pg import db_url
from bench.run_standard import Layout, machine, prepare_database
from tests.support.didcomm_agent import CM2, ENCRYPTED, FORWARD, PICKUP, Agent, routed_did

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
# Off for the load (one IP, a few senders); metering stays on as in production.
NO_LIMITS = ["MEDIATOR_DIDCOMM_RATE_LIMIT_PER_SENDER=0", "MEDIATOR_DIDCOMM_RATE_LIMIT_PER_IP=0"]


# --- DIDComm world, through the protocol -----------------------------------------------------------


class Mediator:
    """POST /didcomm of a running deployment, as a wallet does."""

    def __init__(self, url: str, host: str):
        self.url, self.host = url, host
        with httpx.Client(base_url=url, headers={"Host": host}, timeout=30) as c:
            self.did = c.get("/didcomm/invitation").json()["from"]
        vm = resolve_did(self.did).key_agreement[0]
        self.kid, self.key = vm.id, vm.key

    def send(self, client: httpx.Client, agent: Agent, message: dict) -> dict:
        resp = client.post("/didcomm", content=agent.pack(message, self.did), headers={"Content-Type": ENCRYPTED})
        if resp.status_code != 200:
            raise RuntimeError(f"{message['type']}: {resp.status_code} {resp.text[:200]}")
        return agent.unpack(resp.content)[0]


def granted_wallets(med: Mediator, n: int, threads: int = 4) -> list[tuple[Agent, Agent]]:
    """`n` (wallet, recipient DID) pairs: mediation granted, the recipient DID added."""

    def one(_: int) -> tuple[Agent, Agent]:
        wallet = Agent()
        with httpx.Client(base_url=med.url, headers={"Host": med.host}, timeout=60) as c:
            grant = med.send(c, wallet, wallet.message(CM2 + "mediate-request"))
            assert grant["type"] == CM2 + "mediate-grant", grant
            rcpt = routed_did(med.did)
            update = {"updates": [{"recipient_did": rcpt.did, "action": "add"}]}
            answer = med.send(c, wallet, wallet.message(CM2 + "keylist-update", update))
            assert answer["body"]["updated"][0]["result"] == "success", answer
        return wallet, rcpt

    with ThreadPoolExecutor(threads) as pool:
        return list(pool.map(one, range(n)))


def inner_for(rcpt: Agent, payload_bytes: int = 256) -> dict:
    """The opaque message a sender forwards: a JWE (anoncrypt) for the recipient with a body of
    `payload_bytes`, as TWO_WAY_PRIVATE carries 256 bytes. Built once per recipient."""
    vm = resolve_did(rcpt.did).key_agreement[0]
    msg = {"id": str(uuid.uuid4()), "type": "https://didcomm.org/basicmessage/2.0/message",
           "body": {"content": "A" * payload_bytes}, "to": [rcpt.did]}  # fmt: skip
    return jwe.encrypt(json.dumps(msg).encode(), to=[(vm.id, vm.key)])


def forwards(med: Mediator, targets: list[tuple[Agent, dict]], n: int) -> list[bytes]:
    """n fresh forwards (anoncrypt to the mediator DID), round-robin over (recipient, inner)."""
    out = []
    for i in range(n):
        rcpt, inner = targets[i % len(targets)]
        fwd = {"id": str(uuid.uuid4()), "typ": "application/didcomm-plain+json", "type": FORWARD,
               "to": [med.did], "body": {"next": rcpt.did}, "attachments": [{"data": {"json": inner}}]}  # fmt: skip
        out.append(json.dumps(jwe.encrypt(json.dumps(fwd).encode(), to=[(med.kid, med.key)])).encode())
    return out


def raise_nofile() -> None:
    """Raise the open-file limit to the hard limit (each socket is a descriptor on both ends)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def _layout_args(args) -> SimpleNamespace:
    return SimpleNamespace(db=args.db, redis_url=args.redis_url, port=args.port, env=NO_LIMITS + args.env,
                           no_celery=True, layout="production")  # fmt: skip


def _save(part: str, report: dict, md: str) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    base = RESULTS / f"didcomm-{part}-{report['started']}"
    base.with_suffix(".json").write_text(json.dumps(report, indent=2, default=str))
    base.with_suffix(".md").write_text(md)
    print(md)
    print(f"results: {base}.json / .md", file=sys.stderr)


# --- forwards per second ---------------------------------------------------------------------------


def _row(rnd: int, name: str, r: dict) -> dict:
    c = r.get("cpu") or {}
    return {
        "round": rnd,
        "kind": name,
        "requests": r["requests"],
        "throughput_rps": r["throughput_rps"],
        "p50_ms": r["p50_ms"],
        "p99_ms": r["p99_ms"],
        "server_cpu_ms_per_req": c.get("server_cpu_ms_per_req"),
        "by_process": c.get("server_cpu_ms_per_req_by_process") or {},
        "postgres_cpu_ms_per_req": c.get("postgres_cpu_ms_per_req"),
        "client_cpu_share": c.get("client_cpu_share"),
        "other_cpu_share": c.get("other_cpu_share"),
        "nginx_us_per_req": loadgen.nginx_us(c),
        "codes": r["codes"],
        "loadavg": os.getloadavg(),
    }


def _med(rows: list[dict], key: str):
    vals = [r[key] for r in rows if isinstance(r.get(key), int | float)]
    return round(statistics.median(vals), 3) if vals else None


def alternate(layout, args, kinds: dict, target: dict, report: dict, before: dict | None = None) -> None:
    """An unmeasured warm-up of each kind, then `args.alternations` rounds of one measured run of each
    (the order flipping every round; bodies built before each run, sized from the previous rate).
    `target[name]` holds the kind's load generator options, and optionally the `server` it runs on
    (default the layout; its `host` is the Host header) and the PostgreSQL `database` whose backends
    count (default `args.db`; None for a server without one). `before[name]()`, if given, runs before
    each of that kind's runs, unmeasured."""

    def where(name: str):
        opts = dict(target[name])
        srv = opts.pop("server", layout)
        return srv, getattr(srv, "host", layout.host), opts.pop("database", args.db), opts

    for name, make in kinds.items():  # unmeasured warm-up
        srv, host, _, opts = where(name)
        loadgen.drive(srv.url, host, make(2000), args.clients, args.warmup, **opts)
    last: dict[str, float] = {}
    for rnd in range(1, args.alternations + 1):
        order = list(kinds) if rnd % 2 else list(reversed(kinds))
        for name in order:
            n = args.requests if name not in last else min(args.requests, int(last[name] * args.seconds * 1.5) + 500)
            bodies = kinds[name](n)
            if before and name in before:
                before[name]()
            time.sleep(2.0)  # the metering flush of the previous run settles
            srv, host, database, opts = where(name)
            cpu = CpuSampler(server_pgid=srv.pgid, database=database)
            t0 = time.time()
            res = loadgen.drive(srv.url, host, bodies, args.clients, args.seconds, cpu, **opts)
            last[name] = res["throughput_rps"]
            row = _row(rnd, name, res) | {"t0": round(t0, 1), "t1": round(time.time(), 1)}
            report["runs"].append(row)
            print(f"   round {rnd} {name:16s} {row['throughput_rps']:7.1f} req/s  p50 {row['p50_ms']}  "
                  f"p99 {row['p99_ms']} ms  server {row['server_cpu_ms_per_req']} + PG "
                  f"{row['postgres_cpu_ms_per_req']} CPU ms/req  other {row['other_cpu_share']}  "
                  f"{row['codes']}", file=sys.stderr)  # fmt: skip


def forwards_summary(runs: list[dict], kind: str, base: str = "two_way_private") -> dict:
    """Medians per kind, and `kind` / `base` per round: req/s, and CPU per request (server +
    PostgreSQL) `base` / `kind` (> 1 = `kind` cheaper), with their medians."""
    summary: dict = {}
    for name in (kind, base):
        rows = [r for r in runs if r["kind"] == name]
        summary[name] = {k: _med(rows, k) for k in ("throughput_rps", "p50_ms", "p99_ms", "server_cpu_ms_per_req",
                                                    "postgres_cpu_ms_per_req", "other_cpu_share")}  # fmt: skip
    rate, cpu = [], []
    for rnd in sorted({r["round"] for r in runs}):
        by = {r["kind"]: r for r in runs if r["round"] == rnd}
        d, t = by.get(kind), by.get(base)
        if d and t and t["throughput_rps"]:
            rate.append(round(d["throughput_rps"] / t["throughput_rps"], 3))
            dc = (d["server_cpu_ms_per_req"] or 0) + (d["postgres_cpu_ms_per_req"] or 0)
            tc = (t["server_cpu_ms_per_req"] or 0) + (t["postgres_cpu_ms_per_req"] or 0)
            if dc:
                cpu.append(round(tc / dc, 3))
    summary["rate_ratio_per_round"] = rate
    summary["rate_ratio_median"] = round(statistics.median(rate), 3) if rate else None
    summary["cpu_ratio_per_round"] = cpu
    summary["cpu_ratio_median"] = round(statistics.median(cpu), 3) if cpu else None
    return summary


def _empty_queues(database_url: str) -> None:
    """Every stored DIDComm message deleted (the queue depths follow, by their triggers)."""
    import psycopg

    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("DELETE FROM didcomm_queuedmessage")
        conn.execute("VACUUM didcomm_queuedmessage")


def run_forwards(args) -> dict:
    started = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    report: dict = {"started": started, "command": "python -m bench.didcomm_bench " + " ".join(sys.argv[1:]),
                    "machine": machine(), "runs": []}  # fmt: skip
    la = _layout_args(args)
    print(f"== fresh database {args.db}", file=sys.stderr)
    prepare_database(la)
    layout = Layout(la)
    try:
        world = loadgen.build_world(layout.url, layout.host, args.pairs)
        med = Mediator(layout.url, layout.host)
        wallets = granted_wallets(med, args.pairs)
        targets = [(rcpt, inner_for(rcpt)) for _, rcpt in wallets]
        print(f"== worlds: {args.pairs} Decentrl pairs, {args.pairs} DIDComm wallets", file=sys.stderr)
        kinds = {
            "didcomm_forward": lambda n: forwards(med, targets, n),
            "two_way_private": lambda n: loadgen.gen_two_way(world, n),
        }
        forward_target = {"path": "/didcomm", "content_type": ENCRYPTED, "ok_status": 202}
        target: dict = {"didcomm_forward": forward_target, "two_way_private": {}}
        # Every forward run starts on empty queues: otherwise the runs' forwards would fill the 64
        # queues to their cap (1,000) and measure evictions.
        before = {kind: functools.partial(_empty_queues, db_url(args.db)) for kind in kinds if "forward" in kind}
        alternate(layout, args, kinds, target, report, before)
    finally:
        layout.stop()
    runs = report["runs"]
    summary = report["summary"] = forwards_summary(runs, "didcomm_forward")
    rate, cpu = summary["rate_ratio_per_round"], summary["cpu_ratio_per_round"]
    md = [f"# didcomm forwards — {started}", "", "Command: `" + report["command"] + "`", "",
          "| round | kind | req/s | p50 ms | p99 ms | server CPU ms/req (by process) | PG CPU ms/req | client share "
          "| other share | codes |", "|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in runs:
        by = ", ".join(f"{k} {v}" for k, v in r["by_process"].items() if v)
        md.append(f"| {r['round']} | {r['kind']} | {r['throughput_rps']} | {r['p50_ms']} | {r['p99_ms']} "
                  f"| {r['server_cpu_ms_per_req']} ({by}) | {r['postgres_cpu_ms_per_req']} | {r['client_cpu_share']} "
                  f"| {r['other_cpu_share']} | {r['codes']} |")  # fmt: skip
    md += ["", f"DIDComm / TWO_WAY_PRIVATE req/s per round {rate}, median **{summary['rate_ratio_median']}**; "
           f"CPU per request (server + PostgreSQL) TWO_WAY_PRIVATE / DIDComm per round {cpu}, median "
           f"**{summary['cpu_ratio_median']}**"]  # fmt: skip
    md += ["", "```", json.dumps(summary, indent=1), "```"]
    _save("forwards", report, "\n".join(md) + "\n")
    return report


# --- forward-to-live-push latency ------------------------------------------------------------------


async def _open_live(ws_url: str, host: str, port: int, med: Mediator, wallet: Agent):
    from websockets.asyncio.client import connect

    ws = await connect(ws_url, host="127.0.0.1", port=port, compression=None, proxy=None, ping_interval=None,
                       open_timeout=60, max_size=None)  # fmt: skip
    await ws.send(
        wallet.pack(wallet.message(PICKUP + "live-delivery-change", {"live_delivery": True}), med.did).decode()
    )
    status, _ = wallet.unpack(await asyncio.wait_for(ws.recv(), 60))
    if status["type"] != PICKUP + "status" or status["body"].get("live_delivery") is not True:
        raise RuntimeError(f"live mode refused: {status}")
    return ws


class Stamps:
    """Each live socket's frames, stamped on arrival (perf_counter)."""

    def __init__(self):
        self.frames: dict[int, list[tuple[float, str]]] = {}
        self.events: dict[int, asyncio.Event] = {}

    def start(self, i: int, ws) -> asyncio.Task:
        self.frames[i], self.events[i] = [], asyncio.Event()
        return asyncio.create_task(self._read(i, ws))

    async def _read(self, i: int, ws) -> None:
        try:
            async for frame in ws:
                self.frames[i].append((time.perf_counter(), frame))
                self.events[i].set()
        except Exception:  # noqa: BLE001 - a closed socket ends its reader
            return

    async def next(self, i: int, seen: int, timeout: float = 10) -> tuple[float, str]:
        while len(self.frames[i]) <= seen:
            self.events[i].clear()
            if len(self.frames[i]) > seen:
                break
            await asyncio.wait_for(self.events[i].wait(), timeout)
        return self.frames[i][seen]


def _post(conn: http.client.HTTPConnection, body: bytes, headers: dict) -> int:
    conn.request("POST", "/didcomm", body=body, headers=headers)
    resp = conn.getresponse()
    resp.read()
    return resp.status


def _pct(vals: list[float], p: float) -> float:
    s = sorted(vals)
    return s[min(len(s) - 1, max(0, int(round(p / 100 * len(s) + 0.5)) - 1))] if s else float("nan")


async def _measure_push(layout, args) -> dict:
    med = Mediator(layout.url, layout.host)
    t0 = time.perf_counter()
    wallets = await asyncio.to_thread(granted_wallets, med, args.live, args.setup_threads)
    setup_s = time.perf_counter() - t0
    port = int(layout.url.rsplit(":", 1)[1])
    ws_url = f"ws://{layout.host}/didcomm/ws"
    sem = asyncio.Semaphore(32)
    failures: dict[str, int] = {}

    async def one(w):
        async with sem:
            try:
                return await _open_live(ws_url, layout.host, port, med, w)
            except Exception as exc:  # noqa: BLE001 - counted
                failures[type(exc).__name__] = failures.get(type(exc).__name__, 0) + 1
                return None

    t0 = time.perf_counter()
    socks = await asyncio.gather(*(one(w) for w, _ in wallets))
    open_s = time.perf_counter() - t0
    live = [(i, s) for i, s in enumerate(socks) if s is not None]
    stamps = Stamps()
    readers = [stamps.start(i, s) for i, s in live]
    targets = [(i, wallets[i][1]) for i, _ in live]
    inners = {i: inner_for(r) for i, r in targets}
    bodies = [
        forwards(med, [(r, inners[i])], 1)[0] for k in range(args.sends + 10) for i, r in [targets[k % len(targets)]]
    ]
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    headers = {"Content-Type": ENCRYPTED, "Host": layout.host}
    req_frame, resp_frame, statuses = [], [], {}
    sample = None
    try:
        for k, body in enumerate(bodies):
            i = targets[k % len(targets)][0]
            seen = len(stamps.frames[i])
            t_req = time.perf_counter()
            status = await asyncio.to_thread(_post, conn, body, headers)
            t_resp = time.perf_counter()
            statuses[status] = statuses.get(status, 0) + 1
            t_frame, frame = await stamps.next(i, seen)
            if sample is None:
                sample = frame
            if k >= 10:
                req_frame.append((t_frame - t_req) * 1000)
                resp_frame.append((t_frame - t_resp) * 1000)
            await asyncio.sleep(args.pause_ms / 1000)
        # What was pushed is a Pickup 3.0 delivery of one stored message, authcrypt to the wallet.
        wallet = wallets[targets[0][0]][0]
        delivery, _ = wallet.unpack(sample)
        check = {"type": delivery["type"], "attachments": len(delivery.get("attachments", []))}
    finally:
        conn.close()
        for t in readers:
            t.cancel()
        for start in range(0, len(live), 500):
            await asyncio.gather(*(s.close() for _, s in live[start : start + 500]), return_exceptions=True)
    return {
        "live_sockets": len(live),
        "open_failures": failures,
        "setup_s": round(setup_s, 1),
        "open_s": round(open_s, 1),
        "sends": len(req_frame),
        "statuses": statuses,
        "first_push": check,
        "req_to_frame_p50_ms": round(_pct(req_frame, 50), 2),
        "req_to_frame_p99_ms": round(_pct(req_frame, 99), 2),
        "req_to_frame_max_ms": round(max(req_frame), 2),
        "resp_to_frame_p50_ms": round(_pct(resp_frame, 50), 2),
        "resp_to_frame_p99_ms": round(_pct(resp_frame, 99), 2),
        "push_before_response": sum(1 for v in resp_frame if v < 0),
        "loadavg": os.getloadavg(),
    }


def run_push(args) -> dict:
    raise_nofile()
    started = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    report: dict = {"started": started, "command": "python -m bench.didcomm_bench " + " ".join(sys.argv[1:]),
                    "machine": machine(), "runs": []}  # fmt: skip
    la = _layout_args(args)
    prepare_database(la)
    layout = Layout(la)
    try:
        for r in range(args.runs):
            res = asyncio.run(_measure_push(layout, args))
            res["run"] = r + 1
            report["runs"].append(res)
            print(json.dumps(res), file=sys.stderr)
    finally:
        layout.stop()
    keys = ("req_to_frame_p50_ms", "req_to_frame_p99_ms", "resp_to_frame_p50_ms", "resp_to_frame_p99_ms")
    report["median"] = {k: statistics.median(r[k] for r in report["runs"]) for k in keys}
    md = [f"# didcomm push — {started}", "", "Command: `" + report["command"] + "`", "",
          "| run | live sockets | sends | request→frame p50 | p99 | max | response→frame p50 | p99 | push before 202 "
          "| load avg |", "|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in report["runs"]:
        md.append(f"| {r['run']} | {r['live_sockets']} | {r['sends']} | {r['req_to_frame_p50_ms']} | "
                  f"{r['req_to_frame_p99_ms']} | {r['req_to_frame_max_ms']} | {r['resp_to_frame_p50_ms']} | "
                  f"{r['resp_to_frame_p99_ms']} | {r['push_before_response']} | "
                  f"{', '.join(f'{x:.1f}' for x in r['loadavg'])} |")  # fmt: skip
    md += ["", "medians: " + json.dumps(report["median"])]
    _save("push", report, "\n".join(md) + "\n")
    return report


def parts_parser(doc: str, *, db: str, port: int, live: int, live_help: str):
    """The `forwards` and `push` subcommands with their options (this bench's and the v1 bench's)."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="part", required=True)
    for name in ("forwards", "push"):
        p = sub.add_parser(name)
        p.add_argument("--db", default=os.environ.get("BENCH_DB", db))
        p.add_argument("--redis-url", default=os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/12"))
        p.add_argument("--port", type=int, default=int(os.environ.get("BENCH_PORT", str(port))))
        p.add_argument("--env", nargs="*", action="extend", default=[], help="extra KEY=VALUE for the layout")
    f = sub.choices["forwards"]
    f.add_argument("--alternations", type=int, default=3)
    f.add_argument("--seconds", type=float, default=10)
    f.add_argument("--warmup", type=float, default=3)
    f.add_argument("--clients", type=int, default=16)
    f.add_argument("--pairs", type=int, default=64)
    f.add_argument("--requests", type=int, default=15_000, help="bodies built for a kind's first run")
    p = sub.choices["push"]
    p.add_argument("--live", type=int, default=live, help=live_help)
    p.add_argument("--sends", type=int, default=200)
    p.add_argument("--pause-ms", type=float, default=10)
    p.add_argument("--runs", type=int, default=1)
    p.add_argument("--setup-threads", type=int, default=4)
    return ap, sub


def main(argv: list[str] | None = None) -> None:
    ap, _ = parts_parser(
        __doc__, db="mediator_bench_didcomm", port=8340, live=1000, live_help="live recipients, one socket each"
    )
    args = ap.parse_args(argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mediator_project.settings")
    {"forwards": run_forwards, "push": run_push}[args.part](args)


if __name__ == "__main__":
    main()
