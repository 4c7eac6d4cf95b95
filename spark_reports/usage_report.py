"""The usage report job: the export, then the lake -> transform -> load for one ReportRun.

    python -m spark_reports.usage_report --run-id 7 --from 2026-11-01 --to 2026-11-21 [--tenant 3 ...]
    python -m spark_reports.usage_report --serve     # one run per request line on stdin, one session for all

The database comes from REPORT_DATABASE_URL, the Spark engine from SPARK_REMOTE / SPARK_MASTER /
the local engine (see config.py). `--serve` is how the launcher (apps/usage/services.py) runs it: the
process stays up beside its Celery worker and keeps its Spark session for the next run, so a
report pays neither a Python start nor a new session; it reads requests
`{"run_id": 7, "from": "2026-11-01", "to": "2026-11-21", "tenants": [3]}`, one per line, runs them one
at a time, pings its session every PING_S seconds while idle (the engine drops idle sessions) and
exits at the end of its input. Lines on stdout the launcher reads:

    USAGE_REPORT_PROGRESS {"step": ..., "at": epoch s, "step_no": n, "steps": N, "tasks_done": ..., ...}
    USAGE_REPORT_ENGINE_DOWN <address>      the Spark engine did not answer (exit 3)
    USAGE_REPORT_STALE_SESSION <address>    serving: the kept session no longer answers, nothing was
                                            done for the request (exit 3; the launcher retries anew)
    USAGE_REPORT_RESULT {"daily": n, ...}   a run's last line on success (then the next request)
    USAGE_REPORT_WARM {"seconds": s}        after a request {"warm_up": folder}: `warm_up` done
    USAGE_REPORT_CANCELLED {"interrupted": n}  on SIGTERM: n Spark operations of the run interrupted (exit 143)

SIGTERM (the launcher's Cancel) interrupts the job's Spark operations on the engine, then exits 143.
A run that fails ends the process (exit 1, its traceback printed): the next run gets a new session.
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import os
import select
import signal
import sys
import threading
import time
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

from pyspark.sql import DataFrame

from . import lake_export, lake_layout, lake_log, lake_read
from .config import Database, build_session, database_from_env, env_int, session_target
from .load import collect_report, load
from .transform import UsageReport, meter_partials, report_from

RESULT_MARKER = "USAGE_REPORT_RESULT"
PROGRESS_MARKER = "USAGE_REPORT_PROGRESS"
ENGINE_DOWN_MARKER = "USAGE_REPORT_ENGINE_DOWN"
CANCELLED_MARKER = "USAGE_REPORT_CANCELLED"
STALE_MARKER = "USAGE_REPORT_STALE_SESSION"
WARM_MARKER = "USAGE_REPORT_WARM"
EXIT_ENGINE_DOWN = 3
EXIT_CANCELLED = 143
# The job's steps, in order; a run on a kept session starts at "exporting".
STEPS = ["connecting", "exporting", "counting rows", "computing the report", "writing the report"]
PING_S = 60.0  # serving: touch the kept session this often while idle (the engine ends it after 5 idle minutes)
log = logging.getLogger("spark_reports.usage_report")


class Progress:
    """Prints progress lines: the job's step, and (over Spark Connect) the tasks of its Spark
    operations as the engine streams them. Throttled to one line per PERIOD seconds."""

    PERIOD = 0.5

    def __init__(self, out=None) -> None:
        self.out = out or sys.stdout
        self.state: dict = {"step": STEPS[0], "step_no": 1, "steps": len(STEPS), "tasks_done": 0, "tasks_total": 0}
        self._ops: dict[str, tuple[int, int, int]] = {}
        self._last = 0.0
        self._lock = threading.Lock()

    def step(self, name: str, **extra) -> None:
        with self._lock:
            self.state.update(step=name, at=round(time.time(), 3), step_no=STEPS.index(name) + 1, **extra)
            self._ops.clear()
            self.state.update(tasks_done=0, tasks_total=0)
            self._emit(force=True)

    def __call__(self, stages, inflight_tasks, operation_id, done) -> None:  # a Connect ProgressHandler
        stages = list(stages or [])
        with self._lock:
            self._ops[operation_id or ""] = (
                sum(s.num_completed_tasks for s in stages),
                sum(s.num_tasks for s in stages),
                sum(s.num_bytes_read for s in stages),
            )
            self.state["tasks_done"] = sum(v[0] for v in self._ops.values())
            self.state["tasks_total"] = sum(v[1] for v in self._ops.values())
            self.state["bytes_read"] = sum(v[2] for v in self._ops.values())
            self._emit(force=False)

    def _emit(self, *, force: bool) -> None:
        now = time.monotonic()
        if force or now - self._last >= self.PERIOD:
            self._last = now
            print(f"{PROGRESS_MARKER} {json.dumps(self.state, sort_keys=True)}", file=self.out, flush=True)


# Metering rows per shuffle partition. The shuffles carry aggregates (thousands of times fewer rows
# than the metering rows), so one partition serves up to a few million metering rows; more only add
# stages' tasks to schedule. At most SPARK_SHUFFLE_PARTITIONS (default 4).
ROWS_PER_SHUFFLE_PARTITION = 5_000_000


def shuffle_partitions(rows: int) -> int:
    most = max(1, env_int("SPARK_SHUFFLE_PARTITIONS", 4))
    return max(1, min(most, -(-rows // ROWS_PER_SHUFFLE_PARTITION)))


def report_of(rows: DataFrame, inputs: DataFrame, date_from: date, date_to: date) -> UsageReport:
    """The report of the lake's metering rows and the inputs' snapshot, as ONE plan the load
    collects in ONE Spark operation: the rows aggregated in one scan (`transform.meter_partials`:
    one aggregation, two grouping sets), then the four tables from that small result
    (`transform.report_from`: one aggregation, four grouping sets, one window). The result is
    read once, so nothing is kept on the engine between two operations (the job's earlier
    checkpoint of it cost an operation of its own: its planning, code generation and tasks)."""
    return report_from(meter_partials(rows), inputs, date_from, date_to)


def run(
    spark,
    db: Database,
    *,
    run_id: int,
    date_from: date,
    date_to: date,
    tenant_ids: list[int] | None,
    progress: Progress | None = None,
    lake: str | None = None,
) -> dict:
    """One report run in an existing session: the metering export first (the lake is then
    complete up to now), then the report from the lake; returns row counts per table and timings."""
    started = time.perf_counter()
    if progress:
        progress.step("exporting")
    exported = lake_export.export(spark, db, lake)
    phases = {"export": time.perf_counter() - started}
    if progress:
        progress.step("counting rows")
    sizes = {"meters": lake_log.rows_estimate(db, date_from, date_to)}
    state = lake_log.lake_state(db, date_from, date_to)
    rows = lake_read.read_meters(spark, db, date_from, date_to, tenant_ids, lake, state)
    inputs = lake_read.read_inputs(spark, db, date_from, date_to, tenant_ids, lake, state)
    phases["bounds"] = time.perf_counter() - started - sum(phases.values())
    if progress:
        progress.state["rows_total"] = sizes["meters"]
        progress.step("computing the report")
    spark.conf.set("spark.sql.shuffle.partitions", str(shuffle_partitions(sizes["meters"])))
    report = report_of(rows, inputs, date_from, date_to)

    def computed() -> None:
        phases["tables"] = time.perf_counter() - started - sum(phases.values())
        if progress:
            progress.step("writing the report")

    counts: dict = load(report, db, run_id, computed)
    phases["write"] = time.perf_counter() - started - sum(phases.values())
    counts["seconds"] = round(time.perf_counter() - started, 3)
    counts["phases"] = {name: round(value, 3) for name, value in phases.items()}
    counts["rows_read"] = sizes
    counts["exported"] = exported["rows"]
    return counts


WARM_DAY = date(2000, 1, 1)


def warm_up(spark, folder: str) -> float:
    """A report's Spark operations, once, on a few synthetic metering rows written to and read back
    from Parquet under `folder` (then left to its owner): a new engine's JVM loads, compiles and
    JIT-warms their code here instead of during the first report. Nothing touches the database or
    the lake. Returns its seconds."""
    started = time.perf_counter()
    at = datetime(WARM_DAY.year, WARM_DAY.month, WARM_DAY.day, 12, tzinfo=UTC)
    values = {
        "transport": "http",
        "protocol": "decentrl",
        "channel": "DIRECT_AUTHENTICATED",
        "http_status": 200,
        "bytes_in": 100,
        "bytes_out": 50,
        "day": WARM_DAY,
        "tenant_id": 1,
        "export": 1,
    }
    rows = [
        {
            **values,
            "id": i,
            "at": at + timedelta(seconds=i),
            "command_type": ("QUERY_EVENTS", "SAVE_EVENTS", "")[i % 3],
            "code": "SUCCESS" if i % 4 else "INVALID_SIGNATURE",
            "duration_ms": 1.0 + i,
            "sender_did": f"did:decentrl:warm-{i % 5}",
        }
        for i in range(1, 41)
    ]
    names = [f.name for f in lake_layout.LAKE_SCHEMA.fields]
    frame = spark.createDataFrame([tuple(r.get(n) for n in names) for r in rows], lake_layout.LAKE_SCHEMA)
    frame.write.mode("overwrite").partitionBy(*lake_layout.PARTITIONS).parquet(folder)
    read = spark.read.schema(lake_layout.LAKE_SCHEMA).parquet(folder)
    inputs = spark.createDataFrame([], lake_layout.INPUTS_SCHEMA)
    collect_report(report_of(read, inputs, WARM_DAY, WARM_DAY))
    return time.perf_counter() - started


def _engine_down(exc: BaseException) -> bool:
    text = f"{type(exc).__name__} {exc}"
    return any(s in text for s in ("UNAVAILABLE", "Connection refused", "failed to connect", "Socket closed"))


@dataclass(frozen=True)
class Request:
    """One report run to compute."""

    run_id: int
    date_from: date
    date_to: date
    tenant_ids: list[int]

    @classmethod
    def from_line(cls, line: str) -> Request:
        data = json.loads(line)
        return cls(
            int(data["run_id"]),
            date.fromisoformat(data["from"]),
            date.fromisoformat(data["to"]),
            [int(t) for t in data.get("tenants") or []],
        )


class Job:
    """Runs requests on one Spark session, built on the first and kept for the next (`--serve`)."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.kind, self.target = session_target()
        self.spark: Any = None  # a Connect or a classic SparkSession
        self.tag: str | None = None
        self.cancelled = threading.Event()
        signal.signal(signal.SIGTERM, self._cancel)

    def _cancel(self, signum, frame):
        # Interrupt the engine's operations of this run (the JVM keeps running for the next report).
        self.cancelled.set()
        interrupted = []
        if self.tag and self.spark is not None and self.kind == "remote":
            interrupted = self.spark.interruptTag(self.tag) or []
        # os.write: safe inside a signal handler, unlike print or logging.
        os.write(1, f"{CANCELLED_MARKER} {json.dumps({'interrupted': len(interrupted)})}\n".encode())
        raise SystemExit(EXIT_CANCELLED)

    def alive(self) -> bool:
        """The kept session still answers (one round trip); False when there is none."""
        if self.spark is None:
            return False
        try:
            self.spark.conf.get("spark.sql.session.timeZone")
        except Exception:  # noqa: BLE001 - any failure means a new session is needed
            return False
        return True

    def handle(self, request: Request) -> int:
        """One run: its progress lines, then its result line and 0, or the status to exit with."""
        t0 = time.perf_counter()
        log.info(
            "run %s: %s..%s tenants=%s, spark %s %s",
            request.run_id,
            request.date_from,
            request.date_to,
            request.tenant_ids or "all",
            self.kind,
            self.target,
        )
        progress = Progress()
        if not self.connect(progress):
            return EXIT_ENGINE_DOWN
        spark = self.spark
        session_s = time.perf_counter() - t0
        self.tag = f"usage-report-{request.run_id}"
        if self.kind == "remote":
            spark.addTag(self.tag)
            spark.registerProgressHandler(progress)
        try:
            counts = run(
                spark,
                self.db,
                run_id=request.run_id,
                date_from=request.date_from,
                date_to=request.date_to,
                tenant_ids=request.tenant_ids or None,
                progress=progress,
            )
        except SystemExit:
            raise
        except Exception as exc:
            if self.cancelled.is_set():
                return EXIT_CANCELLED
            if self.kind == "remote" and _engine_down(exc):
                print(f"{ENGINE_DOWN_MARKER} {self.target}", flush=True)
                log.exception("the engine went away")
                return EXIT_ENGINE_DOWN
            raise
        finally:
            if self.kind == "remote":
                spark.removeProgressHandler(progress)
                spark.removeTag(self.tag)
            self.tag = None
        counts["phases"]["session"] = round(session_s, 3)
        counts["total_seconds"] = round(time.perf_counter() - t0, 3)
        print(f"{RESULT_MARKER} {json.dumps(counts, sort_keys=True)}", flush=True)
        # The run's DataFrames are dropped now, not later (any engine state one holds goes with it).
        gc.collect()
        return 0

    def serve(self, stream) -> int:
        """Requests from `stream`, one per line, until it ends; the session is kept between them."""
        while True:
            ready, _, _ = select.select([stream], [], [], PING_S)
            if not ready:
                if self.spark is not None and not self.alive():
                    return EXIT_ENGINE_DOWN  # nothing to report to: the next run finds this process gone
                continue
            line = stream.readline()
            if not line:
                return 0
            if not line.strip():
                continue
            if self.spark is not None and not self.alive():
                print(f"{STALE_MARKER} {self.target}", flush=True)
                return EXIT_ENGINE_DOWN
            data = json.loads(line)
            code = self.warm(data["warm_up"]) if "warm_up" in data else self.handle(Request.from_line(line))
            if code:
                return code

    def connect(self, progress: Progress) -> bool:
        """The session, built (step "connecting") unless kept; False when the engine did not answer
        (its line printed)."""
        if self.spark is not None:
            return True
        t0 = time.perf_counter()
        progress.step("connecting")
        try:
            self.spark = build_session()
        except Exception as exc:
            if self.kind == "remote" and _engine_down(exc):
                print(f"{ENGINE_DOWN_MARKER} {self.target}", flush=True)
                return False
            raise
        log.info("spark session up in %.1fs", time.perf_counter() - t0)
        return True

    def warm(self, folder: str) -> int:
        """`warm_up` on this process's session (connecting first): its line, then 0."""
        if not self.connect(Progress()):
            return EXIT_ENGINE_DOWN
        seconds = warm_up(self.spark, folder)
        print(f"{WARM_MARKER} {json.dumps({'seconds': round(seconds, 3)})}", flush=True)
        gc.collect()
        return 0

    def stop(self) -> None:
        if self.spark is not None:
            try:
                self.spark.stop()
            except Exception:  # noqa: BLE001 - the engine may be gone; the results are written
                pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--serve", action="store_true", help="one run per request line on stdin")
    parser.add_argument("--run-id", type=int)
    parser.add_argument("--from", dest="date_from", type=date.fromisoformat)
    parser.add_argument("--to", dest="date_to", type=date.fromisoformat)
    parser.add_argument("--tenant", dest="tenants", type=int, action="append", default=[])
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(asctime)s %(levelname)s %(message)s")
    if not args.serve:
        if args.run_id is None or args.date_from is None or args.date_to is None:
            parser.error("--run-id, --from and --to are required without --serve")
        if args.date_to < args.date_from:
            parser.error("--to is before --from")
    job = Job(database_from_env())
    try:
        if args.serve:
            return job.serve(sys.stdin)
        return job.handle(Request(args.run_id, args.date_from, args.date_to, args.tenants))
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        job.stop()


if __name__ == "__main__":
    code = main()
    # The report is written and its result line printed; the interpreter's own exit (gRPC's and
    # pyspark's threads and modules torn down) would add up to a second. Nothing is left to do.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
