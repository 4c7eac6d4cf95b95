"""transform.py on tiny hand-built DataFrames: every figure checked against a value worked out by hand."""

from __future__ import annotations

import math
from datetime import date, datetime

import pytest
from pyspark.sql import functions as F
from pyspark.sql.types import DateType

from spark_reports import extract, transform

pytestmark = pytest.mark.spark

D1, D2 = date(2026, 3, 1), date(2026, 3, 2)


def ts(day: date, h: int, m: int = 0, s: int = 0, ms: int = 0) -> datetime:
    return datetime(day.year, day.month, day.day, h, m, s, ms * 1000)


def bucket(duration_ms: float) -> int:
    """extract.latency_bucket_sql in Python."""
    if duration_ms <= 0:
        return extract.LATENCY_BUCKET_FLOOR
    return math.floor(math.log(duration_ms) * extract.LATENCY_BUCKETS_PER_E)


def meters(spark, rows, protocol=None):
    """Metering rows as the extract gives them: the two partial aggregates (extract.SCHEMAS), one
    partial row per metering row (a partial may hold any share of a group: the transform merges);
    protocol NULL by default, as on rows metered before the column existed.
    rows: tenant_id, at, command_type, code, http_status, bytes_in, bytes_out, duration_ms, sender_did"""
    protocols = protocol if isinstance(protocol, list) else [protocol] * len(rows)
    counts = spark.createDataFrame(
        [(r[0], r[1].date(), p, r[2], r[3], r[8], 1, r[5], r[6]) for r, p in zip(rows, protocols, strict=True)],
        schema=extract.schema("counts"),
    )
    latency = spark.createDataFrame(
        [(r[0], r[1].date(), bucket(r[7]), 1, r[7]) for r in rows], schema=extract.schema("latency")
    )
    return counts, latency


def snapshot(spark, regs=(), pending=(), stored=()):
    """The inputs' snapshot as the export takes it (extract.input_snapshot) of these rows:
    regs (tenant_id, created_at), pending (tenant_id, created_at, acknowledged_at), stored
    (tenant_id, created_at, payload_bytes). Counts per tenant and day of creation; deliveries per
    day of acknowledgement, in latency buckets with the bucket's largest time."""
    counts: dict = {}
    histogram: dict = {}

    def add(tenant, day, slot, value=1):
        row = counts.setdefault((tenant, day), [tenant, 0, 0, 0, 0, None, None, None, day])
        row[slot] += value

    for tenant, created in regs:
        add(tenant, created.date(), 1)
    for tenant, created, acknowledged in pending:
        add(tenant, created.date(), 2)
        if acknowledged is not None:
            ms = (acknowledged - created).total_seconds() * 1000
            n, top = histogram.get((tenant, acknowledged.date(), bucket(ms)), (0, ms))
            histogram[(tenant, acknowledged.date(), bucket(ms))] = (n + 1, max(top, ms))
    for tenant, created, size in stored:
        add(tenant, created.date(), 3)
        add(tenant, created.date(), 4, size)
    rows = [tuple(r) for r in counts.values()]
    rows += [(t, None, None, None, None, b, n, top, d) for (t, d, b), (n, top) in histogram.items()]
    return spark.createDataFrame(rows, schema=extract.schema("inputs").add("day", DateType()))


