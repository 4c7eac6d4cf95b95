"""Report run lifecycle (claim, publish, fail without leftovers) and metering retention."""

from __future__ import annotations

import sys
from datetime import date, timedelta
from pathlib import Path

import pytest
from django.core.management import call_command
from django.utils import timezone

from apps.usage import services, tasks
from apps.usage.models import CommandMeter, MeterExport, ReportDaily, ReportRun

pytestmark = pytest.mark.django_db
DAY = date(2026, 1, 10)


def meter(tenant, at, **kw) -> CommandMeter:
    fields = dict(transport="http", code="SUCCESS", http_status=200, bytes_in=1, bytes_out=1, duration_ms=1.0)
    fields.update(kw)
    return CommandMeter.objects.create(tenant_id=tenant.pk if tenant else 999_999_999, at=at, **fields)


def staged_run(tenant) -> ReportRun:
    run = services.report_run_request(date_from=DAY, date_to=DAY, enqueue=False)
    ReportDaily.objects.create(run=run, tenant=tenant, day=DAY, commands=5)
    return run


def fake_job(monkeypatch, code: str) -> None:
    """A stand-in job process; SPARK_REMOTE names a cluster, so the launcher starts no local engine.
    Like the real job (`--serve`) it reads its run's request before it says anything: what a job
    prints before a run is submitted belongs to no run (a stand-in that printed at once raced the
    launcher's submit and lost its first lines on a loaded machine)."""
    monkeypatch.setenv("SPARK_REMOTE", "sc://127.0.0.1:9")
    code = "import sys\nsys.stdin.readline()\n" + code
    monkeypatch.setattr(services, "_job_command", lambda: [sys.executable, "-c", code])


def test_a_failed_job_leaves_no_half_written_report(tenant_a, monkeypatch):
    run = staged_run(tenant_a)
    fake_job(monkeypatch, "print('extract ok'); print('load: connection reset'); raise SystemExit(3)")
    run = services.report_run_execute(run_id=run.pk)
    assert run.status == ReportRun.Status.FAILED
    assert not ReportDaily.objects.filter(run=run).exists()
    assert "load: connection reset" in run.log_tail
    assert run.log_tail.endswith("job exited with 3")
    assert run.error == "The report job failed. The technical details are below."
    assert run.started_at and run.finished_at


def test_a_job_whose_counts_disagree_with_the_rows_fails(tenant_a, monkeypatch):
    run = staged_run(tenant_a)
    fake_job(monkeypatch, 'print(\'USAGE_REPORT_RESULT {"daily": 2, "by_type": 0, "by_code": 0, "top": 0}\')')
    run = services.report_run_execute(run_id=run.pk)
    assert run.status == ReportRun.Status.FAILED
    assert "row counts differ" in run.log_tail
    assert run.error == "The report's rows did not add up when it finished, so nothing was published."
    assert not ReportDaily.objects.filter(run=run).exists()


def test_a_clean_job_publishes_the_staged_rows(tenant_a, monkeypatch):
    run = staged_run(tenant_a)
    fake_job(
        monkeypatch,
        'print(\'USAGE_REPORT_RESULT {"daily": 1, "by_type": 0, "by_code": 0, "top": 0, "total_seconds": 1.5}\')',
    )
    run = services.report_run_execute(run_id=run.pk)
    assert run.status == ReportRun.Status.SUCCEEDED
    assert run.row_counts == {
        "daily": 1,
        "by_type": 0,
        "by_code": 0,
        "top": 0,
        "job_seconds": 1.5,
        "spark_seconds": None,
    }


def test_a_run_is_executed_once(tenant_a, monkeypatch):
    run = staged_run(tenant_a)
    ReportRun.objects.filter(pk=run.pk).update(status=ReportRun.Status.RUNNING)
    fake_job(monkeypatch, "raise SystemExit(1)")
    again = services.report_run_execute(run_id=run.pk)
    assert again.status == ReportRun.Status.RUNNING  # another worker holds it; nothing ran here
    assert ReportDaily.objects.filter(run=run).count() == 1


