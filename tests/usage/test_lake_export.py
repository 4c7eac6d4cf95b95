"""The metering export (spark_reports/lake.py, lake_export.py) as a real process, killed with SIGKILL at its worst
moments, then run again: every metering row is in the lake's committed exports exactly once, and the
figures Spark computes from the lake equal an SQL oracle over the metering table, across UTC day
edges, tenants and protocols."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from django.db import connection
from django.db.models import Max, Min
from pyspark.sql import functions as F

from apps.usage import services, tasks
from apps.usage.models import CommandMeter, MeterExport
from spark_reports import lake, lake_cleanup, lake_compaction, lake_export, lake_layout, lake_read, transform
from spark_reports.config import database_from_url

from . import dataset

pytestmark = [pytest.mark.spark, pytest.mark.django_db(transaction=True)]
ROOT = Path(__file__).resolve().parents[2]
DAY = datetime(2026, 2, 1, tzinfo=UTC)


def meter_rows(tenants, n: int, *, start: int = 0) -> None:
    """n rows spread over three UTC days (both edges of each), two tenants and three protocols."""
    rows = []
    protocols = list(dataset.PROTOCOLS.items())
    for i in range(start, start + n):
        day = DAY + timedelta(days=i % 3)
        at = (
            day
            if i % 7 == 0
            else day + timedelta(days=1, microseconds=-1)
            if i % 7 == 1
            else day + timedelta(seconds=i)
        )
        protocol, channel = protocols[i % 3]
        rows.append(
            CommandMeter(
                tenant=tenants[i % 2],
                at=at,
                transport="http",
                protocol=protocol,
                channel=channel,
                command_type="QUERY_EVENTS",
                code="SUCCESS" if i % 4 else "RATE_LIMITED",
                http_status=200,
                bytes_in=i,
                bytes_out=2 * i,
                duration_ms=0.5 + i % 40,
            )
        )
    CommandMeter.objects.bulk_create(rows)


def start_export(env_extra: dict[str, str]) -> subprocess.Popen:
    env = services._job_env() | env_extra
    return subprocess.Popen(  # noqa: S603
        [sys.executable, "-m", "spark_reports.lake", "export"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def committed_ids(spark, db) -> list[int]:
    rows = lake_read.read_meters(spark, db, DAY.date() - timedelta(days=1), DAY.date() + timedelta(days=4))
    return sorted(r["id"] for r in rows.select("id").collect())


@pytest.mark.parametrize("kill", ["while_writing", "after_write_before_commit"])
def test_an_export_killed_mid_write_then_run_again_has_every_row_exactly_once(
    spark, tenant_a, tenant_b, kill, lake_dir
):
    meter_rows([tenant_a, tenant_b], 600)
    db = database_from_url(services.report_database_url())
    if kill == "while_writing":
        proc = start_export({})
        for line in proc.stdout:
            if line.startswith(lake.WRITING_MARKER + " "):
                proc.kill()  # SIGKILL as soon as the attempt is recorded and its read and write start
                break
        else:
            pytest.fail("the export never started writing")
        proc.wait(60)
    else:
        proc = start_export({"LAKE_EXPORT_KILL_AFTER_WRITE": "1"})
        output = proc.communicate(timeout=300)[0]
        assert proc.returncode == -9, output
    assert proc.returncode == -9
    killed = MeterExport.objects.get()
    assert killed.state == MeterExport.State.PENDING  # the watermark did not move
    if kill == "after_write_before_commit":
        # Its files are complete in the lake: read without the commit rule they would double every row.
        files = (
            spark.read.schema(lake_layout.LAKE_SCHEMA)
            .parquet(lake_layout.meters_uri(lake_dir))
            .where(F.col("export") == killed.pk)
        )
        assert files.count() == 600

    meter_rows([tenant_a, tenant_b], 150, start=600)  # traffic goes on meanwhile
    result = lake_export.export(spark, db)
    assert (result["abandoned"], result["rows"]) == (1, 750)
    killed.refresh_from_db()
    assert killed.state == MeterExport.State.ABANDONED
    expected = sorted(CommandMeter.objects.values_list("pk", flat=True))
    assert committed_ids(spark, db) == expected  # every row, none twice
    assert lake_export.export(spark, db)["rows"] == 0  # nothing new: nothing exported again
    assert committed_ids(spark, db) == expected


def test_spark_figures_from_the_lake_equal_sql_across_days_tenants_and_protocols(spark, tenant_a, tenant_b):
    meter_rows([tenant_a, tenant_b], 900)
    db = database_from_url(services.report_database_url())
    first, last = DAY.date(), DAY.date() + timedelta(days=2)
    lake_export.export(spark, db)
    merged = transform.merge_meters(
        transform.meter_partials(lake_read.read_meters(spark, db, first, last)), first, last
    )
    counts = transform.merged_counts(merged)
    got = {
        (r["tenant_id"], r["day"], r["protocol"]): (r["commands"], r["errors"], r["bytes_in"], r["bytes_out"])
        for r in counts.groupBy("tenant_id", "day", "protocol")
        .agg(
            F.sum("commands").alias("commands"),
            F.sum(F.when(F.col("code") == "SUCCESS", 0).otherwise(F.col("commands"))).alias("errors"),
            F.sum("bytes_in").alias("bytes_in"),
            F.sum("bytes_out").alias("bytes_out"),
        )
        .collect()
    }
    with connection.cursor() as cur:
        cur.execute(
            """SELECT tenant_id, (at AT TIME ZONE 'UTC')::date, protocol, count(*),
                 count(*) FILTER (WHERE code <> 'SUCCESS'), sum(bytes_in), sum(bytes_out)
               FROM usage_commandmeter GROUP BY 1, 2, 3"""
        )
        expected = {(t, d, p): (n, e, bi, bo) for t, d, p, n, e, bi, bo in cur.fetchall()}
        cur.execute(
            """SELECT tenant_id, (at AT TIME ZONE 'UTC')::date,
                 percentile_disc(0.5) WITHIN GROUP (ORDER BY duration_ms),
                 percentile_disc(0.95) WITHIN GROUP (ORDER BY duration_ms)
               FROM usage_commandmeter GROUP BY 1, 2"""
        )
        exact = {(t, d): (p50, p95) for t, d, p50, p95 in cur.fetchall()}
    assert got == expected
    assert len({d for _, d, _ in expected}) == 3 and len({p for *_, p in expected}) == 3
    latency = transform.latency_percentiles(transform.merged_histogram(merged)).collect()
    assert {(r["tenant_id"], r["day"]) for r in latency} == set(exact)
    for r in latency:
        p50, p95 = exact[(r["tenant_id"], r["day"])]
        assert dataset.latency_within_bound(r["latency_p50_ms"], p50)
        assert dataset.latency_within_bound(r["latency_p95_ms"], p95)


def test_the_beat_task_exports_through_a_job_process(spark, tenant_a, tenant_b):
    meter_rows([tenant_a, tenant_b], 40)
    assert tasks.export_metering() == "exported 40 metering rows (0 interrupted exports abandoned)"
    assert tasks.export_metering() == "exported 0 metering rows (0 interrupted exports abandoned)"
    assert services.metering_watermark() == CommandMeter.objects.latest("pk").pk
    # The commit's row count and time span, read from the files' footers, are the rows' own.
    export = MeterExport.objects.get(state=MeterExport.State.COMMITTED, rows__gt=0)
    span = CommandMeter.objects.aggregate(first=Min("at"), last=Max("at"))
    assert (export.rows, export.first_at, export.last_at) == (40, span["first"], span["last"])


def export_folders(lake_dir: str, day) -> set[tuple[str, str]]:
    """The (tenant_id=, export=) folders of one day of the lake's metering rows."""
    root = Path(lake_layout.meters_uri(lake_dir)) / f"day={day.isoformat()}"
    return {(p.parent.name, p.name) for p in root.glob("tenant_id=*/export=*")}


