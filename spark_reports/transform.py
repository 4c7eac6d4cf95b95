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
- `report_from` derives all four tables from that small result (a few thousand times smaller than
  the rows) and the snapshot in ONE aggregation with four grouping sets (per tenant and day; per
  protocol and type; per code; per sender) and ONE window pass (the senders' ranks, the day's
  commands for by_code's shares): one Spark plan, a row per table row. (Four branches, each with
  its own aggregation or window, and unions took longer to plan and ~3x as long to generate code
  for: docs/benchmarks.md.)

Command latency percentiles: the nearest-rank percentile (PostgreSQL's percentile_disc) is the
value of rank r = ceil(q * n). Cumulative counts over the buckets in order (a fold over the day's
buckets, collected and sorted: `_percentiles`) find the bucket holding rank r exactly; the report gives that bucket's largest duration. Both lie in one bucket
[e^(b/1000), e^((b+1)/1000)), so the reported value v' and the exact one v satisfy
v <= v' < v * e^(1/1000): at most 0.1 % (0.10005 %) above, never below, and always a duration of
the data (exact when the bucket holds one distinct duration).
Delivery latency percentiles (created -> acknowledged) are read the same way off the snapshot's
histogram, with the same bound.

Cost: Spark scans the lake's columns once and aggregates them in one shuffle (`meter_partials`:
both aggregates, two grouping sets), then aggregates that result once more (`report_from`). The
database is not read for metering. (`merge_meters` merges partial aggregates of the same shape,
e.g. of several sources.)
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
    latency rows with histogram 1) merged in ONE aggregation: per tenant, day, protocol, command
    type, code and sender (labelled as the report shows them) the commands and bytes for the
    counts rows, the merged histogram (commands and the largest duration per bucket) for the
    latency rows: rows of `meter_partials`' shape. Split with `merged_counts` and `merged_histogram`."""
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
    """The counts part of `merge_meters` (COUNTS_COLUMNS)."""
    return merged.where(F.col("histogram") == 0).select(*COUNTS_COLUMNS)


def merged_histogram(merged: DataFrame) -> DataFrame:
    """The latency part of `merge_meters`: per tenant, day and bucket, commands and top_ms."""
    return merged.where(F.col("histogram") == 1).select("tenant_id", "day", "bucket", "commands", "top_ms")


# The report's four tables as grouping sets of one aggregation (report_from): each row of its
# result is one table's row, told apart by grouping_id() (a bit per key of KEYS left out).
KEYS = ["tenant_id", "day", "protocol", "command_type", "code", "sender_did"]
GROUPING_SETS = {
    "daily": ["tenant_id", "day"],
    "by_type": ["tenant_id", "day", "protocol", "command_type"],
    "by_code": ["tenant_id", "day", "code"],
    "top": ["tenant_id", "day", "sender_did"],
}
GROUPING_ID = {
    name: sum(1 << (len(KEYS) - 1 - i) for i, key in enumerate(KEYS) if key not in keys)
    for name, keys in GROUPING_SETS.items()
}
TABLE_COLUMNS = {
    "daily": DAILY_COLUMNS,
    "by_type": ["tenant_id", "day", "protocol", "command_type", "commands", "errors"],
    "by_code": ["tenant_id", "day", "code", "commands", "rate"],
    "top": ["tenant_id", "day", "rank", "sender_did", "commands", "bytes_in", "bytes_out"],
}
INPUTS_ROW = 2  # the `histogram` of the inputs' snapshot rows beside the meters' 0 (counts) and 1 (latency)


@dataclass(frozen=True)
class UsageReport:
    """The report as ONE DataFrame: a struct column per table (TABLE_COLUMNS), exactly one of them
    set on each row. `daily`, `by_type`, `by_code` and `top` are the tables apart (each a filter
    of `rows`); the job collects `rows` itself, in one Spark operation (load.collect_report)."""

    rows: DataFrame

    def table(self, name: str) -> DataFrame:
        return self.rows.where(F.col(name).isNotNull()).select(*[F.col(f"{name}.{c}") for c in TABLE_COLUMNS[name]])

    @property
    def daily(self) -> DataFrame:
        return self.table("daily")

    @property
    def by_type(self) -> DataFrame:
        return self.table("by_type")

    @property
    def by_code(self) -> DataFrame:
        return self.table("by_code")

    @property
    def top(self) -> DataFrame:
        return self.table("top")

    def tables(self) -> dict[str, DataFrame]:
        return {name: self.table(name) for name in TABLE_COLUMNS}


