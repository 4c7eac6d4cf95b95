"""What a database's backends wait on, sampled: run beside a benchmark (issue 15 §7, the forward's store).

Every `--interval-ms` (default 10) one query of `pg_stat_activity` for the active backends of
`--db`: each sample is counted under (statement kind, wait event), the kind taken from the start of
the statement (`--kind NAME=SUBSTRING`, first match wins; the DIDComm forward's store and the
statements of TWO_WAY_PRIVATE by default). Every second a snapshot of `pg_stat_user_tables` for the
tables of `--table`, `pg_stat_database` for the database and `pg_stat_wal` (cluster-wide). Counts
go out per second (JSON lines, `--out`), so a benchmark's rows (with their start and end times) can
be matched to them afterwards: `--window FROM:TO` sums a saved file over a time window, and
`--results` over the runs of each kind of a benchmark's results JSON (rows with `t0`/`t1`, as
`bench.didcomm_bench` writes them).

    .venv/bin/python -m bench.pg_waits --db mediator_bench_x --out /tmp/waits.jsonl &
    .venv/bin/python -m bench.pg_waits --summary-file /tmp/waits.jsonl --window 1763900000:1763900010
    .venv/bin/python -m bench.pg_waits --summary-file /tmp/waits.jsonl --results bench/results/didcomm-forwards-….json

Sampling costs one backend a few % of a core at 10 ms; the samples are of wall time, not CPU.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import time

import psycopg

from bench.pg import db_url

KINDS = [
    ("forward_store", "didcomm_forward_store"),
    ("commit", "COMMIT"),
    ("begin", "BEGIN"),
    ("other", ""),
]
TABLES = ["didcomm_queuedepth", "didcomm_queuedmessage", "didcomm_recipientkey"]

ACTIVITY = """
SELECT coalesce(wait_event_type, 'CPU'), coalesce(wait_event, 'running'), left(query, 200)
  FROM pg_stat_activity
 WHERE datname = %s AND state = 'active' AND pid <> pg_backend_pid() AND backend_type = 'client backend'
"""
TABLE_STATS = """
SELECT relname, n_live_tup, n_dead_tup, n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del,
       autovacuum_count, autoanalyze_count, pg_relation_size(relid), pg_indexes_size(relid)
  FROM pg_stat_user_tables WHERE relname = ANY(%s)
