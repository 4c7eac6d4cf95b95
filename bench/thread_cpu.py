"""Where the loaded Granian worker's CPU goes, thread by thread: TWO_WAY_PRIVATE at 16 clients.

    .venv/bin/python -m bench.thread_cpu                                   # 2 runs x 10 s
    .venv/bin/python -m bench.thread_cpu --env USAGE_METERING_FLUSH_MS=1000 --runs 3

Starts the production layout (scripts/run_production.sh, no Celery) on a fresh database, builds
bench/loadgen.py's world, warms up, then for each run reads every thread of the Granian worker
processes from /proc (CPU and voluntary context switches, before and after) and prints them per
command, named by `py-spy dump` when py-spy is installed (`pip install py-spy`; Granian's
application threads have no Python name, and its Rust runtime thread, which parses HTTP and hands
requests over, has no Python frame at all). In-process benchmarks (bench/hotpath_cpu.py) run one
thread: what only shows when eight application threads, the pusher and the metering writer share
one GIL shows here (docs/benchmark-history.md, "The metering writer chased its own tail").
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from types import SimpleNamespace

from bench import loadgen
from bench.run_standard import Layout, prepare_database

TICK = os.sysconf("SC_CLK_TCK")


def worker_pids(session: int) -> list[int]:
    """The Granian processes (master and workers) of the layout's session."""
    out = subprocess.run(
        ["pgrep", "-s", str(session), "-f", "mediator_project.http_server"], capture_output=True, text=True
    )
    return [int(p) for p in out.stdout.split()]


def threads(pids: list[int]) -> dict[tuple[int, int], tuple[float, int]]:
    """(pid, tid) -> (CPU seconds, voluntary switches)."""
    found = {}
    for pid in pids:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except FileNotFoundError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/stat") as fh:
                    fields = fh.read().rsplit(")", 1)[1].split()
                with open(f"/proc/{pid}/task/{tid}/status") as fh:
                    voluntary = int(fh.read().split("voluntary_ctxt_switches:")[1].split()[0])
            except FileNotFoundError:
                continue
            found[(pid, int(tid))] = ((int(fields[11]) + int(fields[12])) / TICK, voluntary)
    return found


def names(pids: list[int]) -> dict[int, str]:
    """tid -> Python thread name, from py-spy (empty without it)."""
    spy = shutil.which("py-spy") or os.path.join(os.path.dirname(sys.executable), "py-spy")
    if not os.path.exists(spy):
        return {}
    found = {}
    for pid in pids:
        out = subprocess.run([spy, "dump", "--pid", str(pid)], capture_output=True, text=True).stdout
        for line in out.splitlines():
            if line.startswith("Thread "):
                parts = line.split('"')
                found[int(line.split()[1])] = parts[1] if len(parts) > 1 else "(application)"
    return found


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--port", type=int, default=8400)
    ap.add_argument("--db", default="mediator_bench_threads")
    ap.add_argument("--redis-url", default="redis://127.0.0.1:6379/12")
    ap.add_argument("--env", nargs="*", default=[], help="KEY=VALUE added to the layout's environment")
    args = ap.parse_args(argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mediator_project.settings")
    layout_args = SimpleNamespace(db=args.db, redis_url=args.redis_url, port=args.port, env=args.env,
                                  no_celery=True, layout="production")  # fmt: skip
    prepare_database(layout_args)
    layout = Layout(layout_args)
    runs = []
    try:
        world = loadgen.build_world(layout.url, layout.host, 64)
        loadgen.drive(layout.url, layout.host, loadgen.gen_two_way(world, 3000), args.clients, 3)
        pids = worker_pids(layout.pgid)
        for run in range(1, args.runs + 1):
            bodies = loadgen.gen_two_way(world, int(4000 * args.seconds))
            time.sleep(2.0)
            before = threads(pids)
            res = loadgen.drive(layout.url, layout.host, bodies, args.clients, args.seconds)
            after = threads(pids)
            done = sum(res["codes"].values())
            rows = []
            for key, (cpu, vol) in after.items():
                cpu0, vol0 = before.get(key, (0.0, 0))
                if cpu > cpu0:
                    rows.append({"pid": key[0], "tid": key[1], "cpu_us_per_cmd": round((cpu - cpu0) / done * 1e6, 1),
                                 "voluntary_per_cmd": round((vol - vol0) / done, 2)})  # fmt: skip
            rows.sort(key=lambda r: -r["cpu_us_per_cmd"])
            runs.append({"run": run, "rps": res["throughput_rps"], "commands": done, "threads": rows})
        named = names(pids)
    finally:
        layout.stop()
    for r in runs:
        print(f"run {r['run']}: {r['rps']:.0f} req/s, {r['commands']} commands")
        for t in r["threads"]:
            name = named.get(t["tid"], "(no Python frame)")
            print(f"  {t['pid']}/{t['tid']:<8} {name:22s} {t['cpu_us_per_cmd']:7.1f} µs CPU per command, "
                  f"{t['voluntary_per_cmd']:.2f} voluntary switches per command")  # fmt: skip
    return runs


if __name__ == "__main__":
    main()
