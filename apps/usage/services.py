"""Usage services: request and execute report runs, publish or fail them, prune metering."""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from urllib.parse import quote, urlencode

from celery import current_app
from django.conf import settings
from django.db import connection, transaction
from django.db.models import Max
from django.utils import timezone

from apps.tenants.models import Tenant

from .models import RESULT_MODELS, CommandMeter, MeterExport, ReportRun

log = logging.getLogger("mediator.usage")

# spark_reports.usage_report prints these; that module is not imported here (it runs as its own process).
RESULT_MARKER = "USAGE_REPORT_RESULT"
PROGRESS_MARKER = "USAGE_REPORT_PROGRESS"
ENGINE_DOWN_MARKER = "USAGE_REPORT_ENGINE_DOWN"
STALE_MARKER = "USAGE_REPORT_STALE_SESSION"
WARM_MARKER = "USAGE_REPORT_WARM"
EXPORT_MARKER = "LAKE_EXPORT"  # spark_reports.lake's result line
ENGINE_DOWN_WORDS = (
    "The Spark engine that computes reports was not reachable. It has been restarted; "
    "generate the report again in a minute."
)
POLL_S = 0.5  # how often the launcher looks for a Cancel (progress is copied as it comes)
CANCEL_GRACE_S = 15.0  # SIGTERM -> SIGKILL
LOG_TAIL_CHARS = 4000
# The Celery task that runs a queued report (apps/usage/tasks.py, which calls this module), sent by name.
REPORT_TASK = "apps.usage.tasks.run_usage_report"
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
        run = ReportRun.objects.create(
            kind=kind,
            date_from=date_from,
            date_to=date_to,
            requested_by=requested_by,
            stages={"queued": _now_s()},
        )
        if tenants:
            run.tenants.set(tenants)
        if enqueue:
            run_id = run.pk
            transaction.on_commit(
                lambda: current_app.send_task(REPORT_TASK, args=[run_id], queue=settings.USAGE_REPORT_QUEUE)
            )
    return run


def report_database_url() -> str:
    """The default database as a URL for the Spark job (credentials go through its environment).

    The embedded PostgreSQL's Unix socket is out of the JDBC driver's reach: the job gets its loopback
    TCP address instead, with the password that TCP requires (settings.EMBEDDED_PG_TCP)."""
    s = connection.settings_dict
    host, port, password = s.get("HOST") or "127.0.0.1", s.get("PORT") or 5432, s.get("PASSWORD") or ""
    tcp = settings.EMBEDDED_PG_TCP
    if tcp is not None and host == str(settings.EMBEDDED_PGDATA):
        host, port, password = tcp["host"], tcp["port"], tcp["password"]
    user = quote(s.get("USER") or "postgres", safe="")
    password = quote(password, safe="")
    auth = f"{user}:{password}" if password else user
    # A multi-host HOST (h1,h2,h3) needs its target_session_attrs to reach the primary.
    options = {k: v for k, v in (s.get("OPTIONS") or {}).items() if k in ("target_session_attrs", "connect_timeout")}
    query = f"?{urlencode(options)}" if options else ""
    return f"postgresql://{auth}@{host}:{port}/{s['NAME']}{query}"


def _now_s() -> float:
    """A stage's time: epoch seconds to the millisecond (the job's progress lines say the same)."""
    return round(time.time(), 3)


def _claim(run_id: int) -> bool:
    # Conditional UPDATE: of two workers handed the same run, exactly one moves it to running.
    return bool(
        ReportRun.objects.filter(pk=run_id, status=ReportRun.Status.QUEUED).update(
            status=ReportRun.Status.RUNNING,
            started_at=timezone.now(),
        )
    )


def _log_path(run: ReportRun) -> Path:
    path = Path(settings.VAR_DIR) / "usage-runs"
    path.mkdir(parents=True, exist_ok=True)
    return path / f"run-{run.pk}-{run.public_id.hex[:8]}.log"