def test_a_request_with_an_inverted_or_huge_range_is_refused(settings):
    with pytest.raises(services.ReportRequestError):
        services.report_run_request(date_from=DAY, date_to=DAY - timedelta(days=1), enqueue=False)
    settings.USAGE_REPORT_MAX_DAYS = 7
    with pytest.raises(services.ReportRequestError):
        services.report_run_request(date_from=DAY, date_to=DAY + timedelta(days=7), enqueue=False)
    assert not ReportRun.objects.exists()


def test_a_request_enqueues_only_after_commit(tenant_a, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        run = services.report_run_request(date_from=DAY, date_to=DAY, tenants=[tenant_a])
    assert len(callbacks) == 1
    assert run.status == ReportRun.Status.QUEUED and list(run.tenants.all()) == [tenant_a]


def test_prune_keeps_each_tenants_retention(tenant_a, tenant_b, capsys):
    services.metering_prune()  # rows other tests left behind, so that the count below is exact
    now = timezone.now()
    tenant_a.metering_retention_days = 1
    tenant_a.save(update_fields=["metering_retention_days"])
    keep_a = meter(tenant_a, now - timedelta(hours=20))
    meter(tenant_a, now - timedelta(days=2))
    keep_b = meter(tenant_b, now - timedelta(days=30))
    meter(tenant_b, now - timedelta(days=91))
    meter(None, now)  # a deleted tenant's row
    assert tasks.prune_metering().startswith("pruned 3 metering rows across ")
    assert set(CommandMeter.objects.filter(tenant_id__in=[tenant_a.pk, tenant_b.pk]).values_list("pk", flat=True)) == {
        keep_a.pk,
        keep_b.pk,
    }
    call_command("prune_metering")
    assert capsys.readouterr().out.startswith("pruned 0 metering rows")


def test_prune_drops_exported_rows_past_the_keep_days_and_never_an_unexported_one(tenant_a, settings):
    services.metering_prune()
    settings.USAGE_METERING_KEEP_DAYS = 2
    now = timezone.now()
    exported_old = meter(tenant_a, now - timedelta(days=2, minutes=1))
    exported_recent = meter(tenant_a, now - timedelta(days=1, hours=23))
    MeterExport.objects.create(
        lo_id=0, hi_id=exported_recent.pk, state=MeterExport.State.COMMITTED, rows=2, started_at=now
    )
    # Past the watermark: an interrupted export's range and rows not exported yet stay, however old.
    pending_old = meter(tenant_a, now - timedelta(days=5))
    MeterExport.objects.create(
        lo_id=exported_recent.pk, hi_id=pending_old.pk, state=MeterExport.State.ABANDONED, started_at=now
    )
    not_exported_old = meter(tenant_a, now - timedelta(days=3))
    result = services.metering_prune(now=now)
    assert (result.rows, result.exported) == (1, 1)
    assert not CommandMeter.objects.filter(pk=exported_old.pk).exists()
    assert set(CommandMeter.objects.values_list("pk", flat=True)) == {
        exported_recent.pk,
        pending_old.pk,
        not_exported_old.pk,
    }


def test_prune_drops_whole_lake_days_past_the_lake_retention(settings, lake_dir):
    today = timezone.now().date()
    settings.USAGE_LAKE_RETENTION_DAYS = 30
    days = {
        d: Path(lake_dir) / "meters" / f"day={d.isoformat()}"
        for d in (today - timedelta(days=31), today - timedelta(days=30), today)
    }
    for path in days.values():
        (path / "tenant_id=1" / "export=1").mkdir(parents=True)
        (path / "tenant_id=1" / "export=1" / "part-0.parquet").write_bytes(b"x")
    result = services.metering_prune()
    oldest = today - timedelta(days=31)
    assert result.lake_days == (f"day={oldest.isoformat()}",)
    assert {d for d, path in days.items() if path.exists()} == set(days) - {oldest}


def test_the_nightly_task_reports_yesterday_for_every_tenant(tenant_a, monkeypatch):
    yesterday = timezone.now().date() - timedelta(days=1)
    before = services.report_run_request(
        date_from=yesterday - timedelta(days=1), date_to=yesterday - timedelta(days=1), enqueue=False
    )
    ReportRun.objects.filter(pk=before.pk).update(status=ReportRun.Status.SUCCEEDED)
    fake_job(monkeypatch, 'print(\'USAGE_REPORT_RESULT {"daily": 0, "by_type": 0, "by_code": 0, "top": 0}\')')
    summary = tasks.nightly_usage_report()
    run = ReportRun.objects.exclude(pk=before.pk).get()
    assert (run.kind, run.date_from, run.date_to, run.tenants.count()) == ("nightly", yesterday, yesterday, 0)
    assert summary == f"nightly usage report {run.pk} for {yesterday} succeeded"
    assert tasks.nightly_usage_report() == "nightly usage report: yesterday is already reported"


def test_the_job_request_names_the_run_range_and_tenants(tenant_a, tenant_b):
    run = services.report_run_request(date_from=DAY, date_to=DAY, tenants=[tenant_b, tenant_a], enqueue=False)
    assert services._job_command()[1:] == ["-m", "spark_reports.usage_report", "--serve"]
    assert services._job_request(run) == {
        "run_id": run.pk,
        "from": "2026-01-10",
        "to": "2026-01-10",
        "tenants": sorted([tenant_a.pk, tenant_b.pk]),
    }
    url = services.report_database_url()
    assert url.startswith("postgresql://") and "password" not in " ".join(services._job_command())


def test_a_run_whose_worker_died_is_failed_and_its_rows_dropped(tenant_a, settings):
    run = staged_run(tenant_a)
    ReportRun.objects.filter(pk=run.pk).update(
        status=ReportRun.Status.RUNNING,
        started_at=timezone.now() - timedelta(seconds=settings.USAGE_REPORT_TIMEOUT_S + 700),
    )
    fresh = staged_run(tenant_a)
    ReportRun.objects.filter(pk=fresh.pk).update(status=ReportRun.Status.RUNNING, started_at=timezone.now())
    assert services.report_runs_fail_stale() == 1
    run.refresh_from_db()
    assert run.status == ReportRun.Status.FAILED and run.log_tail == "the worker running this report was lost"
    assert not ReportDaily.objects.filter(run=run).exists()
    assert ReportDaily.objects.filter(run=fresh).count() == 1


def test_the_nightly_run_skips_a_reported_day_and_catches_up_missed_ones(tenant_a, monkeypatch, settings):
    fake_job(monkeypatch, 'print(\'USAGE_REPORT_RESULT {"daily": 0, "by_type": 0, "by_code": 0, "top": 0}\')')
    today = date(2026, 3, 10)
    first = services.nightly_report_run(today=today)
    assert (first.date_from, first.date_to, first.status) == (date(2026, 3, 3), date(2026, 3, 9), "succeeded")
    assert services.nightly_report_run(today=today) is None  # yesterday is reported: nothing recomputed
    assert ReportRun.objects.count() == 1
    # Two nights missed: the next run covers exactly those two days and the new yesterday.
    later = services.nightly_report_run(today=date(2026, 3, 13))
    assert (later.date_from, later.date_to) == (date(2026, 3, 10), date(2026, 3, 12))
    # A run for one tenant does not count as the nightly all-tenant report.
    services.report_run_request(date_from=date(2026, 3, 13), date_to=date(2026, 3, 13), tenants=[tenant_a])
    assert services.days_to_report(yesterday=date(2026, 3, 13)) == [date(2026, 3, 13)]


def test_progress_lines_reach_the_run_while_it_works(tenant_a, monkeypatch, tmp_path):
    run = staged_run(tenant_a)
    # The job works until the run has shown its progress (a file the spy makes), not for a fixed time.
    shown = tmp_path / "shown"
    code = (
        "import os, time\n"
        'print(\'USAGE_REPORT_PROGRESS {"step": "computing daily", "step_no": 3, "steps": 6, "tasks_done": 2,'
        ' "tasks_total": 8, "rows_total": 1000}\', flush=True)\n'
        "deadline = time.monotonic() + 60\n"
        f"while not os.path.exists({str(shown)!r}) and time.monotonic() < deadline:\n"
        "    time.sleep(0.02)\n"
        'print(\'USAGE_REPORT_RESULT {"daily": 1, "by_type": 0, "by_code": 0, "top": 0}\')\n'
    )
    fake_job(monkeypatch, code)
    seen = []
    real_update = services._cancel_requested

    def spy(run_id):
        seen.append(ReportRun.objects.get(pk=run_id).progress)
        if seen[-1]:
            shown.touch()
        return real_update(run_id)

    monkeypatch.setattr(services, "_cancel_requested", spy)
    run = services.report_run_execute(run_id=run.pk)
    assert run.status == ReportRun.Status.SUCCEEDED
    assert {
        "step": "computing daily",
        "step_no": 3,
        "steps": 6,
        "tasks_done": 2,
        "tasks_total": 8,
        "rows_total": 1000,
    } in seen


def test_cancel_stops_a_running_job_and_drops_its_rows(tenant_a, monkeypatch):
    run = staged_run(tenant_a)
    fake_job(monkeypatch, "import time; print('working', flush=True); time.sleep(60)")
    calls = {"n": 0}
    real = services._cancel_requested

    def cancel_after_first_poll(run_id):
        calls["n"] += 1
        if calls["n"] == 2:
            services.report_run_cancel(run_id=run_id)
        return real(run_id)

    monkeypatch.setattr(services, "_cancel_requested", cancel_after_first_poll)
    started = timezone.now()
    run = services.report_run_execute(run_id=run.pk)
    assert run.status == ReportRun.Status.CANCELLED
    assert (timezone.now() - started).total_seconds() < 20  # the 60 s job was stopped
    assert not ReportDaily.objects.filter(run=run).exists()
    assert "working" in run.log_tail and run.finished_at


def test_cancel_of_a_queued_run_is_immediate_and_a_finished_run_cannot_be_cancelled(tenant_a, monkeypatch):
    run = services.report_run_request(date_from=DAY, date_to=DAY, enqueue=False)
    assert services.report_run_cancel(run_id=run.pk).status == ReportRun.Status.CANCELLED
    fake_job(monkeypatch, "raise SystemExit(1)")
    assert services.report_run_execute(run_id=run.pk).status == ReportRun.Status.CANCELLED  # nothing to claim
    with pytest.raises(services.ReportCancelError):
        services.report_run_cancel(run_id=run.pk)


def test_an_unreachable_engine_fails_the_run_in_words(tenant_a, monkeypatch):
    run = staged_run(tenant_a)
    fake_job(monkeypatch, "print('USAGE_REPORT_ENGINE_DOWN sc://127.0.0.1:9'); raise SystemExit(3)")
    run = services.report_run_execute(run_id=run.pk)
    assert run.status == ReportRun.Status.FAILED
    assert run.error == services.ENGINE_DOWN_WORDS
    assert "USAGE_REPORT_ENGINE_DOWN" in run.log_tail and not ReportDaily.objects.filter(run=run).exists()


@pytest.mark.parametrize(
    ("reason", "output", "words"),
    [
        ("timeout after 3600s", "", "The report took longer than the limit of 3600 seconds and was stopped."),
        (
            "job exited with 1",
            "org.postgresql.util.PSQLException: Connection to 127.0.0.1:5 refused",
            "Spark could not read the mediator's database.",
        ),
        (
            "job exited with 1",
            "java.lang.OutOfMemoryError: Java heap space",
            "The Spark engine ran out of memory computing this report.",
        ),
        ("the worker running this report was lost", "", "The worker running this report stopped before it finished."),
        ("could not start: No such file", "", "The report job could not be started on the worker."),
    ],
)
def test_failures_are_named_in_words(reason, output, words):
    assert services.failure_words(reason=reason, output=output) == words