@pytest.fixture
def inputs(spark):
    m = meters(
        spark,
        [
            (1, ts(D1, 1), "QUERY_EVENTS", "SUCCESS", 200, 100, 50, 1.0, "did:a"),
            (1, ts(D1, 2), "QUERY_EVENTS", "SUCCESS", 200, 100, 50, 2.0, "did:a"),
            (1, ts(D1, 3), "SAVE_EVENTS", "SUCCESS", 200, 300, 20, 3.0, "did:b"),
            (1, ts(D1, 4), "SAVE_EVENTS", "INVALID_SIGNATURE", 401, 300, 40, 4.0, "did:c"),
            (1, ts(D1, 5), None, "INVALID_COMMAND", 400, 10, 40, 5.0, None),
            (1, ts(D2, 23, 59, 59, 999), "ACKNOWLEDGE_EVENTS", "SUCCESS", 200, 70, 30, 7.0, "did:a"),
            (2, ts(D1, 1), "QUERY_EVENTS", "SUCCESS", 200, 1, 1, 9.0, "did:z"),
            # outside the range: the day after D2
            (1, ts(date(2026, 3, 3), 0), "QUERY_EVENTS", "SUCCESS", 200, 1, 1, 1.0, "did:a"),
        ],
    )
    regs = [(1, ts(D1, 6)), (1, ts(D1, 7)), (2, ts(D2, 1))]
    pending = [
        (1, ts(D1, 10), ts(D1, 10, 0, 1)),  # delivered after 1 s
        (1, ts(D1, 11), ts(D2, 11)),  # delivered the next day after 24 h
        (1, ts(D1, 12), None),  # still pending
        (1, ts(date(2026, 2, 28), 12), ts(D1, 12, 0, 3)),  # created before the range, delivered in it
    ]
    stored = [(1, ts(D1, 9), 100), (1, ts(D1, 9, 30), 250), (2, ts(D2, 9), 7)]
    return (*m, snapshot(spark, regs, pending, stored))


def collect(df, *keys):
    return {tuple(r[k] for k in keys): r.asDict() for r in df.collect()}


def test_daily_figures_per_tenant_and_day(inputs):
    report = transform.usage_report(*inputs, D1, D2)
    daily = collect(report.daily, "tenant_id", "day")
    assert set(daily) == {(1, D1), (1, D2), (2, D1), (2, D2)}
    a1 = daily[(1, D1)]
    assert (a1["commands"], a1["errors"], a1["bytes_in"], a1["bytes_out"]) == (5, 2, 810, 200)
    assert a1["error_rate"] == pytest.approx(0.4)
    # nearest-rank percentiles of 1..5 ms: p50 -> 3rd value, p95 -> 5th value
    assert (a1["latency_p50_ms"], a1["latency_p95_ms"]) == (3.0, 5.0)
    # did:a and did:b succeeded; did:c only failed; the unparsed command has no sender
    assert a1["active_identities"] == 2
    assert a1["new_registrations"] == 2
    assert (a1["pending_created"], a1["pending_delivered"]) == (3, 2)
    assert (a1["stored_events"], a1["stored_bytes"]) == (2, 350)
    a2 = daily[(1, D2)]
    assert (a2["commands"], a2["errors"], a2["pending_created"], a2["pending_delivered"]) == (1, 0, 0, 1)
    assert a2["delivery_p50_ms"] == 24 * 3600 * 1000.0
    b2 = daily[(2, D2)]
    assert (b2["commands"], b2["new_registrations"], b2["stored_events"], b2["stored_bytes"]) == (0, 1, 1, 7)
    assert b2["latency_p50_ms"] is None and b2["error_rate"] == 0.0


def test_delivery_latency_is_counted_on_the_acknowledgement_day(inputs):
    daily = collect(transform.usage_report(*inputs, D1, D2).daily, "tenant_id", "day")
    # D1 acknowledgements: 1 s (created D1 10:00), and 24 h 3 s (created Feb 28, before the range)
    assert daily[(1, D1)]["pending_delivered"] == 2
    assert daily[(1, D1)]["delivery_p50_ms"] == 1000.0
    assert daily[(1, D1)]["delivery_p95_ms"] == 24 * 3600 * 1000.0 + 3000.0


def test_commands_by_type_and_errors_by_code(inputs):
    report = transform.usage_report(*inputs, D1, D2)
    types = {
        k: (v["commands"], v["errors"]) for k, v in collect(report.by_type, "tenant_id", "day", "command_type").items()
    }
    assert types == {
        (1, D1, "QUERY_EVENTS"): (2, 0),
        (1, D1, "SAVE_EVENTS"): (2, 1),
        (1, D1, transform.UNPARSED): (1, 1),
        (1, D2, "ACKNOWLEDGE_EVENTS"): (1, 0),
        (2, D1, "QUERY_EVENTS"): (1, 0),
    }
    codes = {k: (v["commands"], v["rate"]) for k, v in collect(report.by_code, "tenant_id", "day", "code").items()}
    assert codes == {(1, D1, "INVALID_SIGNATURE"): (1, 0.2), (1, D1, "INVALID_COMMAND"): (1, 0.2)}


