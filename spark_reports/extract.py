"""Extract: the report's database inputs over JDBC, with partitioned reads on each table's bigint id,
and the metering rows' JDBC read of the lake's export (lake.py).

Only metadata columns are selected; payloads, tags and signatures are never read.
PostgreSQL timestamps arrive as timestamps (session time zone UTC).

The metering rows are not read by a report: the export (lake.py) reads each of them once, into the
Parquet lake, and the report aggregates the lake's files in Spark (transform.meter_partials). A
report still reads registrations, pending and stored events here.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, timedelta

import psycopg
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    DataType,
    DateType,
    DoubleType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from .config import Database, env_int
from .transform import LATENCY_BUCKET_FLOOR, LATENCY_BUCKETS_PER_E  # noqa: F401 - the histogram's definition, re-exported

# Every input's columns and types as the transform sees them, whatever the database: a JDBC read is
# cast to these, and an input that the bounds query says is empty is an empty local DataFrame of
# them (no JDBC read, no Spark job). Declared here so that nothing asks the engine for a schema.
SCHEMAS: dict[str, list[tuple[str, DataType]]] = {
    # Both partial aggregates of the metering rows in one frame: `histogram` says which a row is
    # (0: counts, whose bucket and top_ms are null; 1: latency, whose protocol..sender_did and
    # bytes are null).
    "meters": [
        ("histogram", LongType()),
        ("tenant_id", LongType()),
        ("day", DateType()),
        ("protocol", StringType()),
        ("command_type", StringType()),
        ("code", StringType()),
        ("sender_did", StringType()),
        ("bucket", LongType()),
        ("commands", LongType()),
        ("bytes_in", LongType()),
        ("bytes_out", LongType()),
        ("top_ms", DoubleType()),
    ],
    "counts": [
        ("tenant_id", LongType()),
        ("day", DateType()),
        ("protocol", StringType()),
        ("command_type", StringType()),
        ("code", StringType()),
        ("sender_did", StringType()),
        ("commands", LongType()),
        ("bytes_in", LongType()),
        ("bytes_out", LongType()),
    ],
    "latency": [
        ("tenant_id", LongType()),
        ("day", DateType()),
        ("bucket", LongType()),
        ("commands", LongType()),
        ("top_ms", DoubleType()),
    ],
    # One metering row as the export reads it (lake.py) and the lake keeps it.
    "meter_rows": [
        ("id", LongType()),
        ("tenant_id", LongType()),
        ("at", TimestampType()),
        ("transport", StringType()),
        ("protocol", StringType()),
        ("channel", StringType()),
        ("command_type", StringType()),
        ("code", StringType()),
        ("http_status", LongType()),
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
    """The inputs of the report, with normalised column types."""

    registrations: DataFrame  # tenant_id, created_at
    pending: DataFrame  # tenant_id, created_at, acknowledged_at
    stored: DataFrame  # tenant_id, created_at, payload_bytes


def _ts_literal(d: date) -> str:
    # A safe literal built from a date object, never from user text.
    return f"TIMESTAMPTZ '{d.isoformat()} 00:00:00+00'"


def _tenant_filter(column: str, tenant_ids: list[int] | None) -> str:
    if not tenant_ids:
        return ""
    return f" AND {column} IN ({','.join(str(int(t)) for t in tenant_ids)})"


Bounds = tuple[int | None, int | None, int]  # MIN(id), MAX(id), COUNT(*)


@dataclass(frozen=True)
class Rows:
    """One input's rows in the report's range: `FROM ... WHERE ...` and the bigint id to split it on."""

    from_where: str
    id_column: str


@dataclass(frozen=True)
class Read:
    """One frame read from an input's rows: its SELECT list and GROUP BY (partial aggregates) or none;
    `inner`: select from a derived table of the rows with these columns; `then`: UNION ALL this read."""

    rows: str  # the input, a key of the Rows dict
    select: str
    group_by: str = ""
    inner: str = ""
    then: Read | None = None

    def query(self, where: str) -> str:
        """The query over the rows `where` (`FROM ... WHERE ...`) selects."""
        source = f"FROM (SELECT {self.inner} {where}) m" if self.inner else where
        tail = f" UNION ALL {self.then.query(where)}" if self.then else ""
        return f"SELECT {self.select} {source}{self.group_by}{tail}"


def _bounds(db: Database, rows: dict[str, Rows]) -> dict[str, Bounds]:
    """MIN(id), MAX(id), COUNT(*) of every input, in ONE small query that the job process sends
    itself (as load.write_rows does): a Spark JDBC read of it cost a Spark job, 0.3-1 s of
    scheduling on a busy box, for four rows (issue 17)."""
    union = " UNION ALL ".join(
        f"SELECT '{name}' AS name, MIN({r.id_column}) AS lo, MAX({r.id_column}) AS hi, COUNT(*) AS n {r.from_where}"
        for name, r in rows.items()
    )
    with psycopg.connect(**db.connect_kwargs) as pg:
        found = pg.execute(union).fetchall()
    out: dict[str, Bounds] = {}
    for name, lo, hi, n in found:
        out[name] = (int(lo), int(hi), int(n)) if n else (None, None, 0)
    return out


def id_ranges(bounds: Bounds, partitions: int) -> list[tuple[int, int]]:
    """[lo, hi] split into `partitions` half-open id ranges of equal width that cover it exactly."""
    lo, hi, n = bounds
    if not n or lo is None or hi is None:
        return []
    parts = max(1, min(partitions, n, hi - lo + 1))
    width = -(-(hi + 1 - lo) // parts)
    return [(start, min(start + width, hi + 1)) for start in range(lo, hi + 1, width)]


def read_ranges(
    spark: SparkSession, db: Database, read: Read, rows: Rows, bounds: Bounds, name: str, partitions: int | None = None
) -> DataFrame:
    """`read` over the input's rows, one JDBC query per id range (`jdbc_partitions` of them unless
    told), unioned: one Spark partition (one task, one connection) per range. The range is a
    condition INSIDE the query, so a GROUP BY aggregates each range on its own (partial aggregates
    that the transform merges), unlike Spark's own partitionColumn, which filters the query's result.

    fetchsize 10 000: the PostgreSQL driver otherwise buffers the whole result of a range in memory.
    customSchema: the declared types.
    pushDownPredicate false: the database runs exactly the query written here. Spark would otherwise
    wrap the transform's day filter around a GROUP BY, and PostgreSQL, pushing it inside as a cast of
    `at`, then expects a few hundred rows and sorts instead of hashing (2-5x slower at 1M rows)."""
    custom = ", ".join(f"{c} {kind.simpleString()}" for c, kind in SCHEMAS[name])
    frames = []
    for start, stop in id_ranges(bounds, partitions or jdbc_partitions(bounds[2])):
        query = read.query(f"{rows.from_where} AND {rows.id_column} >= {start} AND {rows.id_column} < {stop}")
        frames.append(
            spark.read.format("jdbc")
            .options(
                url=db.url,
                dbtable=f"({query}) q",
                fetchsize="10000",
                customSchema=custom,
                pushDownPredicate="false",
                **db.properties,
            )
            .load()
        )
    union = frames[0]
    for frame in frames[1:]:
        union = union.unionByName(frame)
    return union


def jdbc_partitions(rows: int) -> int:
    """How many id ranges to read `rows` rows in: one per ROWS_PER_PARTITION rows (each range is one
    task, and a task costs scheduling on a busy box), at most SPARK_JDBC_PARTITIONS (default 4)."""
    most = max(1, env_int("SPARK_JDBC_PARTITIONS", 4))
    return max(1, min(most, -(-rows // ROWS_PER_PARTITION)))


def schema(name: str) -> StructType:
    return StructType([StructField(column, kind, True) for column, kind in SCHEMAS[name]])


def typed(df: DataFrame, name: str) -> DataFrame:
    """The frame's declared columns, cast to its declared types."""
    return df.select(*[F.col(column).cast(kind).alias(column) for column, kind in SCHEMAS[name]])


