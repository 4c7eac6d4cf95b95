"""Extract: what the jobs read from the database, the only place they do. The metering rows' JDBC
read (partitioned id-range reads, lake_export.py) and the snapshot of the report's other inputs
(registrations, pending and stored events, aggregated per tenant and UTC day) that every export
writes into the lake beside the metering rows. A report reads the lake only.

Only metadata columns are selected; payloads, tags and signatures are never read.
PostgreSQL timestamps arrive as timestamps (session time zone UTC).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import UTC, date, datetime

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
from .transform import LATENCY_BUCKET_FLOOR, LATENCY_BUCKETS_PER_E

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
    # One metering row as the export reads it (lake_export.py) and the lake keeps it.
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
    # The report's other inputs per tenant and UTC day as the export snapshots them (lake_export.py): a
    # counts row (bucket, delivered and top_ms null) and the delivery latency histogram's rows
    # (acknowledged pending events per bucket of their creation-to-acknowledgement time, the
    # latency histogram's buckets, and the bucket's largest time; the counts null).
    "inputs": [
        ("tenant_id", LongType()),
        ("registrations", LongType()),
        ("pending_created", LongType()),
        ("stored_events", LongType()),
        ("stored_bytes", LongType()),
        ("bucket", LongType()),
        ("delivered", LongType()),
        ("top_ms", DoubleType()),
    ],
}
# Rows per JDBC partition: a small input is one JDBC read (one task); a large one is split into
# ranges of about this many rows, up to max_partitions() ranges read in parallel.
ROWS_PER_PARTITION = 250_000
# Rows the PostgreSQL driver fetches per round trip (it otherwise buffers a range's whole result).
FETCH_SIZE = 10_000


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
    `at`, then expects a few hundred rows and sorts instead of hashing (several times slower).
    prepareThreshold -1: the driver prepares the query on the server from its first execution, so
    the rows come in PostgreSQL's binary format (timestamps, integers, doubles neither formatted as
    text by the server nor parsed by the JVM). Each query runs once, in its own transaction, so a
    pooler in transaction mode keeps it whole."""
    custom = ", ".join(f"{c} {kind.simpleString()}" for c, kind in SCHEMAS[name])
    frames = []
    for start, stop in id_ranges(bounds, partitions or jdbc_partitions(bounds[2])):
        query = read.query(f"{rows.from_where} AND {rows.id_column} >= {start} AND {rows.id_column} < {stop}")
        frames.append(
            spark.read.format("jdbc")
            .options(
                url=db.url,
                dbtable=f"({query}) q",
                fetchsize=str(FETCH_SIZE),
                prepareThreshold="-1",
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


def max_partitions() -> int:
    """The most tasks the export reads (and compaction writes) in: SPARK_JDBC_PARTITIONS, by default
    this machine's cores, those of the local engine's executors (local[*]). A task reads, decodes
    and encodes its rows on one core; more tasks than cores only add connections, open files and
    scheduling, and cost CPU."""
    return max(1, env_int("SPARK_JDBC_PARTITIONS", os.cpu_count() or 1))


def jdbc_partitions(rows: int) -> int:
    """How many id ranges to read `rows` rows in: one per ROWS_PER_PARTITION rows (each range is one
    task, and a task costs scheduling on a busy box), at most max_partitions()."""
    return max(1, min(max_partitions(), -(-rows // ROWS_PER_PARTITION)))


def schema(name: str) -> StructType:
    return StructType([StructField(column, kind, True) for column, kind in SCHEMAS[name]])


def typed(df: DataFrame, name: str) -> DataFrame:
    """The frame's declared columns, cast to its declared types."""
    return df.select(*[F.col(column).cast(kind).alias(column) for column, kind in SCHEMAS[name]])


def input_snapshot(db: Database, since: date | None) -> dict[date, list[tuple]]:
    """The report's other inputs per tenant and UTC day, for the days from `since` on (every day when
    None), in SCHEMAS["inputs"] order, per day: registrations (contracts the identity owns and
    requested from this tenant's own DID, docs/protocol-readings.md §4, re-registrations included) and
    stored events per day of creation, pending events created per day of creation and delivered per
    day of acknowledgement (the histogram of their delivery time). Four small GROUP BYs in one
    session of the job."""
    lo = datetime(since.year, since.month, since.day, tzinfo=UTC) if since else datetime.min.replace(tzinfo=UTC)
    day = "(({}) AT TIME ZONE 'UTC')::date"
    queries = [
        # (query, where its figures go in the counts row)
        (
            f"SELECT c.tenant_id, {day.format('c.created_at')}, count(*) FROM messaging_contract c"
            " JOIN tenants_tenant t ON t.id = c.tenant_id"
            " WHERE c.owner_did = c.requestor_did AND c.recipient_did = t.did AND c.created_at >= %(lo)s GROUP BY 1, 2",
            [1],
        ),
        (
            f"SELECT tenant_id, {day.format('created_at')}, count(*) FROM messaging_pendingevent"
            " WHERE created_at >= %(lo)s GROUP BY 1, 2",
            [2],
        ),
        (
            f"SELECT tenant_id, {day.format('created_at')}, count(*), sum(payload_bytes) FROM messaging_storedevent"
            " WHERE created_at >= %(lo)s GROUP BY 1, 2",
            [3, 4],
        ),
    ]
    histogram = (
        f"SELECT tenant_id, d, CASE WHEN ms > 0 THEN floor(ln(ms) * {LATENCY_BUCKETS_PER_E})::bigint"
        f" ELSE {LATENCY_BUCKET_FLOOR} END, count(*), max(ms)"
        f" FROM (SELECT tenant_id, {day.format('acknowledged_at')} d,"
        " (extract(epoch FROM acknowledged_at - created_at) * 1000)::float8 ms"
        " FROM messaging_pendingevent WHERE acknowledged_at >= %(lo)s) p GROUP BY 1, 2, 3"
    )
    counts: dict[tuple[int, date], list] = {}
    out: dict[date, list[tuple]] = {}
    with psycopg.connect(**db.connect_kwargs) as pg:
        for query, slots in queries:
            for tenant, d, *values in pg.execute(query, {"lo": lo}):
                row = counts.setdefault((tenant, d), [tenant, 0, 0, 0, 0, None, None, None])
                for slot, value in zip(slots, values, strict=True):
                    row[slot] = int(value or 0)
        for tenant, d, bucket, n, top in pg.execute(histogram, {"lo": lo}):
            out.setdefault(d, []).append((tenant, None, None, None, None, int(bucket), int(n), float(top)))
    for (_, d), row in counts.items():
        out.setdefault(d, []).append(tuple(row))
    return out
