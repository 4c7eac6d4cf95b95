"""The metering export (docs/usage.md "The metering lake"): every metering row past the watermark out of
PostgreSQL into the lake's Parquet files, exactly once, with the snapshot of the report's other inputs."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import date

import pyarrow as pa
import pyarrow.parquet as pq
from pyarrow import fs as pafs
from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DoubleType

from .config import Database
from .extract import SCHEMAS, Read, Rows, input_snapshot, read_ranges, typed
from .lake_layout import LAKE_SCHEMA, PARTITIONS, inputs_uri, lake_uri, meters_uri, pyarrow_uri
from .lake_log import METER_TABLE, Attempt, begin, commit, exclusive

CONCURRENT_WRITERS = 64  # open Parquet files per write task before Spark falls back to sorting
# Columns whose values are (nearly) all distinct: no dictionary encoding (the writer would hash
# every value into a dictionary it then drops); the others (tenants, protocols, types, codes,
# senders, sizes) keep it.
NO_DICTIONARY = {f"parquet.enable.dictionary#{c}": "false" for c in ("id", "at", "duration_ms")}
_ARROW_INPUTS = pa.schema(
    [(c, pa.float64() if isinstance(kind, DoubleType) else pa.int64()) for c, kind in SCHEMAS["inputs"]]
)


def read_range(spark: SparkSession, db: Database, attempt: Attempt) -> DataFrame:
    """The metering rows (lo, hi] over JDBC, one query per id range (extract.read_ranges), typed."""
    columns = ", ".join(c for c, _ in SCHEMAS["meter_rows"])
    rows = Rows(f"FROM {METER_TABLE} WHERE id > {attempt.lo} AND id <= {attempt.hi}", "id")
    size = attempt.hi - attempt.lo  # ids are dense: at most this many rows
    frame = read_ranges(spark, db, Read("meter_rows", columns), rows, (attempt.lo + 1, attempt.hi, size), "meter_rows")
    return typed(frame, "meter_rows")


def write_meters(spark: SparkSession, frame: DataFrame, lake: str) -> None:
    """Append `frame` (LAKE_SCHEMA's columns) to the lake, replacing only the partitions it holds."""
    # A task keeps one open file per (day, tenant) it meets instead of sorting its rows by
    # partition first (the rows arrive in id order, the tenants interleaved).
    spark.conf.set("spark.sql.maxConcurrentOutputFileWriters", str(CONCURRENT_WRITERS))
    # Timestamps as Parquet's INT64 microseconds, not Spark's default INT96: the writer would hash
    # the 12-byte INT96 values, nearly all distinct, into a dictionary of byte arrays, and INT96 has
    # no min/max statistics (the commit reads the time span from them, `written`).
    spark.conf.set("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
    (
        frame.write.mode("overwrite")
        .options(**NO_DICTIONARY)
        .option("partitionOverwriteMode", "dynamic")
        .partitionBy(*PARTITIONS)
        .parquet(meters_uri(lake))
    )


def export(
    spark: SparkSession,
    db: Database,
    lake: str | None = None,
    *,
    on_writing: Callable[[Attempt], None] | None = None,
    after_write: Callable[[Attempt], None] | None = None,
) -> dict:
    """Export every metering row past the watermark into the lake, exactly once, with the inputs'
    snapshot (docs/usage.md "The metering lake"); returns what it did. `on_writing` / `after_write` are called
    around the write."""
    lake = lake or lake_uri()
    started = time.perf_counter()
    with exclusive(db) as pg:
        attempt, abandoned = begin(pg)
        if on_writing:
            on_writing(attempt)
        stats: dict = {"rows": 0}
        if attempt.hi > attempt.lo:
            rows = read_range(spark, db, attempt)
            out = rows.withColumn("day", F.to_date("at")).withColumn("export", F.lit(attempt.export).cast("long"))
            write_meters(spark, out, lake)
        write_inputs(lake, attempt.export, input_snapshot(db, attempt.inputs_from))
        if after_write:
            after_write(attempt)
        if attempt.hi > attempt.lo:
            stats = written(spark, lake, attempt.export)
        commit(pg, attempt, stats)
    return {
        "export": attempt.export,
        "from_id": attempt.lo,
        "to_id": attempt.hi,
        "rows": int(stats["rows"]),
        "abandoned": abandoned,
        "seconds": round(time.perf_counter() - started, 3),
    }


def write_inputs(lake: str, export: int, snapshot: dict[date, list[tuple]]) -> None:
    """The inputs' snapshot of attempt `export`: one small Parquet file per day, written by the job."""
    filesystem, root = pafs.FileSystem.from_uri(pyarrow_uri(inputs_uri(lake)))
    names = [c for c, _ in SCHEMAS["inputs"]]
    for day, rows in snapshot.items():
        folder = f"{root}/day={day.isoformat()}/export={export}"
        filesystem.create_dir(folder, recursive=True)
        table = pa.Table.from_pylist([dict(zip(names, row, strict=True)) for row in rows], schema=_ARROW_INPUTS)
        pq.write_table(table, f"{folder}/part-0.parquet", filesystem=filesystem)


def written(spark: SparkSession, lake: str, export: int, day: date | None = None) -> dict:
    """What attempt `export` wrote (on `day`, or any), read back from the lake (only its folders):
    rows and time span. The commit records what the files hold, not what the write meant to hold;
    their Parquet footers say it (row counts, the `at` column's min/max statistics: no second pass
    over the rows), the files as Spark lists them."""
    root = meters_uri(lake)
    days = f"day={day.isoformat()}" if day else "day=*"
    try:
        files = (
            spark.read.schema(LAKE_SCHEMA)
            .option("basePath", root)
            .parquet(f"{root}/{days}/tenant_id=*/export={export}")
            .inputFiles()
        )
    except AnalysisException as exc:  # no folder at all: the range held no row (ids of deleted rows)
        if "PATH_NOT_FOUND" not in str(exc):
            raise
        files = []
    rows, first, last = 0, None, None
    for path in files:
        filesystem, name = pafs.FileSystem.from_uri(pyarrow_uri(path))
        meta = pq.read_metadata(name, filesystem=filesystem)
        rows += meta.num_rows
        at = meta.schema.names.index("at")
        for g in range(meta.num_row_groups):
            stats = meta.row_group(g).column(at).statistics
            if stats is None or not stats.has_min_max:
                raise RuntimeError(f"{path} has no statistics of `at`")
            first = stats.min if first is None else min(first, stats.min)
            last = stats.max if last is None else max(last, stats.max)
    return {"rows": rows, "first_at": first, "last_at": last}
