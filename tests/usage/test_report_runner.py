"""The launcher keeps one job process per worker process (`spark_reports.usage_report --serve`), so
a report pays neither a Python start nor a new Spark session; each run records when its stages
began (`ReportRun.stages`), and the run page says them in words. An export that finds no new
metering row does no Spark work at all.

The job processes here are stand-ins (real processes on real pipes, speaking the job's protocol);
the real job is what the Spark tests and the browser test run."""

from __future__ import annotations

import sys
from datetime import UTC, datetime

import pytest
import time_machine
from django.db.models import Max

from apps.usage import services, views
from apps.usage.models import CommandMeter, MeterExport, ReportRun
from spark_reports import lake_export
from spark_reports.config import database_from_url
from spark_reports.usage_report import STEPS

pytestmark = pytest.mark.django_db
DAY = datetime(2026, 1, 10, tzinfo=UTC).date()
FROZEN = datetime(2026, 1, 10, 12, 0, tzinfo=UTC)
T = FROZEN.timestamp()

# Serves every request line it reads: says which process served which request, prints the job's
# steps (each at T plus its number) and an empty result, then waits for the next line.
SERVING_JOB = f"""
import json, os, sys
for n, line in enumerate(sys.stdin):
    request = json.loads(line)
    print("served", request["run_id"], "by", os.getpid(), "request", n, flush=True)
    for i, step in enumerate({STEPS[1:]!r}):
        print("USAGE_REPORT_PROGRESS " + json.dumps({{"step": step, "at": {T} + i + 1, "step_no": i + 2}}), flush=True)
    print("USAGE_REPORT_RESULT " + json.dumps({{"daily": 0, "by_type": 0, "by_code": 0, "top": 0}}), flush=True)
"""


@pytest.fixture(autouse=True)
def no_kept_job():
    yield
    services.report_job_stop()


def serve(monkeypatch, code: str) -> None:
    """Stand-in job processes; SPARK_REMOTE names a cluster, so the launcher starts no local engine."""
    monkeypatch.setenv("SPARK_REMOTE", "sc://127.0.0.1:9")
    monkeypatch.setattr(services, "_job_command", lambda: [sys.executable, "-c", code])


def new_run() -> ReportRun:
    return services.report_run_request(date_from=DAY, date_to=DAY, enqueue=False)


def served(run: ReportRun) -> list[str]:
    """What the job process said about the run (its log file's first line)."""
    return services._log_path(run).read_text().splitlines()[0].split()


def test_one_job_process_serves_one_run_after_the_other(monkeypatch):
    serve(monkeypatch, SERVING_JOB)
    first, second = new_run(), new_run()
    assert services.report_run_execute(run_id=first.pk).status == ReportRun.Status.SUCCEEDED
    assert services.report_run_execute(run_id=second.pk).status == ReportRun.Status.SUCCEEDED
    one, two = served(first), served(second)
    assert one == ["served", str(first.pk), "by", one[3], "request", "0"]
    assert two == ["served", str(second.pk), "by", one[3], "request", "1"]  # the same process, its 2nd request


def test_a_new_environment_gets_a_new_job_process(monkeypatch):
    serve(monkeypatch, SERVING_JOB)
    first, second = new_run(), new_run()
    services.report_run_execute(run_id=first.pk)
    monkeypatch.setenv("SPARK_SHUFFLE_PARTITIONS", "3")  # the job reads its settings once, at its start
    services.report_run_execute(run_id=second.pk)
    one, two = served(first), served(second)
    assert two[5] == "0" and two[3] != one[3]


def test_a_run_records_when_each_stage_began(monkeypatch):
    serve(monkeypatch, SERVING_JOB)
    with time_machine.travel(FROZEN, tick=False):
        run = new_run()
        run = services.report_run_execute(run_id=run.pk)
    assert run.stages == {
        "queued": T,
        "claimed": T,
        "exporting": T + 1,
        "counting rows": T + 2,
        "computing the report": T + 3,
        "writing the report": T + 4,
        "publishing": T,
        "published": T,
    }


