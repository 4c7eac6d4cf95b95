"""The real report job (the export over JDBC into the lake -> transform -> load -> publish) on
PostgreSQL data built here, checked against the same figures computed independently in SQL.

Percentile tolerance: command and delivery latency are read off latency histograms (of the lake's
metering rows, of the export's snapshot of the pending events): at least percentile_disc and less
than percentile_disc * e^(1/1000) (one bucket, spark_reports/transform.py).
"""

from __future__ import annotations

from datetime import UTC, datetime

import psycopg
import pytest
from django.db import connection

from apps.usage import services
from apps.usage.models import (
    CommandMeter,
    ReportCommandType,
    ReportDaily,
    ReportErrorCode,
    ReportRun,
    ReportTopIdentity,
)
from spark_reports import extract, lake_export, lake_log, lake_read, load, transform
from spark_reports.config import database_from_url
from spark_reports.transform import DAILY_COLUMNS
from spark_reports.usage_report import run as run_job

from . import dataset

pytestmark = [pytest.mark.spark, pytest.mark.django_db(transaction=True)]
TOL = 1e-9


def sql(query: str, params: list) -> list[tuple]:
    with connection.cursor() as cur:
        cur.execute(query, params)
        return cur.fetchall()


def expected_daily(ids: list[int], first, last) -> dict:
    """Per (tenant_id, day) figures straight from SQL."""
    rng = [ids, first, last]
    out: dict = {}

    def put(rows, names):
        for row in rows:
            entry = out.setdefault((row[0], row[1]), {})
            entry.update(dict(zip(names, row[2:], strict=True)))

    day = "(({col}) AT TIME ZONE 'UTC')::date"
    put(
        sql(
            f"""SELECT tenant_id, {day.format(col="at")} d, count(*), sum(CASE WHEN code NOT IN ('SUCCESS', 'EVICTED') THEN 1 ELSE 0 END),
                sum(bytes_in), sum(bytes_out),
                percentile_disc(0.5) WITHIN GROUP (ORDER BY duration_ms), percentile_disc(0.95) WITHIN GROUP (ORDER BY duration_ms),
                count(DISTINCT sender_did) FILTER (WHERE code IN ('SUCCESS', 'EVICTED') AND sender_did <> '')
              FROM usage_commandmeter WHERE tenant_id = ANY(%s) GROUP BY 1, 2 HAVING {day.format(col="at")} BETWEEN %s AND %s""",
            rng,
        ),
        ["commands", "errors", "bytes_in", "bytes_out", "latency_p50_ms", "latency_p95_ms", "active_identities"],
    )
    put(
        sql(
            f"""SELECT c.tenant_id, {day.format(col="c.created_at")} d, count(*) FROM messaging_contract c
              JOIN tenants_tenant t ON t.id = c.tenant_id
              WHERE c.tenant_id = ANY(%s) AND c.owner_did = c.requestor_did AND c.recipient_did = t.did
              GROUP BY 1, 2 HAVING {day.format(col="c.created_at")} BETWEEN %s AND %s""",
            rng,
        ),
        ["new_registrations"],
    )
    put(
        sql(
            f"""SELECT tenant_id, {day.format(col="created_at")} d, count(*) FROM messaging_pendingevent
              WHERE tenant_id = ANY(%s) GROUP BY 1, 2 HAVING {day.format(col="created_at")} BETWEEN %s AND %s""",
            rng,
        ),
        ["pending_created"],
    )
    put(
        sql(
            f"""SELECT tenant_id, {day.format(col="acknowledged_at")} d, count(*),
                percentile_disc(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM acknowledged_at - created_at) * 1000),
                percentile_disc(0.95) WITHIN GROUP (ORDER BY extract(epoch FROM acknowledged_at - created_at) * 1000)
              FROM messaging_pendingevent WHERE tenant_id = ANY(%s) AND acknowledged_at IS NOT NULL
              GROUP BY 1, 2 HAVING {day.format(col="acknowledged_at")} BETWEEN %s AND %s""",
            rng,
        ),
        ["pending_delivered", "delivery_p50_ms", "delivery_p95_ms"],
    )
    put(
        sql(
            f"""SELECT tenant_id, {day.format(col="created_at")} d, count(*), sum(payload_bytes) FROM messaging_storedevent
              WHERE tenant_id = ANY(%s) GROUP BY 1, 2 HAVING {day.format(col="created_at")} BETWEEN %s AND %s""",
            rng,
        ),
        ["stored_events", "stored_bytes"],
    )
    return out


