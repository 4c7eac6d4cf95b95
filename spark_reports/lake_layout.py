"""The lake's layout (docs/usage.md "The metering lake"): where it lives, its folders, the schemas and
partitions of its rows, and the filesystem URIs pyarrow opens it by."""

from __future__ import annotations

import os

from pyspark.sql.types import DateType, LongType, StructField, StructType

from .config import ROOT
from .extract import SCHEMAS

PARTITIONS = ["day", "tenant_id", "export"]
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


def lake_uri() -> str:
    """Where the lake lives: USAGE_LAKE_URI (a Hadoop filesystem URI or a local path), else var/lake/."""
    return os.environ.get("USAGE_LAKE_URI", "").strip() or str(ROOT / "var" / "lake")


def meters_uri(lake: str) -> str:
    return lake.rstrip("/") + "/meters"


def inputs_uri(lake: str) -> str:
    return lake.rstrip("/") + "/inputs"


def pyarrow_uri(uri: str) -> str:
    """pyarrow names Hadoop's s3a:// filesystem s3://; a plain path is a local one."""
    if uri.startswith("s3a://"):
        return "s3://" + uri[len("s3a://") :]
    return uri if "://" in uri else "file://" + os.path.abspath(uri)
