"""Where the CPU went during a benchmark run, from /proc (Linux).

The load generator shares the 2 cores with the server and, on a shared box, with other work.
Throughput alone then says little; CPU milliseconds per request do not depend on who else is
running. A sample sums utime+stime of:

- server: every process in the server's session (scripts/run_production.sh starts in its own
  session, whose id is the `server_pgid` given here; supervisord gives each program a process
  group of its own inside it: Granian master and workers, Daphne, nginx, Celery if started);
- postgres: backends whose command line names the bench database ("postgres: user db …");
- machine: all CPUs from /proc/stat (busy = everything but idle and iowait);
- the server's context switches (voluntary: a thread blocked or waited for a lock or the GIL;
  involuntary: preempted), summed over every thread of its processes (/proc/<pid>/task/*/status):
  how many thread hand-offs a request costs, which on a shared box is where CPU per request grows
  with the load.

The load generator's own client CPU is reported by its worker processes (os.times()).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

TICK = os.sysconf("SC_CLK_TCK")


def _stat(pid: str) -> tuple[int, float] | None:
    """(session, cpu seconds) of one pid, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read().decode("ascii", "replace")
    except OSError:
        return None
    rest = raw[raw.rindex(")") + 2 :].split()
    # fields after "comm": state(3) ppid(4) pgrp(5) session(6) … utime(14) stime(15) → rest index 0-based from state
    return int(rest[3]), (int(rest[11]) + int(rest[12])) / TICK


def _cmdline(pid: str) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode("utf-8", "replace")
    except OSError:
        return ""


def _machine_busy() -> tuple[float, float]:
    """(busy cpu seconds, total cpu seconds) over all cores since boot."""
    with open("/proc/stat") as fh:
        parts = fh.readline().split()[1:]
    vals = [int(x) for x in parts]
    idle = vals[3] + (vals[4] if len(vals) > 4 else 0)
    total = sum(vals[:8])
    return (total - idle) / TICK, total / TICK


def _switches(pid: str) -> tuple[int, int]:
    """(voluntary, involuntary) context switches of every thread of one process so far."""
    vol = invol = 0
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0, 0
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/status") as fh:
                for line in fh:
                    if line.startswith("voluntary_ctxt_switches"):
                        vol += int(line.split()[1])
                    elif line.startswith("nonvoluntary_ctxt_switches"):
                        invol += int(line.split()[1])
        except OSError:
            continue
    return vol, invol


def _kind(pid: str) -> str:
    cmd = _cmdline(pid)
    if "mediator_project.http_server" in cmd:  # Granian's master and workers (fork: same command line)
        return "granian"
    for kind in ("gunicorn", "granian", "daphne", "nginx", "celery"):
        if kind in cmd:
            return kind
    return "other"


@dataclass
class Sample:
    server: dict[str, float]
    kinds: dict[str, str]
    postgres: dict[str, float]
    machine_busy: float
    machine_total: float
    switches: dict[str, tuple[int, int]]


class CpuSampler:
    """Samples server, PostgreSQL and machine CPU; `report` turns two samples into per-request figures."""

    def __init__(self, *, server_pgid: int | None, database: str | None):
        self.server_pgid = server_pgid
        self.db_marker = f" {database} " if database else None

    def sample(self) -> Sample:
        server: dict[str, float] = {}
        kinds: dict[str, str] = {}
        postgres: dict[str, float] = {}
        switches: dict[str, tuple[int, int]] = {}
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            st = _stat(pid)
            if st is None:
                continue
            pgrp, cpu_s = st
            if self.server_pgid is not None and pgrp == self.server_pgid:
                server[pid] = cpu_s
                kinds[pid] = _kind(pid)
                switches[pid] = _switches(pid)
            elif self.db_marker:
                cmd = _cmdline(pid)
                if cmd.startswith("postgres: ") and self.db_marker in cmd:
                    postgres[pid] = cpu_s
        busy, total = _machine_busy()
        return Sample(server, kinds, postgres, busy, total, switches)

    @staticmethod
    def _delta(a: dict[str, float], b: dict[str, float]) -> float:
        # Processes that appeared during the run count from zero; ones that ended are lost.
        return sum(v - a.get(pid, 0.0) for pid, v in b.items())

    def report(self, before: Sample, after: Sample, elapsed: float, requests: int, *, client_cpu_s: float) -> dict:
        server = self._delta(before.server, after.server)
        pg = self._delta(before.postgres, after.postgres)
        busy = after.machine_busy - before.machine_busy
        total = after.machine_total - before.machine_total
        cores = os.cpu_count() or 1
        per = (lambda x: round(x * 1000 / requests, 3)) if requests else (lambda x: None)
        other = max(0.0, busy - server - pg - client_cpu_s)
        server_and_pg_ms = (server + pg) * 1000 / requests if requests else 0
        by_kind: dict[str, float] = {}
        for pid, v in after.server.items():
            k = after.kinds.get(pid, "other")
            by_kind[k] = by_kind.get(k, 0.0) + v - before.server.get(pid, 0.0)
        vol = sum(v[0] - before.switches.get(pid, (0, 0))[0] for pid, v in after.switches.items())
        invol = sum(v[1] - before.switches.get(pid, (0, 0))[1] for pid, v in after.switches.items())
        return {
            "server_cpu_ms_per_req_by_process": {k: per(v) for k, v in sorted(by_kind.items())},
            # Context switches per request of the server's threads (voluntary, involuntary).
            "server_switches_per_req": [round(vol / requests, 2), round(invol / requests, 2)] if requests else None,
            "server_cpu_ms_per_req": per(server),
            "postgres_cpu_ms_per_req": per(pg),
            "client_cpu_ms_per_req": per(client_cpu_s),
            "server_cpu_share": round(server / total, 3) if total else None,
            "postgres_cpu_share": round(pg / total, 3) if total else None,
            "client_cpu_share": round(client_cpu_s / total, 3) if total else None,
            "other_cpu_share": round(other / total, 3) if total else None,
            "machine_busy_share": round(busy / total, 3) if total else None,
            # What all cores would serve if server + PostgreSQL had the box to themselves.
            "capacity_rps_all_cores": round(cores * 1000 / server_and_pg_ms, 1) if server_and_pg_ms else None,
            "loadavg_1m": round(os.getloadavg()[0], 2),
        }
