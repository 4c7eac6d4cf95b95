"""The metering lake: every metering row leaves the database once, into Parquet, and reports read it there.

    python -m spark_reports.lake export           # export past the watermark, then compact (Celery beat, every few minutes)
    python -m spark_reports.lake drop --keep-days N [--today YYYY-MM-DD]   # drop the lake's day partitions older than N days

Layout (a Hadoop filesystem URI or a local path, USAGE_LAKE_URI, default var/lake/):

    <lake>/meters/day=YYYY-MM-DD/tenant_id=N/export=E/part-*.parquet   metering rows
    <lake>/inputs/day=YYYY-MM-DD/export=E/part-0.parquet                the report's other inputs

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
   `pending` attempt E (also when the range is empty: the inputs' snapshot below is still taken).
3. Spark reads (lo, hi] over JDBC, one query per id range in parallel, and writes it into the
   partitions `export=E` with dynamic partition overwrite: files are staged under the job's own
   `.spark-staging-<job>` directory (so that an interrupted attempt's write still running on the
   engine never shares a temporary directory with the next one) and renamed into place at commit.
4. the snapshot of the report's other inputs (extract.input_snapshot: registrations, pending and
   stored events per tenant and day, a few rows per tenant and day) for the days from the previous
   attempt's start on (rows are created and acknowledged now; every day at the first export) is
   written by the job itself (pyarrow) to `inputs/day=D/export=E/`. A day's figures are those of
   the last committed attempt whose snapshot covers it: a row deleted after that (retention) still
   counts on its day.
5. the attempt becomes `committed` (the watermark advances) in one UPDATE, with its row count.
Readers keep `0 < export <= last committed attempt AND export NOT IN (abandoned attempts)`: a row
is in exactly one committed attempt, whatever crashed where.

Compaction (after the beat's export, not a report's; under its own lock, so that exports never wait
for it, and an export's rows of a day being compacted are past its `covers`): the 5-minute exports leave a closed day with
hundreds of small files. For each day before today that has more than one export's files (or new
files since its last compaction), one attempt C (`day` = D, `covers` = the last committed export)
reads the day's rows as readers see them and writes them as `export=-C` (one file per tenant and
Spark task). Its commit (`compacted`) switches readers of day D, in one UPDATE, to `export = -C OR
(export > covers AND the rule above)`: before it they read the old files only, after it the new
ones and later exports only, never both. The replaced folders, and snapshots a later one
supersedes, are deleted CLEAN_AFTER later (longer than a report, which may still be reading them).

Object storage (s3a://, gs://, abfs://): the engine needs the filesystem's connector jar
(hadoop-aws with its AWS SDK bundle, gcs-connector, hadoop-azure) on SPARK_JDBC_JARS and its
credentials in the engine's Hadoop configuration (e.g. spark.hadoop.fs.s3a.* settings or the
cloud's default credential chain). Correctness does not rely on atomic renames (uncommitted
attempts are invisible by their export number), only on listing what was committed, which the
S3A committers and GCS/ABFS provide. The job's own writes and deletes (the inputs' snapshot,
`drop`, compaction's cleanup) go through pyarrow's filesystems (local, s3://, gs://, hdfs://: the
job host needs the same credentials).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from functools import partial, reduce
from typing import Any

import psycopg
import pyarrow as pa
import pyarrow.parquet as pq
from pyarrow import fs as pafs
from pyspark.errors import AnalysisException
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DateType, DoubleType, LongType, StructField, StructType

from .config import ROOT, Database, build_session, database_from_env
from .extract import SCHEMAS, Read, Rows, input_snapshot, max_partitions, read_ranges, typed

EXPORT_TABLE = "usage_meterexport"
METER_TABLE = "usage_commandmeter"
# The advisory locks (any constants no other code uses): one export at a time, one compaction at a
# time; an export never waits for a compaction (a report's export would wait minutes).
LOCK_KEY = 0x6D65746572  # "meter"
COMPACT_LOCK_KEY = LOCK_KEY + 1
EXPORT_MARKER = "LAKE_EXPORT"
WRITING_MARKER = "LAKE_EXPORT_WRITING"
PARTITIONS = ["day", "tenant_id", "export"]
CONCURRENT_WRITERS = 64  # open Parquet files per write task before Spark falls back to sorting
# Columns whose values are (nearly) all distinct: no dictionary encoding (the writer would hash
# every value into a dictionary it then drops); the others (tenants, protocols, types, codes,
# senders, sizes) keep it.
NO_DICTIONARY = {f"parquet.enable.dictionary#{c}": "false" for c in ("id", "at", "duration_ms")}
# A snapshot of the inputs covers the days from the previous attempt's start, less this margin
# (a transaction that stamped its rows before the previous attempt and committed after it).
SNAPSHOT_MARGIN = timedelta(hours=1)
# Compaction looks back this many closed days for exports to merge (late rows of older days stay
# in their export's files: readers see them all the same).
COMPACT_LOOKBACK_DAYS = 7
# Replaced files are deleted this long after their replacement committed: longer than a report
# (USAGE_REPORT_TIMEOUT_S, 1 hour by default) that listed them before may still read them.
CLEAN_AFTER = timedelta(hours=2)
# The lake's rows: the metering columns (never a payload: the table holds none) and the partitions.
LAKE_SCHEMA = StructType(
    [StructField(c, kind, True) for c, kind in SCHEMAS["meter_rows"] if c != "tenant_id"]
    + [StructField("day", DateType(), True), StructField("tenant_id", LongType(), True)]
    + [StructField("export", LongType(), True)]
)
INPUTS_SCHEMA = StructType(
    [StructField(c, kind, True) for c, kind in SCHEMAS["inputs"]]
    + [StructField("day", DateType(), True), StructField("export", LongType(), True)]
)
_ARROW_INPUTS = pa.schema(
    [(c, pa.float64() if isinstance(kind, DoubleType) else pa.int64()) for c, kind in SCHEMAS["inputs"]]
)


def lake_uri() -> str:
    """Where the lake lives: USAGE_LAKE_URI (a Hadoop filesystem URI or a local path), else var/lake/."""
    return os.environ.get("USAGE_LAKE_URI", "").strip() or str(ROOT / "var" / "lake")


def meters_uri(lake: str) -> str:
    return lake.rstrip("/") + "/meters"


def inputs_uri(lake: str) -> str:
    return lake.rstrip("/") + "/inputs"


@dataclass(frozen=True)
class LakeState:
    """What the database says the lake holds: the watermark, the last committed attempt, the
    attempts whose files must never be read, the latest compaction (id, covers) of each day asked
    for, and which attempt's inputs snapshot holds each day (`holder`)."""

    watermark: int
    last_export: int
    abandoned: tuple[int, ...]
    compacted: dict[date, tuple[int, int]] = field(default_factory=dict)
    snapshots: tuple[tuple[date | None, int], ...] = ()  # (inputs_from, last committed attempt with it)

    def holder(self, day: date) -> int | None:
        """The last committed attempt whose inputs snapshot covers `day`."""
        found = [export for since, export in self.snapshots if since is None or since <= day]
        return max(found) if found else None

    def visible(self, day: Column, export: Column) -> Column:
        """The rule a reader keeps a metering file by (the module's docstring)."""
        kept = (export > 0) & (export <= F.lit(self.last_export))
        if self.abandoned:
            kept &= ~export.isin(*self.abandoned)
        rule = None
        for d, (compaction, covers) in sorted(self.compacted.items()):
            then = (export == F.lit(-compaction)) | (kept & (export > F.lit(covers)))
            rule = F.when(day == F.lit(d), then) if rule is None else rule.when(day == F.lit(d), then)
        return kept if rule is None else rule.otherwise(kept)


