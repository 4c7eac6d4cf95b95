"""The metering lake: every metering row leaves the database once, into Parquet, and reports read it there.

    python -m spark_reports.lake export           # export the rows past the watermark (Celery beat, every few minutes)
    python -m spark_reports.lake drop --keep-days N   # drop the lake's day partitions older than N days

Layout (a Hadoop filesystem URI or a local path, USAGE_LAKE_URI, default var/lake/):

    <lake>/meters/day=YYYY-MM-DD/tenant_id=N/export=E/part-*.parquet

one directory per UTC day (the reports' partition pruning and the lake's retention, which drops
whole days), tenant (pruning) and export attempt E, a row of `usage_meterexport`.

Export, exactly once. Under one exclusive lock (a PostgreSQL advisory lock held by the job's
session, released by the server when the job dies):
1. an attempt that is still `pending` was interrupted (crash, kill -9 at any point): mark it
   `abandoned`. Its files, complete or not, are never read (readers skip its `export=` value); its
   rows were not counted as exported, so step 2 exports them again.
2. the range: from the watermark (the largest committed hi_id) to MAX(id), read under
   `LOCK TABLE ... IN SHARE MODE` (waits for the metering writers' open COPYs, whose ids may be
   lower than a committed one, to commit; blocks them for that moment only), recorded as a new
   `pending` attempt E.
3. Spark reads (lo, hi] over JDBC, one query per id range in parallel, and writes it into the
   partitions `export=E` with dynamic partition overwrite: files are staged under the job's own
   `.spark-staging-<job>` directory (so that an interrupted attempt's write still running on the
   engine never shares a temporary directory with the next one) and renamed into place at commit.
4. the attempt becomes `committed` (the watermark advances) in one UPDATE, with its row count.
Readers keep `export <= last committed attempt AND export NOT IN (abandoned attempts)`: a row is
in exactly one committed attempt, whatever crashed where.

Object storage (s3a://, gs://, abfs://): the engine needs the filesystem's connector jar
(hadoop-aws with its AWS SDK bundle, gcs-connector, hadoop-azure) on SPARK_JDBC_JARS and its
credentials in the engine's Hadoop configuration (e.g. spark.hadoop.fs.s3a.* settings or the
cloud's default credential chain). Correctness does not rely on atomic renames (uncommitted
attempts are invisible by their export number), only on listing what was committed, which the
S3A committers and GCS/ABFS provide. `drop` deletes through pyarrow's filesystems (local, s3://,
gs://, hdfs://: the job host needs the same credentials).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

import psycopg
from pyarrow import fs as pafs
from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DateType, LongType, StructField, StructType

from .config import ROOT, Database, build_session, database_from_env
from .extract import SCHEMAS, Read, Rows, read_ranges, typed

EXPORT_TABLE = "usage_meterexport"
METER_TABLE = "usage_commandmeter"
# The advisory lock of the export (any constant no other code uses): one export at a time.
LOCK_KEY = 0x6D65746572  # "meter"
EXPORT_MARKER = "LAKE_EXPORT"
WRITING_MARKER = "LAKE_EXPORT_WRITING"
PARTITIONS = ["day", "tenant_id", "export"]
CONCURRENT_WRITERS = 64  # open Parquet files per write task before Spark falls back to sorting
# The lake's rows: the metering columns (never a payload: the table holds none) and the partitions.
LAKE_SCHEMA = StructType(
    [StructField(c, kind, True) for c, kind in SCHEMAS["meter_rows"] if c != "tenant_id"]
    + [StructField("day", DateType(), True), StructField("tenant_id", LongType(), True)]
    + [StructField("export", LongType(), True)]
)


def lake_uri() -> str:
    """Where the lake lives: USAGE_LAKE_URI (a Hadoop filesystem URI or a local path), else var/lake/."""
    return os.environ.get("USAGE_LAKE_URI", "").strip() or str(ROOT / "var" / "lake")


def meters_uri(lake: str) -> str:
    return lake.rstrip("/") + "/meters"


@dataclass(frozen=True)
class LakeState:
    """What the database says the lake holds: the watermark, the last committed attempt, and the
    attempts whose files must never be read."""

    watermark: int
    last_export: int
    abandoned: tuple[int, ...]


def _connect_pg(db: Database) -> psycopg.Connection:
    return psycopg.connect(**db.connect_kwargs, autocommit=True)


def _scalar(cursor: psycopg.Cursor[Any]) -> Any:
    """The first column of a statement's one row (an aggregate or an INSERT ... RETURNING has one)."""
    row = cursor.fetchone()
    if row is None:
        raise RuntimeError("the statement returned no row")
    return row[0]


def _query(db: Database, sql: str, params: tuple = ()) -> list[tuple]:
    """One read of the export's own small table, in its own connection."""
    with _connect_pg(db) as pg:
        return pg.execute(sql, params).fetchall()