def _job_command() -> list[str]:
    """The report job process, serving one run per request line (spark_reports.usage_report --serve)."""
    return [sys.executable, "-m", "spark_reports.usage_report", "--serve"]


def _job_request(run: ReportRun) -> dict:
    """What the job computes for `run`: its range and tenants."""
    tenants = list(run.tenants.values_list("pk", flat=True).order_by("pk"))
    return {"run_id": run.pk, "from": run.date_from.isoformat(), "to": run.date_to.isoformat(), "tenants": tenants}


def _parse_result(output: str) -> dict | None:
    for line in reversed(output.splitlines()):
        if line.startswith(RESULT_MARKER + " "):
            try:
                return json.loads(line[len(RESULT_MARKER) + 1 :])
            except ValueError:
                return None
    return None


def _local_engine() -> bool:
    """The job will use this deployment's local engine (neither SPARK_REMOTE nor SPARK_MASTER)."""
    return not (os.environ.get("SPARK_REMOTE", "").strip() or os.environ.get("SPARK_MASTER", "").strip())


def spark_engine_ensure(*, env: dict[str, str]) -> str | None:
    """Start this deployment's local Spark engine unless it is up (the lazy start of `make run`;
    under the production layout its supervisor restarts it, and this finds it up); `engine start`
    recognises its own engine and never uses another deployment's. Returns None when it answers,
    else what went wrong. A cluster (SPARK_REMOTE / SPARK_MASTER) is not ours to start."""
    if not _local_engine():
        return None
    try:
        proc = _spark_module("engine", ["start"], env, settings.USAGE_ENGINE_START_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return f"the Spark engine did not start within {settings.USAGE_ENGINE_START_TIMEOUT_S} s"
    if proc.returncode != 0:
        return _output_tail(proc) or f"engine start exited with {proc.returncode}"
    return None


def _spark_module(
    module: str, args: list[str], env: dict[str, str], timeout: float
) -> subprocess.CompletedProcess[str]:
    """Run `python -m spark_reports.<module> <args>` to its end, its output captured."""
    return subprocess.run(  # noqa: S603 - fixed argv, no shell
        [sys.executable, "-m", f"spark_reports.{module}", *args],
        cwd=settings.BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _output_tail(proc: subprocess.CompletedProcess[str]) -> str:
    """The end of a finished job's output, as much as a run's log keeps."""
    return (proc.stdout + proc.stderr).strip()[-LOG_TAIL_CHARS:]


def _job_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "REPORT_DATABASE_URL": report_database_url(),
            "PYTHONPATH": str(settings.BASE_DIR),
            "PYTHONUNBUFFERED": "1",
            "SPARK_LOCAL_IP": os.environ.get("SPARK_LOCAL_IP", "127.0.0.1"),
            "USAGE_LAKE_URI": str(settings.USAGE_LAKE_URI),
            "USAGE_LAKE_RETENTION_DAYS": str(settings.USAGE_LAKE_RETENTION_DAYS),
        }
    )
    return env


class _Sink:
    """One run's share of the job's output: its log file, its last progress, its stages (a step's
    first line names when it began) and its result line. `changed` is set on each of them."""

    def __init__(self, log_path: Path, stages: dict) -> None:
        self.log_path = log_path
        self.log = log_path.open("wb")
        self.progress: dict | None = None
        self.stages = stages
        self.result: dict | None = None
        self.stale = False
        self.changed = threading.Event()

    def line(self, raw: bytes) -> None:
        self.log.write(raw)
        self.log.flush()
        line = raw.decode(errors="replace")
        marker, _, rest = line.partition(" ")
        if marker == PROGRESS_MARKER:
            try:
                progress = json.loads(rest)
            except ValueError:
                return
            if isinstance(progress, dict):
                self.progress = progress
                step, at = progress.get("step"), progress.get("at")
                if isinstance(step, str) and isinstance(at, int | float):
                    self.stages.setdefault(step, at)
                self.changed.set()
        elif marker in (RESULT_MARKER, WARM_MARKER):
            try:
                self.result = json.loads(rest)
            except ValueError:
                self.result = {}
            self.changed.set()
        elif marker == STALE_MARKER:
            self.stale = True

    def output(self) -> str:
        self.log.close()
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