def test_a_kept_session_that_expired_is_replaced_before_the_run_begins(monkeypatch, tmp_path):
    # The first process finds its session gone when the request comes (it says so, having done
    # nothing); the launcher starts a new one and hands it the same run.
    once = tmp_path / "stale-once"
    serve(
        monkeypatch,
        f"import os, sys\n"
        f"if not os.path.exists({str(once)!r}):\n"
        f"    open({str(once)!r}, 'w').close()\n"
        "    sys.stdin.readline()\n"
        "    print('USAGE_REPORT_STALE_SESSION sc://127.0.0.1:9', flush=True)\n"
        "    raise SystemExit(3)\n" + SERVING_JOB,
    )
    run = services.report_run_execute(run_id=new_run().pk)
    assert run.status == ReportRun.Status.SUCCEEDED
    assert served(run)[:2] == ["served", str(run.pk)] and served(run)[5] == "0"


def test_the_run_page_says_the_stages_in_words_with_their_seconds():
    run = ReportRun(
        date_from=DAY,
        date_to=DAY,
        stages={"published": 110.5, "queued": 100.0, "claimed": 100.25, "exporting": 101.0, "publishing": 110.0},
    )
    assert views.stage_list(run) == [
        {"stage": "queued", "words": "Waiting for a worker", "seconds": 0.25},
        {"stage": "claimed", "words": "Starting the report job", "seconds": 0.75},
        {"stage": "exporting", "words": "Exporting new metering rows to the lake", "seconds": 9.0},
        {"stage": "publishing", "words": "Publishing", "seconds": 0.5},
        {"stage": "published", "words": "Published", "seconds": None},
    ]
    assert set(STEPS) <= set(views.STAGE_WORDS)


class NoSpark:
    """A Spark session that must not be used: any use is a Spark operation the export should not run."""

    def __getattr__(self, name):
        raise AssertionError(f"the export used Spark ({name}) with no new metering row")


@pytest.mark.django_db(transaction=True)
def test_an_export_that_finds_no_new_row_does_no_spark_work(tenant_a, lake_dir):
    CommandMeter.objects.create(
        tenant=tenant_a, at=FROZEN, transport="http", code="SUCCESS", http_status=200, bytes_in=1, bytes_out=2,
        duration_ms=1.0,
    )  # fmt: skip
    hi = CommandMeter.objects.aggregate(hi=Max("id"))["hi"]
    # As if an earlier export had taken every row up to now.
    MeterExport.objects.create(lo_id=0, hi_id=hi, state="committed", rows=1, started_at=FROZEN, first_at=FROZEN)
    db = database_from_url(services.report_database_url())
    result = lake_export.export(NoSpark(), db, lake_dir)
    assert (result["from_id"], result["to_id"], result["rows"], result["abandoned"]) == (hi, hi, 0, 0)
    attempt = MeterExport.objects.get(pk=result["export"])
    assert (attempt.state, attempt.lo_id, attempt.hi_id, attempt.rows) == ("committed", hi, hi, 0)


@pytest.mark.spark
@pytest.mark.django_db(transaction=True)
def test_a_warmed_engine_serves_the_first_report_on_the_kept_session(spark_engine, tenant_a, monkeypatch):
    # make run's prestart: the engine (the session's, already up) is warmed by the worker's job
    # process, which keeps its session: the first report then neither checks the engine nor connects.
    monkeypatch.setenv("SPARK_SHUFFLE_PARTITIONS", "2")
    assert services.report_engine_warm().startswith("spark engine warm (")
    run = services.report_run_execute(run_id=new_run().pk)
    assert run.status == ReportRun.Status.SUCCEEDED, run.log_tail
    assert [s["stage"] for s in views.stage_list(run)] == ["queued", "claimed", *STEPS[1:], "publishing", "published"]
    assert (run.row_counts["daily"], run.progress["rows_total"]) == (0, 0)


def test_a_run_over_the_time_limit_is_stopped_and_says_so(monkeypatch, settings):
    settings.USAGE_REPORT_TIMEOUT_S = 0
    serve(monkeypatch, "import sys, time\nsys.stdin.readline()\nprint('working', flush=True)\ntime.sleep(60)")
    run = services.report_run_execute(run_id=new_run().pk)
    assert run.status == ReportRun.Status.FAILED
    assert run.error == "The report took longer than the limit of 0 seconds and was stopped."
    assert run.log_tail.endswith("timeout after 0s")
