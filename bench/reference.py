"""A framework-free reference server for Decentrl TWO_WAY_PRIVATE, and the part of the suite that runs it
beside the production layout (`make bench BENCH_ARGS="--only reference"`).

    .venv/bin/python -m bench.reference --alternations 3 --seconds 10     # ~3 min

The server (`application`) is a bare WSGI callable: no Django request handling, middleware or view.
Per `POST /` it does the product's work for a TWO_WAY_PRIVATE with the product's own code: the tenant
from the Host header (tenants.selectors.tenant_for_host), the body cap, the envelope
(wire.envelope.parse_command), the signature check (dispatch.authenticate: tenants.resolver.verify_signer),
then dispatch.execute: the timestamp window, the recipient's resolution, and messaging's one statement
(sql.deliver after decentrl.storage's nonce claim). The answer is the product's canonical JSON, the same
bytes as the product's for a success. What it leaves out is what the product adds around that work: its
entry (mediator_project/entry.py: connection handling, security and CORS headers), the limit hooks, the log
line and the observers (metering, metrics). Any other channel is INVALID_COMMAND.

It runs on the production tier's own server (mediator_project/http_server.py: Granian, the same workers and
threads, one persistent database connection per thread) on the production layout's database, so the part
compares three ways of serving the same signed commands, taking turns in every round (the order flipping):
`production` (nginx → Granian, the layout as deployed), `granian` (the same Granian without nginx) and
`reference`. Reported: req/s, p50/p99 and CPU per command of each run (bench/cpu.py), and per round
production / reference and granian / reference (the cost of the product's entry and framework alone), with
their medians. JSON + Markdown under bench/results/reference-<UTC time>.*
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from http.client import responses
from pathlib import Path
from types import SimpleNamespace

import django
import httpx

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mediator_project.settings")
os.environ.setdefault("MEDIATOR_VAR_DIR", str(ROOT / "var" / "bench"))
os.environ.setdefault("LOG_LEVEL", "WARNING")
django.setup(set_prefix=False)

from django.db import DatabaseError  # noqa: E402

from apps.decentrl.dispatch import admit, authenticate, execute  # noqa: E402
from apps.tenants.selectors import tenant_for_host  # noqa: E402
from apps.wire.canonical import canonical_bytes  # noqa: E402
from apps.wire.envelope import TWO_WAY_PRIVATE, parse_command  # noqa: E402
from apps.wire.errors import ErrorCode, ProtocolError, error_body  # noqa: E402
from bench import didcomm_bench as alternation  # noqa: E402
from bench import loadgen, write_results  # noqa: E402
from bench.run_standard import Layout, SessionServer, machine, prepare_database, server_env  # noqa: E402

_JSON = ("Content-Type", "application/json")


def command(raw: bytes, host: str) -> dict:
    """One TWO_WAY_PRIVATE through the product's codec, signature check and statement: the reply body."""
    tenant = admit(tenant_for_host(host), len(raw))
    cmd = parse_command(raw)
    if cmd.header.channel != TWO_WAY_PRIVATE:
        raise ProtocolError(ErrorCode.INVALID_COMMAND, "the reference serves TWO_WAY_PRIVATE only")
    return execute(tenant, cmd, authenticate(cmd), "http", int(time.time() * 1000))


def application(environ, start_response):
    """`POST /` (a command) and `GET /health`, as WSGI."""
    if environ["REQUEST_METHOD"] != "POST":
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "2")])
        return [b"ok"]
    raw = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
    try:
        status, body = 200, command(raw, environ.get("HTTP_HOST", ""))
    except ProtocolError as err:
        status, body = err.status, err.body()
    except DatabaseError:  # execute claimed the nonce on its own first, as the product does
        status, body = 503, error_body(ErrorCode.MEDIATOR_UNAVAILABLE)
    reply = canonical_bytes(body)
    start_response(f"{status} {responses[status]}", [_JSON, ("Content-Length", str(len(reply)))])
    return [reply]


