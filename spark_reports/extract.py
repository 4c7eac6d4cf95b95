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

from .config import Database, env_int


@dataclass(frozen=True)
class ReportInputs:
    """The four inputs of `transform.usage_report`, with normalised column types."""

    meters: DataFrame  # tenant_id, at, command_type, code, http_status, bytes_in, bytes_out, duration_ms, sender_did
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


def read_partitioned(spark: SparkSession, db: Database, query: str, *, partitions: int | None = None) -> DataFrame:
    """`query` (which selects an `id` column) read in id ranges, one JDBC connection per range."""
    partitions = partitions or env_int("SPARK_JDBC_PARTITIONS", 4)
    bounds = (
        spark.read.format("jdbc")
        .options(
            url=db.url,
            dbtable=f"(SELECT MIN(id) AS lo, MAX(id) AS hi, COUNT(*) AS n FROM ({query}) b) q",
            **db.properties,
        )
        .load()
        .collect()[0]
    )
    reader = spark.read.format("jdbc").options(url=db.url, dbtable=f"({query}) q", fetchsize="10000", **db.properties)
    if bounds["n"] and int(bounds["n"]) > 0 and partitions > 1 and bounds["hi"] > bounds["lo"]:
        reader = reader.options(
            partitionColumn="id",
            lowerBound=str(int(bounds["lo"])),
            upperBound=str(int(bounds["hi"]) + 1),
            numPartitions=str(partitions),
        )
    return reader.load()


def _as_timestamp(df: DataFrame, *columns: str) -> DataFrame:
    for c in columns:
        df = df.withColumn(c, F.col(c).cast("timestamp"))
    return df


def extract(
    spark: SparkSession, db: Database, date_from: date, date_to: date, tenant_ids: list[int] | None = None
) -> ReportInputs:
    """Read metering, registrations, pending and stored events for [date_from, date_to] (UTC days)."""
    lo = _ts_literal(db, date_from)
    hi = _ts_literal(db, date_to + timedelta(days=1))
    meters = read_partitioned(
        spark,
        db,
        f"SELECT id, tenant_id, {_ts(db, 'at')}, command_type, code, http_status, bytes_in, bytes_out, duration_ms, sender_did"
        f" FROM usage_commandmeter WHERE at >= {lo} AND at < {hi}{_tenant_filter('tenant_id', tenant_ids)}",
    )
    # A registration is a contract the identity owns and requested from this tenant's own DID
    # (PROTOCOL-DECISIONS §4); each one stored in the range counts, re-registrations included.
    registrations = read_partitioned(
        spark,
        db,
        f"SELECT c.id AS id, c.tenant_id AS tenant_id, {_ts(db, 'c.created_at')} FROM messaging_contract c"
        " JOIN tenants_tenant t ON t.id = c.tenant_id"
        " WHERE c.owner_did = c.requestor_did AND c.recipient_did = t.did"
        f" AND c.created_at >= {lo} AND c.created_at < {hi}{_tenant_filter('c.tenant_id', tenant_ids)}",
    )
    pending = read_partitioned(
        spark,
        db,
        f"SELECT id, tenant_id, {_ts(db, 'created_at')}, {_ts(db, 'acknowledged_at')} FROM messaging_pendingevent"
        f" WHERE ((created_at >= {lo} AND created_at < {hi}) OR (acknowledged_at >= {lo} AND acknowledged_at < {hi}))"
        f"{_tenant_filter('tenant_id', tenant_ids)}",
    )
    stored = read_partitioned(
        spark,
        db,
        f"SELECT id, tenant_id, {_ts(db, 'created_at')}, payload_bytes FROM messaging_storedevent"
        f" WHERE created_at >= {lo} AND created_at < {hi}{_tenant_filter('tenant_id', tenant_ids)}",
    )
    return ReportInputs(
        meters=_as_timestamp(meters, "at").drop("id"),
        registrations=_as_timestamp(registrations, "created_at").drop("id"),
        pending=_as_timestamp(pending, "created_at", "acknowledged_at").drop("id"),
        stored=_as_timestamp(stored, "created_at").drop("id"),
    )