def _connect_pg(db: Database) -> psycopg.Connection:
    return psycopg.connect(**db.connect_kwargs, autocommit=True)


def _row(cursor: psycopg.Cursor[Any]) -> tuple[Any, ...]:
    """A statement's one row (an aggregate has one)."""
    row = cursor.fetchone()
    if row is None:
        raise RuntimeError("the statement returned no row")
    return row


def _kept_after_compaction(compaction: int, covers: int, export: int) -> bool:
    """A day's folder that stays once its compaction is old enough: the compaction's own (-id) and
    the attempts after those it covers."""
    return export == -compaction or export > covers


def _snapshot_kept(holder: int, old: bool, dead: set[int], export: int) -> bool:
    """A day's snapshot folder that stays: the holder's; an earlier one until the holder is old
    enough; a later one until its attempt is known dead (an export may be writing it)."""
    return export == holder or (export < holder and not old) or (export > holder and export not in dead)


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


def lake_state(db: Database, date_from: date | None = None, date_to: date | None = None) -> LakeState:
    """The lake's state, with the compactions of [date_from, date_to] (none when not given)."""
    with _connect_pg(db) as pg:
        watermark, last = _row(
            pg.execute(
                f"SELECT COALESCE(MAX(hi_id), 0), COALESCE(MAX(id), 0) FROM {EXPORT_TABLE} WHERE state = 'committed'"
            )
        )
        abandoned = pg.execute(
            f"SELECT id FROM {EXPORT_TABLE} WHERE state = 'abandoned' AND day IS NULL AND id < %s ORDER BY id",
            (last,),
        ).fetchall()
        compacted: dict[date, tuple[int, int]] = {}
        if date_from is not None and date_to is not None:
            for day, compaction, covers in pg.execute(
                f"SELECT DISTINCT ON (day) day, id, covers FROM {EXPORT_TABLE}"
                " WHERE state = 'compacted' AND day BETWEEN %s AND %s ORDER BY day, id DESC",
                (date_from, date_to),
            ):
                compacted[day] = (int(compaction), int(covers))
        snapshots = pg.execute(
            f"SELECT inputs_from, MAX(id) FROM {EXPORT_TABLE} WHERE state = 'committed' GROUP BY inputs_from"
        ).fetchall()
    return LakeState(
        int(watermark),
        int(last),
        tuple(int(r[0]) for r in abandoned),
        compacted,
        tuple((since, int(export)) for since, export in snapshots),
    )