def lake_state(db: Database) -> LakeState:
    rows = _query(
        db,
        f"SELECT COALESCE(MAX(hi_id), 0), COALESCE(MAX(id), 0) FROM {EXPORT_TABLE} WHERE state = 'committed'",
    )
    watermark, last = rows[0]
    abandoned = _query(db, f"SELECT id FROM {EXPORT_TABLE} WHERE state = 'abandoned' AND id < %s ORDER BY id", (last,))
    return LakeState(int(watermark), int(last), tuple(int(r[0]) for r in abandoned))


@dataclass(frozen=True)
class Attempt:
    export: int
    lo: int  # exclusive
    hi: int  # inclusive


@contextmanager
def _exclusive(db: Database) -> Iterator[psycopg.Connection]:
    """One export at a time, for as long as the job lives (released by the server when it dies)."""
    with _connect_pg(db) as pg:
        pg.execute("SELECT pg_advisory_lock(%s)", (LOCK_KEY,))
        try:
            yield pg
        finally:
            pg.execute("SELECT pg_advisory_unlock(%s)", (LOCK_KEY,))


def _begin(pg: psycopg.Connection) -> tuple[Attempt | None, int]:
    """Abandon an interrupted attempt, then record the next one over (watermark, MAX(id)]; returns it
    (None when there is nothing new) and how many attempts were abandoned."""
    now = datetime.now(UTC)
    abandon = f"UPDATE {EXPORT_TABLE} SET state = 'abandoned', finished_at = %s WHERE state = 'pending'"
    watermark = f"SELECT COALESCE(MAX(hi_id), 0) FROM {EXPORT_TABLE} WHERE state = 'committed'"
    insert = f"INSERT INTO {EXPORT_TABLE} (lo_id, hi_id, state, rows, started_at) VALUES (%s, %s, 'pending', 0, %s)"
    with pg.transaction():
        abandoned = pg.execute(abandon, (now,)).rowcount
        lo = _scalar(pg.execute(watermark))
        pg.execute(f"LOCK TABLE {METER_TABLE} IN SHARE MODE")
        hi = _scalar(pg.execute(f"SELECT COALESCE(MAX(id), 0) FROM {METER_TABLE}"))
        if hi <= lo:
            return None, abandoned
        export = _scalar(pg.execute(insert + " RETURNING id", (lo, hi, now)))
    return Attempt(int(export), int(lo), int(hi)), abandoned


def _commit(pg: psycopg.Connection, attempt: Attempt, stats: dict) -> None:
    sql = (
        f"UPDATE {EXPORT_TABLE} SET state = 'committed', rows = %s, first_at = %s, last_at = %s, finished_at = %s"
        " WHERE id = %s AND state = 'pending'"
    )
    first, last = stats.get("first_at"), stats.get("last_at")
    utc = [v.replace(tzinfo=UTC) if v is not None and v.tzinfo is None else v for v in (first, last)]
    updated = pg.execute(sql, (stats["rows"], *utc, datetime.now(UTC), attempt.export)).rowcount
    if updated != 1:
        raise RuntimeError(f"export {attempt.export} was no longer pending")


def read_range(spark: SparkSession, db: Database, attempt: Attempt) -> DataFrame:
    """The metering rows (lo, hi] over JDBC, one query per id range (extract.read_ranges), typed."""
    columns = ", ".join(c for c, _ in SCHEMAS["meter_rows"])
    rows = Rows(f"FROM {METER_TABLE} WHERE id > {attempt.lo} AND id <= {attempt.hi}", "id")
    size = attempt.hi - attempt.lo  # ids are dense: at most this many rows
    frame = read_ranges(spark, db, Read("meter_rows", columns), rows, (attempt.lo + 1, attempt.hi, size), "meter_rows")
    return typed(frame, "meter_rows")


def export(
    spark: SparkSession,
    db: Database,
    lake: str | None = None,
    *,
    on_writing: Callable[[Attempt], None] | None = None,
    after_write: Callable[[Attempt], None] | None = None,
) -> dict:
    """Export every metering row past the watermark into the lake, exactly once (the module's
    docstring); returns what it did. `on_writing` / `after_write` are called around the write."""
    lake = lake or lake_uri()
    started = time.perf_counter()
    with _exclusive(db) as pg:
        attempt, abandoned = _begin(pg)
        if attempt is None:
            return {"rows": 0, "abandoned": abandoned, "seconds": round(time.perf_counter() - started, 3)}
        if on_writing:
            on_writing(attempt)
        # A task keeps one open file per (day, tenant) it meets instead of sorting its rows by
        # partition first (the rows arrive in id order, the tenants interleaved).
        spark.conf.set("spark.sql.maxConcurrentOutputFileWriters", str(CONCURRENT_WRITERS))
        rows = read_range(spark, db, attempt)
        out = rows.withColumn("day", F.to_date("at")).withColumn("export", F.lit(attempt.export).cast("long"))
        (
            out.write.mode("overwrite")
            .option("partitionOverwriteMode", "dynamic")
            .partitionBy(*PARTITIONS)
            .parquet(meters_uri(lake))
        )
        if after_write:
            after_write(attempt)
        stats = written(spark, lake, attempt.export)
        _commit(pg, attempt, stats)
    return {
        "export": attempt.export,
        "from_id": attempt.lo,
        "to_id": attempt.hi,
        "rows": int(stats["rows"]),
        "abandoned": abandoned,
        "seconds": round(time.perf_counter() - started, 3),
    }


