"""Usage services: request and execute report runs, publish or fail them, prune metering."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from pathlib import Path
from urllib.parse import quote

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from apps.tenants.models import Tenant

from .models import (
    CommandMeter,
    ReportCommandType,
    ReportDaily,
    ReportErrorCode,
    ReportRun,
    ReportTopIdentity,
)

log = logging.getLogger("mediator.usage")

RESULT_MARKER = "USAGE_REPORT_RESULT"  # spark_reports.usage_report prints it; that module is not imported here
RESULT_MODELS = {
    "daily": ReportDaily,
    "by_type": ReportCommandType,
    "by_code": ReportErrorCode,
    "top": ReportTopIdentity,
}
LOG_TAIL_CHARS = 4000
PRUNE_BATCH = 10_000


class ReportRequestError(ValueError):
    """A report request that cannot be honoured (bad range, unknown tenants)."""


def report_run_request(
    *,
    date_from: date,
    date_to: date,
    tenants: list[Tenant] | None = None,
    kind: str = ReportRun.Kind.MANUAL,
    requested_by=None,
    enqueue: bool = True,
) -> ReportRun:
    """Create a queued ReportRun and, after commit, hand it to a Celery worker."""
    if date_to < date_from:
        raise ReportRequestError("the end date is before the start date")
    if (date_to - date_from).days + 1 > settings.USAGE_REPORT_MAX_DAYS:
        raise ReportRequestError(f"a report covers at most {settings.USAGE_REPORT_MAX_DAYS} days")
    with transaction.atomic():
        run = ReportRun.objects.create(kind=kind, date_from=date_from, date_to=date_to, requested_by=requested_by)
        if tenants:
            run.tenants.set(tenants)
        if enqueue:
            from .tasks import run_usage_report

            run_id = run.pk
            transaction.on_commit(
                lambda: run_usage_report.apply_async(args=[run_id], queue=settings.USAGE_REPORT_QUEUE)
            )
    return run


def report_database_url() -> str:
    """The default database as a URL for the Spark job (credentials go through its environment)."""
    s = connection.settings_dict
    if s["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{Path(s['NAME']).resolve()}"
    user = quote(s.get("USER") or "postgres", safe="")
    password = quote(s.get("PASSWORD") or "", safe="")
    auth = f"{user}:{password}" if password else user
    return f"postgresql://{auth}@{s.get('HOST') or '127.0.0.1'}:{s.get('PORT') or 5432}/{s['NAME']}"


def _claim(run_id: int) -> bool:
    # Conditional UPDATE: of two workers handed the same run, exactly one moves it to running.
    return bool(
        ReportRun.objects.filter(pk=run_id, status=ReportRun.Status.QUEUED).update(
            status=ReportRun.Status.RUNNING, started_at=timezone.now()
        )
    )


def _log_path(run: ReportRun) -> Path:
    path = Path(settings.VAR_DIR) / "usage-runs"
    path.mkdir(parents=True, exist_ok=True)
    return path / f"run-{run.pk}-{run.public_id.hex[:8]}.log"


def _job_command(run: ReportRun) -> list[str]:
    cmd = [
        sys.executable,
        "-m",
        "spark_reports.usage_report",
        "--run-id",
        str(run.pk),
        "--from",
        run.date_from.isoformat(),
        "--to",
        run.date_to.isoformat(),
    ]
    for tenant_id in run.tenants.values_list("pk", flat=True).order_by("pk"):
        cmd += ["--tenant", str(tenant_id)]
    return cmd


def _parse_result(output: str) -> dict | None:
    for line in reversed(output.splitlines()):
        if line.startswith(RESULT_MARKER + " "):
            try:
                return json.loads(line[len(RESULT_MARKER) + 1 :])
            except ValueError:
                return None
    return None


def report_run_execute(*, run_id: int) -> ReportRun:
    """Run the Spark job for a queued run as its own process, then publish or fail the run.

    Idempotent: a run that is not queued any more (already taken, finished) is left as it is.
    """
    if not _claim(run_id):
        return ReportRun.objects.get(pk=run_id)
    run = ReportRun.objects.get(pk=run_id)
    env = dict(os.environ)
    env.update(
        {
            "REPORT_DATABASE_URL": report_database_url(),
            "PYTHONPATH": str(settings.BASE_DIR),
            "PYTHONUNBUFFERED": "1",
            "SPARK_LOCAL_IP": os.environ.get("SPARK_LOCAL_IP", "127.0.0.1"),
        }
    )
    log_path = _log_path(run)
    try:
        with log_path.open("wb") as out:
            proc = subprocess.run(
                _job_command(run),
                cwd=settings.BASE_DIR,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                timeout=settings.USAGE_REPORT_TIMEOUT_S,
                check=False,
            )
        returncode: int | str = proc.returncode
    except subprocess.TimeoutExpired:
        returncode = f"timeout after {settings.USAGE_REPORT_TIMEOUT_S}s"
    except OSError as exc:
        returncode = f"could not start: {exc.strerror}"
    output = log_path.read_text(errors="replace") if log_path.exists() else ""
    result = _parse_result(output) if returncode == 0 else None
    if result is None:
        return report_run_fail(run=run, reason=f"job exited with {returncode}", output=output)
    return report_run_publish(run=run, result=result, output=output)


def report_run_publish(*, run: ReportRun, result: dict, output: str) -> ReportRun:
    """Check the staged rows match what the job reported, then make the run visible in one UPDATE."""
    counts = {name: model.objects.filter(run=run).count() for name, model in RESULT_MODELS.items()}
    expected = {name: int(result.get(name, -1)) for name in RESULT_MODELS}
    if counts != expected:
        return report_run_fail(run=run, reason=f"row counts differ: job said {expected}, found {counts}", output=output)
    row_counts = dict(counts, job_seconds=result.get("total_seconds"), spark_seconds=result.get("seconds"))
    ReportRun.objects.filter(pk=run.pk, status=ReportRun.Status.RUNNING).update(
        status=ReportRun.Status.SUCCEEDED, finished_at=timezone.now(), row_counts=row_counts, log_tail=""
    )
    run.refresh_from_db()
    log.info("usage report %s published: %s", run.pk, counts)
    return run


def report_run_fail(*, run: ReportRun, reason: str, output: str) -> ReportRun:
    """Drop whatever the failed job staged and record why, with the end of its log."""
    with transaction.atomic():
        for model in RESULT_MODELS.values():
            model.objects.filter(run=run).delete()
        tail = (output[-LOG_TAIL_CHARS:] + "\n" if output else "") + reason
        ReportRun.objects.filter(pk=run.pk).update(
            status=ReportRun.Status.FAILED, finished_at=timezone.now(), log_tail=tail[-LOG_TAIL_CHARS:]
        )
    run.refresh_from_db()
    log.warning("usage report %s failed: %s", run.pk, reason)
    return run


def report_runs_fail_stale(*, now: datetime | None = None) -> int:
    """Fail runs still `running` well past the job timeout (their worker died); returns how many."""
    cutoff = (now or timezone.now()) - timedelta(seconds=settings.USAGE_REPORT_TIMEOUT_S + 600)
    stale = list(ReportRun.objects.filter(status=ReportRun.Status.RUNNING, started_at__lt=cutoff))
    for run in stale:
        report_run_fail(run=run, reason="the worker running this report was lost", output="")
    return len(stale)


def nightly_report_run(*, today: date | None = None) -> ReportRun:
    """Yesterday's report over all tenants, created and executed in the calling worker."""
    report_runs_fail_stale()
    day = (today or timezone.now().date()) - timedelta(days=1)
    run = report_run_request(date_from=day, date_to=day, kind=ReportRun.Kind.NIGHTLY, enqueue=False)
    return report_run_execute(run_id=run.pk)


@dataclass(frozen=True)
class PruneResult:
    rows: int
    tenants: int

    def summary(self) -> str:
        return f"pruned {self.rows} metering rows across {self.tenants} tenants"


def _delete_in_batches(qs) -> int:
    # Short batches keep each DELETE's locks and WAL small while the mediator keeps inserting.
    total = 0
    while True:
        ids = list(qs.values_list("pk", flat=True)[:PRUNE_BATCH])
        if not ids:
            return total
        total += CommandMeter.objects.filter(pk__in=ids).delete()[0]


def metering_prune(*, now: datetime | None = None) -> PruneResult:
    """Delete metering rows older than each tenant's retention, and rows of deleted tenants."""
    now = now or timezone.now()
    rows = 0
    tenants = list(Tenant.objects.only("pk", "metering_retention_days"))
    for tenant in tenants:
        cutoff = now - timedelta(days=tenant.metering_retention_days)
        rows += _delete_in_batches(CommandMeter.objects.filter(tenant_id=tenant.pk, at__lt=cutoff))
    rows += _delete_in_batches(CommandMeter.objects.exclude(tenant_id__in=[t.pk for t in tenants]))
    return PruneResult(rows=rows, tenants=len(tenants))
