"""Transform: pure DataFrame -> DataFrame functions, no I/O, no Django (docs/contributing.md §13).

Per tenant and UTC day:
- daily: commands, errors (a code other than SUCCESS and EVICTED), error rate, bytes in/out, p50/p95
  command latency, distinct active identities (senders with at least one successful command:
  SUCCESS or EVICTED), new registrations,
  pending events created and delivered (acknowledged), p50/p95 delivery latency
  (created -> acknowledged, by the day of acknowledgement), stored-event count and bytes;
- by_type: commands and errors per protocol and command type ("(unparsed)" when the envelope did
  not parse; protocol "decentrl" for rows metered before the column existed);
- by_code: every code other than SUCCESS (the errors, and EVICTED on its own row) with its count and
  share of that day's commands;
- top: the ten sender DIDs with the most commands (ties: more bytes, then DID order).

Inputs: the metering rows arrive as rows from the Parquet lake (lake_read.py), which `meter_partials`
aggregates in ONE scan into two kinds of aggregates (a grouping set each); registrations, pending
and stored events arrive as the export's per tenant and day snapshot of them (extract.SCHEMAS
["inputs"]: counts, and the delivery latency histogram in the same buckets as command latency).
- `command_counts` merges the per-range (tenant, day, protocol, type, code, sender) counts into one
  table a few thousand times smaller than the rows, from which daily counts, by_type, by_code and
  top are all derived;
- `command_latency` merges the per-range latency histograms (tenant, day, bucket: commands and the
  bucket's largest duration) and reads p50/p95 off them.

Command latency percentiles: the nearest-rank percentile (PostgreSQL's percentile_disc) is the
value of rank r = ceil(q * n). Cumulative counts over the buckets in order find the bucket holding
rank r exactly; the report gives that bucket's largest duration. Both lie in one bucket
[e^(b/1000), e^((b+1)/1000)), so the reported value v' and the exact one v satisfy
v <= v' < v * e^(1/1000): at most 0.1 % (0.10005 %) above, never below, and always a duration of
the data (exact when the bucket holds one distinct duration).
Delivery latency percentiles (created -> acknowledged) are read the same way off the snapshot's
histogram, with the same bound.

Cost: Spark scans the lake's columns once and aggregates them in one shuffle (`meter_partials`:
both aggregates, two grouping sets), then only reshapes aggregates thousands of times smaller than
the rows. The database is not read for metering. (`merge_meters` merges partial aggregates of the
same shape, e.g. of several sources.)
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

# A command's latency bucket: floor(LATENCY_BUCKETS_PER_E * ln(duration_ms)), so that the durations
# of one bucket differ by less than a factor e^(1/1000) (0.1 %); durations <= 0 share the lowest
# bucket. The one definition of the histogram.
LATENCY_BUCKETS_PER_E = 1000
LATENCY_BUCKET_FLOOR = -(10**9)  # below floor(1000 * ln(any positive double)) >= -745 000
SUCCESS = "SUCCESS"
# The codes that are not errors (apps/usage/selectors.py NOT_ERRORS says the same): SUCCESS, and
# EVICTED, a DIDComm forward stored after the overflow policy evicted the recipient's oldest message
# (the policy working, not a client error; by_code shows it as its own row).
NOT_ERRORS = (SUCCESS, "EVICTED")
UNPARSED = "(unparsed)"
DEFAULT_PROTOCOL = "decentrl"
TOP_N = 10

COUNTS_COLUMNS = [
    "tenant_id",
    "day",
    "protocol",
    "command_type",
    "code",
    "sender_did",
    "commands",
    "bytes_in",
    "bytes_out",
]
LATENCY_COLUMNS = ["tenant_id", "day", "latency_p50_ms", "latency_p95_ms"]
DAILY_COLUMNS = [
    "tenant_id",
    "day",
    "commands",
    "errors",
    "error_rate",
    "bytes_in",
    "bytes_out",
    "latency_p50_ms",
    "latency_p95_ms",
    "active_identities",
    "new_registrations",
    "pending_created",
    "pending_delivered",
    "delivery_p50_ms",
    "delivery_p95_ms",
    "stored_events",
    "stored_bytes",
]
COUNT_COLUMNS = [
    "commands",
    "errors",
    "bytes_in",
    "bytes_out",
    "active_identities",
    "new_registrations",
    "pending_created",
    "pending_delivered",
    "stored_events",
    "stored_bytes",
]


@dataclass(frozen=True)
class UsageReport:
    daily: DataFrame
    by_type: DataFrame
    by_code: DataFrame
    top: DataFrame

    def tables(self) -> dict[str, DataFrame]:
        return {"daily": self.daily, "by_type": self.by_type, "by_code": self.by_code, "top": self.top}


def _in_range(day: Column, date_from: date, date_to: date) -> Column:
    return (day >= F.lit(date_from)) & (day <= F.lit(date_to))


def _labels() -> dict[str, Column]:
    """The counts' labels as the report shows them: "(unparsed)" for an empty command type,
    "decentrl" for a missing protocol, "" for a missing sender."""
    return {
        "protocol": F.coalesce(F.col("protocol"), F.lit(DEFAULT_PROTOCOL)),
        "command_type": F.when(F.coalesce(F.col("command_type"), F.lit("")) == "", F.lit(UNPARSED)).otherwise(
            F.col("command_type")
        ),
        "code": F.col("code"),
        "sender_did": F.coalesce(F.col("sender_did"), F.lit("")),
    }


def command_counts(partials: DataFrame, date_from: date, date_to: date) -> DataFrame:
    """The per-range partial counts merged: per tenant, day, protocol, command type, code and
    sender, the commands and bytes. Every count-like output is an aggregate of this small table."""
    return (
        partials.where(_in_range(F.col("day"), date_from, date_to))
        .select(
            "tenant_id", "day", *[c.alias(name) for name, c in _labels().items()], "commands", "bytes_in", "bytes_out"
        )
        .groupBy("tenant_id", "day", "protocol", "command_type", "code", "sender_did")
        .agg(
            F.sum("commands").cast("long").alias("commands"),
            F.sum("bytes_in").cast("long").alias("bytes_in"),
            F.sum("bytes_out").cast("long").alias("bytes_out"),
        )
    )


def latency_bucket(duration: Column) -> Column:
    """LATENCY_BUCKET of a duration column."""
    return (
        F.when(duration > 0, F.floor(F.log(duration) * LATENCY_BUCKETS_PER_E))
        .otherwise(F.lit(LATENCY_BUCKET_FLOOR))
        .cast("long")
    )


def meter_partials(rows: DataFrame) -> DataFrame:
    """Metering rows (tenant_id, day, protocol, command_type, code, sender_did, bytes_in, bytes_out,
    duration_ms) to both aggregates (extract.SCHEMAS["meters"]) in one scan and one shuffle: the
    counts per tenant, day, protocol, type, code and sender, labelled as the report shows them
    (histogram 0), and the latency histogram per tenant, day and bucket (histogram 1: commands and
    the bucket's largest duration). Already merged: what `merge_meters` gives for these rows."""
    keyed = rows.select(
        "tenant_id",
        "day",
        *[c.alias(name) for name, c in _labels().items()],
        latency_bucket(F.col("duration_ms")).alias("bucket"),
        "bytes_in",
        "bytes_out",
        "duration_ms",
    )
    counts_set = ["tenant_id", "day", "protocol", "command_type", "code", "sender_did"]
    histogram_set = ["tenant_id", "day", "bucket"]
    grouped = keyed.groupingSets(
        [[F.col(c) for c in counts_set], [F.col(c) for c in histogram_set]],
        *[F.col(c) for c in dict.fromkeys(counts_set + histogram_set)],
    ).agg(
        F.grouping("bucket").alias("_counts"),
        F.count(F.lit(1)).cast("long").alias("commands"),
        F.sum("bytes_in").cast("long").alias("bytes_in"),
        F.sum("bytes_out").cast("long").alias("bytes_out"),
        F.max("duration_ms").alias("top_ms"),
    )
    counts_row = F.col("_counts") == 1
    return grouped.select(
        (1 - F.col("_counts")).cast("long").alias("histogram"),
        "tenant_id",
        "day",
        *[F.when(counts_row, F.col(c)).alias(c) for c in ("protocol", "command_type", "code", "sender_did")],
        F.when(~counts_row, F.col("bucket")).alias("bucket"),
        "commands",
        F.when(counts_row, F.col("bytes_in")).alias("bytes_in"),
        F.when(counts_row, F.col("bytes_out")).alias("bytes_out"),
        F.when(~counts_row, F.col("top_ms")).alias("top_ms"),
    )


def merge_meters(partials: DataFrame, date_from: date, date_to: date) -> DataFrame:
    """Both kinds of per-range partials (extract.SCHEMAS["meters"]: counts rows with histogram 0,
    latency rows with histogram 1) merged in ONE aggregation: `command_counts` for the counts rows,
    the merged histogram (commands and the largest duration per bucket) for the latency rows.
    Split with `merged_counts` and `merged_histogram`."""
    counts_row = F.col("histogram") == 0
    return (
        partials.where(_in_range(F.col("day"), date_from, date_to))
        .select(
            "histogram",
            *[F.when(counts_row, c).alias(name) for name, c in _labels().items()],
            "tenant_id",
            "day",
            "bucket",
            "commands",
            "bytes_in",
            "bytes_out",
            "top_ms",
        )
        .groupBy("histogram", "tenant_id", "day", "protocol", "command_type", "code", "sender_did", "bucket")
        .agg(
            F.sum("commands").cast("long").alias("commands"),
            F.sum("bytes_in").cast("long").alias("bytes_in"),
            F.sum("bytes_out").cast("long").alias("bytes_out"),
            F.max("top_ms").alias("top_ms"),
        )
    )


def merged_counts(merged: DataFrame) -> DataFrame:
    """The counts part of `merge_meters`: what `command_counts` gives."""
    return merged.where(F.col("histogram") == 0).select(*COUNTS_COLUMNS)


def merged_histogram(merged: DataFrame) -> DataFrame:
    """The latency part of `merge_meters`: per tenant, day and bucket, commands and top_ms."""
    return merged.where(F.col("histogram") == 1).select("tenant_id", "day", "bucket", "commands", "top_ms")


def _errors(commands: str = "commands") -> Column:
    return F.sum(F.when(F.col("code").isin(*NOT_ERRORS), 0).otherwise(F.col(commands))).cast("long")


def _rank_value(q: float) -> Column:
    """The largest duration of the first bucket whose cumulative count reaches rank ceil(q * n)."""
    reached = F.col("cumulative") >= F.ceil(F.lit(q) * F.col("total"))
    return F.min(F.when(reached, F.struct(F.col("bucket"), F.col("top_ms")))).getField("top_ms")


def command_latency(histogram: DataFrame, date_from: date, date_to: date) -> DataFrame:
    """p50/p95 command latency per tenant and day from the per-range latency histograms (the error
    bound is in the module's docstring)."""
    return latency_percentiles(
        histogram.where(_in_range(F.col("day"), date_from, date_to))
        .groupBy("tenant_id", "day", "bucket")
        .agg(F.sum("commands").alias("commands"), F.max("top_ms").alias("top_ms"))
    )


def latency_percentiles(merged: DataFrame, name: str = "latency") -> DataFrame:
    """p50/p95 per tenant and day from a merged histogram (one row per tenant, day and bucket), as
    `<name>_p50_ms` and `<name>_p95_ms`."""
    day = Window.partitionBy("tenant_id", "day")
    ranked = merged.withColumn("total", F.sum("commands").over(day)).withColumn(
        "cumulative",
        F.sum("commands").over(day.orderBy("bucket").rowsBetween(Window.unboundedPreceding, Window.currentRow)),
    )
    return ranked.groupBy("tenant_id", "day").agg(
        _rank_value(0.5).cast("double").alias(f"{name}_p50_ms"),
        _rank_value(0.95).cast("double").alias(f"{name}_p95_ms"),
    )


def command_totals(counts: DataFrame) -> DataFrame:
    """Per tenant and day: commands, errors, bytes and distinct active identities, from `counts`."""
    ok = F.col("code").isin(*NOT_ERRORS)
    return counts.groupBy("tenant_id", "day").agg(
        F.sum("commands").cast("long").alias("commands"),
        _errors().alias("errors"),
        F.sum("bytes_in").alias("bytes_in"),
        F.sum("bytes_out").alias("bytes_out"),
        F.countDistinct(F.when(ok & (F.col("sender_did") != ""), F.col("sender_did"))).alias("active_identities"),
    )


def input_figures(inputs: DataFrame, date_from: date, date_to: date) -> list[DataFrame]:
    """The daily figures of the inputs' snapshot (extract.SCHEMAS["inputs"] per tenant and day):
    new registrations, pending events created and delivered, stored events and bytes, and the
    delivery latency percentiles read off its histogram rows."""
    rows = inputs.where(_in_range(F.col("day"), date_from, date_to))
    totals = rows.groupBy("tenant_id", "day").agg(
        F.sum("registrations").alias("new_registrations"),
        F.sum("pending_created").alias("pending_created"),
        F.sum("delivered").alias("pending_delivered"),
        F.sum("stored_events").alias("stored_events"),
        F.sum("stored_bytes").alias("stored_bytes"),
    )
    histogram = rows.where(F.col("bucket").isNotNull()).select(
        "tenant_id", "day", "bucket", F.col("delivered").alias("commands"), "top_ms"
    )
    return [totals, latency_percentiles(histogram, "delivery")]


def _merge(parts: list[DataFrame], columns: list[str]) -> DataFrame:
    """Combine per-(tenant, day) partial results with one union and one shuffle instead of outer joins.

    Each part has at most one row per key and some of `columns`; the union fills the others with
    nulls, so `max` over it picks the one non-null value of every column. (Named columns, never
    `df.columns`: over Spark Connect every schema question is a round trip to the engine.)
    """
    union = parts[0]
    for part in parts[1:]:
        union = union.unionByName(part, allowMissingColumns=True)
    return union.groupBy("tenant_id", "day").agg(*[F.max(c).alias(c) for c in columns])


def daily(counts: DataFrame, latency: DataFrame, inputs: DataFrame, date_from: date, date_to: date) -> DataFrame:
    """One row per tenant and day with any activity; absent counts are 0, absent percentiles null."""
    out = _merge(
        [command_totals(counts), latency, *input_figures(inputs, date_from, date_to)],
        [c for c in DAILY_COLUMNS if c not in ("tenant_id", "day", "error_rate")],
    )
    for c in COUNT_COLUMNS:
        out = out.withColumn(c, F.coalesce(F.col(c).cast("long"), F.lit(0).cast("long")))
    out = out.withColumn(
        "error_rate", F.when(F.col("commands") > 0, F.col("errors") / F.col("commands")).otherwise(F.lit(0.0))
    )
    return out.select(*DAILY_COLUMNS)


def by_type(counts: DataFrame) -> DataFrame:
    return counts.groupBy("tenant_id", "day", "protocol", "command_type").agg(
        F.sum("commands").cast("long").alias("commands"), _errors().alias("errors")
    )


def by_code(counts: DataFrame) -> DataFrame:
    per_day = Window.partitionBy("tenant_id", "day")
    counted = counts.groupBy("tenant_id", "day", "code").agg(F.sum("commands").cast("long").alias("commands"))
    return (
        counted.withColumn("rate", F.col("commands") / F.sum("commands").over(per_day))
        .where(F.col("code") != SUCCESS)
        .select("tenant_id", "day", "code", "commands", "rate")
    )


def top_identities(counts: DataFrame, n: int = TOP_N) -> DataFrame:
    volume = (
        counts.where(F.col("sender_did") != "")
        .groupBy("tenant_id", "day", "sender_did")
        .agg(
            F.sum("commands").cast("long").alias("commands"),
            F.sum("bytes_in").cast("long").alias("bytes_in"),
            F.sum("bytes_out").cast("long").alias("bytes_out"),
        )
    )
    order = Window.partitionBy("tenant_id", "day").orderBy(
        F.col("commands").desc(), (F.col("bytes_in") + F.col("bytes_out")).desc(), F.col("sender_did").asc()
    )
    return (
        volume.withColumn("rank", F.row_number().over(order))
        .where(F.col("rank") <= n)
        .select("tenant_id", "day", "rank", "sender_did", "commands", "bytes_in", "bytes_out")
    )


def report_from(
    counts: DataFrame, latency: DataFrame, inputs: DataFrame, date_from: date, date_to: date
) -> UsageReport:
    """The report from the merged metering aggregates (`command_counts`, `command_latency`) and the
    inputs' snapshot."""
    return UsageReport(
        daily=daily(counts, latency, inputs, date_from, date_to),
        by_type=by_type(counts),
        by_code=by_code(counts),
        top=top_identities(counts),
    )


def usage_report(
    counts: DataFrame, latency: DataFrame, inputs: DataFrame, date_from: date, date_to: date
) -> UsageReport:
    """The whole report for [date_from, date_to] from the metering rows' two partial aggregates and
    the inputs' snapshot. (The job merges the two first and keeps them on the engine:
    spark_reports.usage_report.settle.)"""
    return report_from(
        command_counts(counts, date_from, date_to),
        command_latency(latency, date_from, date_to),
        inputs,
        date_from,
        date_to,
    )
