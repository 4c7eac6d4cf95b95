"""Usage report benchmark: the metering export into the lake, then the Spark job on the warm engine
reading the lake, beside the same aggregates computed by PostgreSQL alone.

    .venv/bin/python -m bench.usage_report_bench                 # 1M and 5M rows, 3 runs each
    .venv/bin/python -m bench.usage_report_bench --rows 100000 --days 1 --tenants 1   # "fast enough to click"
    .venv/bin/python -m bench.usage_report_bench --rows 10000000 --runs 3 --sql groupby   # the 10M-row target
    .venv/bin/python -m bench.usage_report_bench --rows 2000000 --runs 0 --warm-ups 0 --compare /tmp/old-tree  # exports only
    .venv/bin/python -m bench.usage_report_bench --rows 100000 --days 1 --tenants 1 --compare /tmp/old-tree  # old vs new

- export: `python -m spark_reports.lake export` over all the rows (what the beat runs every few
  minutes, here with the whole table past the watermark): its seconds (JDBC id-range reads,
  Parquet write, the watermark's commit) and rows/s, on the fresh engine and again on the warm
  one (`export_warm`: the attempts and the lake reset, the same rows exported anew);

- warm: `python -m spark_reports.usage_report` as its own process for one run (the Celery worker
  keeps one such process for run after run instead: bench/usage_click_bench.py measures that), as a client of an engine (spark_reports/engine.py) that is already up and has run one
  report: client start, extract, transform, load (wall clock of the process);
- sql: one PostgreSQL session computing the daily figures, commands by type, errors by code and the
  top 10 per tenant and day (percentile_disc for p50/p95) over the same rows, results discarded;
  sql_groupby: the first of those alone, one GROUP BY (the target's "ratio ≤ 1x" compares with it;
  `--sql groupby` runs it alone). The SQL and the report run side by side, which goes first flipping
  every run; `ratio_vs_groupby_runs` is each run's report / GROUP BY.
  The report itself reads no metering row from PostgreSQL (its export ran first and found nothing new).
- stages: the job's own step timestamps (from its progress lines), when its result line came and
  when the process ended, and the phases its result line reports (session, export, bounds, tables,
  write, stop), per run;
- --runs 0: the exports only (no report, no SQL); --keep-data: the reports and SQL only, on the
  database and lake the last run of the same size left (no insert, no export).
- --compare TREE: the job of another tree (a `git archive` snapshot) on the same engine, alternating
  with this tree's, the order flipping every run; before them, --export-rounds (2) rounds of both
  trees' exports of all the rows, alternately (the lake reset before each).
- every export records the CPU seconds it cost (the engine's JVM, the database backends) and
  `rows_per_cpu_s`: on a machine shared with other work the wall clock measures the others too.

Data: BENCH_USAGE_DB (default mediator_bench_usage) is dropped and recreated, migrated, and filled
with generate_series: 3 tenants (--tenants), 7 days (--days), 500 sender DIDs, 12 command types,
~9% errors, the three protocols in turn. The lake is var/bench-usage/lake (emptied with the
database; BENCH_VAR_DIR moves both). The engine listens on BENCH_ENGINE_PORT (default 15099) and is stopped at the end.
Medians go to stdout and var/bench-results/usage_report-<rows>.json (var/ is ignored by git).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from datetime import date, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DB = os.environ.get("BENCH_USAGE_DB", "mediator_bench_usage")
PG = os.environ.get("BENCH_PG", "postgresql://postgres@127.0.0.1:5432")
DAYS = 7
TENANTS = 3
FIRST = date(2026, 1, 1)
LAST = FIRST + timedelta(days=DAYS - 1)
ENGINE_PORT = int(os.environ.get("BENCH_ENGINE_PORT", "15099"))
# The bench's own deployment (its engine's name, its lake); BENCH_VAR_DIR lets two benches run at once.
BENCH_VAR = Path(os.environ.get("BENCH_VAR_DIR") or ROOT / "var" / "bench-usage")
LAKE = BENCH_VAR / "lake"

SQL_EQUIVALENT = [
    """SELECT tenant_id, (at AT TIME ZONE 'UTC')::date d, count(*), sum(CASE WHEN code NOT IN ('SUCCESS', 'EVICTED') THEN 1 ELSE 0 END),
         sum(bytes_in), sum(bytes_out),
         percentile_disc(0.5) WITHIN GROUP (ORDER BY duration_ms), percentile_disc(0.95) WITHIN GROUP (ORDER BY duration_ms),
         count(DISTINCT sender_did) FILTER (WHERE code IN ('SUCCESS', 'EVICTED') AND sender_did <> '')
       FROM usage_commandmeter WHERE at >= %(lo)s AND at < %(hi)s GROUP BY 1, 2""",
    """SELECT tenant_id, (at AT TIME ZONE 'UTC')::date d, command_type, count(*), sum(CASE WHEN code NOT IN ('SUCCESS', 'EVICTED') THEN 1 ELSE 0 END)
       FROM usage_commandmeter WHERE at >= %(lo)s AND at < %(hi)s GROUP BY 1, 2, 3""",
    """SELECT tenant_id, (at AT TIME ZONE 'UTC')::date d, code, count(*) FROM usage_commandmeter
       WHERE at >= %(lo)s AND at < %(hi)s GROUP BY 1, 2, 3""",
    """SELECT * FROM (SELECT tenant_id, d, sender_did, n, row_number() OVER (PARTITION BY tenant_id, d ORDER BY n DESC, b DESC, sender_did) rk
         FROM (SELECT tenant_id, (at AT TIME ZONE 'UTC')::date d, sender_did, count(*) n, sum(bytes_in + bytes_out) b
               FROM usage_commandmeter WHERE at >= %(lo)s AND at < %(hi)s AND sender_did <> '' GROUP BY 1, 2, 3) v) r WHERE rk <= 10""",
]


def psql(sql: str, db: str = "postgres") -> None:
    subprocess.run(["psql", f"{PG}/{db}", "-v", "ON_ERROR_STOP=1", "-qc", sql], check=True, stdout=subprocess.DEVNULL)


def django_env() -> dict:
    env = dict(os.environ)
    env.update(
        {
            "DJANGO_SETTINGS_MODULE": "mediator_project.settings",
            "DATABASE_URL": f"{PG}/{DB}",
            "USAGE_METERING_MODE": "off",
            "PYTHONPATH": str(ROOT),
            "REPORT_DATABASE_URL": f"{PG}/{DB}",
            "SPARK_ENGINE_PORT": str(ENGINE_PORT),
            "MEDIATOR_VAR_DIR": str(BENCH_VAR),
            "USAGE_LAKE_URI": str(LAKE),
        }
    )
    return env


def prepare(rows: int) -> list[int]:
    """Fresh database with `rows` metering rows; returns the tenant ids."""
    shutil.rmtree(LAKE, ignore_errors=True)
    psql(f"DROP DATABASE IF EXISTS {DB}")
    psql(f"CREATE DATABASE {DB}")
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=django_env(), check=True)
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "import django; django.setup()\n"
            "from apps.tenants.services import tenant_create\n"
            f"print(','.join(str(tenant_create(slug=f'bench-{{i}}', domain=f'bench{{i}}.test').pk) for i in range({TENANTS})))",
        ],
        cwd=ROOT,
        env=django_env(),
        check=True,
        capture_output=True,
        text=True,
    )
    ids = [int(x) for x in out.stdout.strip().splitlines()[-1].split(",")]
    types = "ARRAY['QUERY_EVENTS','SAVE_EVENTS','ACKNOWLEDGE_EVENTS','QUERY_PENDING_EVENTS','TWO_WAY_PRIVATE','REQUEST_COMMUNICATION_CONTRACT','QUERY_COMMUNICATION_CONTRACTS','SAVE_COMMUNICATION_CONTRACT','UPDATE_EVENT_TAGS','COMMUNICATION_CONTRACT_RESPONSE','QUERY_PENDING_CONTRACT_REQUESTS','ACKNOWLEDGE_CONTRACT_REQUESTS']"
    t0 = time.perf_counter()
    psql(
        f"""INSERT INTO usage_commandmeter (tenant_id, at, transport, protocol, channel, command_type, code, http_status,
              bytes_in, bytes_out, duration_ms, sender_did)
            SELECT (ARRAY[{",".join(map(str, ids))}])[1 + (g % {TENANTS})],
                   TIMESTAMPTZ '{FIRST.isoformat()} 00:00:00+00' + (g::float / {rows} * {DAYS} * 86400) * INTERVAL '1 second',
                   CASE WHEN g % 5 = 0 THEN 'ws' ELSE 'http' END,
                   (ARRAY['decentrl','didcomm-v2','didcomm-v1'])[1 + (g / 7 % 3)],
                   (ARRAY['DIRECT_AUTHENTICATED','didcomm-v2','didcomm-v1'])[1 + (g / 7 % 3)],
                   ({types})[1 + (g * 7 % 12)],
                   CASE WHEN g % 17 = 0 THEN 'INVALID_SIGNATURE' WHEN g % 31 = 0 THEN 'RATE_LIMITED' ELSE 'SUCCESS' END,
                   200, 200 + (g * 13 % 4000), 60 + (g * 11 % 9000), (g * 37 % 20000) / 100.0,
                   'did:decentrl:user' || (g * 7919 % 500) || ':z6MkBenchSigningKey:z6LSBenchPreKey:did:web:bench'
            FROM generate_series(1::bigint, {rows}::bigint) g""",
        DB,
    )
    psql("VACUUM ANALYZE usage_commandmeter", DB)
    print(f"inserted {rows} metering rows in {time.perf_counter() - t0:.1f}s", flush=True)
    return ids


def new_run_id() -> int:
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "import django; django.setup()\n"
            "from apps.usage.models import ReportRun\n"
            f"print(ReportRun.objects.create(date_from='{FIRST}', date_to='{LAST}', status='running').pk)",
        ],
        cwd=ROOT,
        env=django_env(),
        check=True,
        capture_output=True,
        text=True,
    )
    return int(out.stdout.strip().splitlines()[-1])


def warm(run_id: int, tree: Path = ROOT) -> tuple[float, dict]:
    """Wall clock of one job process (of `tree`'s spark_reports) against the warm engine, when each
    of its steps began, its result line's phases, and when the result line came and the process ended."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "spark_reports.usage_report",
            "--run-id",
            str(run_id),
            "--from",
            FIRST.isoformat(),
            "--to",
            LAST.isoformat(),
        ],
        cwd=tree,
        env=django_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    steps: dict[str, float] = {}
    for line in proc.stdout:
        if line.startswith("USAGE_REPORT_PROGRESS "):
            step = json.loads(line.split(" ", 1)[1])["step"]
            steps.setdefault(step, round(time.perf_counter() - t0, 2))
        elif line.startswith("USAGE_REPORT_RESULT "):
            steps["result"] = round(time.perf_counter() - t0, 2)
            steps["phases"] = json.loads(line.split(" ", 1)[1]).get("phases")
    if proc.wait() != 0:
        raise SystemExit(f"the job failed (run {run_id})")
    steps["exited"] = round(time.perf_counter() - t0, 2)
    return time.perf_counter() - t0, steps