@dataclass(frozen=True)
class Attempt:
    export: int
    lo: int  # exclusive
    hi: int  # inclusive
    inputs_from: date | None = None  # the inputs snapshot's first day (None: every day)


@contextmanager
def _exclusive(db: Database, key: int = LOCK_KEY) -> Iterator[psycopg.Connection]:
    """One export (or compaction) at a time, for as long as the job lives (released by the server
    when it dies)."""
    with _connect_pg(db) as pg:
        pg.execute("SELECT pg_advisory_lock(%s)", (key,))
        try:
            yield pg
        finally:
            pg.execute("SELECT pg_advisory_unlock(%s)", (key,))


def _begin(pg: psycopg.Connection) -> tuple[Attempt, int]:
    """Abandon an interrupted attempt, then record the next one over (watermark, MAX(id)] (an empty
    range when nothing is new: the inputs' snapshot is taken all the same); returns it and how many
    attempts were abandoned."""
    now = datetime.now(UTC)
    abandon = f"UPDATE {EXPORT_TABLE} SET state = 'abandoned', finished_at = %s WHERE state = 'pending' AND day IS NULL"
    previous = f"SELECT COALESCE(MAX(hi_id), 0), MAX(started_at) FROM {EXPORT_TABLE} WHERE state = 'committed'"
    insert = (
        f"INSERT INTO {EXPORT_TABLE} (lo_id, hi_id, state, rows, started_at, inputs_from)"
        " VALUES (%s, %s, 'pending', 0, %s, %s) RETURNING id"
    )
    with pg.transaction():
        abandoned = pg.execute(abandon, (now,)).rowcount
        lo, since = _row(pg.execute(previous))
        pg.execute(f"LOCK TABLE {METER_TABLE} IN SHARE MODE")
        hi = max(lo, _scalar(pg.execute(f"SELECT COALESCE(MAX(id), 0) FROM {METER_TABLE}")))
        inputs_from = (since - SNAPSHOT_MARGIN).astimezone(UTC).date() if since else None
        export = _scalar(pg.execute(insert, (lo, hi, now, inputs_from)))
    return Attempt(int(export), int(lo), int(hi), inputs_from), abandoned


def _commit(pg: psycopg.Connection, attempt: Attempt, stats: dict, state: str = "committed") -> None:
    sql = (
        f"UPDATE {EXPORT_TABLE} SET state = %s, rows = %s, first_at = %s, last_at = %s, finished_at = %s"
        " WHERE id = %s AND state = 'pending'"
    )
    first, last = stats.get("first_at"), stats.get("last_at")
    utc = [v.replace(tzinfo=UTC) if v is not None and v.tzinfo is None else v for v in (first, last)]
    updated = pg.execute(sql, (state, stats["rows"], *utc, datetime.now(UTC), attempt.export)).rowcount
    if updated != 1:
        raise RuntimeError(f"export {attempt.export} was no longer pending")


def read_range(spark: SparkSession, db: Database, attempt: Attempt) -> DataFrame:
    """The metering rows (lo, hi] over JDBC, one query per id range (extract.read_ranges), typed."""
    columns = ", ".join(c for c, _ in SCHEMAS["meter_rows"])
    rows = Rows(f"FROM {METER_TABLE} WHERE id > {attempt.lo} AND id <= {attempt.hi}", "id")
    size = attempt.hi - attempt.lo  # ids are dense: at most this many rows
    frame = read_ranges(spark, db, Read("meter_rows", columns), rows, (attempt.lo + 1, attempt.hi, size), "meter_rows")
    return typed(frame, "meter_rows")