def _histogram(rows: Column, commands: str) -> list[Column]:
    """Aggregates of a histogram's rows (one per bucket, those where `rows` holds): their
    (bucket, commands, top_ms) as a list, and their commands in all (n)."""
    bucket = F.struct(F.col("bucket"), F.col(commands).alias("commands"), F.col("top_ms"))
    return [F.collect_list(F.when(rows, bucket)), F.sum(F.when(rows, F.col(commands)))]


def _percentiles(histogram: Column, n: Column) -> Column:
    """p50 and p95 (fields p50, p95) of a histogram list (`_histogram`): its buckets in order,
    the cumulative count, and the largest duration of the first bucket whose cumulative count
    reaches rank ceil(q * n) (the error bound is in the module's docstring); null when empty."""
    ranks = {"p50": F.ceil(F.lit(0.5) * n), "p95": F.ceil(F.lit(0.95) * n)}
    start = F.struct(
        F.lit(0).cast("long").alias("cumulative"),
        *[F.lit(False).alias(f"{p}_found") for p in ranks],
        *[F.lit(None).cast("double").alias(p) for p in ranks],
    )

    def step(acc: Column, bucket: Column) -> Column:
        cumulative = acc["cumulative"] + bucket["commands"]
        return F.struct(
            cumulative.alias("cumulative"),
            *[(acc[f"{p}_found"] | (cumulative >= r)).alias(f"{p}_found") for p, r in ranks.items()],
            *[
                F.when(acc[f"{p}_found"], acc[p]).when(cumulative >= r, bucket["top_ms"]).alias(p)
                for p, r in ranks.items()
            ],
        )

    return F.aggregate(F.array_sort(histogram), start, step)


def latency_percentiles(histogram: DataFrame) -> DataFrame:
    """p50/p95 command latency (latency_p50_ms, latency_p95_ms) per tenant and day of a merged
    histogram (one row per tenant, day and bucket: `merged_histogram`), as the report reads them."""
    latency, n = _histogram(F.lit(True), "commands")
    folded = histogram.groupBy("tenant_id", "day").agg(_percentiles(latency, n).alias("latency"))
    return folded.select(
        "tenant_id",
        "day",
        F.col("latency.p50").cast("double").alias("latency_p50_ms"),
        F.col("latency.p95").cast("double").alias("latency_p95_ms"),
    )