@pytest.fixture
def built(spark, tenant_a, tenant_b):
    ds = dataset.build(["a", "b"])
    dataset.write_orm(ds, {"a": tenant_a, "b": tenant_b})
    return ds


def run_report(spark, tenants, first, last) -> ReportRun:
    run = ReportRun.objects.create(date_from=first, date_to=last, status=ReportRun.Status.RUNNING)
    run.tenants.set(tenants)
    db = database_from_url(services.report_database_url())
    counts = run_job(spark, db, run_id=run.pk, date_from=first, date_to=last, tenant_ids=[t.pk for t in tenants])
    return services.report_run_publish(run=run, result=counts, output="")


def test_the_job_on_postgresql_matches_sql(spark, built, tenant_a, tenant_b):
    first, last = dataset.DAYS[0], dataset.DAYS[-1]
    run = run_report(spark, [tenant_a, tenant_b], first, last)
    assert run.status == ReportRun.Status.SUCCEEDED, run.log_tail

    ids = [tenant_a.pk, tenant_b.pk]
    expected = expected_daily(ids, first, last)
    got = {(r.tenant_id, r.day): r for r in ReportDaily.objects.filter(run=run)}
    assert set(got) == set(expected)
    assert len(got) == 6  # two tenants x three days; the days just outside the range are excluded
    for key, exp in expected.items():
        row = got[key]
        for name, value in exp.items():
            actual = getattr(row, name)
            if name in dataset.LATENCY_COLUMNS:
                assert dataset.latency_within_bound(actual, value), (key, name, actual, value)
            elif isinstance(actual, float) or isinstance(value, float):
                assert actual == pytest.approx(float(value), abs=TOL), (key, name)
            else:
                assert actual == value, (key, name)
        assert row.error_rate == pytest.approx(exp["errors"] / exp["commands"], abs=TOL)
    assert run.row_counts["daily"] == 6

    # Per protocol: Decentrl, DIDComm v2 and v1 each as itself (the dataset's day-edge rows share a
    # command type across the three).
    types = sql(
        """SELECT tenant_id, (at AT TIME ZONE 'UTC')::date d, protocol,
             CASE WHEN command_type = '' THEN '(unparsed)' ELSE command_type END,
             count(*), sum(CASE WHEN code NOT IN ('SUCCESS', 'EVICTED') THEN 1 ELSE 0 END)
           FROM usage_commandmeter WHERE tenant_id = ANY(%s) AND (at AT TIME ZONE 'UTC')::date BETWEEN %s AND %s
           GROUP BY 1, 2, 3, 4""",
        [ids, first, last],
    )
    assert {(t, d, p, c): (n, e) for t, d, p, c, n, e in types} == {
        (r.tenant_id, r.day, r.protocol, r.command_type): (r.commands, r.errors)
        for r in ReportCommandType.objects.filter(run=run)
    }
    assert {p for _, _, p, *_ in types} == set(dataset.PROTOCOLS)

    codes = sql(
        """SELECT tenant_id, d, code, n, n::float / sum(n) OVER (PARTITION BY tenant_id, d) FROM (
             SELECT tenant_id, (at AT TIME ZONE 'UTC')::date d, code, count(*) n FROM usage_commandmeter
             WHERE tenant_id = ANY(%s) AND (at AT TIME ZONE 'UTC')::date BETWEEN %s AND %s GROUP BY 1, 2, 3) x""",
        [ids, first, last],
    )
    exp_codes = {(t, d, c): (n, rate) for t, d, c, n, rate in codes if c != "SUCCESS"}
    got_codes = {(r.tenant_id, r.day, r.code): (r.commands, r.rate) for r in ReportErrorCode.objects.filter(run=run)}
    assert set(got_codes) == set(exp_codes)
    for key, (n, rate) in exp_codes.items():
        assert got_codes[key][0] == n and got_codes[key][1] == pytest.approx(rate, abs=TOL)

    top = sql(
        """SELECT tenant_id, d, rk, sender_did, n, bi, bo FROM (
             SELECT tenant_id, d, sender_did, n, bi, bo,
               row_number() OVER (PARTITION BY tenant_id, d ORDER BY n DESC, bi + bo DESC, sender_did COLLATE "C") rk
             FROM (SELECT tenant_id, (at AT TIME ZONE 'UTC')::date d, sender_did, count(*) n, sum(bytes_in) bi, sum(bytes_out) bo
                   FROM usage_commandmeter WHERE tenant_id = ANY(%s) AND sender_did <> ''
                     AND (at AT TIME ZONE 'UTC')::date BETWEEN %s AND %s GROUP BY 1, 2, 3) v) r WHERE rk <= 10""",
        [ids, first, last],
    )
    assert {(t, d, rk): (did, n, bi, bo) for t, d, rk, did, n, bi, bo in top} == {
        (r.tenant_id, r.day, r.rank): (r.sender_did, r.commands, r.bytes_in, r.bytes_out)
        for r in ReportTopIdentity.objects.filter(run=run)
    }
    assert ReportTopIdentity.objects.filter(run=run, tenant=tenant_a).count() == 30  # 10 per day for the busy tenant