class _Job:
    """The worker's report job process (`spark_reports.usage_report --serve`): it keeps its Spark
    session from one run to the next, so a report pays neither a Python start nor a new session.
    One run at a time; its output goes to that run's sink (read on a thread)."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.command = _job_command()
        self.sink: _Sink | None = None
        self.proc = subprocess.Popen(  # noqa: S603 - argv built by _job_command, no shell
            self.command,
            cwd=settings.BASE_DIR,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def serves(self, env: dict[str, str]) -> bool:
        """Alive, and started for this environment and command (settings may differ between runs)."""
        return self.proc.poll() is None and self.env == env and self.command == _job_command()

    def _read(self) -> None:
        stdout = self.proc.stdout
        assert stdout is not None  # started with stdout=PIPE
        for raw in stdout:
            sink = self.sink
            if sink is not None:
                sink.line(raw)
        self.proc.wait()
        sink = self.sink
        if sink is not None:
            sink.changed.set()

    def submit(self, request: dict, log_path: Path, stages: dict) -> _Sink:
        sink = self.sink = _Sink(log_path, stages)
        stdin = self.proc.stdin
        assert stdin is not None  # started with stdin=PIPE
        try:
            stdin.write((json.dumps(request) + "\n").encode())
            stdin.flush()
        except OSError:
            sink.changed.set()  # the process is gone: the launcher reads its exit status
        return sink

    def exited(self) -> int | None:
        """The exit status once the process has ended and its output is read, else None."""
        if self.proc.poll() is None or self._reader.is_alive():
            return None
        return self.proc.returncode

    def close(self, grace: float) -> None:
        """The end of its input (it ends its session and exits), then stop() after `grace` seconds."""
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
            self.proc.wait(grace)
        except (OSError, subprocess.TimeoutExpired):
            pass
        self.stop(grace)

    def stop(self, grace: float) -> None:
        """SIGTERM (the job interrupts its Spark operations), then SIGKILL after `grace` seconds."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._reader.join(5)


# This worker process's job process, kept between runs (one run at a time per worker process).
_JOB: _Job | None = None
_JOB_LOCK = threading.Lock()


def _kept_job(env: dict[str, str]) -> _Job | None:
    return _JOB if _JOB is not None and _JOB.serves(env) else None


def _job_for(env: dict[str, str]) -> _Job:
    """The kept job process when it serves `env`, else a new one, the local engine started first
    (a kept job's session proves the engine up). Raises _EngineProblem, OSError."""
    global _JOB
    kept = _kept_job(env)
    if kept is not None:
        return kept
    if _JOB is not None:
        _JOB.close(CANCEL_GRACE_S)
        _JOB = None
    problem = spark_engine_ensure(env=env)
    if problem:
        raise _EngineProblem(problem)
    _JOB = _Job(env)
    return _JOB


def report_job_stop() -> None:
    """End this worker process's kept job process, if any (the worker's shutdown; a worker that
    dies closes the job's input, and the job ends by itself)."""
    global _JOB
    with _JOB_LOCK:
        if _JOB is not None:
            _JOB.close(CANCEL_GRACE_S)
            _JOB = None


_WARMING = threading.Event()  # set while report_engine_warm runs


