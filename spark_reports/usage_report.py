"""The usage report job: extract -> transform -> load for one ReportRun.

    python -m spark_reports.usage_report --run-id 7 --from 2026-11-01 --to 2026-11-21 [--tenant 3 ...]

The database comes from REPORT_DATABASE_URL (see config.py). The last stdout line is
`USAGE_REPORT_RESULT {"daily": n, ...}` on success; any failure exits non-zero.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from datetime import date

from .config import Database, build_session, database_from_env
from .extract import extract
from .load import load
from .transform import usage_report

RESULT_MARKER = "USAGE_REPORT_RESULT"
log = logging.getLogger("spark_reports.usage_report")


def run(spark, db: Database, *, run_id: int, date_from: date, date_to: date, tenant_ids: list[int] | None) -> dict:
    """One report run in an existing session; returns row counts per table and timings."""
    started = time.perf_counter()
    inputs = extract(spark, db, date_from, date_to, tenant_ids)
    report = usage_report(inputs.meters, inputs.registrations, inputs.pending, inputs.stored, date_from, date_to)
    counts = load(report, db, run_id)
    counts["seconds"] = round(time.perf_counter() - started, 3)
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-id", type=int, required=True)
    parser.add_argument("--from", dest="date_from", type=date.fromisoformat, required=True)
    parser.add_argument("--to", dest="date_to", type=date.fromisoformat, required=True)
    parser.add_argument("--tenant", dest="tenants", type=int, action="append", default=[])
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(asctime)s %(levelname)s %(message)s")
    if args.date_to < args.date_from:
        parser.error("--to is before --from")
    db = database_from_env()
    t0 = time.perf_counter()
    log.info(
        "run %s: %s..%s tenants=%s on %s", args.run_id, args.date_from, args.date_to, args.tenants or "all", db.dialect
    )
    spark = build_session()
    log.info("spark session up in %.1fs (master %s)", time.perf_counter() - t0, spark.sparkContext.master)
    try:
        counts = run(
            spark,
            db,
            run_id=args.run_id,
            date_from=args.date_from,
            date_to=args.date_to,
            tenant_ids=args.tenants or None,
        )
    finally:
        spark.stop()
    counts["total_seconds"] = round(time.perf_counter() - t0, 3)
    print(f"{RESULT_MARKER} {json.dumps(counts, sort_keys=True)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