def test_top_identities_rank_by_commands_then_bytes(spark):
    rows = []
    for i in range(12):
        for _ in range(12 - i):  # did:00 sends 12 commands, did:11 sends 1
            rows.append((1, ts(D1, 1), "QUERY_EVENTS", "SUCCESS", 200, 10, 10, 1.0, f"did:{i:02d}"))
    rows.append((1, ts(D1, 2), "QUERY_EVENTS", "SUCCESS", 200, 500, 10, 1.0, "did:big"))  # 1 command, more bytes
    top = transform.usage_report(*meters(spark, rows), snapshot(spark), D1, D1).top.orderBy("rank").collect()
    assert [r["rank"] for r in top] == list(range(1, 11))
    assert [r["sender_did"] for r in top] == [f"did:{i:02d}" for i in range(10)]
    assert (top[0]["commands"], top[0]["bytes_in"], top[0]["bytes_out"]) == (12, 120, 120)


def test_commands_without_a_verified_sender_count_per_tenant_and_code_but_never_as_an_identity(spark):
    # Issue 13 item 9: metering stores NULL for a sender whose signature did not verify. Twenty such
    # commands outnumber did:a's two, yet only did:a is an identity; the twenty count in the totals.
    rows = [(1, ts(D1, 1), "QUERY_EVENTS", "SUCCESS", 200, 10, 10, 1.0, "did:a")] * 2
    rows += [(1, ts(D1, 2), "QUERY_EVENTS", "INVALID_SIGNATURE", 401, 10, 10, 1.0, None)] * 15
    rows += [(1, ts(D1, 3), "TWO_WAY_PRIVATE", "DUPLICATE_NONCE", 401, 10, 10, 1.0, None)] * 5
    rows += [(1, ts(D1, 4), "QUERY_EVENTS", "SUCCESS", 200, 10, 10, 1.0, "")]  # a row from before: "" = none
    m = meters(spark, rows)
    report = transform.usage_report(*m, snapshot(spark), D1, D1)
    day = report.daily.collect()[0]
    assert (day["commands"], day["errors"], day["active_identities"]) == (23, 20, 1)
    assert [(r["rank"], r["sender_did"], r["commands"]) for r in report.top.collect()] == [(1, "did:a", 2)]
    codes = {r["code"]: r["commands"] for r in report.by_code.collect()}
    assert codes == {"INVALID_SIGNATURE": 15, "DUPLICATE_NONCE": 5}


def test_an_empty_range_gives_empty_tables(spark, inputs):
    report = transform.usage_report(*inputs, date(2020, 1, 1), date(2020, 1, 2))
    assert [df.count() for df in report.tables().values()] == [0, 0, 0, 0]


def test_command_types_are_counted_per_protocol(spark):
    # DIDComm traffic is metered into the same table with protocol "didcomm"; a row without the
    # column's value (metered before it existed) is the Decentrl protocol.
    rows = [
        (1, ts(D1, 1), "TWO_WAY_PRIVATE", "SUCCESS", 200, 1, 1, 1.0, "did:a"),
        (1, ts(D1, 2), "TWO_WAY_PRIVATE", "SUCCESS", 200, 1, 1, 1.0, "did:a"),
        (1, ts(D1, 3), "forward", "SUCCESS", 200, 1, 1, 1.0, "did:a"),
        (1, ts(D1, 4), "forward", "INVALID_MESSAGE", 200, 1, 1, 1.0, "did:a"),
    ]
    m = meters(spark, rows, protocol=["decentrl", None, "didcomm", "didcomm"])
    got = {
        (r["protocol"], r["command_type"]): (r["commands"], r["errors"])
        for r in transform.usage_report(*m, snapshot(spark), D1, D1).by_type.collect()
    }
    assert got == {("decentrl", "TWO_WAY_PRIVATE"): (2, 0), ("didcomm", "forward"): (2, 1)}


def latency(spark, partials):
    """p50, p95 of one tenant-day in the report from partial histogram rows (bucket, commands, top_ms)."""
    df = spark.createDataFrame([(1, D1, *p) for p in partials], schema=extract.schema("latency"))
    no_counts = spark.createDataFrame([], schema=extract.schema("counts"))
    row = transform.usage_report(no_counts, df, snapshot(spark), D1, D1).daily.collect()[0]
    return row["latency_p50_ms"], row["latency_p95_ms"]


