"""The metering lake's command: export the new metering rows and compact, or drop old days.

    python -m spark_reports.lake export           # export past the watermark, then compact (Celery beat, every few minutes)
    python -m spark_reports.lake drop --keep-days N [--today YYYY-MM-DD]   # drop the lake's day partitions older than N days

Each prints its result as one line after EXPORT_MARKER. The lake's design is docs/usage.md "The metering
lake"; its modules: lake_layout (folders, schemas), lake_log (the commit log, `usage_meterexport`),
lake_export, lake_read, lake_compaction, lake_cleanup.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from datetime import date

from .config import build_session, database_from_env
from .lake_cleanup import drop_days
from .lake_compaction import compact
from .lake_export import export
from .lake_layout import lake_uri
from .lake_log import Attempt

EXPORT_MARKER = "LAKE_EXPORT"
WRITING_MARKER = "LAKE_EXPORT_WRITING"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["export", "drop"])
    parser.add_argument("--keep-days", type=int, default=int(os.environ.get("USAGE_LAKE_RETENTION_DAYS") or 400))
    # The caller's today (metering_prune's `now`), so one clock decides what is old; default: the UTC date.
    parser.add_argument("--today", type=date.fromisoformat, default=None, help="YYYY-MM-DD (UTC day)")
    args = parser.parse_args(argv)
    if args.action == "drop":
        dropped = drop_days(lake_uri(), args.keep_days, today=args.today)
        print(f"{EXPORT_MARKER} {json.dumps({'dropped_days': dropped})}", flush=True)
        return 0
    db = database_from_env()
    spark = build_session("mediator-meter-export")

    def writing(attempt: Attempt) -> None:
        print(
            f"{WRITING_MARKER} {json.dumps({'export': attempt.export, 'from_id': attempt.lo, 'to_id': attempt.hi})}",
            flush=True,
        )

    def written(attempt: Attempt) -> None:
        # For the crash tests only: die the hardest way between the write and the commit.
        if os.environ.get("LAKE_EXPORT_KILL_AFTER_WRITE") == "1":
            os.kill(os.getpid(), 9)

    result = export(spark, db, on_writing=writing, after_write=written)
    # The beat's export compacts the closed days too (a report's export does not: it waits for none).
    result.update(compact(spark, db))
    print(f"{EXPORT_MARKER} {json.dumps(result, sort_keys=True)}", flush=True)
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    os._exit(code)
