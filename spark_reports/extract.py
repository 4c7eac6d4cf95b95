"""Extract: the report's inputs over JDBC, with partitioned reads on each table's bigint id.

Only metadata columns are selected; payloads, tags and signatures are never read.
PostgreSQL timestamps arrive as timestamps. SQLite stores Django datetimes as UTC text
("YYYY-MM-DD HH:MM:SS[.ffffff]"), so they are read as text and parsed here (session time zone UTC).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, timedelta

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    DataType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from .config import Database, env_int

# Every input's columns and types as the transform sees them, whatever the database: a JDBC read is
# cast to these, and an input that the bounds query says is empty is an empty local DataFrame of
# them (no JDBC read, no Spark job). Declared here so that nothing asks the engine for a schema.
SCHEMAS: dict[str, list[tuple[str, DataType]]] = {
    "meters": [
        ("tenant_id", LongType()),
        ("at", TimestampType()),
        ("protocol", StringType()),
        ("command_type", StringType()),
        ("code", StringType()),
        ("http_status", IntegerType()),
        ("bytes_in", LongType()),
        ("bytes_out", LongType()),
        ("duration_ms", DoubleType()),
        ("sender_did", StringType()),
    ],
    "registrations": [("tenant_id", LongType()), ("created_at", TimestampType())],
    "pending": [("tenant_id", LongType()), ("created_at", TimestampType()), ("acknowledged_at", TimestampType())],
    "stored": [("tenant_id", LongType()), ("created_at", TimestampType()), ("payload_bytes", LongType())],
}
# Rows per JDBC partition: a small input is one JDBC read (one task); a large one is split into
# ranges of about this many rows, up to SPARK_JDBC_PARTITIONS ranges read in parallel.
ROWS_PER_PARTITION = 250_000


@dataclass(frozen=True)
class ReportInputs:
    """The four inputs of `transform.usage_report`, with normalised column types."""

    meters: DataFrame  # tenant_id, at, protocol, command_type, code, http_status, bytes_in, bytes_out, duration_ms, sender_did
    registrations: DataFrame  # tenant_id, created_at
    pending: DataFrame  # tenant_id, created_at, acknowledged_at
    stored: DataFrame  # tenant_id, created_at, payload_bytes


def _ts_literal(db: Database, d: date) -> str:
    # Both are safe literals built from a date object, never from user text.
    if db.is_sqlite:
        return f"'{d.isoformat()} 00:00:00'"
    return f"TIMESTAMPTZ '{d.isoformat()} 00:00:00+00'"


def _ts(db: Database, column: str) -> str:
    """The column as the job wants to read it: text on SQLite, a timestamp on PostgreSQL."""
    name = column.split(".")[-1]
    return f"CAST({column} AS TEXT) AS {name}" if db.is_sqlite else f"{column} AS {name}"


def _tenant_filter(column: str, tenant_ids: list[int] | None) -> str:
    if not tenant_ids:
        return ""
    return f" AND {column} IN ({','.join(str(int(t)) for t in tenant_ids)})"


Bounds = tuple[int | None, int | None, int]  # MIN(id), MAX(id), COUNT(*)


def _bounds(spark: SparkSession, db: Database, queries: dict[str, str]) -> dict[str, Bounds]:
    """MIN(id), MAX(id), COUNT(*) of every query, in ONE small JDBC query (one Spark job instead
    of one per input: each job costs a round of scheduling, issue 17)."""
    union = " UNION ALL ".join(
        f"SELECT '{name}' AS name, MIN(id) AS lo, MAX(id) AS hi, COUNT(*) AS n FROM ({query}) b"
        for name, query in queries.items()
    )
    rows = (
        spark.read.format("jdbc")
        # SQLite's driver guesses types from the first row; say what the columns are.
        .options(
            url=db.url, dbtable=f"({union}) q", customSchema="name STRING, lo LONG, hi LONG, n LONG", **db.properties
        )
        .load()
        .collect()
    )
    out: dict[str, Bounds] = {}
    for row in rows:
        n = int(row["n"] or 0)
        out[row["name"]] = (int(row["lo"]), int(row["hi"]), n) if n else (None, None, 0)
    return out


def read_partitioned(
    spark: SparkSession,
    db: Database,
    query: str,
    bounds: Bounds,
    *,
    text_columns: tuple[str, ...] = (),
    partitions: int | None = None,
) -> DataFrame:
    """`query` (which selects an `id` column) read in id ranges, one JDBC connection per range
    (`jdbc_partitions` of them unless told).

    fetchsize 10 000: the PostgreSQL driver otherwise buffers the whole result of a range in memory."""
    lo, hi, n = bounds
    partitions = partitions or jdbc_partitions(n)
    reader = spark.read.format("jdbc").options(url=db.url, dbtable=f"({query}) q", fetchsize="10000", **db.properties)
    if db.is_sqlite and text_columns:
        # SQLite's driver guesses a column's type from its declaration (datetime -> NUMERIC); read the text.
        reader = reader.option("customSchema", ", ".join(f"{c} STRING" for c in text_columns))
    if n and partitions > 1 and lo is not None and hi is not None and hi > lo:
        reader = reader.options(
            partitionColumn="id", lowerBound=str(lo), upperBound=str(hi + 1), numPartitions=str(min(partitions, n))
        )
    return reader.load()


def jdbc_partitions(rows: int) -> int:
    """How many id ranges to read `rows` rows in: one per ROWS_PER_PARTITION rows (each range is one
    task, and a task costs scheduling on a busy box), at most SPARK_JDBC_PARTITIONS (default 4)."""
    most = max(1, env_int("SPARK_JDBC_PARTITIONS", 4))
    return max(1, min(most, -(-rows // ROWS_PER_PARTITION)))


def schema(name: str) -> StructType:
    return StructType([StructField(column, kind, True) for column, kind in SCHEMAS[name]])


def _typed(df: DataFrame, name: str) -> DataFrame:
    """The input's declared columns, cast to its declared types (SQLite's timestamps are text)."""
    return df.select(*[F.col(column).cast(kind).alias(column) for column, kind in SCHEMAS[name]])


def extract(
    spark: SparkSession, db: Database, date_from: date, date_to: date, tenant_ids: list[int] | None = None
) -> tuple[ReportInputs, dict[str, int]]:
    """Read metering, registrations, pending and stored events for [date_from, date_to] (UTC days); also
    returns how many rows each input holds (known before any row is read: progress shows it)."""
    lo = _ts_literal(db, date_from)
    hi = _ts_literal(db, date_to + timedelta(days=1))
    queries = {
        "meters": f"SELECT id, tenant_id, {_ts(db, 'at')}, protocol, command_type, code, http_status, bytes_in,"
        f" bytes_out, duration_ms, sender_did FROM usage_commandmeter"
        f" WHERE at >= {lo} AND at < {hi}{_tenant_filter('tenant_id', tenant_ids)}",
        # A registration is a contract the identity owns and requested from this tenant's own DID
        # (PROTOCOL-DECISIONS §4); each one stored in the range counts, re-registrations included.
        "registrations": f"SELECT c.id AS id, c.tenant_id AS tenant_id, {_ts(db, 'c.created_at')} FROM messaging_contract c"
        " JOIN tenants_tenant t ON t.id = c.tenant_id"
        " WHERE c.owner_did = c.requestor_did AND c.recipient_did = t.did"
        f" AND c.created_at >= {lo} AND c.created_at < {hi}{_tenant_filter('c.tenant_id', tenant_ids)}",
        "pending": f"SELECT id, tenant_id, {_ts(db, 'created_at')}, {_ts(db, 'acknowledged_at')} FROM messaging_pendingevent"
        f" WHERE ((created_at >= {lo} AND created_at < {hi}) OR (acknowledged_at >= {lo} AND acknowledged_at < {hi}))"
        f"{_tenant_filter('tenant_id', tenant_ids)}",
        "stored": f"SELECT id, tenant_id, {_ts(db, 'created_at')}, payload_bytes FROM messaging_storedevent"
        f" WHERE created_at >= {lo} AND created_at < {hi}{_tenant_filter('tenant_id', tenant_ids)}",
    }
    text = {
        "meters": ("at",),
        "registrations": ("created_at",),
        "pending": ("created_at", "acknowledged_at"),
        "stored": ("created_at",),
    }
    bounds = _bounds(spark, db, queries)
    frames = {
        # An input the bounds say is empty is not read at all (its JDBC read would still cost a task).
        name: _typed(read_partitioned(spark, db, query, bounds[name], text_columns=text[name]), name)
        if bounds[name][2]
        else spark.createDataFrame([], schema(name))
        for name, query in queries.items()
    }
    # Not cached: the transform reads the metering rows once per pass, and caching 1M rows cost more
    # than reading them again (issue 17).
    return ReportInputs(**frames), {name: b[2] for name, b in bounds.items()}
