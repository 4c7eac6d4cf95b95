"""Sockets at scale: what N idle authenticated `/ws` sockets cost the socket server, how fast a storm
of connects is admitted, and how fast a push reaches one of them (docs/benchmarks.md).

    python -m bench.socket_bench --sockets 2000 --concurrency 200
    python -m bench.socket_bench --sockets 10000 --concurrency 200 --trees . /tmp/base-tree

One Daphne (`mediator_project.socket_server`, the socket tier of the production layout, here also
serving the HTTP the setup and the pushes' commands need) on a fresh database, the Redis channel
layer, rate limits off. N identities are registered through the protocol once; K of them (`--push-pairs`)
also get a sender with a contract. Then each round, for each tree in `--trees` in turn (the order
flipping every round, so that a before/after comparison runs alternately on the same noisy box):

1. **admission**: the N sockets connect at most C at a time (a storm from an empty server): each a
   WebSocket handshake, then AUTHENTICATE (the frames signed beforehand); sockets/s over the whole
   storm, handshake and AUTHENTICATE (frame sent → AUTH_SUCCESS) p50/p99, refusals by kind
   (an HTTP status is Daphne's WSREJECT, a close code the application's answer);
2. **memory**: the server's RSS (`/proc/<pid>/status`) with the N sockets idle against its RSS
   after a warm-up of a few sockets, per socket;
3. **push**: `--sends` TWO_WAY_PRIVATE commands, one at a time, each to one of the K recipients
   holding an idle socket among the N; request → PENDING_EVENTS frame p50/p99;
4. **reconnect storm**: every socket dropped at once (no closing handshake, as a network loss) and
   re-admitted C at a time; time until all are re-authenticated and the K recipients have their
   backlog (the pushed events, not acknowledged) again.

`--tracemalloc` starts the server under `bench/traced_server.py` and writes where its heap grew
between the warm-up and the N idle sockets (top allocation sites) into the results.
JSON + Markdown under bench/results/sockets-<UTC time>.*
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import os
import resource
import signal
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

from websockets.exceptions import InvalidStatus

from apps.wire.canonical import canonical_bytes, canonical_str, loads_strict
from apps.wire.client import Identity, MediatorClient
from apps.wire.ws import MediatorSocket, SocketClosed
from bench import loadgen, write_results
from bench.run_standard import ROOT, SessionServer, machine, prepare_database, server_env

DAY_S = 86_400


def raise_nofile(need: int) -> int:
    """Raise this process's open-file limit to at least `need` (root may raise the hard limit too);
    the server inherits it. Returns the soft limit in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = max(soft, need)
    if want > hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, want))
            return want
        except (ValueError, OSError):
            want = hard
    resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    return want


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def pct(vals: list[float], p: float) -> float:
    s = sorted(vals)
    return round(s[min(len(s) - 1, max(0, int(round(p / 100 * len(s) + 0.5)) - 1))], 2) if s else float("nan")


class SocketServer(SessionServer):
    """One socket server process started from `tree` (its code, this database)."""

    def __init__(self, args, tree: Path, tag: str):
        env = server_env(args)
        env["PYTHONPATH"] = str(tree)
        env.update(dict(e.split("=", 1) for e in args.server_env))
        module = "bench.traced_server" if args.tracemalloc else "mediator_project.socket_server"
        if args.tracemalloc:
            # The wrapper lives in this tree; the server's code comes from `tree` (first on the path).
            env["PYTHONPATH"] = f"{tree}{os.pathsep}{ROOT}"
            env["BENCH_TRACE_FILE"] = str(ROOT / "var" / "bench" / f"trace-{tag}.txt")
        cmd = [sys.executable, "-m", module, "-b", "127.0.0.1", "-p", str(args.port), *args.daphne_args]
        self.host = f"localhost:{args.port}"
        self.tree = tree
        self.trace_file = env.get("BENCH_TRACE_FILE")
        self.launch_in(tree, cmd, env, f"sockets-{tag}.log", f"http://127.0.0.1:{args.port}", self.host)

    def launch_in(self, tree: Path, cmd: list[str], env: dict, log: str, url: str, host: str) -> None:
        cwd = os.getcwd()
        os.chdir(tree)
        try:
            self.launch("the socket server", cmd, env, log, url, host)
        finally:
            os.chdir(cwd)

    def snapshot(self, label: str) -> None:
        """Ask bench/traced_server.py for a heap snapshot named `label`, and wait until it is written."""
        marker = Path(f"{self.trace_file}.{label}")
        marker.unlink(missing_ok=True)
        Path(f"{self.trace_file}.next").write_text(label)
        os.kill(self.proc.pid, signal.SIGUSR1)
        deadline = time.time() + 120
        while not marker.exists() and time.time() < deadline:
            time.sleep(0.2)