def report_engine_warm() -> str:
    """Start this deployment's local engine unless it is up, and warm it: this worker's job process
    connects and runs `usage_report.warm_up` (a report's Spark operations on a few synthetic rows),
    so that the engine's JVM has loaded and compiled their code and the job process has its session
    before the first report. `make run`'s worker does this at its start (USAGE_ENGINE_PRESTART,
    tasks.py); a report claimed meanwhile waits for it, saying that the engine is starting."""
    if not _local_engine():
        return "spark engine: not ours to start (SPARK_REMOTE / SPARK_MASTER)"
    env = _job_env()
    folder = Path(settings.VAR_DIR) / "spark-warm-up"
    _WARMING.set()
    try:
        with _JOB_LOCK:
            global _JOB
            job = _job_for(env)
            log_dir = Path(settings.VAR_DIR) / "usage-runs"
            log_dir.mkdir(parents=True, exist_ok=True)
            sink = job.submit({"warm_up": str(folder)}, log_dir / "warm-up.log", {})
            deadline = time.monotonic() + settings.USAGE_REPORT_TIMEOUT_S
            while sink.result is None and job.exited() is None and time.monotonic() < deadline:
                sink.changed.wait(POLL_S)
                sink.changed.clear()
            job.sink = None
            output = sink.output()
            if sink.result is None:
                job.stop(CANCEL_GRACE_S)
                _JOB = None
                raise RuntimeError(f"the warm-up did not finish: {output[-LOG_TAIL_CHARS:]}")
            return f"spark engine warm ({sink.result.get('seconds')} s)"
    finally:
        _WARMING.clear()
        shutil.rmtree(folder, ignore_errors=True)


def report_engine_prestart() -> None:
    """report_engine_warm on a thread of its own (the worker goes on taking tasks); a failure is
    logged, and the first report starts the engine as it would have."""

    def warm() -> None:
        try:
            log.info("usage reports: %s", report_engine_warm())
        except Exception as exc:  # noqa: BLE001 - a prestart that fails costs nothing but the wait
            log.warning("usage reports: the Spark engine's prestart failed: %s", exc)

    threading.Thread(target=warm, name="spark-engine-prestart", daemon=True).start()


class _EngineProblem(RuntimeError):
    """The local engine could not be started."""


def _cancel_requested(run_id: int) -> bool:
    return ReportRun.objects.filter(pk=run_id, cancel_requested_at__isnull=False).exists()


def _show(run_id: int, **fields) -> None:
    # Conditional: never overwrite a run that another path has already finished.
    ReportRun.objects.filter(pk=run_id, status=ReportRun.Status.RUNNING).update(**fields)


def report_run_execute(*, run_id: int) -> ReportRun:
    """Run a queued run on this worker's job process (a client of the warm engine, kept between
    runs), copy its progress and stages onto the run as they come, stop it on Cancel, then
    publish (as soon as its result line comes), fail or cancel the run.

    Idempotent: a run that is not queued any more (already taken, finished, cancelled) is left as it is.
    """
    if not _claim(run_id):
        return ReportRun.objects.get(pk=run_id)
    stages = dict(ReportRun.objects.get(pk=run_id).stages, claimed=_now_s())
    if _WARMING.is_set():
        # The worker is starting and warming the engine (make run's prestart): the run waits for it.
        stages["starting engine"] = _now_s()
        _show(run_id, stages=stages, progress={"step": "starting engine"})
    with _JOB_LOCK:
        return _execute(ReportRun.objects.get(pk=run_id), stages)


def _execute(run: ReportRun, stages: dict) -> ReportRun:
    env = _job_env()
    for attempt in range(2):
        if _local_engine() and _kept_job(env) is None:
            # Shown while the engine is checked or started (a cold one takes seconds).
            stages.setdefault("starting engine", _now_s())
            _show(run.pk, stages=stages, progress={"step": "starting engine"})
        try:
            job = _job_for(env)
        except _EngineProblem as exc:
            return report_run_fail(run=run, reason=f"spark engine: {exc}", output="", error=ENGINE_DOWN_WORDS)
        except OSError as exc:
            return report_run_fail(run=run, reason=f"could not start: {exc.strerror}", output="")
        outcome, sink = _follow(run, job, stages)
        if not (sink.stale and attempt == 0):
            break
        # The kept session had expired before the run began (nothing done): once more, anew.
        sink.output()
    if outcome == "cancelled":
        return report_run_cancel_finish(run=run, output=sink.output())
    output = sink.output()
    if outcome == "result" and sink.result is not None:
        stages["publishing"] = _now_s()
        return report_run_publish(run=run, result=sink.result, output=output, stages=stages)
    # A timeout says so first (FAILURE_WORDS reads the reason's start), an exit its status.
    reason = outcome if isinstance(outcome, str) else f"job exited with {outcome}"
    if ENGINE_DOWN_MARKER in output:
        # The engine went away (or never answered): restart it for the next run, say so in words.
        spark_engine_ensure(env=env)
        return report_run_fail(run=run, reason=reason, output=output, error=ENGINE_DOWN_WORDS)
    return report_run_fail(run=run, reason=reason, output=output)