def test_compaction_rewrites_closed_days_and_readers_see_every_row_once_at_every_step(
    spark, tenant_a, tenant_b, lake_dir
):
    db = database_from_url(services.report_database_url())
    for start in (0, 90, 180):  # three exports, each with rows on the three days and both tenants
        meter_rows([tenant_a, tenant_b], 90, start=start)
        lake_export.export(spark, db)
    days = [DAY.date() + timedelta(days=i) for i in range(3)]
    today = days[-1] + timedelta(days=1)
    expected = sorted(CommandMeter.objects.values_list("pk", flat=True))
    assert len(export_folders(lake_dir, days[0])) == 6

    class Died(Exception):
        pass

    def die(attempt):
        raise Died  # the compaction's files are written, its commit never comes

    with pytest.raises(Died):
        lake_compaction.compact(spark, db, today=today, after_write=die)
    assert MeterExport.objects.get(state=MeterExport.State.PENDING).day == days[0]
    assert committed_ids(spark, db) == expected  # its files are there, unread

    result = lake_compaction.compact(spark, db, today=today)
    assert [(c["day"], c["rows"]) for c in result["compacted"]] == [(d.isoformat(), 90) for d in days]
    assert MeterExport.objects.filter(day__isnull=False, state=MeterExport.State.ABANDONED).count() == 1
    # Old and new files are both on disk until CLEAN_AFTER: readers take one set of them.
    assert len(export_folders(lake_dir, days[0])) == 6 + 2 + 2
    assert committed_ids(spark, db) == expected

    meter_rows([tenant_a, tenant_b], 30, start=270)  # late rows of the compacted days
    lake_export.export(spark, db)
    expected = sorted(CommandMeter.objects.values_list("pk", flat=True))
    assert committed_ids(spark, db) == expected

    later = datetime.now(UTC) + lake_cleanup.CLEAN_AFTER + timedelta(minutes=1)
    result = lake_compaction.compact(spark, db, today=today, now=later)
    assert [c["day"] for c in result["compacted"]] == [d.isoformat() for d in days]  # the late rows joined
    assert result["cleaned_folders"] > 0
    latest = MeterExport.objects.filter(state=MeterExport.State.COMPACTED, day=days[0]).latest("pk")
    assert export_folders(lake_dir, days[0]) == {
        (f"tenant_id={t.pk}", f"export={-latest.pk}") for t in (tenant_a, tenant_b)
    }
    assert committed_ids(spark, db) == expected
    assert lake_compaction.compact(spark, db, today=today, now=later)["compacted"] == []  # nothing left to do
