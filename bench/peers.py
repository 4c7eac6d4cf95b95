"""DIDComm v1 forwards per second: this mediator beside ACA-Py 1.7's and Credo 0.6.3's mediators, on the same
box, taking turns in one run, so the ratio between them holds even when the box is shared.

    .venv/bin/python -m bench.peers --alternations 3 --seconds 10          # ~6 min
    .venv/bin/python -m bench.peers --only production acapy --alternations 1 --seconds 5

The contenders, each started once with state of its own and running for the whole run:

- `production`: the production layout (bench/run_standard.py `Layout`: nginx → Granian, Daphne,
  PostgreSQL, no Celery, metering on, rate limits off);
- `embedded`: `make run` as a user starts it (its own var directory under var/bench, rate limits off);
- `acapy`: ACA-Py 1.7.0, `aca-py start --open-mediation --enable-undelivered-queue`, askar wallet
  (tests/interop/acapy.py, installed by scripts/ensure_extra_acapy.sh), log level `error`;
- `credo`: Credo 0.6.3's mediator (auto-granting, forwards queued for pickup) behind an HTTP inbound
  transport (tests/interop/credo.py and credo/credo_agent.mjs, installed by scripts/ensure_extra_credo.sh).

Every contender gets the same world, built through the protocol (bench/didcomm_v1_bench.py): `--pairs`
Aries agents, each connected by DID Exchange 1.1 from the mediator's OOB invitation, granted mediation
(Coordinate Mediation 1.0) and with one recipient key registered. The recipients publish no http(s)
endpoint (Credo's case), so each mediator keeps what it is forwarded for pickup. Every forward is built
before its run: a fresh `routing/1.0/forward` anoncrypt to the grant's routing key around a fixed
256-byte envelope. Then an unmeasured warm-up of each, and `--alternations` rounds of one run of each
(the order flipping every round) through the same load generator (bench/loadgen.py: raw keep-alive
sockets, `--clients` at once, 200 = accepted) and CPU accounting (bench/cpu.py: the contender's
session; PostgreSQL backends for the production layout). Reported: req/s, p50/p99, CPU ms per
request, and ours / peer req/s per round with the median.

What "accepted" means differs: this mediator and Credo answer 200 once the forward is stored; ACA-Py
answers once it has unpacked it and queued it to be handled (its HTTP transport handles messages
after the response). A contender that cannot start (e.g. no Python >= 3.13 for ACA-Py) is reported
as skipped with the reason; the others still run.

JSON + Markdown under bench/results/didcomm-peers-<UTC time>.*
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import shutil
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import parse_qs, urlparse

from bench import didcomm_bench as v2
from bench.didcomm_v1_bench import ENVELOPE, V1Mediator, forwards, granted_agents, inner_for
from bench.run_standard import Layout, SessionServer, machine, prepare_database
from tests.interop import acapy, credo
from tests.support.servers import free_port

ROOT = Path(__file__).resolve().parents[1]
CONTENDERS = ("production", "embedded", "acapy", "credo")
OURS = ("production", "embedded")
PEERS = ("acapy", "credo")
NO_LIMITS = {
    "MEDIATOR_RATE_LIMIT_PER_DID": "0",
    "MEDIATOR_RATE_LIMIT_PER_IP": "0",
    "MEDIATOR_DIDCOMM_RATE_LIMIT_PER_SENDER": "0",
    "MEDIATOR_DIDCOMM_RATE_LIMIT_PER_IP": "0",
}


class Embedded(SessionServer):
    """`make run` in its own session, as a user starts it: the Makefile's own recipe (the install step
    skipped: the venv is there), its own var directory, rate limits off."""

    def __init__(self, port: int, var_dir: Path):
        shutil.rmtree(var_dir, ignore_errors=True)
        env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE")}
        env |= NO_LIMITS | {"MEDIATOR_VAR_DIR": str(var_dir)}
        self.host = f"localhost:{port}"
        cmd = ["make", "-s", "-o", ".venv/.installed", "run", f"PORT={port}", "BIND=127.0.0.1"]
        self.launch("make run", cmd, env, f"embedded-{port}.log", f"http://127.0.0.1:{port}", self.host, wait=180)


class Peer:
    """A peer mediator process started by tests/interop (its pid is its session), answering on `url`/."""

    host = "localhost"
    path = "/"

    def __init__(self, agent, url: str, invitation: dict):
        self.agent, self.url, self.invitation = agent, url, invitation
        self.pgid = agent.proc.pid

    def stop(self) -> None:
        self.agent.stop()


def start_acapy(home: Path) -> Peer:
    agent = acapy.start_agent(home, "acapy-mediator", mediator=True, own_session=True, log_level="error")
    body = {"handshake_protocols": ["https://didcomm.org/didexchange/1.1"], "use_public_did": False}
    invitation = agent.post("/out-of-band/create-invitation", body, multi_use="true")["invitation"]
    return Peer(agent, agent.endpoint, invitation)


def start_credo(home: Path) -> Peer:
    credo.ensure_installed()
    port = free_port()
    agent = credo.start_agent(home, "credo-mediator", mediator_port=port, own_session=True)
    url = agent.call("create-invitation", multiUse=True)["url"]
    oob = parse_qs(urlparse(url).query)["oob"][0]
    invitation = json.loads(base64.urlsafe_b64decode(oob + "=" * (-len(oob) % 4)))
    return Peer(agent, f"http://127.0.0.1:{port}", invitation)


def start(name: str, args, home: Path):
    if name == "production":
        la = SimpleNamespace(db=args.db, redis_url=args.redis_url, port=args.port, no_celery=True,
                             env=[f"{k}={v}" for k, v in NO_LIMITS.items()] + args.env, layout="production")  # fmt: skip
        prepare_database(la)
        return Layout(la)
    if name == "embedded":
        return Embedded(args.port + 20, ROOT / "var" / "bench" / "embedded")
    return {"acapy": start_acapy, "credo": start_credo}[name](home)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", nargs="+", choices=CONTENDERS, default=list(CONTENDERS))
    ap.add_argument("--alternations", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--warmup", type=float, default=3)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--pairs", type=int, default=64)
    ap.add_argument("--requests", type=int, default=15_000, help="forwards built for a contender's first run")
    ap.add_argument("--db", default=os.environ.get("BENCH_DB", "mediator_bench_peers"))
    ap.add_argument("--redis-url", default=os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/12"))
    ap.add_argument("--port", type=int, default=int(os.environ.get("BENCH_PORT", "8360")))
    ap.add_argument("--env", nargs="*", action="extend", default=[], help="extra KEY=VALUE for the production layout")
    args = ap.parse_args(argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mediator_project.settings")
    started = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    report: dict = {"started": started, "command": "python -m bench.peers " + " ".join(sys.argv[1:] if argv is None else argv),
                    "machine": machine(), "versions": {"acapy": acapy.VERSION, "credo": credo.VERSION},
                    "skipped": {}, "runs": []}  # fmt: skip
    (ROOT / "var" / "bench").mkdir(parents=True, exist_ok=True)
    home = Path(tempfile.mkdtemp(prefix="peers-", dir=ROOT / "var" / "bench"))
    servers: dict = {}
    kinds: dict = {}
    target: dict = {}
    try:
        for name in args.only:
            print(f"== starting {name}", file=sys.stderr)
            try:
                srv = servers[name] = start(name, args, home)
            except Exception as exc:  # noqa: BLE001 - reported, the others still run
                report["skipped"][name] = f"{type(exc).__name__}: {str(exc)[-600:]}"
                print(f"   skipped: {report['skipped'][name]}", file=sys.stderr)
                continue
            med = V1Mediator(srv.url, srv.host, getattr(srv, "invitation", None), getattr(srv, "path", "/didcomm"))
            agents = granted_agents(med, args.pairs)
            targets = [(rcpt, inner_for(rcpt)) for _, rcpt in agents]
            kinds[name] = lambda n, med=med, targets=targets: forwards(med, targets, n)
            target[name] = {"server": srv, "path": med.path, "content_type": ENVELOPE, "ok_status": 200,
                            "database": args.db if name == "production" else None}  # fmt: skip
            print(f"   {args.pairs} agents connected and granted", file=sys.stderr)
        if kinds:
            v2.alternate(next(iter(servers.values())), args, kinds, target, report)
    finally:
        for srv in servers.values():
            srv.stop()
        shutil.rmtree(home, ignore_errors=True)  # the peers' wallets
    report["summary"] = summary = {}
    for ours in [k for k in OURS if k in kinds]:
        for peer in [k for k in PEERS if k in kinds]:
            summary[f"{ours}/{peer}"] = v2.forwards_summary(report["runs"], ours, base=peer)
    if "production" in kinds and "embedded" in kinds:
        summary["embedded/production"] = v2.forwards_summary(report["runs"], "embedded", base="production")
    v2._save("peers", report, markdown(report))
    return report


def markdown(report: dict) -> str:
    md = [f"# DIDComm v1 forwards, side by side — {report['started']}", "", "Command: `" + report["command"] + "`",
          "", "| round | contender | forwards/s | p50 ms | p99 ms | server CPU ms/req | PG CPU ms/req | other share "
          "| codes |", "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in report["runs"]:
        md.append(f"| {r['round']} | {r['kind']} | {r['throughput_rps']} | {r['p50_ms']} | {r['p99_ms']} "
                  f"| {r['server_cpu_ms_per_req']} | {r['postgres_cpu_ms_per_req']} | {r['other_cpu_share']} "
                  f"| {r['codes']} |")  # fmt: skip
    md += ["", "| ratio (req/s) | per round | median |", "|---|---|---|"]
    for pair, s in report["summary"].items():
        md.append(f"| {pair} | {s['rate_ratio_per_round']} | **{s['rate_ratio_median']}** |")
    for name, why in report["skipped"].items():
        md += ["", f"{name} skipped: {why}"]
    return "\n".join(md) + "\n"


if __name__ == "__main__":
    main()