def extract(
    spark: SparkSession, db: Database, date_from: date, date_to: date, tenant_ids: list[int] | None = None
) -> tuple[ReportInputs, dict[str, int]]:
    """Read registrations, pending and stored events for
    [date_from, date_to] (UTC days); also returns how many rows each input holds (known before any
    row is read: progress shows it)."""
    lo = _ts_literal(date_from)
    hi = _ts_literal(date_to + timedelta(days=1))
    rows = {
        # A registration is a contract the identity owns and requested from this tenant's own DID
        # (PROTOCOL-DECISIONS §4); each one stored in the range counts, re-registrations included.
        "registrations": Rows(
            "FROM messaging_contract c JOIN tenants_tenant t ON t.id = c.tenant_id"
            " WHERE c.owner_did = c.requestor_did AND c.recipient_did = t.did"
            f" AND c.created_at >= {lo} AND c.created_at < {hi}{_tenant_filter('c.tenant_id', tenant_ids)}",
            "c.id",
        ),
        "pending": Rows(
            "FROM messaging_pendingevent"
            f" WHERE ((created_at >= {lo} AND created_at < {hi}) OR (acknowledged_at >= {lo} AND acknowledged_at < {hi}))"
            f"{_tenant_filter('tenant_id', tenant_ids)}",
            "id",
        ),
        "stored": Rows(
            f"FROM messaging_storedevent WHERE created_at >= {lo} AND created_at < {hi}"
            f"{_tenant_filter('tenant_id', tenant_ids)}",
            "id",
        ),
    }
    reads = {
        "registrations": Read("registrations", "c.tenant_id AS tenant_id, c.created_at AS created_at"),
        "pending": Read("pending", "tenant_id, created_at, acknowledged_at"),
        "stored": Read("stored", "tenant_id, created_at, payload_bytes"),
    }
    bounds = _bounds(db, rows)
    frames = {
        # An input the bounds say is empty is not read at all (its JDBC read would still cost a task).
        name: typed(read_ranges(spark, db, read, rows[read.rows], bounds[read.rows], name), name)
        if bounds[read.rows][2]
        else spark.createDataFrame([], schema(name))
        for name, read in reads.items()
    }
    return ReportInputs(**frames), {name: b[2] for name, b in bounds.items()}
