"""The benchmark suite, one command (`make bench`; `make bench QUICK=1` for a few minutes):

1. Decentrl: a fresh PostgreSQL database (BENCH_DB, default `mediator_bench`), migrated, one
   tenant; the production layout (scripts/run_production.sh: nginx → Granian for HTTP, Daphne for
   /ws, Redis channel layer, Celery) with rate limits off and metering on (buffered, the default);
   the HTTP scenarios through the protocol (bench/loadgen.py), each `--runs` times: TWO_WAY_PRIVATE
   at 16 clients and QUERY_EVENTS by tag over `--stored` events (seeded with a bulk INSERT shaped
   exactly like SAVE_EVENTS rows; `--seed protocol` seeds through SAVE_EVENTS instead);
   `query_pending_ack` and `save_events` run when named in `--only`;
2. DIDComm v2: forwards beside TWO_WAY_PRIVATE, and forward-to-live-push latency
   (bench/didcomm_bench.py);
3. DIDComm v1: forwards beside TWO_WAY_PRIVATE (bench/didcomm_v1_bench.py);
4. reference: TWO_WAY_PRIVATE through the production layout beside a framework-free reference server
   (the product's codec, signature check and statement on the same Granian, bench/reference.py);
5. entry: what the command entry buys, CPU per `POST /` through it against Django's own handler
   (bench/entry_bench.py, in one process);
6. push: what the channels_redis adapter buys, CPU per push through it against the layer's public
   group_send (bench/push_bench.py, in one process);
7. usage_click: what staff wait for a usage report, from the request (API) or the click (Chromium)
   to the published run, stage by stage, and the first report on a cold engine
   (bench/usage_click_bench.py);
8. sockets: N idle authenticated `/ws` sockets on one socket server: RSS per socket, admission rate
   of a connect storm, AUTHENTICATE and push p99, a reconnect storm (bench/socket_bench.py);
9. data: TWO_WAY_PRIVATE, QUERY_EVENTS, DIDComm forwards and pickups on 10k identities beside 1M
   (and 10M in the full run, given ~170 GB of disk), seeded in bulk (bench/data_bench.py);
10. peers: the same DIDComm v1 forwards to this mediator (production layout and `make run`), ACA-Py
   1.7's and Credo 0.6.3's mediators, side by side (bench/peers.py);
11. wake: push wake-ups on the production layout with its Celery worker and FCM's stand-in: forward →
   provider latency for a sleeping recipient, forwards/s with pushes on / off, coalescing, a provider
   down or hanging, Pickup 4.0 live deliveries left unacknowledged (bench/wake_bench.py);
12. JSON + Markdown under bench/results/ (not committed), the tables printed.

    .venv/bin/python -m bench.run_standard            # ~25 min on 2 cores
    .venv/bin/python -m bench.run_standard --quick    # ~7 min: one short run or round of each
    .venv/bin/python -m bench.run_standard --only two_way_private peers
    BENCH_ENV="HTTP_WORKERS=3" .venv/bin/python -m bench.run_standard --only two_way_private

Every HTTP run also records where the CPU went (bench/cpu.py): server processes, PostgreSQL
backends, the load generator itself and the rest of the machine, so that numbers from a shared
box can be read.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace

import httpx

from bench.pg import PG_ADMIN_URL, db_url

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
HTTP_SCENARIOS = ("two_way_private", "query_pending_ack", "save_events", "query_events_by_tag")
# The suite's parts after the Decentrl scenarios: each its own process (module, its arguments, then the
# quick mode's), its results under bench/results/ as well.
MODULES = {
    "didcomm_v2": ("bench.didcomm_bench", ["forwards", "--alternations", "3", "--seconds", "10"],
                   ["forwards", "--alternations", "1", "--seconds", "5", "--warmup", "1", "--requests", "5000"]),
    "didcomm_v2_push": ("bench.didcomm_bench", ["push", "--live", "1000", "--sends", "200"],
                        ["push", "--live", "100", "--sends", "50"]),
    "didcomm_v1": ("bench.didcomm_v1_bench", ["forwards", "--alternations", "3", "--seconds", "10"],
                   ["forwards", "--alternations", "1", "--seconds", "5", "--warmup", "1", "--requests", "5000"]),
    "reference": ("bench.reference", ["--alternations", "3", "--seconds", "10"],
                  ["--alternations", "1", "--seconds", "5", "--warmup", "1", "--requests", "20000"]),
    "entry": ("bench.entry_bench", ["--rounds", "6", "--requests", "3000"], ["--rounds", "2", "--requests", "1000"]),
    "push": ("bench.push_bench", ["--rounds", "6", "--pushes", "3000"], ["--rounds", "2", "--pushes", "1000"]),
    "usage_click": ("bench.usage_click_bench", ["--rows", "100000", "--rounds", "3", "--cold"],
                    ["--rows", "100000", "--rounds", "1"]),
    "sockets": ("bench.socket_bench", ["--sockets", "10000", "--concurrency", "200"],
                ["--sockets", "1000", "--concurrency", "100", "--sends", "50"]),
    "data": ("bench.data_bench", [], ["--quick"]),
    "peers": ("bench.peers", ["--alternations", "3", "--seconds", "10"],
              ["--alternations", "1", "--seconds", "5", "--warmup", "1", "--pairs", "16", "--requests", "5000"]),
    "wake": ("bench.wake_bench", [], ["--quick"]),
    "queue_model": ("bench.queue_model", [], ["--quick"]),
}  # fmt: skip
SUITE = ("two_way_private", "query_events_by_tag", *MODULES)


def machine() -> dict:
    def run(cmd: str) -> str:
        try:
            return subprocess.run(shlex.split(cmd), capture_output=True, text=True, check=False).stdout.strip()
        except OSError:
            return "?"

    import django
    import granian
    import psycopg

    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")), "?")
    return {
        "nproc": run("nproc"),
        "cpu": cpu,
        "mem": run("free -h").splitlines()[1] if run("free -h") else "?",
        "kernel": run("uname -r"),
        "python": sys.version.split()[0],
        "django": django.__version__,
        "psycopg": psycopg.__version__,
        "granian": granian.__version__,
        "postgres": run("psql -V"),
        "nginx": subprocess.run(["nginx", "-v"], capture_output=True, text=True, check=False).stderr.strip(),
        "redis": run("redis-server --version"),
        "loadavg_at_start": os.getloadavg(),
        "postgres_connection": PG_ADMIN_URL.rsplit("/", 1)[0],
    }


def server_env(args) -> dict:
    env = dict(os.environ)
    env.update(
        {
            "DJANGO_SETTINGS_MODULE": "mediator_project.settings",
            "DATABASE_URL": db_url(args.db),
            "REDIS_URL": args.redis_url,
            # Development mode with DEBUG off: run_production.sh would otherwise default to
            # production and need its secrets.
            "MEDIATOR_ENV": "development",
            "DJANGO_DEBUG": "0",
            "LOG_LEVEL": "WARNING",
            "MEDIATOR_RATE_LIMIT_PER_DID": "0",
            "MEDIATOR_RATE_LIMIT_PER_IP": "0",
            "MEDIATOR_WS_CONNECT_PER_IP": "0",
            "MEDIATOR_WS_AUTH_PER_IP": "0",
            "MEDIATOR_VAR_DIR": str(ROOT / "var" / "bench"),
            "PORT": str(args.port),
            "PYTHONPATH": str(ROOT),
        }
    )
    for item in shlex.split(os.environ.get("BENCH_ENV", "")) + args.env:
        k, _, v = item.partition("=")
        env[k] = v
    return env


def prepare_database(args) -> None:
    """Drop and recreate the bench database, migrate it and bootstrap the tenant for the port."""
    import psycopg

    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
            [args.db],
        )
        conn.execute(f'DROP DATABASE IF EXISTS "{args.db}"')
        conn.execute(f'CREATE DATABASE "{args.db}"')
    env = server_env(args)
    py = sys.executable
    subprocess.run([py, "manage.py", "migrate", "--noinput", "-v0"], cwd=ROOT, env=env, check=True)
    subprocess.run(
        [py, "manage.py", "bootstrap_tenant", "--port", str(args.port)],
        cwd=ROOT,
        env=env,
        check=True,
        stdout=sys.stderr,
    )


class SessionServer:
    """A server started in its own session (`self.proc`): its pid is the process group to stop."""

    proc: subprocess.Popen

    @property
    def pgid(self) -> int:
        return self.proc.pid

    def launch(
        self, what: str, cmd: list[str], env: dict, log_name: str, url: str, host: str | None = None, wait: float = 60
    ) -> None:
        """Start `cmd` in its own session (output to var/bench/`log_name`) and wait until `url`'s
        /health answers 200 (with Host `host`), at most `wait` s; then a second for every worker."""
        log_dir = ROOT / "var" / "bench"
        log_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = log_dir / log_name
        self.proc = subprocess.Popen(
            cmd, cwd=ROOT, env=env, stdout=self.log_path.open("wb"), stderr=subprocess.STDOUT, start_new_session=True
        )
        self.url = url
        headers = {"Host": host} if host else None
        deadline = time.time() + wait
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(self.log_path.read_text(errors="replace"))
            try:
                if httpx.get(url + "/health", headers=headers, timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        else:
            self.stop()
            raise RuntimeError(f"{what} did not start:\n" + self.log_path.read_text(errors="replace"))
        time.sleep(1.0)  # let every worker process finish booting

    def stop(self) -> None:
        """SIGTERM to the leader's group, then wait until every process of the session is gone
        (supervisord puts each program in a group of its own, and a program may outlive it);
        whatever is left after 20 s is killed."""
        if self.proc.poll() is None:
            os.killpg(self.pgid, signal.SIGTERM)
        deadline = time.monotonic() + 20
        while session_members(self.pgid) and time.monotonic() < deadline:
            self.proc.poll()  # reap the leader
            time.sleep(0.2)
        for pid in session_members(self.pgid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait(timeout=5)


def session_members(sid: int) -> list[int]:
    """The live (not zombie) processes of session `sid`, from /proc."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[3]) == sid:
            found.append(int(entry))
    return found