"""
DB_STATS = "SELECT xact_commit, blks_read, blks_hit, deadlocks FROM pg_stat_database WHERE datname = %s"
WAL_STATS = "SELECT wal_records, wal_fpi, wal_bytes::bigint, wal_write, wal_sync FROM pg_stat_wal"


def kind_of(query: str, kinds: list[tuple[str, str]]) -> str:
    q = query.lstrip()
    for name, sub in kinds:
        if sub in q[:120]:
            return name
    return "other"


def sample(args) -> None:
    kinds = [tuple(k.split("=", 1)) for k in args.kind] + KINDS
    out = open(args.out, "a", buffering=1)  # noqa: SIM115 - held for the whole run
    conn = psycopg.connect(db_url("postgres"), autocommit=True)
    conn.execute("SET application_name = 'bench.pg_waits'")
    stats_conn = None
    deadline = time.time() + args.seconds if args.seconds else float("inf")
    second = int(time.time())
    counts: collections.Counter = collections.Counter()
    n = 0
    try:
        while time.time() < deadline:
            t = time.time()
            if int(t) != second:
                rec = {"t": second, "samples": n, "waits": {f"{k}|{w}": c for (k, w), c in counts.items()}}
                try:
                    if stats_conn is None:
                        stats_conn = psycopg.connect(db_url(args.db), autocommit=True)
                    rec["tables"] = {r[0]: r[1:] for r in stats_conn.execute(TABLE_STATS, [args.table]).fetchall()}
                    rec["db"] = stats_conn.execute(DB_STATS, [args.db]).fetchone()
                    rec["wal"] = [
                        int(x) if isinstance(x, int) else float(x) for x in conn.execute(WAL_STATS).fetchone()
                    ]
                except psycopg.Error:
                    stats_conn = None  # the database is being (re)created
                out.write(json.dumps(rec) + "\n")
                second, counts, n = int(t), collections.Counter(), 0
            for et, ev, q in conn.execute(ACTIVITY, [args.db]).fetchall():
                counts[(kind_of(q, kinds), f"{et}:{ev}")] += 1
            n += 1
            time.sleep(max(0.0, args.interval_ms / 1000 - (time.time() - t)))
    except KeyboardInterrupt:
        pass
    finally:
        out.close()


def summary(path: str, windows: list[str]) -> None:
    recs = [json.loads(line) for line in open(path)]
    for w in windows:
        a, b = (float(x) for x in w.split(":"))
        sel = [r for r in recs if a <= r["t"] < b]
        if not sel:
            continue
        counts: collections.Counter = collections.Counter()
        for r in sel:
            counts.update(r["waits"])
        samples = sum(r["samples"] for r in sel)
        by_kind: dict[str, list] = collections.defaultdict(list)
        for key, c in counts.items():
            k, wait = key.split("|", 1)
            by_kind[k].append((wait, c))
        print(f"window {w}: {len(sel)} s, {samples} samples")
        for k, waits in sorted(by_kind.items()):
            total = sum(c for _, c in waits)
            print(f"  {k}: {total / samples:.2f} active backends on average")
            for wait, c in sorted(waits, key=lambda x: -x[1])[:8]:
                print(f"     {wait:40s} {c / samples:6.2f}  {100 * c / total:5.1f}%")
        first, last = sel[0], sel[-1]
        for table in TABLES:
            if table in first.get("tables", {}) and table in last.get("tables", {}):
                f, la = first["tables"][table], last["tables"][table]
                print(f"  {table}: live {la[0]} dead {la[1]} ins +{la[2] - f[2]} upd +{la[3] - f[3]} "
                      f"hot +{la[4] - f[4]} del +{la[5] - f[5]} autovacuum +{la[6] - f[6]} heap {la[8] // 8192} "
                      f"pages, indexes {la[9] // 8192} pages")  # fmt: skip
        if first.get("wal") and last.get("wal") and first.get("db") and last.get("db"):
            commits = last["db"][0] - first["db"][0]
            wal = [x - y for x, y in zip(last["wal"], first["wal"], strict=True)]
            print(f"  commits +{commits}, blocks read +{last['db'][1] - first['db'][1]}; cluster WAL: records "
                  f"+{wal[0]}, full-page images +{wal[1]}, {wal[2] / 1e6:.1f} MB, writes +{wal[3]}, syncs +{wal[4]}")  # fmt: skip


def by_run_kind(path: str, results: str) -> None:
    """Sum the samples over the runs of each kind of a benchmark's results JSON (rows with t0/t1, as
    bench.didcomm_bench writes them): active backends, PostgreSQL wall ms per request, wait shares."""
    recs = [json.loads(line) for line in open(path)]
    runs = json.load(open(results))["runs"]
    for kind in dict.fromkeys(r["kind"] for r in runs):
        counts: collections.Counter = collections.Counter()
        samples = seconds = 0
        requests = 0.0
        for r in (r for r in runs if r["kind"] == kind):
            sel = [x for x in recs if int(r["t0"]) + 1 <= x["t"] < int(r["t1"])]
            samples += sum(x["samples"] for x in sel)
            seconds += len(sel)
            requests += r["throughput_rps"] * len(sel)
            for x in sel:
                counts.update(x["waits"])
        print(f"{kind}: {seconds} s, {samples} samples")
        stmts: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        for key, c in counts.items():
            k, wait = key.split("|", 1)
            stmts[k][wait] += c
        for k, waits in sorted(stmts.items()):
            total = sum(waits.values())
            active = total / max(samples, 1)
            print(
                f"  {k}: {active:.2f} active backends, {1000 * active * seconds / max(requests, 1):.1f} ms per request"
            )
            for wait, c in waits.most_common(8):
                print(f"     {wait:40s} {100 * c / total:5.1f}%")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--db")
    ap.add_argument("--out", default="/tmp/pg_waits.jsonl")
    ap.add_argument("--interval-ms", type=float, default=10)
    ap.add_argument("--seconds", type=float, default=0, help="stop after this long (0: until interrupted)")
    ap.add_argument("--kind", action="append", default=[], help="NAME=SUBSTRING of the statement, tried first")
    ap.add_argument("--table", action="append", default=list(TABLES))
    ap.add_argument("--summary-file")
    ap.add_argument("--window", action="append", default=[], help="FROM:TO (unix seconds) to sum")
    ap.add_argument("--results", help="a results JSON with t0/t1 per run: sum per kind of run")
    args = ap.parse_args(argv)
    if args.summary_file and args.results:
        by_run_kind(args.summary_file, args.results)
    elif args.summary_file:
        summary(args.summary_file, args.window)
    elif args.db:
        sample(args)
    else:
        ap.error("--db or --summary-file")


if __name__ == "__main__":
    sys.exit(main())