def test_a_run_for_one_tenant_contains_only_that_tenant(spark, built, tenant_a, tenant_b):
    day = dataset.DAYS[1]
    run = run_report(spark, [tenant_a], day, day)
    assert run.status == ReportRun.Status.SUCCEEDED
    assert set(ReportDaily.objects.filter(run=run).values_list("tenant_id", "day")) == {(tenant_a.pk, day)}
    for model in (ReportCommandType, ReportErrorCode, ReportTopIdentity):
        assert not model.objects.filter(run=run, tenant=tenant_b).exists()
    assert ReportDaily.objects.get(run=run).commands == 120 + dataset.EDGES


def _rows(tenant_id: int, day) -> dict[str, list[tuple]]:
    """One row per table in load.COLUMNS order."""
    daily = dict.fromkeys(DAILY_COLUMNS, 0) | {"tenant_id": tenant_id, "day": day, "commands": 3, "error_rate": 0.0}
    daily |= {"latency_p50_ms": 1.5, "latency_p95_ms": None, "delivery_p50_ms": None, "delivery_p95_ms": None}
    return {
        "daily": [tuple(daily[c] for c in DAILY_COLUMNS)],
        "by_type": [(tenant_id, day, "didcomm", "routing/2.0/forward", 3, 1)],
        "by_code": [(tenant_id, day, "RATE_LIMITED", 1, 1 / 3)],
        "top": [(tenant_id, day, 1, "did:decentrl:x", 3, 30, 60)],
    }


def test_the_rows_are_written_in_one_transaction(tenant_a):
    db = database_from_url(services.report_database_url())
    day = dataset.DAYS[0]
    run = ReportRun.objects.create(date_from=day, date_to=day, status=ReportRun.Status.RUNNING)
    assert load.write_rows(db, run.pk, _rows(tenant_a.pk, day)) == {"daily": 1, "by_type": 1, "by_code": 1, "top": 1}
    daily = ReportDaily.objects.get(run=run)
    assert (daily.tenant_id, daily.day, daily.commands, daily.latency_p50_ms, daily.latency_p95_ms) == (
        tenant_a.pk,
        day,
        3,
        1.5,
        None,
    )
    assert ReportCommandType.objects.filter(run=run).values_list("protocol", "command_type", "commands").get() == (
        "didcomm",
        "routing/2.0/forward",
        3,
    )
    assert ReportTopIdentity.objects.filter(run=run).values_list("rank", "sender_did", "bytes_out").get() == (
        1,
        "did:decentrl:x",
        60,
    )

    # A row the database refuses (the top table's sender is NOT NULL): nothing of the run is written,
    # not even the tables before it.
    bad = ReportRun.objects.create(date_from=day, date_to=day, status=ReportRun.Status.RUNNING)
    rows = _rows(tenant_a.pk, day)
    rows["top"] = [(tenant_a.pk, day, 1, None, 3, 30, 60)]
    with pytest.raises(psycopg.errors.NotNullViolation):
        load.write_rows(db, bad.pk, rows)
    assert [m.objects.filter(run=bad).count() for m in services.RESULT_MODELS.values()] == [0, 0, 0, 0]