class World(SimpleNamespace):
    identities: list[Identity]
    senders: list[Identity]


def build_world(url: str, host: str, n: int, pairs: int, threads: int) -> World:
    """`n` registered identities; the first `pairs` each with a registered sender holding a contract."""
    probe = MediatorClient(url, host=host, timeout=60)
    mediator_did = probe.did

    def register(chunk: list[int]) -> list[Identity]:
        client = MediatorClient(url, host=host, timeout=60)
        out = []
        for i in chunk:
            who = Identity.create(f"u{i}", mediator_did)
            client.register(who, lifetime_s=DAY_S)
            out.append(who)
        client.close()
        return out

    chunks = [list(range(k, n, threads)) for k in range(threads)]
    with ThreadPoolExecutor(threads) as pool:
        people = [who for part in pool.map(register, chunks) for who in part]
    senders = [Identity.create(f"s{i}", mediator_did) for i in range(pairs)]
    for s, r in zip(senders, people[:pairs], strict=True):
        probe.register(s, lifetime_s=DAY_S)
        loadgen.save_contract(probe, s, r)
    probe.close()
    return World(identities=people, senders=senders)


class Storm:
    """Open (and authenticate) sockets at most `concurrency` at a time; what each took and how it ended."""

    def __init__(self, url: str, port: int, concurrency: int, open_timeout: float):
        self.url, self.port, self.timeout = url, port, open_timeout
        self.sem = asyncio.Semaphore(concurrency)
        self.handshake_ms: list[float] = []
        self.auth_ms: list[float] = []
        self.refusals: dict[str, int] = {}

    def _refused(self, kind: str) -> None:
        self.refusals[kind] = self.refusals.get(kind, 0) + 1

    async def one(self, frame: str) -> MediatorSocket | None:
        async with self.sem:
            t0 = time.perf_counter()
            try:
                sock = await MediatorSocket.open(
                    self.url, connect_to=("127.0.0.1", self.port), open_timeout=self.timeout
                )
            except InvalidStatus as exc:
                self._refused(f"http_{exc.response.status_code}")
                return None
            except Exception as exc:  # noqa: BLE001 - counted by kind
                self._refused(type(exc).__name__)
                return None
            t1 = time.perf_counter()
            try:
                await sock.conn.send(frame)
                reply = await sock.recv(self.timeout)
            except SocketClosed as exc:
                self._refused(f"close_{exc.code}")
                return None
            except Exception as exc:  # noqa: BLE001 - counted by kind
                self._refused(type(exc).__name__)
                sock.abort()
                return None
            if reply.get("type") != "AUTH_SUCCESS":
                try:
                    code = await sock.wait_closed(self.timeout)
                except TimeoutError:
                    code = None
                    sock.abort()
                self._refused(f"{reply.get('code')}_{code}")
                return None
            self.handshake_ms.append((t1 - t0) * 1000)
            self.auth_ms.append((time.perf_counter() - t1) * 1000)
            return sock

    async def run(self, frames: list[str]) -> tuple[list[MediatorSocket | None], float]:
        t0 = time.perf_counter()
        socks = await asyncio.gather(*(self.one(f) for f in frames))
        return list(socks), time.perf_counter() - t0

    def summary(self, opened: int, wall_s: float) -> dict:
        return {
            "opened": opened,
            "wall_s": round(wall_s, 2),
            "sockets_per_s": round(opened / wall_s, 1) if wall_s else None,
            "handshake_p50_ms": pct(self.handshake_ms, 50),
            "handshake_p99_ms": pct(self.handshake_ms, 99),
            "auth_p50_ms": pct(self.auth_ms, 50),
            "auth_p99_ms": pct(self.auth_ms, 99),
            "refusals": dict(self.refusals),
        }


def _frames(people: list[Identity]) -> list[str]:
    return [canonical_str(who.ws_authenticate()) for who in people]


def _post(conn: http.client.HTTPConnection, body: bytes, host: str) -> int:
    conn.request("POST", "/", body=body, headers={"Content-Type": "application/json", "Host": host})
    resp = conn.getresponse()
    resp.read()
    return resp.status


async def _next_pending(sock: MediatorSocket, timeout: float) -> float:
    """Read until a PENDING_EVENTS frame arrives; its arrival time (perf_counter)."""
    deadline = time.perf_counter() + timeout
    while True:
        raw = await asyncio.wait_for(sock.conn.recv(), max(0.0, deadline - time.perf_counter()))
        if loads_strict(raw).get("type") == "PENDING_EVENTS":
            return time.perf_counter()