def report_from(merged: DataFrame, inputs: DataFrame, date_from: date, date_to: date) -> UsageReport:
    """The report from the merged metering aggregates (`merge_meters`' or `meter_partials`' rows,
    already in the range) and the inputs' snapshot, in ONE aggregation and ONE window pass.

    The meters' rows and the snapshot's are one union (`histogram` 0: counts, 1: latency
    buckets, 2: the snapshot), aggregated with four grouping sets (GROUPING_SETS): per tenant
    and day every daily figure (sums of the rows of its kind, the distinct active identities,
    both histograms as lists), per protocol and type, per code, per sender. A row of a set whose
    key comes only from the other kinds' rows (a null protocol, code or sender) is dropped with
    SUCCESS and the empty sender. Then one window per tenant and day, the senders' rows first by
    commands, bytes and DID: their rank (top TOP_N kept), and the day's commands (by_code's
    share). One row per table row; a day appears when any of its rows does (absent counts 0,
    absent percentiles null)."""
    snapshot = inputs.where(_in_range(F.col("day"), date_from, date_to)).select(
        F.lit(INPUTS_ROW).cast("long").alias("histogram"),
        "tenant_id",
        "day",
        "bucket",
        "top_ms",
        "registrations",
        "pending_created",
        "delivered",
        "stored_events",
        "stored_bytes",
    )
    rows = merged.unionByName(snapshot, allowMissingColumns=True)
    counted = F.col("histogram") == 0
    ok = F.col("code").isin(*NOT_ERRORS)
    latency, latency_n = _histogram(F.col("histogram") == 1, "commands")
    delivery, delivery_n = _histogram((F.col("histogram") == INPUTS_ROW) & F.col("bucket").isNotNull(), "delivered")
    grouped = rows.groupingSets([[F.col(c) for c in keys] for keys in GROUPING_SETS.values()], *map(F.col, KEYS)).agg(
        F.grouping_id().alias("set"),
        F.sum(F.when(counted, F.col("commands"))).cast("long").alias("commands"),
        F.sum(F.when(counted, F.when(ok, 0).otherwise(F.col("commands")))).cast("long").alias("errors"),
        F.sum(F.when(counted, F.col("bytes_in"))).cast("long").alias("bytes_in"),
        F.sum(F.when(counted, F.col("bytes_out"))).cast("long").alias("bytes_out"),
        F.size(F.collect_set(F.when(counted & ok & (F.col("sender_did") != ""), F.col("sender_did"))))
        .cast("long")
        .alias("active_identities"),
        latency.alias("latency_histogram"),
        latency_n.alias("latency_n"),
        delivery.alias("delivery_histogram"),
        delivery_n.alias("delivery_n"),
        F.sum("registrations").alias("new_registrations"),
        F.sum("pending_created").alias("pending_created"),
        F.sum("delivered").alias("pending_delivered"),
        F.sum("stored_events").alias("stored_events"),
        F.sum("stored_bytes").alias("stored_bytes"),
    )
    kind = F.col("set")
    kept = grouped.where(
        F.when(kind == GROUPING_ID["daily"], True)
        .when(kind == GROUPING_ID["by_type"], F.col("protocol").isNotNull())
        .when(kind == GROUPING_ID["by_code"], F.col("code") != SUCCESS)
        .otherwise(F.col("sender_did") != "")
    )
    order = Window.partitionBy("tenant_id", "day").orderBy(
        (kind != GROUPING_ID["top"]).asc(),
        F.col("commands").desc(),
        (F.col("bytes_in") + F.col("bytes_out")).desc(),
        F.col("sender_did").asc(),
    )
    whole_day = order.rowsBetween(Window.unboundedPreceding, Window.unboundedFollowing)
    ranked = kept.select(
        "*",
        F.row_number().over(order).alias("rank"),
        F.max(F.when(kind == GROUPING_ID["daily"], F.col("commands"))).over(whole_day).alias("day_commands"),
    ).where((kind != GROUPING_ID["top"]) | (F.col("rank") <= TOP_N))
    ranked = ranked.select(
        "*",
        *[_percentiles(F.col(f"{h}_histogram"), F.col(f"{h}_n")).alias(h) for h in ("latency", "delivery")],
    )
    zero = F.lit(0).cast("long")
    daily = {c: F.coalesce(F.col(c).cast("long"), zero) for c in COUNT_COLUMNS}
    daily.update(
        error_rate=F.when(F.col("commands") > 0, F.col("errors") / F.col("commands")).otherwise(F.lit(0.0)),
        **{
            f"{name}_{p}_ms": F.col(f"{name}.{p}").cast("double")
            for name in ("latency", "delivery")
            for p in ("p50", "p95")
        },
    )
    columns = {
        "daily": {"tenant_id": F.col("tenant_id"), "day": F.col("day"), **daily},
        "by_code": {"rate": F.col("commands") / F.col("day_commands")},
    }
    tables = {
        name: F.struct(*[columns.get(name, {}).get(c, F.col(c)).alias(c) for c in names])
        for name, names in TABLE_COLUMNS.items()
    }
    return UsageReport(ranked.select(*[F.when(kind == GROUPING_ID[name], t).alias(name) for name, t in tables.items()]))


def usage_report(
    counts: DataFrame, latency: DataFrame, inputs: DataFrame, date_from: date, date_to: date
) -> UsageReport:
    """The whole report for [date_from, date_to] from the metering rows' two partial aggregates
    apart (extract.SCHEMAS "counts" and "latency") and the inputs' snapshot: `merge_meters` of
    both, then `report_from`. (The job aggregates the lake's rows with `meter_partials` instead:
    spark_reports.usage_report.run.)"""
    both = counts.select(F.lit(0).cast("long").alias("histogram"), "*").unionByName(
        latency.select(F.lit(1).cast("long").alias("histogram"), "*"), allowMissingColumns=True
    )
    return report_from(merge_meters(both, date_from, date_to), inputs, date_from, date_to)