def test_latency_percentiles_merge_the_partial_histograms_of_every_range(spark):
    # 100 commands of 1..100 ms, split over three id ranges in an uneven way: the same bucket appears
    # in several ranges, with its own count and largest duration in each.
    values = [float(v) for v in range(1, 101)]
    ranges = [values[0::3], values[1::3], values[2::3]]
    partials = []
    for part in ranges:
        per_bucket: dict[int, list[float]] = {}
        for v in part:
            per_bucket.setdefault(bucket(v), []).append(v)
        partials += [(b, len(vs), max(vs)) for b, vs in per_bucket.items()]
    # 1..100 ms are far apart (> 0.1 %): one duration per bucket, so the nearest ranks exactly.
    assert latency(spark, partials) == (50.0, 95.0)


def test_a_latency_percentile_is_at_most_a_tenth_of_a_percent_above_the_exact_one(spark):
    # Durations closer than 0.1 % share a bucket: the report gives the bucket's largest duration.
    # Here the exact p50 is 10.0 ms (rank 2 of 4) and 10.004 ms shares its bucket (ratio < e^0.001).
    values = [5.0, 10.0, 10.004, 20.0]
    assert len({bucket(v) for v in values}) == 3 and bucket(10.0) == bucket(10.004)
    partials = {}
    for v in values:
        n, top = partials.get(bucket(v), (0, 0.0))
        partials[bucket(v)] = (n + 1, max(top, v))
    p50, p95 = latency(spark, [(b, n, top) for b, (n, top) in partials.items()])
    assert (p50, p95) == (10.004, 20.0)
    assert 10.0 <= p50 < 10.0 * math.exp(1 / extract.LATENCY_BUCKETS_PER_E)


def test_a_zero_duration_is_the_lowest_latency(spark):
    assert latency(spark, [(bucket(0.0), 3, 0.0), (bucket(2.0), 1, 2.0)]) == (0.0, 2.0)


def test_one_aggregation_merges_both_kinds_of_partials_as_the_two_merges_do(spark):
    # ONE frame of both partial aggregates (extract.SCHEMAS["meters"], `histogram` 0 or 1) merged in
    # one aggregation: the counts labelled as the report shows them (NULL protocol, "" type, NULL
    # sender), the histogram's percentiles those of the report over the two kinds apart.
    rows = [
        (1, ts(D1, 1), "TWO_WAY_PRIVATE", "SUCCESS", 200, 3, 4, 2.0, "did:a"),
        (1, ts(D1, 2), "", "INVALID_MESSAGE", 400, 5, 6, 9.0, None),
        (1, ts(D1, 3), "TWO_WAY_PRIVATE", "SUCCESS", 200, 7, 8, 2.0, "did:a"),
        (2, ts(D2, 4), "forward", "EVICTED", 200, 1, 1, 40.0, "did:b"),
    ]
    counts, latency = meters(spark, rows, protocol=[None, None, "decentrl", "didcomm"])
    both = counts.select(F.lit(0).cast("long").alias("histogram"), "*").unionByName(
        latency.select(F.lit(1).cast("long").alias("histogram"), "*"), allowMissingColumns=True
    )
    merged = transform.merge_meters(both, D1, D2)
    assert sorted(tuple(r) for r in transform.merged_counts(merged).collect()) == [
        (1, D1, "decentrl", "(unparsed)", "INVALID_MESSAGE", "", 1, 5, 6),
        (1, D1, "decentrl", "TWO_WAY_PRIVATE", "SUCCESS", "did:a", 2, 10, 12),
        (2, D2, "didcomm", "forward", "EVICTED", "did:b", 1, 1, 1),
    ]
    assert sorted(tuple(r) for r in transform.latency_percentiles(transform.merged_histogram(merged)).collect()) == [
        (1, D1, 2.0, 9.0),
        (2, D2, 40.0, 40.0),
    ]
    daily = transform.usage_report(counts, latency, snapshot(spark), D1, D2).daily
    assert sorted(tuple(r) for r in daily.select("tenant_id", "day", "latency_p50_ms", "latency_p95_ms").collect()) == [
        (1, D1, 2.0, 9.0),
        (2, D2, 40.0, 40.0),
    ]