class Layout(SessionServer):
    """scripts/run_production.sh in its own session: its pid (supervisord's, which stops the
    programs on SIGTERM) is the session of the set."""

    def __init__(self, args):
        self.args = args
        env = server_env(args)
        if args.no_celery:
            env["NO_CELERY"] = "1"
        cmd = ["scripts/run_production.sh"]
        self.http_port = args.port
        if args.layout == "no-proxy":  # clients straight to Granian (HTTP_PORT = PORT + 1)
            env["NO_PROXY"] = "1"
            self.http_port = args.port + 1
        elif args.layout == "daphne":  # the embedded default's server: one Daphne for everything
            cmd = [sys.executable, "-m", "mediator_project.socket_server", "-b", "127.0.0.1", "-p", str(args.port), "mediator_project.asgi:application"]  # fmt: skip
        self.host = f"localhost:{args.port}"
        self.launch(
            "the production layout",
            cmd,
            env,
            f"production-{args.port}.log",
            f"http://127.0.0.1:{self.http_port}",
            self.host,
        )


def run_http(args, layout: Layout) -> list[dict]:
    from bench import loadgen
    from bench.cpu import CpuSampler

    cpu = CpuSampler(server_pgid=layout.pgid, database=args.db)
    world = loadgen.build_world(layout.url, layout.host, args.pairs)
    reports = []
    for scenario in [s for s in HTTP_SCENARIOS if s in args.only]:
        ns = SimpleNamespace(
            url=layout.url,
            host=layout.host,
            scenario=scenario,
            clients=args.clients,
            pairs=args.pairs,
            # The first run signs this many bodies; later runs size themselves (loadgen.run_scenario).
            requests=args.requests if scenario == "two_way_private" else max(2000, args.requests // 4),
            seconds=args.seconds,
            stored=args.stored,
            seed=args.seed,
            tag_owners=args.tag_owners,
            database_url=db_url(args.db),
            runs=args.runs,
        )
        print(f"== {scenario}: {args.runs} run(s) x {args.seconds}s at {args.clients} clients", file=sys.stderr)
        rep = loadgen.run_scenario(ns, world=world, cpu=cpu)
        rep.pop("_world", None), rep.pop("_state", None)
        reports.append(rep)
        m = rep["median"]
        print(
            f"   median {m['throughput_rps']} req/s  p50 {m['p50_ms']} ms  p99 {m['p99_ms']} ms  "
            f"server {m['server_cpu_ms_per_req']} + PG {m['postgres_cpu_ms_per_req']} CPU ms/req  "
            f"client share {m['client_cpu_share']}  other share {m['other_cpu_share']}",
            file=sys.stderr,
        )
    return reports


def _json_lines(out: str) -> list[dict]:
    rows = []
    for line in out.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    return rows


def _tables(out: str) -> list[str]:
    """A part's Markdown without its title, command line, JSON lines and fenced JSON blocks."""
    keep, fenced = [], False
    for line in out.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and not line.startswith(("{", "# ", "Command: ")):
            keep.append(line)
    return keep


def run_module(module: str, argv: list[str], timeout: int) -> dict:
    """Run one part of the suite as its own process (its progress on our stderr); keep its JSON lines and
    Markdown."""
    if not (ROOT / "bench" / (module.rsplit(".", 1)[1] + ".py")).exists():
        return {"module": module, "skipped": "not present"}
    print(f"== {module} {' '.join(argv)}", file=sys.stderr)
    started = time.perf_counter()
    try:
        proc = subprocess.run(
            [sys.executable, "-m", module, *argv],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
            timeout=timeout,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
    except subprocess.TimeoutExpired:
        return {"module": module, "argv": argv, "error": f"timeout after {timeout}s"}
    res = {
        "module": module,
        "argv": argv,
        "returncode": proc.returncode,
        "seconds": round(time.perf_counter() - started, 1),
        "json": _json_lines(proc.stdout),
        "markdown": _tables(proc.stdout),
    }
    if proc.returncode:
        res["error"] = f"exited with {proc.returncode} (its output above)"
    for ln in res["markdown"]:
        print("   " + ln, file=sys.stderr)
    return res


def markdown(report: dict) -> str:
    from bench.loadgen import MD_HEADER, markdown_row

    out = [f"# make bench — {report['started']}", "", "```", json.dumps(report["machine"], indent=1), "```", ""]
    out += ["Command: `" + report["command"] + "`", "", "## HTTP scenarios (every run)", "", MD_HEADER]
    for rep in report["http"]:
        for r in rep["runs"]:
            out.append(markdown_row(rep["scenario"], r))
    out += ["", "## Medians", "", "| scenario | req/s | p50 ms | p95 ms | p99 ms | server CPU ms/req | PG CPU ms/req "
            "| client CPU share | other CPU share | capacity req/s (all cores, server+PG only) | nginx µs/req |", "|---|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for rep in report["http"]:
        m = rep["median"]
        out.append(
            f"| {rep['scenario']} | {m['throughput_rps']} | {m['p50_ms']} | {m['p95_ms']} | {m['p99_ms']} "
            f"| {m['server_cpu_ms_per_req']} | {m['postgres_cpu_ms_per_req']} | {m['client_cpu_share']} "
            f"| {m['other_cpu_share']} | {m['capacity_rps_all_cores']} | {m.get('nginx_us_per_req')} |"
        )
    for key, r in report.get("modules", {}).items():
        out += ["", f"## {key} (`python -m {r['module']} {' '.join(r.get('argv', []))}`)", ""]
        out += r.get("markdown") or [r.get("error") or r.get("skipped") or "no table"]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="one short run or round of each part, 100k stored events")
    ap.add_argument("--db", default=os.environ.get("BENCH_DB", "mediator_bench"))
    ap.add_argument("--redis-url", default=os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/13"))
    ap.add_argument("--port", type=int, default=int(os.environ.get("BENCH_PORT", "8300")))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=15)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--pairs", type=int, default=64)
    ap.add_argument("--requests", type=int, default=30_000)
    ap.add_argument("--stored", type=int, default=1_000_000)
    ap.add_argument("--seed", choices=("sql", "protocol"), default="sql")
    ap.add_argument("--tag-owners", type=int, default=10)
    ap.add_argument(
        "--only", nargs="+", choices=(*HTTP_SCENARIOS, *MODULES), default=list(SUITE), help="parts of the suite"
    )
    ap.add_argument("--no-celery", action="store_true")
    ap.add_argument(
        "--layout",
        choices=("production", "no-proxy", "daphne"),
        default="production",
        help="production: nginx+Granian+Daphne (default); no-proxy: Granian direct; daphne: one Daphne",
    )
    ap.add_argument(
        "--env", nargs="*", action="extend", default=[], help="extra KEY=VALUE for the server (also BENCH_ENV)"
    )
    args = ap.parse_args(argv)
    if args.quick:
        args.runs, args.seconds, args.requests, args.stored = 1, 5, 10_000, min(args.stored, 100_000)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mediator_project.settings")
    started = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    report: dict = {
        "started": started,
        "command": "python -m bench.run_standard " + " ".join(argv if argv is not None else sys.argv[1:]),
        "machine": machine(),
        "layout": args.layout,
        "server_env": {k: v for k, v in server_env(args).items() if k.startswith(("HTTP_", "MEDIATOR_", "USAGE_", "DB_POOL"))},
        "http": [],
    }  # fmt: skip
    t0 = time.perf_counter()
    if any(s in args.only for s in HTTP_SCENARIOS):
        print(f"== fresh database {args.db}", file=sys.stderr)
        prepare_database(args)
        layout = Layout(args)
        try:
            report["http"] = run_http(args, layout)
        finally:
            layout.stop()
    report["modules"] = {}
    for key in [k for k in MODULES if k in args.only]:
        module, full, quick = MODULES[key]
        report["modules"][key] = run_module(module, quick if args.quick else full, 3600)
    report["total_s"] = round(time.perf_counter() - t0, 1)
    RESULTS.mkdir(parents=True, exist_ok=True)
    base = RESULTS / f"standard-{started}"
    base.with_suffix(".json").write_text(json.dumps(report, indent=2, default=str))
    md = markdown(report)
    base.with_suffix(".md").write_text(md)
    print(md)
    print(f"results: {base}.json / .md ({report['total_s']} s)", file=sys.stderr)
    return report


if __name__ == "__main__":
    main()