def _follow(run: ReportRun, job: _Job, stages: dict) -> tuple[int | str, _Sink]:
    """Submit `run` to `job` and follow it: "result" once its result line came, "cancelled", a
    timeout's words, or the job's exit status if it ended first."""
    global _JOB
    sink = job.submit(_job_request(run), _log_path(run), stages)
    # The reader thread adds the job's steps to `stages`: each write takes a copy (one C call, whole).
    _show(run.pk, stages=stages.copy())
    deadline = time.monotonic() + settings.USAGE_REPORT_TIMEOUT_S
    shown: tuple = (None, len(stages))
    while True:
        sink.changed.wait(POLL_S)
        sink.changed.clear()
        if (sink.progress, len(stages)) != shown:
            shown = (sink.progress, len(stages))
            _show(run.pk, progress=sink.progress or {}, stages=stages.copy())
        if sink.result is not None:
            job.sink = None
            return "result", sink
        status = job.exited()
        if status is not None:
            _JOB = None
            return status, sink
        if _cancel_requested(run.pk):
            job.stop(CANCEL_GRACE_S)
            _JOB = None
            return "cancelled", sink
        if time.monotonic() > deadline:
            job.stop(CANCEL_GRACE_S)
            _JOB = None
            return f"timeout after {settings.USAGE_REPORT_TIMEOUT_S}s", sink


def report_run_publish(*, run: ReportRun, result: dict, output: str, stages: dict | None = None) -> ReportRun:
    """Check the staged rows match what the job reported, then make the run visible in one UPDATE
    (which also records its `published` stage)."""
    counts = {name: model.objects.filter(run=run).count() for name, model in RESULT_MODELS.items()}
    expected = {name: int(result.get(name, -1)) for name in RESULT_MODELS}
    if counts != expected:
        return report_run_fail(run=run, reason=f"row counts differ: job said {expected}, found {counts}", output=output)
    row_counts = dict(counts, job_seconds=result.get("total_seconds"), spark_seconds=result.get("seconds"))
    stages = dict(stages or run.stages, published=_now_s())
    ReportRun.objects.filter(pk=run.pk, status=ReportRun.Status.RUNNING).update(
        status=ReportRun.Status.SUCCEEDED, finished_at=timezone.now(), row_counts=row_counts, log_tail="", stages=stages
    )
    run.refresh_from_db()
    log.info("usage report %s published: %s", run.pk, counts)
    return run


# What failed, in words for staff, from the launcher's reason and the job's log (first match wins);
# the technical tail stays in log_tail, folded away on the run page.
FAILURE_WORDS = [
    (re.compile(r"^timeout after (\d+)s"), "The report took longer than the limit of {0} seconds and was stopped."),
    (re.compile(r"^row counts differ"), "The report's rows did not add up when it finished, so nothing was published."),
    (
        re.compile(r"^the worker running this report was lost"),
        "The worker running this report stopped before it finished.",
    ),
    (re.compile(r"^could not start"), "The report job could not be started on the worker."),
    (re.compile(r"OutOfMemoryError|Java heap space"), "The Spark engine ran out of memory computing this report."),
    (
        re.compile(r"PSQLException|Connection to \S+ refused|password authentication failed"),
        "Spark could not read the mediator's database.",
    ),
]
FAILURE_DEFAULT = "The report job failed. The technical details are below."


def failure_words(*, reason: str, output: str) -> str:
    """One sentence a staff member understands for why a run failed."""
    for pattern, words in FAILURE_WORDS:
        match = pattern.search(reason) or (pattern.pattern[0] != "^" and pattern.search(output))
        if match:
            return words.format(*match.groups())
    return FAILURE_DEFAULT