ENGINE_PID = 0  # the engine's JVM (main() starts it): its CPU time is the export's Spark side
TICK = os.sysconf("SC_CLK_TCK")


def _cpu_s(pid: int | str) -> float | None:
    """User + system CPU seconds of a live process, from /proc."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / TICK


def _pg_backends() -> dict[str, float]:
    """CPU seconds of every PostgreSQL backend connected to the bench database."""
    out = {}
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if cmdline.startswith(b"postgres: ") and f" {DB} ".encode() in cmdline:
                cpu = _cpu_s(pid)
                if cpu is not None:
                    out[pid] = cpu
    return out


def export(tree: Path = ROOT) -> dict:
    """The metering export over every row past the watermark, as its own process (what the beat
    runs, of `tree`), with the CPU seconds it cost: the engine's JVM and the database backends
    (sampled every 0.2 s; a machine shared with other work slows the wall clock, less the CPU)."""
    seen: dict[str, float] = {}
    before = _pg_backends()
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            for pid, cpu in _pg_backends().items():
                seen[pid] = max(seen.get(pid, 0.0), cpu)
            time.sleep(0.2)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    jvm0 = _cpu_s(ENGINE_PID) if ENGINE_PID else None
    t0 = time.perf_counter()
    try:
        out = subprocess.run(
            [sys.executable, "-m", "spark_reports.lake", "export"],
            cwd=tree,
            env=django_env(),
            capture_output=True,
            text=True,
            check=True,
        )
    finally:
        stop.set()
        sampler.join()
    wall = time.perf_counter() - t0
    jvm1 = _cpu_s(ENGINE_PID) if ENGINE_PID else None
    line = next(x for x in reversed(out.stdout.splitlines()) if x.startswith("LAKE_EXPORT "))
    result = json.loads(line.split(" ", 1)[1])
    result["wall_s"] = round(wall, 2)
    result["rows_per_s"] = round(result["rows"] / result["seconds"]) if result["seconds"] else None
    result["jvm_cpu_s"] = round(jvm1 - jvm0, 2) if jvm0 is not None and jvm1 is not None else None
    result["pg_cpu_s"] = round(sum(cpu - before.get(pid, 0.0) for pid, cpu in seen.items()), 2)
    if result["rows"] and result["jvm_cpu_s"] is not None:
        # What the box would export with both cores on it: rows per CPU second, times two.
        result["rows_per_cpu_s"] = round(result["rows"] / (result["jvm_cpu_s"] + result["pg_cpu_s"]))
    result["load"] = round(os.getloadavg()[0], 1)
    return result


def reset_lake() -> None:
    """No attempt recorded and an empty lake: the next export takes every row anew."""
    shutil.rmtree(LAKE, ignore_errors=True)
    psql("DELETE FROM usage_meterexport", DB)


def sql_groupby() -> float:
    """One PostgreSQL GROUP BY over the same rows: the daily figures (SQL_EQUIVALENT's first query)."""
    import psycopg

    with psycopg.connect(f"{PG}/{DB}") as conn:
        t0 = time.perf_counter()
        conn.execute(
            SQL_EQUIVALENT[0], {"lo": f"{FIRST} 00:00:00+00", "hi": f"{LAST + timedelta(days=1)} 00:00:00+00"}
        ).fetchall()
        return time.perf_counter() - t0


def sql_only() -> float:
    import psycopg

    with psycopg.connect(f"{PG}/{DB}") as conn:
        t0 = time.perf_counter()
        for q in SQL_EQUIVALENT:
            conn.execute(q, {"lo": f"{FIRST} 00:00:00+00", "hi": f"{LAST + timedelta(days=1)} 00:00:00+00"}).fetchall()
        return time.perf_counter() - t0


def bench(
    rows: int,
    runs: int,
    *,
    warm_ups: int = 1,
    compare: Path | None = None,
    export_rounds: int = 0,
    sql_all: bool = True,
    keep_data: bool = False,
) -> dict:
    result: dict = {
        "rows": rows, "days": DAYS, "tenants": TENANTS, "runs": runs, "warm_s": [], "sql_s": [], "sql_groupby_s": []
    }  # fmt: skip
    if not keep_data:
        prepare(rows)
        result["export"] = export()
    if warm_ups and not keep_data:
        # The engine's first Spark job paid the JVM's warm-up: the same rows exported anew on the warm
        # engine (no attempt recorded, an empty lake), as every later export runs. Later sizes find
        # the engine warm already.
        reset_lake()
        result["export_warm"] = export()
    print(f"  export {result.get('export')}  warm {result.get('export_warm')}", flush=True)
    if compare:
        # The other tree's export and this one's alternately on the same rows, the order flipping
        # every round; the last export (this tree's) leaves the lake the reports read.
        result.update(export_runs=[], compare_export_runs=[])
        for i in range(export_rounds):
            pair = [(compare, "compare_export_runs"), (ROOT, "export_runs")]
            for tree, key in pair if i % 2 == 0 else pair[::-1]:
                reset_lake()
                result[key].append(export(tree))
                print(f"  {key} {result[key][-1]}", flush=True)
        if export_rounds % 2 == 0:
            reset_lake()
            export()
        for key in ("export_runs", "compare_export_runs"):
            if result[key]:
                for field in ("rows_per_s", "rows_per_cpu_s", "seconds"):
                    values = [r[field] for r in result[key] if r.get(field) is not None]
                    if values:
                        result[f"{key}_median_{field}"] = statistics.median(values)
    if not runs:
        return result  # the exports alone
    if compare:
        result.update(compare_tree=str(compare), compare_s=[])
    new_run_id()  # Django's first connection, so that timings below hold only the work
    # One report to warm the engine (JIT, JDBC classes), as after the engine's first report of the day.
    for _ in range(warm_ups):
        warm(new_run_id())
        if compare:
            warm(new_run_id(), compare)
    trees = [(ROOT, "warm_s"), (compare, "compare_s")] if compare else [(ROOT, "warm_s")]
    for i in range(runs):
        # The SQL and the report(s) side by side, which goes first flipping every run; with --compare,
        # this tree's job and the other's in turn, their order flipping too.
        sides = ["sql", "report"] if i % 2 == 0 else ["report", "sql"]
        for side in sides:
            if side == "sql":
                if sql_all:
                    result["sql_s"].append(round(sql_only(), 2))
                result["sql_groupby_s"].append(round(sql_groupby(), 2))
                continue
            for tree, key in trees if i % 2 == 0 else trees[::-1]:
                seconds, steps = warm(new_run_id(), tree)
                result[key].append(round(seconds, 2))
                result.setdefault(key.replace("_s", "_stages"), []).append(steps)
                print(f"  {key} {result[key][-1]}s  {steps}", flush=True)
        result.setdefault("ratio_vs_groupby_runs", []).append(
            round(result["warm_s"][-1] / result["sql_groupby_s"][-1], 2)
        )
        print(f"  sql {result['sql_s'][-1:]}  sql_groupby {result['sql_groupby_s'][-1]}s", flush=True)
    for key in ("warm_s", "sql_s", "sql_groupby_s", "compare_s"):
        if result.get(key):
            result[key.replace("_s", "_median_s")] = round(statistics.median(result[key]), 2)
    if result["sql_s"]:
        result["ratio"] = round(result["warm_median_s"] / result["sql_median_s"], 2)
    result["ratio_vs_groupby"] = round(result["warm_median_s"] / result["sql_groupby_median_s"], 2)
    if compare:
        result["warm_vs_compare"] = round(result["warm_median_s"] / result["compare_median_s"], 2)
    return result


def main() -> None:
    global DAYS, TENANTS, LAST
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, action="append")
    parser.add_argument(
        "--runs", type=int, action="append", help="runs per size: once for all sizes, or once per --rows in order"
    )
    parser.add_argument(
        "--warm-ups", type=int, default=1, help="reports run before the first size (the JVM's JIT warms over several)"
    )
    parser.add_argument(
        "--export-rounds", type=int, default=2, help="with --compare: rounds of the two trees' exports, alternately"
    )
    parser.add_argument(
        "--sql",
        choices=["all", "groupby"],
        default="all",
        help="beside each report: the four SQL queries and the one GROUP BY (all), or the GROUP BY alone",
    )
    parser.add_argument(
        "--keep-data",
        action="store_true",
        help="the database and lake as the last run left them (same --rows, --days, --tenants): no insert, no export",
    )
    parser.add_argument("--days", type=int, default=DAYS)
    parser.add_argument("--tenants", type=int, default=TENANTS)
    parser.add_argument(
        "--compare",
        type=Path,
        help="another tree (e.g. a `git archive` of main) whose job runs alternately with this one",
    )
    args = parser.parse_args()
    DAYS, TENANTS = args.days, args.tenants
    LAST = FIRST + timedelta(days=DAYS - 1)
    os.chdir(ROOT)
    env = django_env()
    for name in ("SPARK_ENGINE_PORT", "MEDIATOR_VAR_DIR"):
        os.environ[name] = env[name]
    from spark_reports import engine

    global ENGINE_PID
    pid = ENGINE_PID = engine.start_background(var_dir=BENCH_VAR, host="127.0.0.1", port=ENGINE_PORT)
    try:
        run_all(args)
    finally:
        os.kill(pid, 15)


def run_all(args) -> None:
    out_dir = ROOT / "var" / "bench-results"
    out_dir.mkdir(parents=True, exist_ok=True)
    sizes = args.rows or [1_000_000, 5_000_000]
    runs = args.runs or [3]
    for i, rows in enumerate(sizes):
        print(f"== {rows} metering rows", flush=True)
        # The engine is warmed by one report before the first size; later sizes find it warm.
        res = bench(
            rows,
            runs[i] if len(runs) > 1 else runs[0],
            warm_ups=args.warm_ups if i == 0 else 0,
            compare=args.compare,
            export_rounds=args.export_rounds,
            sql_all=args.sql == "all",
            keep_data=args.keep_data,
        )
        res["load_average"] = os.getloadavg()
        res["cpus"] = os.cpu_count()
        (out_dir / f"usage_report-{rows}-{DAYS}d-{TENANTS}t.json").write_text(json.dumps(res, indent=2))
        print(json.dumps(res), flush=True)


if __name__ == "__main__":
    main()
