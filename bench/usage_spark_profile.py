"""Where a warm usage report's Spark time goes: its Spark jobs, stages and SQL executions as the
engine's own UI (REST API) records them, beside the client's clock.

    .venv/bin/python -m bench.usage_spark_profile                 # 100k rows, one tenant-day, 6 reports
    .venv/bin/python -m bench.usage_spark_profile --rows 1000000 --reports 4

It starts its own Connect engine (engine.server_command, with the UI on at --ui-port), writes
--rows synthetic metering rows of one tenant-day (bench/usage_click_bench.py's shape) and an inputs
snapshot as a lake under var/bench-profile/ (once per size), then runs the report's Spark part
(usage_report.settle, then load.collect_report) --reports times on one session. No database.
Per report: the client's seconds of each action; the engine's jobs, stages run, tasks and executor
run time; and per SQL execution (one per action) how long after the action was sent the engine
started it (analysis, optimisation, physical planning) and its first job (code generation), and
the job's own seconds. Results: stdout and var/bench-results/usage_spark_profile-<rows>.json.
"""

from __future__ import annotations

import argparse
import json
import os
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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--reports", type=int, default=6)
    parser.add_argument("--port", type=int, default=15311)
    parser.add_argument("--ui-port", type=int, default=4311)
    args = parser.parse_args()
    os.environ["MEDIATOR_VAR_DIR"] = str(VAR)
    sys.path.insert(0, str(ROOT))
    from spark_reports import engine

    cmd = [
        c.replace("spark.ui.enabled=false", "spark.ui.enabled=true")
        for c in engine.server_command("127.0.0.1", args.port)
    ]
    cmd[1:1] = ["--conf", f"spark.ui.port={args.ui_port}"]
    VAR.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    proc = subprocess.Popen(
        cmd, env=engine._env(), stdout=(VAR / "engine.log").open("w"), stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        while not engine.is_up("127.0.0.1", args.port):
            time.sleep(0.2)
        print(f"engine up in {time.time() - t0:.2f} s", flush=True)
        os.environ["SPARK_REMOTE"] = f"sc://127.0.0.1:{args.port}"
        profile(args, t0)
    finally:
        os.killpg(proc.pid, 15)


def profile(args, t0: float) -> None:
    from pyspark.sql import functions as F

    from spark_reports import lake_layout, load, transform, usage_report
    from spark_reports.config import build_session

    def rest(path: str):
        base = f"http://127.0.0.1:{args.ui_port}/api/v1/applications"
        app = json.load(urllib.request.urlopen(base))[0]["id"]
        return json.load(urllib.request.urlopen(f"{base}/{app}/{path}"))

    spark = build_session()
    print(f"session after {time.time() - t0:.2f} s", flush=True)
    meters, inputs_dir = VAR / f"meters-{args.rows}", VAR / "inputs"
    if not meters.exists():
        g = F.col("g")
        frame = (
            spark.range(1, args.rows + 1)
            .withColumnRenamed("id", "g")
            .select(
                g.alias("id"),
                F.expr(f"timestamp'{DAY} 00:00:00' + make_interval(0,0,0,0,0,0, g / {args.rows} * 86399)").alias("at"),
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
    partitions = usage_report.shuffle_partitions(args.rows)
    spark.conf.set("spark.sql.shuffle.partitions", str(partitions))
    results = []
    for i in range(args.reports):
        jobs_before = {j["jobId"] for j in rest("jobs")}
        sql_before = {x["id"] for x in rest("sql?details=false")}
        sent = [time.time()]
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
        counts, latency = usage_report.settle(rows, partitions)
        sent.append(time.time())
        out = load.collect_report(transform.report_from(counts, latency, inputs, DAY, DAY))
        sent.append(time.time())
        time.sleep(0.5)  # the listener's last events
        jobs = [j for j in rest("jobs") if j["jobId"] not in jobs_before]
        ids = {s for j in jobs for s in j["stageIds"]}
        ran = [s for s in rest("stages") if s["stageId"] in ids and s["status"] == "COMPLETE"]
        executions = sorted((x for x in rest("sql?details=false") if x["id"] not in sql_before), key=lambda x: x["id"])
        by_job = {j["jobId"]: j for j in jobs}
        actions = []
        for action, x in zip(("settle", "collect"), executions, strict=False):
            first = min(
                (_ts(by_job[j]["submissionTime"]) for j in x.get("successJobIds", []) if j in by_job), default=None
            )
            job_s = sum(
                _ts(by_job[j]["completionTime"]) - _ts(by_job[j]["submissionTime"])
                for j in x.get("successJobIds", [])
                if j in by_job
            )
            start = sent[0] if action == "settle" else sent[1]
            actions.append(
                {
                    "action": action,
                    "client_s": round((sent[1] - sent[0]) if action == "settle" else (sent[2] - sent[1]), 3),
                    "sent_to_sql_start_s": round(_ts(x["submissionTime"]) - start, 3),
                    "sql_start_to_job_s": round(first - _ts(x["submissionTime"]), 3) if first else None,
                    "jobs_s": round(job_s, 3),
                }
            )
        res = {
            "report": i + 1,
            "seconds": round(sent[2] - sent[0], 3),
            "jobs": len(jobs),
            "stages_run": len(ran),
            "tasks": sum(s["numTasks"] for s in ran),
            "executor_run_s": round(sum(s["executorRunTime"] for s in ran) / 1000, 3),
            "actions": actions,
            "rows": {k: len(v) for k, v in out.items()},
        }
        print(json.dumps(res), flush=True)
        results.append(res)
    out_dir = ROOT / "var" / "bench-results"
    out_dir.mkdir(parents=True, exist_ok=True)
    payload = {"rows": args.rows, "load": os.getloadavg()[0], "cpus": os.cpu_count(), "reports": results}
    (out_dir / f"usage_spark_profile-{args.rows}.json").write_text(json.dumps(payload, indent=2))


if __name__ == "__main__":
    main()