def _drop_staged(run: ReportRun) -> None:
    for model in RESULT_MODELS.values():
        model.objects.filter(run=run).delete()


def report_run_fail(*, run: ReportRun, reason: str, output: str, error: str | None = None) -> ReportRun:
    """Drop whatever the failed job staged and record why: in words, and the end of its log."""
    with transaction.atomic():
        _drop_staged(run)
        tail = (output[-LOG_TAIL_CHARS:] + "\n" if output else "") + reason
        ReportRun.objects.filter(pk=run.pk).update(
            status=ReportRun.Status.FAILED,
            finished_at=timezone.now(),
            log_tail=tail[-LOG_TAIL_CHARS:],
            error=(error or failure_words(reason=reason, output=output))[:300],
        )
    run.refresh_from_db()
    log.warning("usage report %s failed: %s", run.pk, reason)
    return run


class ReportCancelError(ValueError):
    """A cancel that cannot be honoured (the run has finished)."""


def report_run_cancel(*, run_id: int) -> ReportRun:
    """Cancel a run: a queued one at once (its task will find nothing to claim); a running one is
    flagged, and its launcher stops the job (SIGTERM: the job interrupts its Spark operations)."""
    now = timezone.now()
    # Conditional UPDATEs: racing the worker's claim, exactly one of "cancelled" and "running" wins.
    if ReportRun.objects.filter(pk=run_id, status=ReportRun.Status.QUEUED).update(
        status=ReportRun.Status.CANCELLED, cancel_requested_at=now, finished_at=now
    ):
        return ReportRun.objects.get(pk=run_id)
    if not ReportRun.objects.filter(pk=run_id, status=ReportRun.Status.RUNNING).update(cancel_requested_at=now):
        raise ReportCancelError("the run has already finished")
    return ReportRun.objects.get(pk=run_id)


def report_run_cancel_finish(*, run: ReportRun, output: str) -> ReportRun:
    """The launcher stopped the job on request: drop what it staged, mark the run cancelled."""
    with transaction.atomic():
        _drop_staged(run)
        ReportRun.objects.filter(pk=run.pk).update(
            status=ReportRun.Status.CANCELLED, finished_at=timezone.now(), log_tail=output[-LOG_TAIL_CHARS:]
        )
    run.refresh_from_db()
    log.info("usage report %s cancelled", run.pk)
    return run


def report_runs_fail_stale(*, now: datetime | None = None) -> int:
    """Fail runs still `running` well past the job timeout (their worker died); returns how many."""
    cutoff = (now or timezone.now()) - timedelta(seconds=settings.USAGE_REPORT_TIMEOUT_S + 600)
    stale = list(ReportRun.objects.filter(status=ReportRun.Status.RUNNING, started_at__lt=cutoff))
    for run in stale:
        report_run_fail(run=run, reason="the worker running this report was lost", output="")
    return len(stale)


def days_to_report(*, yesterday: date) -> list[date]:
    """The days the nightly run still has to report: from the day after the newest day an
    all-tenant run has published (at most USAGE_NIGHTLY_MAX_CATCHUP_DAYS back) through yesterday.
    A day already reported is not recomputed; a missed night is caught up."""
    first = yesterday - timedelta(days=settings.USAGE_NIGHTLY_MAX_CATCHUP_DAYS - 1)
    covered = (
        ReportRun.objects.filter(status=ReportRun.Status.SUCCEEDED, tenants=None, date_to__gte=first)
        .order_by("-date_to")
        .values_list("date_to", flat=True)
        .first()
    )
    if covered is not None:
        first = max(first, covered + timedelta(days=1))
    return [first + timedelta(days=i) for i in range((yesterday - first).days + 1)]


