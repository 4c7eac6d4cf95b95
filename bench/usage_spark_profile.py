"""Where a usage report's Spark time goes, cold and warm: its Spark jobs, stages and SQL executions
as the engine's own UI (REST API) records them, beside the client's clock.

    .venv/bin/python -m bench.usage_spark_profile                 # 100k rows, one tenant-day, 6 reports
    .venv/bin/python -m bench.usage_spark_profile --rows 1000000 --reports 4
    .venv/bin/python -m bench.usage_spark_profile --old /tmp/old  # and the old tree's report beside it
    .venv/bin/python -m bench.usage_spark_profile --java-opts=,-XX:TieredStopAtLevel=1 --rounds 4 --reports 4

Per round it starts its own Connect engine (engine.server_command, with the UI on at --ui-port and,
with --java-opts, the round's SPARK_ENGINE_JAVA_OPTS: the variants in turn, alternately), writes
--rows synthetic metering rows of one tenant-day (bench/usage_click_bench.py's shape) and an inputs
snapshot as a lake under var/bench-profile/ (once per size), then runs the report's Spark part
(usage_report.report_of, then load.collect_report) --reports times on one session: the first on
the cold engine, the others warm. With --old DIR (a `git archive` of an older tree), that tree's
report (its spark_reports package) runs beside each report, the order flipping every report, on
the same engine and data; both reports' rows must be equal. No database.
Per report: the client's seconds; the engine's jobs, stages run, tasks and executor run time; and
per SQL execution (one per Spark action) how long after the action was sent the engine started it
(analysis, optimisation, physical planning), its first job (code generation), and the jobs' own
seconds. Results: stdout and var/bench-results/usage_spark_profile-<rows>.json.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time
import urllib.request
from datetime import date, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VAR = ROOT / "var" / "bench-profile"
DAY = date(2026, 1, 1)


def _ts(text: str) -> float:
    return datetime.strptime(text.replace("GMT", "+0000"), "%Y-%m-%dT%H:%M:%S.%f%z").timestamp()


def old_package(folder: str):
    """The spark_reports package of an older tree, imported as `old_spark_reports`."""
    spec = importlib.util.spec_from_file_location(
        "old_spark_reports",
        f"{folder}/spark_reports/__init__.py",
        submodule_search_locations=[f"{folder}/spark_reports"],
    )
    assert spec and spec.loader
    package = importlib.util.module_from_spec(spec)
    sys.modules["old_spark_reports"] = package
    spec.loader.exec_module(package)
    return package


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--reports", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=1, help="engines started, one per round")
    parser.add_argument(
        "--java-opts", help="comma-separated SPARK_ENGINE_JAVA_OPTS variants, in turn (empty: the JVM's default JIT)"
    )
    parser.add_argument("--old", help="a folder holding an older tree's spark_reports/ to run beside")
    parser.add_argument("--port", type=int, default=15311)
    parser.add_argument("--ui-port", type=int, default=4311)
    args = parser.parse_args()
    os.environ["MEDIATOR_VAR_DIR"] = str(VAR)
    sys.path.insert(0, str(ROOT))
    variants = args.java_opts.split(",") if args.java_opts is not None else [""]
    rounds = []
    for n in range(args.rounds):
        opts = variants[n % len(variants)]
        started = time.time()
        proc = start_engine(args, opts)
        try:
            from spark_reports import engine

            while not engine.is_up("127.0.0.1", args.port):
                time.sleep(0.2)
            up = time.time() - started
            print(f"round {n + 1} java opts {opts!r}: engine up in {up:.2f} s", flush=True)
            os.environ["SPARK_REMOTE"] = f"sc://127.0.0.1:{args.port}"
            reports = profile(args, started)
        finally:
            os.killpg(proc.pid, 15)
            proc.wait()
        rounds.append({"java_opts": opts, "engine_up_s": round(up, 3), "reports": reports})
    summary = summarise(rounds)
    print(json.dumps(summary, indent=1), flush=True)
    out_dir = ROOT / "var" / "bench-results"
    out_dir.mkdir(parents=True, exist_ok=True)
    payload = {"rows": args.rows, "load": os.getloadavg()[0], "cpus": os.cpu_count(), "rounds": rounds}
    payload["summary"] = summary
    (out_dir / f"usage_spark_profile-{args.rows}.json").write_text(json.dumps(payload, indent=2))


def start_engine(args, opts: str) -> subprocess.Popen:
    from spark_reports import engine

    if args.java_opts is not None:
        os.environ["SPARK_ENGINE_JAVA_OPTS"] = opts
    cmd = [
        c.replace("spark.ui.enabled=false", "spark.ui.enabled=true")
        for c in engine.server_command("127.0.0.1", args.port)
    ]
    cmd[1:1] = ["--conf", f"spark.ui.port={args.ui_port}"]
    VAR.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(
        cmd, env=engine._env(), stdout=(VAR / "engine.log").open("w"), stderr=subprocess.STDOUT, start_new_session=True
    )


def summarise(rounds: list[dict]) -> dict:
    """Per Java option variant and tree: the engine's start, the cold report (a round's first), and
    the median of the warm ones (the reports after the first; the first report of the tree that
    ran second is neither)."""
    out: dict = {}
    for r in rounds:
        v = out.setdefault(r["java_opts"] or "(the JVM's default JIT)", {"engine_up_s": [], "cold_s": [], "trees": {}})
        v["engine_up_s"].append(r["engine_up_s"])
        v["cold_s"].append(r["reports"][0]["seconds"])
        for rep in r["reports"]:
            if rep["report"] > 1:
                v["trees"].setdefault(rep["tree"], {"warm_s": []})["warm_s"].append(rep["seconds"])
    for v in out.values():
        for t in v["trees"].values():
            t["warm_median_s"] = round(statistics.median(t["warm_s"]), 3)
    return out


def write_lake(spark, rows: int, meters: Path, inputs_dir: Path) -> None:
    from pyspark.sql import functions as F

    from spark_reports import lake_layout

    g = F.col("g")
    frame = (
        spark.range(1, rows + 1)
        .withColumnRenamed("id", "g")
        .select(
            g.alias("id"),
            F.expr(f"timestamp'{DAY} 00:00:00' + make_interval(0,0,0,0,0,0, g / {rows} * 86399)").alias("at"),
            F.lit("http").alias("transport"),
            F.lit("decentrl").alias("protocol"),
            F.lit("DIRECT_AUTHENTICATED").alias("channel"),
            F.expr(
                "element_at(array('QUERY_EVENTS','SAVE_EVENTS','TWO_WAY_PRIVATE','ACKNOWLEDGE_EVENTS'), cast(1 + g % 4 as int))"
            ).alias("command_type"),
            F.expr("CASE WHEN g % 17 = 0 THEN 'INVALID_SIGNATURE' ELSE 'SUCCESS' END").alias("code"),
            F.lit(200).cast("long").alias("http_status"),
            (F.lit(200) + g % 4000).alias("bytes_in"),
            (F.lit(60) + g % 9000).alias("bytes_out"),
            (g * 37 % 20000 / 100.0).alias("duration_ms"),
            F.concat(F.lit("did:decentrl:user"), (g % 500).cast("string")).alias("sender_did"),
            F.lit(DAY).alias("day"),
            F.lit(1).cast("long").alias("tenant_id"),
            F.lit(1).cast("long").alias("export"),
        )
    )
    frame.repartition(2).write.mode("overwrite").partitionBy(*lake_layout.PARTITIONS).parquet(str(meters))
    snapshot = [(1, 3, 10, 5, 500, None, None, None, DAY, 1), (1, None, None, None, None, 2000, 4, 8.0, DAY, 1)]
    spark.createDataFrame(snapshot, lake_layout.INPUTS_SCHEMA).coalesce(1).write.mode("overwrite").partitionBy(
        "day", "tenant_id", "export"
    ).parquet(str(inputs_dir))


def profile(args, t0: float) -> list[dict]:
    from pyspark.sql import functions as F

    from spark_reports import lake_layout, load, usage_report
    from spark_reports.config import build_session

    def rest(path: str):
        base = f"http://127.0.0.1:{args.ui_port}/api/v1/applications"
        app = json.load(urllib.request.urlopen(base))[0]["id"]
        return json.load(urllib.request.urlopen(f"{base}/{app}/{path}"))

    spark = build_session()
    print(f"session after {time.time() - t0:.2f} s", flush=True)
    meters, inputs_dir = VAR / f"meters-{args.rows}", VAR / "inputs"
    if not meters.exists():
        write_lake(spark, args.rows, meters, inputs_dir)
    spark.conf.set("spark.sql.shuffle.partitions", str(usage_report.shuffle_partitions(args.rows)))

    def frames():
        rows = (
            spark.read.schema(lake_layout.LAKE_SCHEMA)
            .option("basePath", str(meters))
            .parquet(f"{meters}/day={{{DAY}}}")
            .where((F.col("day") >= F.lit(DAY)) & (F.col("day") <= F.lit(DAY)) & (F.col("export") <= 1))
        )
        inputs = (
            spark.read.schema(lake_layout.INPUTS_SCHEMA)
            .option("basePath", str(inputs_dir))
            .parquet(f"{inputs_dir}/day={{{DAY}}}")
            .where(F.col("export") == 1)
        )
        return rows, inputs

    def new_report() -> tuple[list[float], dict]:
        rows, inputs = frames()
        sent = [time.time()]
        out = load.collect_report(usage_report.report_of(rows, inputs, DAY, DAY))
        return [*sent, time.time()], out

    trees = {"new": new_report}
    if args.old:
        old_package(args.old)
        old_ur, old_load, old_transform = (
            importlib.import_module(f"old_spark_reports.{name}") for name in ("usage_report", "load", "transform")
        )

        def old_report() -> tuple[list[float], dict]:
            rows, inputs = frames()
            sent = [time.time()]
            counts, latency = old_ur.settle(rows, usage_report.shuffle_partitions(args.rows))
            sent.append(time.time())
            out = old_load.collect_report(old_transform.report_from(counts, latency, inputs, DAY, DAY))
            return [*sent, time.time()], out

        trees["old"] = old_report
    results = []
    for i in range(args.reports):
        order = list(trees) if i % 2 == 0 else list(reversed(trees))
        outs = {}
        for tree in order:
            res, outs[tree] = one_report(rest, trees[tree])
            res.update(report=i + 1, tree=tree, load=round(os.getloadavg()[0], 2))
            print(json.dumps(res), flush=True)
            results.append(res)
        canon = [{k: sorted(v) for k, v in out.items()} for out in outs.values()]
        assert all(c == canon[0] for c in canon), "the trees' reports differ"
    spark.stop()  # the next round's engine gets a session of its own
    return results


def one_report(rest, report) -> tuple[dict, dict]:
    """One report's client seconds and the engine's record of its actions."""
    jobs_before = {j["jobId"] for j in rest("jobs")}
    sql_before = {x["id"] for x in rest("sql?details=false")}
    sent, out = report()
    time.sleep(0.5)  # the listener's last events
    jobs = [j for j in rest("jobs") if j["jobId"] not in jobs_before]
    ids = {s for j in jobs for s in j["stageIds"]}
    ran = [s for s in rest("stages") if s["stageId"] in ids and s["status"] == "COMPLETE"]
    executions = sorted((x for x in rest("sql?details=false") if x["id"] not in sql_before), key=lambda x: x["id"])
    by_job = {j["jobId"]: j for j in jobs}
    actions = []
    for n, x in enumerate(executions):
        mine = [by_job[j] for j in x.get("successJobIds", []) if j in by_job]
        first = min((_ts(j["submissionTime"]) for j in mine), default=None)
        start = sent[min(n, len(sent) - 2)]
        actions.append(
            {
                "sent_to_sql_start_s": round(_ts(x["submissionTime"]) - start, 3),
                "sql_start_to_job_s": round(first - _ts(x["submissionTime"]), 3) if first else None,
                "jobs_s": round(sum(_ts(j["completionTime"]) - _ts(j["submissionTime"]) for j in mine), 3),
            }
        )
    return {
        "seconds": round(sent[-1] - sent[0], 3),
        "jobs": len(jobs),
        "stages_run": len(ran),
        "tasks": sum(s["numTasks"] for s in ran),
        "executor_run_s": round(sum(s["executorRunTime"] for s in ran) / 1000, 3),
        "actions": actions,
        "rows": {k: len(v) for k, v in out.items()},
    }, out


if __name__ == "__main__":
    main()
