"""What a report reads from the lake (docs/usage.md "The metering lake"): the committed metering rows and
inputs' snapshots of its days and tenants, pruned to their folders before any file is opened."""

from __future__ import annotations

from datetime import date
from functools import reduce

from pyarrow import fs as pafs
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from .config import Database
from .lake_layout import INPUTS_SCHEMA, LAKE_SCHEMA, inputs_uri, lake_uri, meters_uri, pyarrow_uri
from .lake_log import LakeState, lake_state


def _day_folders(uri: str, date_from: date, date_to: date) -> list[str]:
    """The `day=` folders of [date_from, date_to] that exist under `uri` (one listing of its top)."""
    filesystem, root = pafs.FileSystem.from_uri(pyarrow_uri(uri))
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