class Reference(SessionServer):
    """`application` on the production tier's server (its own session), with the layout's environment."""

    def __init__(self, layout_args, port: int, host: str):
        env = server_env(layout_args) | {"HTTP_PORT": str(port), "DB_CONN_MAX_AGE": "600"}
        # Loaded before Granian forks its workers, as the production tier's entry does.
        serve = (
            "import bench.reference, mediator_project.http_server as h; h.server('bench.reference:application').serve()"
        )
        self.host = host
        cmd = [sys.executable, "-c", serve]
        self.launch("the reference", cmd, env, f"reference-{port}.log", f"http://127.0.0.1:{port}", host)


def _post(srv, body: bytes) -> httpx.Response:
    return httpx.post(srv.url + "/", content=body, headers={"Host": srv.host}, timeout=30)


def same_answers(world: loadgen.World, servers: dict) -> dict:
    """A fresh command to each server, then each command again to the others: a success of the same
    shape everywhere, and the same bytes for every replay."""
    bodies = dict(zip(servers, loadgen.gen_two_way(world, len(servers)), strict=True))
    first = {name: _post(srv, bodies[name]).json() for name, srv in servers.items()}
    replays = {_post(srv, bodies[other]).content for name, srv in servers.items() for other in servers if other != name}
    shapes = {(answer["type"], *sorted(answer)) for answer in first.values()}
    if shapes != {("SUCCESS", "pendingEventId", "type")} or len(replays) != 1:
        raise RuntimeError(f"the servers answer differently: {first} {replays}")
    return {"success": first, "replay": replays.pop().decode()}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--alternations", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--warmup", type=float, default=3)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--pairs", type=int, default=64)
    ap.add_argument("--requests", type=int, default=40_000, help="bodies signed for a server's first run")
    ap.add_argument("--db", default=os.environ.get("BENCH_DB", "mediator_bench_reference"))
    ap.add_argument("--redis-url", default=os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/12"))
    ap.add_argument("--port", type=int, default=int(os.environ.get("BENCH_PORT", "8390")))
    ap.add_argument("--env", nargs="*", action="extend", default=[], help="extra KEY=VALUE for both servers")
    args = ap.parse_args(argv)
    report: dict = {"command": "python -m bench.reference " + " ".join(sys.argv[1:] if argv is None else argv),
                    "machine": machine(), "runs": []}  # fmt: skip
    la = SimpleNamespace(
        db=args.db, redis_url=args.redis_url, port=args.port, env=args.env, no_celery=True, layout="production"
    )
    prepare_database(la)
    layout = Layout(la)
    servers: dict = {"production": layout}
    try:
        servers["granian"] = SimpleNamespace(
            url=f"http://127.0.0.1:{args.port + 1}", host=layout.host, pgid=layout.pgid
        )
        servers["reference"] = Reference(la, args.port + 5, layout.host)
        world = loadgen.build_world(layout.url, layout.host, args.pairs)
        report["same_answers"] = same_answers(world, servers)
        kinds = {name: lambda n: loadgen.gen_two_way(world, n) for name in servers}
        alternation.alternate(layout, args, kinds, {name: {"server": srv} for name, srv in servers.items()}, report)
    finally:
        for srv in (servers.get("reference"), layout):
            if srv is not None:
                srv.stop()
    runs = report["runs"]
    report["summary"] = {
        f"{name}/reference": alternation.forwards_summary(runs, name, base="reference")
        for name in ("production", "granian")
    }
    md = ["Command: `" + report["command"] + "`", "", "| round | server | req/s | p50 ms | p99 ms | server CPU ms/req "
          "| PG CPU ms/req | other share | load avg | codes |", "|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in runs:
        md.append(f"| {r['round']} | {r['kind']} | {r['throughput_rps']} | {r['p50_ms']} | {r['p99_ms']} "
                  f"| {r['server_cpu_ms_per_req']} | {r['postgres_cpu_ms_per_req']} | {r['other_cpu_share']} "
                  f"| {', '.join(f'{x:.1f}' for x in r['loadavg'])} | {r['codes']} |")  # fmt: skip
    md += ["", "| ratio | req/s per round | median | CPU per command reference / it, per round | median |", "|---|---|---|---|---|"]  # fmt: skip
    for pair, s in report["summary"].items():
        md.append(f"| {pair} | {s['rate_ratio_per_round']} | **{s['rate_ratio_median']}** "
                  f"| {s['cpu_ratio_per_round']} | {s['cpu_ratio_median']} |")  # fmt: skip
    write_results("reference", report, md)
    return report


if __name__ == "__main__":
    main()