async def measure_push(args, world: World, socks: list[MediatorSocket | None]) -> dict:
    targets = [(s, r, socks[i]) for i, (s, r) in enumerate(zip(world.senders, world.identities, strict=False))]
    targets = [t for t in targets if t[2] is not None]
    bodies = [
        canonical_bytes(s.sign_command(recipient_did=r.did, payload="A" * 256, channel="TWO_WAY_PRIVATE"))
        for k in range(args.sends)
        for s, r, _ in [targets[k % len(targets)]]
    ]
    conn = http.client.HTTPConnection("127.0.0.1", args.port, timeout=30)
    lat, statuses, missed = [], {}, 0
    try:
        for k, body in enumerate(bodies):
            sock = targets[k % len(targets)][2]
            t0 = time.perf_counter()
            status = await asyncio.to_thread(_post, conn, body, f"localhost:{args.port}")
            statuses[status] = statuses.get(status, 0) + 1
            try:
                lat.append((await _next_pending(sock, 10) - t0) * 1000)
            except TimeoutError:
                missed += 1
    finally:
        conn.close()
    return {"sends": len(bodies), "statuses": statuses, "missed": missed,
            "push_p50_ms": pct(lat, 50), "push_p99_ms": pct(lat, 99), "push_max_ms": pct(lat, 100)}  # fmt: skip


async def close_all(socks: list[MediatorSocket | None], *, abort: bool) -> None:
    live = [s for s in socks if s is not None]
    if abort:
        for s in live:
            s.abort()
        return
    for start in range(0, len(live), 500):
        await asyncio.gather(*(s.close() for s in live[start : start + 500]), return_exceptions=True)


async def one_round(args, world: World, server: SocketServer) -> dict:
    url = f"ws://{server.host}/ws"
    pid = server.proc.pid
    # Warm-up: the code paths and the pools exist before the baseline.
    warm = Storm(url, args.port, 16, args.open_timeout)
    socks, _ = await warm.run(_frames(world.identities[:32]))
    await close_all(socks, abort=False)
    await asyncio.sleep(1.0)
    base_kib = rss_kib(pid)
    if args.tracemalloc:
        await asyncio.to_thread(server.snapshot, "base")
    storm = Storm(url, args.port, args.concurrency, args.open_timeout)
    socks, wall = await storm.run(_frames(world.identities))
    opened = sum(1 for s in socks if s is not None)
    admission = storm.summary(opened, wall)
    await asyncio.sleep(2.0)
    open_kib = rss_kib(pid)
    if args.tracemalloc:
        await asyncio.to_thread(server.snapshot, "open")
    memory = {"rss_base_mib": round(base_kib / 1024, 1), "rss_open_mib": round(open_kib / 1024, 1),
              "kib_per_socket": round((open_kib - base_kib) / max(1, opened), 2)}  # fmt: skip
    push = await measure_push(args, world, socks) if world.senders and args.sends else {}
    # The reconnect storm: all dropped at once, then back C at a time; the K recipients get their
    # pushed (unacknowledged) events as backlog after AUTH_SUCCESS.
    await close_all(socks, abort=True)
    await asyncio.sleep(1.0)
    again = Storm(url, args.port, args.concurrency, args.open_timeout)
    frames = _frames(world.identities)
    t0 = time.perf_counter()
    socks2, _ = await again.run(frames)
    backlog_missing = 0
    if push:
        for sock in socks2[: len(world.senders)]:
            if sock is None:
                continue
            try:
                await _next_pending(sock, 30)
            except TimeoutError:
                backlog_missing += 1
    storm_s = time.perf_counter() - t0
    reconnect = again.summary(sum(1 for s in socks2 if s is not None), storm_s)
    reconnect["backlog_missing"] = backlog_missing
    await close_all(socks2, abort=False)
    return {"admission": admission, "memory": memory, "push": push, "reconnect": reconnect,
            "loadavg": os.getloadavg()}  # fmt: skip