def written(spark: SparkSession, lake: str, export: int) -> dict:
    """What attempt `export` wrote, read back from the lake (only its folders): rows and time span.
    The commit records what the files hold, not what the write meant to hold."""
    root = meters_uri(lake)
    files = spark.read.schema(LAKE_SCHEMA).option("basePath", root).parquet(f"{root}/day=*/tenant_id=*/export={export}")
    try:
        found = files.agg(
            F.count(F.lit(1)).alias("rows"), F.min("at").alias("first_at"), F.max("at").alias("last_at")
        ).first()
    except AnalysisException as exc:  # no folder at all: the range held no row (ids of deleted rows)
        if "PATH_NOT_FOUND" not in str(exc):
            raise
        return {"rows": 0, "first_at": None, "last_at": None}
    assert found is not None  # an aggregate without GROUP BY has one row
    return found.asDict()


def read_meters(
    spark: SparkSession,
    db: Database,
    date_from: date,
    date_to: date,
    tenant_ids: list[int] | None = None,
    lake: str | None = None,
) -> DataFrame:
    """The committed metering rows of [date_from, date_to] (UTC days) from the lake, pruned to those
    days' and tenants' partitions (LAKE_SCHEMA; an empty frame before the first export)."""
    state = lake_state(db)
    if not state.last_export:
        return spark.createDataFrame([], LAKE_SCHEMA)
    frame = spark.read.schema(LAKE_SCHEMA).parquet(meters_uri(lake or lake_uri()))
    keep = (F.col("day") >= F.lit(date_from)) & (F.col("day") <= F.lit(date_to))
    keep &= F.col("export") <= F.lit(state.last_export)
    if state.abandoned:
        keep &= ~F.col("export").isin(*state.abandoned)
    if tenant_ids:
        keep &= F.col("tenant_id").isin(*[int(t) for t in tenant_ids])
    return frame.where(keep)


def rows_estimate(db: Database, date_from: date, date_to: date) -> int:
    """Rows of the committed attempts whose time span meets the range (progress and sizing only)."""
    lo = datetime(date_from.year, date_from.month, date_from.day, tzinfo=UTC)
    hi = lo + timedelta(days=(date_to - date_from).days + 1)
    found = _query(
        db,
        f"SELECT COALESCE(SUM(rows), 0) FROM {EXPORT_TABLE} WHERE state = 'committed' AND last_at >= %s AND first_at < %s",
        (lo, hi),
    )
    return int(found[0][0])


def drop_days(lake: str, keep_days: int, *, today: date | None = None) -> list[str]:
    """Delete the lake's day partitions older than `keep_days` days (whole directories); returns them."""
    filesystem, root = pafs.FileSystem.from_uri(_pyarrow_uri(meters_uri(lake)))
    cutoff = (today or datetime.now(UTC).date()) - timedelta(days=keep_days)
    dropped = []
    try:
        entries = filesystem.get_file_info(pafs.FileSelector(root, allow_not_found=True))
    except FileNotFoundError:
        return []
    for entry in entries:
        name = entry.base_name
        if entry.type != pafs.FileType.Directory or not name.startswith("day="):
            continue
        try:
            day = date.fromisoformat(name[4:])
        except ValueError:
            continue
        if day < cutoff:
            filesystem.delete_dir(entry.path)
            dropped.append(name)
    return sorted(dropped)


def _pyarrow_uri(uri: str) -> str:
    """pyarrow names Hadoop's s3a:// filesystem s3://; a plain path is a local one."""
    if uri.startswith("s3a://"):
        return "s3://" + uri[len("s3a://") :]
    return uri if "://" in uri else "file://" + os.path.abspath(uri)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["export", "drop"])
    parser.add_argument("--keep-days", type=int, default=int(os.environ.get("USAGE_LAKE_RETENTION_DAYS") or 400))
    args = parser.parse_args(argv)
    if args.action == "drop":
        dropped = drop_days(lake_uri(), args.keep_days)
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
    print(f"{EXPORT_MARKER} {json.dumps(result, sort_keys=True)}", flush=True)
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    os._exit(code)