def _write_meters(spark: SparkSession, frame: DataFrame, lake: str) -> None:
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
    snapshot (the module's docstring); returns what it did. `on_writing` / `after_write` are called
    around the write."""
    lake = lake or lake_uri()
    started = time.perf_counter()
    with _exclusive(db) as pg:
        attempt, abandoned = _begin(pg)
        if on_writing:
            on_writing(attempt)
        stats: dict = {"rows": 0}
        if attempt.hi > attempt.lo:
            rows = read_range(spark, db, attempt)
            out = rows.withColumn("day", F.to_date("at")).withColumn("export", F.lit(attempt.export).cast("long"))
            _write_meters(spark, out, lake)
        write_inputs(lake, attempt.export, input_snapshot(db, attempt.inputs_from))
        if after_write:
            after_write(attempt)
        if attempt.hi > attempt.lo:
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


def write_inputs(lake: str, export: int, snapshot: dict[date, list[tuple]]) -> None:
    """The inputs' snapshot of attempt `export`: one small Parquet file per day, written by the job."""
    filesystem, root = pafs.FileSystem.from_uri(_pyarrow_uri(inputs_uri(lake)))
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
        filesystem, name = pafs.FileSystem.from_uri(_pyarrow_uri(path))
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


def _day_folders(uri: str, date_from: date, date_to: date) -> list[str]:
    """The `day=` folders of [date_from, date_to] that exist under `uri` (one listing of its top)."""
    filesystem, root = pafs.FileSystem.from_uri(_pyarrow_uri(uri))
    try:
        entries = filesystem.get_file_info(pafs.FileSelector(root, allow_not_found=True))
    except FileNotFoundError:
        return []
    found = []
    for entry in entries:
        if entry.type == pafs.FileType.Directory and entry.base_name.startswith("day="):
            try:
                day = date.fromisoformat(entry.base_name[4:])
            except ValueError:
                continue
            if date_from <= day <= date_to:
                found.append(entry.base_name[4:])
    return sorted(found)


def _read_days(spark: SparkSession, uri: str, schema: StructType, days: list[str]) -> DataFrame:
    """The files of these day folders only (a glob: Spark lists nothing else of the lake)."""
    return spark.read.schema(schema).option("basePath", uri).parquet(f"{uri}/day={{{','.join(days)}}}")


def read_meters(
    spark: SparkSession,
    db: Database,
    date_from: date,
    date_to: date,
    tenant_ids: list[int] | None = None,
    lake: str | None = None,
    state: LakeState | None = None,
) -> DataFrame:
    """The committed metering rows of [date_from, date_to] (UTC days) from the lake, pruned to those
    days' and tenants' partitions (LAKE_SCHEMA; an empty frame before the first export)."""
    state = state or lake_state(db, date_from, date_to)
    root = meters_uri(lake or lake_uri())
    days = _day_folders(root, date_from, date_to) if state.last_export else []
    if not days:
        return spark.createDataFrame([], LAKE_SCHEMA)
    keep = (F.col("day") >= F.lit(date_from)) & (F.col("day") <= F.lit(date_to))
    keep &= state.visible(F.col("day"), F.col("export"))
    if tenant_ids:
        keep &= F.col("tenant_id").isin(*[int(t) for t in tenant_ids])
    return _read_days(spark, root, LAKE_SCHEMA, days).where(keep)


def read_inputs(
    spark: SparkSession,
    db: Database,
    date_from: date,
    date_to: date,
    tenant_ids: list[int] | None = None,
    lake: str | None = None,
    state: LakeState | None = None,
) -> DataFrame:
    """The inputs' snapshot rows of [date_from, date_to] from the lake: for each day, those of the
    last committed attempt that covers it (INPUTS_SCHEMA; an empty frame when there are none)."""
    state = state or lake_state(db, date_from, date_to)
    root = inputs_uri(lake or lake_uri())
    holders: dict[int, list[date]] = {}
    for name in _day_folders(root, date_from, date_to):
        day = date.fromisoformat(name)
        holder = state.holder(day)
        if holder is not None:
            holders.setdefault(holder, []).append(day)
    if not holders:
        return spark.createDataFrame([], INPUTS_SCHEMA)
    keep = reduce(
        lambda a, b: a | b,
        [(F.col("export") == F.lit(h)) & F.col("day").isin(*days) for h, days in sorted(holders.items())],
    )
    if tenant_ids:
        keep &= F.col("tenant_id").isin(*[int(t) for t in tenant_ids])
    days = sorted(d.isoformat() for ds in holders.values() for d in ds)
    return _read_days(spark, root, INPUTS_SCHEMA, days).where(keep)


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


def _days_to_compact(pg: psycopg.Connection, today: date) -> list[date]:
    """Closed days of the last COMPACT_LOOKBACK_DAYS with files of more than one export since their
    last compaction, or of any export since it."""
    since = today - timedelta(days=COMPACT_LOOKBACK_DAYS)
    exports = pg.execute(
        f"SELECT id, first_at, last_at FROM {EXPORT_TABLE}"
        " WHERE state = 'committed' AND rows > 0 AND last_at >= %s AND first_at < %s",
        (
            datetime(since.year, since.month, since.day, tzinfo=UTC),
            datetime(today.year, today.month, today.day, tzinfo=UTC),
        ),
    ).fetchall()
    covered: dict[date, int] = dict(
        pg.execute(
            f"SELECT DISTINCT ON (day) day, covers FROM {EXPORT_TABLE}"
            " WHERE state = 'compacted' AND day >= %s ORDER BY day, id DESC",
            (since,),
        ).fetchall()
    )
    days = []
    for i in range(COMPACT_LOOKBACK_DAYS):
        day = since + timedelta(days=i)
        newer = [
            e
            for e, first, last in exports
            if first.astimezone(UTC).date() <= day <= last.astimezone(UTC).date() and e > covered.get(day, 0)
        ]
        if len(newer) > 1 or (newer and day in covered):
            days.append(day)
    return days


def compact_day(
    spark: SparkSession,
    db: Database,
    pg: psycopg.Connection,
    lake: str,
    day: date,
    *,
    after_write: Callable[[Attempt], None] | None = None,
) -> dict:
    """Rewrite `day`'s metering files as readers see them into one compaction's folders, then switch
    readers to them in one UPDATE (the module's docstring). Holds the compaction's lock (`pg`);
    exports go on meanwhile (their rows are past `covers`: readers keep them)."""
    now = datetime.now(UTC)
    last = _scalar(pg.execute(f"SELECT COALESCE(MAX(id), 0) FROM {EXPORT_TABLE} WHERE state = 'committed'"))
    compaction = _scalar(
        pg.execute(
            f"INSERT INTO {EXPORT_TABLE} (lo_id, hi_id, state, rows, started_at, day, covers)"
            " VALUES (0, 0, 'pending', 0, %s, %s, %s) RETURNING id",
            (now, day, last),
        )
    )
    attempt = Attempt(int(compaction), 0, 0)
    rows = read_meters(spark, db, day, day, lake=lake)
    expected = rows.count()
    tasks = max_partitions()
    out = rows.withColumn("export", F.lit(-attempt.export).cast("long")).repartition(tasks, "tenant_id")
    _write_meters(spark, out, lake)
    if after_write:
        after_write(attempt)
    stats = written(spark, lake, -attempt.export, day)
    if stats["rows"] != expected:
        raise RuntimeError(f"compaction {attempt.export} of {day} wrote {stats['rows']} rows, not {expected}")
    _commit(pg, attempt, stats, state="compacted")
    return {"day": day.isoformat(), "compaction": attempt.export, "rows": expected}


def _delete_folders(uri: str, pattern_root: str, keep: Callable[[int], bool]) -> int:
    """Delete the `export=X` folders under `uri`/`pattern_root` (one level of `tenant_id=` folders or
    none) whose X `keep` refuses; returns how many."""
    filesystem, root = pafs.FileSystem.from_uri(_pyarrow_uri(uri))
    try:
        entries = filesystem.get_file_info(pafs.FileSelector(f"{root}/{pattern_root}", recursive=True))
    except FileNotFoundError:
        return 0
    deleted = 0
    for entry in entries:
        if entry.type == pafs.FileType.Directory and entry.base_name.startswith("export="):
            if not keep(int(entry.base_name[len("export=") :])):
                filesystem.delete_dir(entry.path)
                deleted += 1
    return deleted


def clean(
    pg: psycopg.Connection, lake: str, *, now: datetime | None = None, clean_after: timedelta = CLEAN_AFTER
) -> int:
    """Delete what committed compactions replaced and what later snapshots superseded, once that
    happened `clean_after` ago, and the files of dead attempts; returns how many folders went."""
    now = now or datetime.now(UTC)
    deleted = 0
    # The compactions of the days with one old enough and not cleaned yet. A day's files are deleted
    # only by its latest compaction once that is old enough itself (a report that began before it
    # may read what the one before it kept); an older one has nothing left of its own to delete.
    done = pg.execute(
        f"SELECT id, day, covers, finished_at < %(old)s, id = MAX(id) OVER (PARTITION BY day) FROM {EXPORT_TABLE}"
        f" WHERE state = 'compacted' AND day IN (SELECT day FROM {EXPORT_TABLE} WHERE state = 'compacted'"
        " AND cleaned_at IS NULL AND finished_at < %(old)s)",
        {"old": now - clean_after},
    ).fetchall()
    cleaned = []
    for compaction, day, covers, old, latest in done:
        if old and latest:
            deleted += _delete_folders(
                meters_uri(lake),
                f"day={day.isoformat()}",
                partial(_kept_after_compaction, compaction, covers),
            )
        if old:
            cleaned.append(compaction)
    if cleaned:
        pg.execute(
            f"UPDATE {EXPORT_TABLE} SET cleaned_at = %s WHERE id = ANY(%s) AND cleaned_at IS NULL", (now, cleaned)
        )
    # Snapshots: of the recent days (the only ones later attempts cover again).
    committed: dict[int, datetime | None] = dict(
        pg.execute(
            f"SELECT id, finished_at FROM {EXPORT_TABLE} WHERE state = 'committed' AND started_at >= %s",
            (now - timedelta(days=COMPACT_LOOKBACK_DAYS),),
        ).fetchall()
    )
    state_rows = pg.execute(
        f"SELECT inputs_from, MAX(id) FROM {EXPORT_TABLE} WHERE state = 'committed' GROUP BY inputs_from"
    ).fetchall()
    state = LakeState(0, 0, (), snapshots=tuple((since, int(e)) for since, e in state_rows))
    # A later attempt's folder is deleted only once it is known dead: an export may be writing it.
    dead = {
        int(r[0])
        for r in pg.execute(
            f"SELECT id FROM {EXPORT_TABLE} WHERE state = 'abandoned' AND started_at >= %s",
            (now - timedelta(days=COMPACT_LOOKBACK_DAYS),),
        )
    }
    today = now.date()
    for i in range(COMPACT_LOOKBACK_DAYS + 1):
        day = today - timedelta(days=i)
        holder = state.holder(day)
        if holder is None or holder not in committed:
            continue
        finished = committed[holder]
        old_enough = finished is not None and finished < now - clean_after
        deleted += _delete_folders(
            inputs_uri(lake),
            f"day={day.isoformat()}",
            partial(_snapshot_kept, holder, old_enough, dead),
        )
    return deleted


def compact(
    spark: SparkSession,
    db: Database,
    lake: str | None = None,
    *,
    today: date | None = None,
    now: datetime | None = None,
    clean_after: timedelta = CLEAN_AFTER,
    after_write: Callable[[Attempt], None] | None = None,
) -> dict:
    """Compact the closed days that need it, then clean what is old enough (the module's docstring)."""
    lake = lake or lake_uri()
    now = now or datetime.now(UTC)
    with _exclusive(db, COMPACT_LOCK_KEY) as pg:
        pg.execute(
            f"UPDATE {EXPORT_TABLE} SET state = 'abandoned', finished_at = %s WHERE state = 'pending' AND day IS NOT NULL",
            (now,),
        )
        compacted = [
            compact_day(spark, db, pg, lake, day, after_write=after_write)
            for day in _days_to_compact(pg, today or now.date())
        ]
        cleaned = clean(pg, lake, now=now, clean_after=clean_after)
    return {"compacted": compacted, "cleaned_folders": cleaned}


def drop_days(lake: str, keep_days: int, *, today: date | None = None) -> list[str]:
    """Delete the lake's day partitions older than `keep_days` days (whole directories, of the
    metering rows and of the inputs' snapshots); returns the metering rows' days dropped."""
    cutoff = (today or datetime.now(UTC).date()) - timedelta(days=keep_days)
    _drop_before(inputs_uri(lake), cutoff)
    return _drop_before(meters_uri(lake), cutoff)


def _drop_before(uri: str, cutoff: date) -> list[str]:
    filesystem, root = pafs.FileSystem.from_uri(_pyarrow_uri(uri))
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
