"""The DIDComm forward's store alone, two databases alternately (issue 15 §7): pgbench at 16 clients.

Each round runs `bench/forward_store.pgbench.sql` (one prepared `didcomm_forward_store` call per
transaction, a random recipient of ids 1-64 in tenant 1, a fresh 2,464-byte incompressible text)
for 10 s against each database, the order flipping every round, and prints tps, pgbench's average
latency and the CPU of that database's backends per call (utime + stime from /proc, sampled from
1 s to 9 s into the run), with the load average. The databases are copies of a forwards-bench
database (`CREATE DATABASE x TEMPLATE mediator_bench_…`), one of them changed by hand:

    .venv/bin/python -m bench.forward_store_ab --rounds 6 fw2_e0 fw2_e1
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import time
from pathlib import Path

SCRIPT = Path(__file__).with_name("forward_store.pgbench.sql")
TICK = os.sysconf("SC_CLK_TCK")


def backends_cpu(db: str) -> float:
    total = 0.0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            if not (cmd.startswith("postgres:") and f" {db} " in cmd):
                continue
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / TICK
        except OSError:
            pass
    return total


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("databases", nargs=2)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--host", default="/var/run/postgresql")
    args = ap.parse_args(argv)
    for rnd in range(1, args.rounds + 1):
        for db in args.databases if rnd % 2 else reversed(args.databases):
            load = os.getloadavg()[0]
            cmd = ["pgbench", "-h", args.host, "-U", "postgres", "-n", "-M", "prepared", "-c", "16", "-j", "2",
                   "-T", "10", "-f", str(SCRIPT), db]  # fmt: skip
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            time.sleep(1.0)
            c0, t0 = backends_cpu(db), time.time()
            time.sleep(8.0)
            c1, t1 = backends_cpu(db), time.time()
            out = proc.communicate()[0]
            tps = float(re.search(r"tps = ([\d.]+)", out).group(1))
            latency = float(re.search(r"latency average = ([\d.]+)", out).group(1))
            print(f"{rnd} {db} load {load:.1f} tps {tps:.0f} latency_ms {latency:.2f} "
                  f"pg_cpu_us_per_call {1e6 * (c1 - c0) / (tps * (t1 - t0)):.0f}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