def nightly_report_run(*, today: date | None = None) -> ReportRun | None:
    """The days not yet reported through yesterday, over all tenants, in the calling worker; None
    when yesterday is already reported (the nightly cost is one day's traffic, not the retention)."""
    report_runs_fail_stale()
    days = days_to_report(yesterday=(today or timezone.now().date()) - timedelta(days=1))
    if not days:
        return None
    run = report_run_request(date_from=days[0], date_to=days[-1], kind=ReportRun.Kind.NIGHTLY, enqueue=False)
    return report_run_execute(run_id=run.pk)


def _lake_job(action: list[str], env: dict[str, str]) -> dict:
    """Run `python -m spark_reports.lake <action>` to its end; its result line as a dict."""
    proc = _spark_module("lake", action, env, settings.USAGE_REPORT_TIMEOUT_S)
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(EXPORT_MARKER + " "):
            return json.loads(line[len(EXPORT_MARKER) + 1 :])
    raise RuntimeError(f"spark_reports.lake {' '.join(action)} exited with {proc.returncode}: {_output_tail(proc)}")


def metering_export() -> str:
    """Export the metering rows past the watermark (and the inputs' snapshot) to the lake, then
    compact its closed days (a Spark job on the warm engine)."""
    env = _job_env()
    problem = spark_engine_ensure(env=env)
    if problem:
        raise RuntimeError(f"spark engine: {problem}")
    result = _lake_job(["export"], env)
    summary = f"exported {result['rows']} metering rows ({result.get('abandoned', 0)} interrupted exports abandoned)"
    if result.get("compacted"):
        summary += f"; compacted {len(result['compacted'])} closed days"
    return summary


def metering_watermark() -> int:
    """The largest metering id the lake holds (committed exports); 0 before the first export."""
    return MeterExport.objects.filter(state=MeterExport.State.COMMITTED).aggregate(hi=Max("hi_id"))["hi"] or 0


@dataclass(frozen=True)
class PruneResult:
    rows: int
    tenants: int
    exported: int = 0
    lake_days: tuple[str, ...] = ()

    def summary(self) -> str:
        return (
            f"pruned {self.rows} metering rows across {self.tenants} tenants"
            f" ({self.exported} of them exported to the lake); dropped {len(self.lake_days)} lake days"
        )


def _delete_in_batches(qs) -> int:
    # Short batches keep each DELETE's locks and WAL small while the mediator keeps inserting.
    total = 0
    while True:
        ids = list(qs.values_list("pk", flat=True)[:PRUNE_BATCH])
        if not ids:
            return total
        total += CommandMeter.objects.filter(pk__in=ids).delete()[0]


def metering_prune(*, now: datetime | None = None, drop_lake_days: bool = True) -> PruneResult:
    """Delete metering rows the lake holds (ids up to the export watermark) once older than
    USAGE_METERING_KEEP_DAYS, rows older than each tenant's retention (exported or not: the hard
    cap), and rows of deleted tenants; then drop the lake's day partitions older than
    USAGE_LAKE_RETENTION_DAYS."""
    now = now or timezone.now()
    watermark = metering_watermark()
    exported = _delete_in_batches(
        CommandMeter.objects.filter(pk__lte=watermark, at__lt=now - timedelta(days=settings.USAGE_METERING_KEEP_DAYS))
    )
    rows = exported
    tenants = list(Tenant.objects.only("pk", "metering_retention_days"))
    for tenant in tenants:
        cutoff = now - timedelta(days=tenant.metering_retention_days)
        rows += _delete_in_batches(CommandMeter.objects.filter(tenant_id=tenant.pk, at__lt=cutoff))
    rows += _delete_in_batches(CommandMeter.objects.exclude(tenant_id__in=[t.pk for t in tenants]))
    days: tuple[str, ...] = ()
    if drop_lake_days:
        keep = str(settings.USAGE_LAKE_RETENTION_DAYS)
        today = now.astimezone(UTC).date().isoformat()
        days = tuple(_lake_job(["drop", "--keep-days", keep, "--today", today], _job_env())["dropped_days"])
    return PruneResult(rows=rows, tenants=len(tenants), exported=exported, lake_days=days)