def test_the_report_reads_only_the_lake_pruned_by_day_and_tenant(spark, tenant_a, capsys):
    day = dataset.DAYS[0]
    CommandMeter.objects.create(
        tenant=tenant_a,
        at=datetime(day.year, day.month, day.day, 12, tzinfo=UTC),
        transport="http",
        command_type="QUERY_EVENTS",
        code="SUCCESS",
        http_status=200,
        bytes_in=1,
        bytes_out=2,
        duration_ms=3.0,
    )
    db = database_from_url(services.report_database_url())
    # Before the first export the lake holds nothing: empty local frames, no file, no database read.
    for frame in (lake_read.read_meters(spark, db, day, day), lake_read.read_inputs(spark, db, day, day)):
        frame.explain()
        plan = capsys.readouterr().out
        assert "JDBCRelation" not in plan and "LocalTableScan" in plan, plan

    assert lake_export.export(spark, db)["rows"] == 1
    rows = lake_read.read_meters(spark, db, day, day, [tenant_a.pk])
    partials = transform.meter_partials(rows)
    inputs = lake_read.read_inputs(spark, db, day, day, [tenant_a.pk])
    inputs.explain()
    plan = capsys.readouterr().out
    assert "JDBCRelation" not in plan and "LocalTableScan" in plan, plan  # no registration, pending or stored event
    partials.explain()
    plan = capsys.readouterr().out
    # The lake's files, pruned by day and tenant (and to committed exports) before any file is opened.
    assert "JDBCRelation" not in plan and "FileScan parquet" in plan, plan
    pruned = plan.split("PartitionFilters: [", 1)[1].split("]", 1)[0]
    assert "day" in pruned and "tenant_id" in pruned and "export" in pruned, pruned
    merged = transform.merge_meters(partials, day, day)
    assert [tuple(r) for r in transform.merged_counts(merged).collect()] == [
        (tenant_a.pk, day, "decentrl", "QUERY_EVENTS", "SUCCESS", "", 1, 1, 2)
    ]
    assert [tuple(r) for r in transform.merged_histogram(merged).collect()] == [
        (tenant_a.pk, day, 1098, 1, 3.0)  # floor(1000 ln 3)
    ]


def test_the_export_reads_id_ranges_in_parallel_and_spark_aggregates_the_lake(spark, tenant_a, monkeypatch, capsys):
    # 30 rows read in three id ranges (three JDBC queries), each row written once to the lake; the
    # figures Spark computes from the lake are those of all rows.
    monkeypatch.setattr(extract, "ROWS_PER_PARTITION", 10)
    monkeypatch.setenv("SPARK_JDBC_PARTITIONS", "3")
    day = dataset.DAYS[0]
    at = datetime(day.year, day.month, day.day, 12, tzinfo=UTC)
    CommandMeter.objects.bulk_create(
        [
            CommandMeter(
                tenant=tenant_a,
                at=at,
                transport="http",
                command_type="QUERY_EVENTS",
                code="SUCCESS" if i % 5 else "RATE_LIMITED",
                http_status=200,
                bytes_in=i,
                bytes_out=2 * i,
                duration_ms=7.0 if i % 2 else 1.0,
                sender_did=f"did:decentrl:s{i % 2}",
            )
            for i in range(30)
        ]
    )
    ids = list(CommandMeter.objects.order_by("pk").values_list("pk", flat=True))
    lo, hi = ids[0], ids[-1]
    assert hi - lo == 29
    assert extract.id_ranges((lo, hi, 30), 3) == [(lo, lo + 10), (lo + 10, lo + 20), (lo + 20, hi + 1)]
    db = database_from_url(services.report_database_url())
    lake_export.read_range(spark, db, lake_log.Attempt(0, lo - 1, hi)).explain()
    assert capsys.readouterr().out.count("JDBCRelation") == 3
    assert lake_export.export(spark, db)["rows"] == 30
    rows = lake_read.read_meters(spark, db, day, day, [tenant_a.pk])
    assert sorted(r["id"] for r in rows.select("id").collect()) == ids
    merged = transform.merge_meters(transform.meter_partials(rows), day, day)
    got = {
        (r["code"], r["sender_did"]): (r["commands"], r["bytes_in"], r["bytes_out"])
        for r in transform.merged_counts(merged).collect()
    }
    expected: dict = {}
    for i in range(30):
        key = ("SUCCESS" if i % 5 else "RATE_LIMITED", f"did:decentrl:s{i % 2}")
        n, b_in, b_out = expected.get(key, (0, 0, 0))
        expected[key] = (n + 1, b_in + i, b_out + 2 * i)
    assert got == expected
    latency = transform.latency_percentiles(transform.merged_histogram(merged)).collect()[0]
    assert (latency["latency_p50_ms"], latency["latency_p95_ms"]) == (1.0, 7.0)  # 15 of 1 ms, 15 of 7 ms