def markdown(report: dict) -> list[str]:
    lines = [
        f"# Sockets at scale, {report['started']}",
        "",
        f"`{report['command']}`; load average at start {report['machine']['loadavg_at_start']}",
        "",
        "| round | tree | opened | admitted/s | handshake p50/p99 ms | AUTHENTICATE p50/p99 ms | refusals | "
        "KiB/socket | RSS MiB base → open | push p50/p99 ms | reconnect storm s (/s) | refusals |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in report["rounds"]:
        a, m, p, c = r["admission"], r["memory"], r["push"], r["reconnect"]
        lines.append(
            f"| {r['round']} | {r['tree']} | {a['opened']} | {a['sockets_per_s']} | {a['handshake_p50_ms']}/"
            f"{a['handshake_p99_ms']} | {a['auth_p50_ms']}/{a['auth_p99_ms']} | {a['refusals'] or '-'} | "
            f"{m['kib_per_socket']} | {m['rss_base_mib']} → {m['rss_open_mib']} | "
            f"{p.get('push_p50_ms', '-')}/{p.get('push_p99_ms', '-')} | {c['wall_s']} ({c['sockets_per_s']}) | "
            f"{c['refusals'] or '-'} |"
        )
    if len(report["trees"]) == 2:
        lines += ["", "Ratios (first tree / second tree, median over rounds):", ""]
        for key, label in (("admission.sockets_per_s", "admitted/s"), ("memory.kib_per_socket", "KiB/socket"),
                           ("reconnect.wall_s", "reconnect storm s"), ("admission.auth_p99_ms", "AUTHENTICATE p99")):  # fmt: skip
            lines.append(f"- {label}: {report['ratios'].get(key)}")
    for tree, text in report.get("traces", {}).items():
        lines += ["", f"## Heap growth with the sockets open ({tree}, tracemalloc)", "", "```", text, "```"]
    return lines


def ratios(rounds: list[dict], trees: list[str]) -> dict:
    out: dict = {}
    if len(trees) != 2:
        return out
    for key in ("admission.sockets_per_s", "memory.kib_per_socket", "reconnect.wall_s", "admission.auth_p99_ms"):
        part, field = key.split(".")
        per = []
        for n in {r["round"] for r in rounds}:
            vals = {r["tree"]: r[part][field] for r in rounds if r["round"] == n}
            if all(vals.get(t) for t in trees):
                per.append(vals[trees[0]] / vals[trees[1]])
        out[key] = (
            {"median": round(statistics.median(per), 2), "per_round": [round(v, 2) for v in per]} if per else None
        )
    return out


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sockets", type=int, default=2000)
    ap.add_argument("--concurrency", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--trees", nargs="+", default=[str(ROOT)], help="source trees to run the server from, alternately")
    ap.add_argument("--push-pairs", type=int, default=50)
    ap.add_argument("--sends", type=int, default=200)
    ap.add_argument("--open-timeout", type=float, default=60.0)
    ap.add_argument("--register-threads", type=int, default=4)
    ap.add_argument("--tracemalloc", action="store_true")
    ap.add_argument("--server-env", nargs="*", default=[], help="KEY=VALUE for the server only")
    ap.add_argument("--daphne-args", nargs="*", default=[], help="extra socket-server options")
    ap.add_argument("--db", default=os.environ.get("BENCH_DB", "mediator_bench_sockets"))
    ap.add_argument("--redis-url", default=os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/13"))
    ap.add_argument("--port", type=int, default=int(os.environ.get("BENCH_PORT", "8340")))
    args = ap.parse_args(argv)
    args.env = []
    limit = raise_nofile(args.sockets * 2 + 1000)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mediator_project.settings")
    trees = [str(Path(t).resolve()) for t in args.trees]
    report: dict = {
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "command": "python -m bench.socket_bench " + " ".join(argv if argv is not None else sys.argv[1:]),
        "machine": machine(),
        "nofile": limit,
        "trees": trees,
        "rounds": [],
        "traces": {},
    }
    prepare_database(args)
    t0 = time.perf_counter()
    first = SocketServer(args, Path(trees[0]), "setup")
    try:
        world = build_world(first.url, first.host, args.sockets, min(args.push_pairs, args.sockets),
                            args.register_threads)  # fmt: skip
    finally:
        first.stop()
    report["setup_s"] = round(time.perf_counter() - t0, 1)
    print(f"registered {len(world.identities)} identities in {report['setup_s']} s", file=sys.stderr)
    for n in range(args.rounds):
        order = trees if n % 2 == 0 else trees[::-1]
        for tree in order:
            tag = f"{n}-{trees.index(tree)}"
            server = SocketServer(args, Path(tree), tag)
            try:
                result = asyncio.run(one_round(args, world, server))
            finally:
                server.stop()
            result.update(round=n, tree=tree)
            report["rounds"].append(result)
            print(result, file=sys.stderr)
            if args.tracemalloc and server.trace_file and Path(f"{server.trace_file}.open").exists():
                report["traces"][tree] = Path(f"{server.trace_file}.open").read_text()
    report["ratios"] = ratios(report["rounds"], trees)
    write_results("sockets", report, markdown(report))
    return report


if __name__ == "__main__":
    main()
