"""Load: append the report's rows under the run's id into tables created by Django migrations
(apps/usage/models.py). Nothing is created, truncated or dropped here.

Staging and publishing: the rows carry the id of a ReportRun that is still `running`; readers
only ever read rows of `succeeded` runs. The launcher flips the run to `succeeded` in one UPDATE
after this process exits cleanly, or deletes the run's rows and marks it `failed` otherwise.
"""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from .config import Database
from .transform import UsageReport

TABLES = {
    "daily": "usage_reportdaily",
    "by_type": "usage_reportcommandtype",
    "by_code": "usage_reporterrorcode",
    "top": "usage_reporttopidentity",
}


def _for_dialect(df: DataFrame, db: Database) -> DataFrame:
    if db.is_sqlite:
        # Django reads SQLite DateFields as ISO text; the JDBC driver would store a Date as epoch millis.
        return df.withColumn("day", F.date_format("day", "yyyy-MM-dd"))
    return df


def write_table(df: DataFrame, db: Database, table: str, run_id: int) -> int:
    """Append `df` tagged with `run_id` to `table`; returns the number of rows written."""
    rows = df.withColumn("run_id", F.lit(int(run_id)).cast("long"))
    rows = _for_dialect(rows, db).cache()
    count = rows.count()
    if count:
        # SQLite takes one writer at a time; PostgreSQL gets a few parallel inserts.
        rows = rows.coalesce(1 if db.is_sqlite else 4)
        (
            rows.write.format("jdbc")
            .mode("append")
            .options(url=db.url, dbtable=table, batchsize="5000", isolationLevel="READ_COMMITTED", **db.properties)
            .save()
        )
    rows.unpersist()
    return count


def load(
    report: UsageReport, db: Database, run_id: int, before_table: Callable[[str], None] | None = None
) -> dict[str, int]:
    """Write every table of `report` under `run_id`; returns rows written per table.
    `before_table(name)` is told each table before it is computed and written (progress)."""
    counts = {}
    for name, df in report.tables().items():
        if before_table:
            before_table(name)
        counts[name] = write_table(df, db, TABLES[name], run_id)
    return counts
