"""What the staff see while a usage report runs (issue 17 §3), in headless Chromium against every
real component: Daphne, a Celery worker on Redis, the warm Spark engine (one Spark Connect server
for the whole test session, `conftest.spark_engine`) and the test's PostgreSQL database.

- A staff member presses *Generate usage report*; the run page follows the job in place (never a
  reload): step n of N, Spark tasks done of total, metering rows, elapsed, the typical duration of
  past runs; then it shows the finished charts and tables, every command type that carried
  traffic by name, nothing overlapping, cut or overflowing at 1440 px and at 390 px.
- Another presses *Cancel* while a Spark operation of the job runs on the engine: the job process is
  gone, the engine answers that it interrupted the run's operation and holds no database connection
  for it any more, nothing is staged and the run says Cancelled, never stuck in "running". The
  engine stays up for the next report.
"""

from __future__ import annotations

import json
import re
import time
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest
from django.utils import timezone

from apps.usage.models import (
    CommandMeter,
    ReportCommandType,
    ReportDaily,
    ReportErrorCode,
    ReportRun,
    ReportTopIdentity,
)
from apps.usage.views import STEP_WORDS, stage_list
from spark_reports.usage_report import STEPS
from tests.support import servers
from tests.support.browser import ARTIFACTS, PASSWORD, admin_page, usage_staff
from tests.support.servers import start_celery_worker, start_daphne
from tests.usage.layout import LAYOUT_PROBLEMS

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.spark]

SPARK_ENV = {"SPARK_SHUFFLE_PARTITIONS": "2", "SPARK_JDBC_PARTITIONS": "2"}

# Every command type a tenant's traffic carries in the test data: the DECENTRL commands (the
# longest names included), TWO_WAY_PRIVATE (the core messaging command) and DIDComm messages.
TRAFFIC = [
    # (protocol, channel, command_type, commands yesterday, commands today)
    ("decentrl", "TWO_WAY_PRIVATE", "TWO_WAY_PRIVATE", 40, 25),
    ("decentrl", "DIRECT_AUTHENTICATED", "QUERY_EVENTS", 30, 12),
    ("decentrl", "DIRECT_AUTHENTICATED", "SAVE_EVENTS", 12, 6),
    ("decentrl", "DIRECT_AUTHENTICATED", "REQUEST_COMMUNICATION_CONTRACT", 5, 3),
    ("decentrl", "DIRECT_AUTHENTICATED", "QUERY_PENDING_CONTRACT_REQUESTS", 4, 2),
    ("decentrl", "DIRECT_AUTHENTICATED", "ACKNOWLEDGE_EVENTS", 3, 3),
    ("decentrl", "DIRECT_AUTHENTICATED", "REGISTER_IDENTITY", 2, 1),
    ("decentrl", "ONE_WAY_PUBLIC", "PUBLISH_PUBLIC_EVENT", 2, 0),
    ("didcomm", "didcomm-v2", "routing/2.0/forward", 9, 7),
    ("didcomm", "didcomm-v2", "messagepickup/3.0/delivery-request", 3, 2),
    ("didcomm", "didcomm-v2", "coordinate-mediation/3.0/mediate-request", 1, 1),
]
ERROR_CODES = ["INVALID_SIGNATURE", "COMMUNICATION_CONTRACT_NOT_FOUND", "RECIPIENT_QUEUE_FULL"]


def chart_name(protocol: str, command_type: str) -> str:
    return command_type if protocol == "decentrl" else f"{protocol}: {command_type}"


@pytest.fixture
def stack(spark_engine, transactional_db, tmp_path):
    """Daphne and a Celery worker; both (and the job processes the worker starts) use the session's
    warm engine: SPARK_ENGINE_PORT is in os.environ, which server_env copies. The database starts
    with no metering rows: the report's row count is this test's own."""
    assert not CommandMeter.objects.exists(), "a module before this one left metering rows committed"
    worker = start_celery_worker(tmp_path, env=SPARK_ENV)
    daphne = start_daphne(tmp_path, env={"CELERY_BROKER_URL": worker.broker_url, "USAGE_REPORT_QUEUE": worker.queue})
    yield daphne, worker
    daphne.stop()
    worker.stop()


@pytest.fixture
def stella(django_user_model):
    return usage_staff(django_user_model, "add_reportrun", "view_reportrun")


def seed_traffic(tenant) -> int:
    """Yesterday's and today's metering rows of TRAFFIC for `tenant`; returns how many."""
    now = timezone.now()
    base = now.replace(hour=0, minute=0, second=0, microsecond=0)
    rows = []
    for protocol, channel, command_type, *per_day in TRAFFIC:
        for day, count in zip((base - timedelta(days=1), base), per_day, strict=True):
            for i in range(count):
                rows.append(
                    CommandMeter(
                        tenant=tenant,
                        at=min(day + timedelta(minutes=3 * i + 1), now - timedelta(seconds=1)),
                        transport="http",
                        protocol=protocol,
                        channel=channel,
                        command_type=command_type,
                        code=ERROR_CODES[i % 3] if i % 5 == 4 else "SUCCESS",
                        http_status=200,
                        bytes_in=400 + i,
                        bytes_out=150,
                        duration_ms=1.0 + i % 9,
                        sender_did=f"did:decentrl:{tenant.slug}-user-{i % 6}",
                    )
                )
    CommandMeter.objects.bulk_create(rows)
    return len(rows)


def seed_past_runs(seconds: list[int]) -> None:
    """Published runs of the past that took `seconds` each: what "typically takes" is the median of."""
    end = timezone.now() - timedelta(hours=2)
    for i, s in enumerate(seconds):
        finished = end - timedelta(days=i)
        ReportRun.objects.create(
            date_from=finished.date() - timedelta(days=400),
            date_to=finished.date() - timedelta(days=400),
            status=ReportRun.Status.SUCCEEDED,
            started_at=finished - timedelta(seconds=s),
            finished_at=finished,
            row_counts={"daily": 0, "by_type": 0, "by_code": 0, "top": 0},
        )


# Collects what the progress section shows each time run.js changes it, and marks the document so
# that a reload (a new document) would be seen.
RECORD_PROGRESS = """() => {
  window.__sameDocument = true;
  window.__seen = [];
  const box = document.getElementById("run-progress");
  const snap = () => {
    const t = (id) => (document.getElementById(id) || {}).textContent;
    window.__seen.push({
      status: t("run-status"), step: t("progress-step"), stepno: t("progress-stepno"), tasks: t("progress-tasks"),
      rows: t("progress-rows"), elapsed: t("progress-elapsed"), typical: t("progress-typical"),
      bar: document.getElementById("progress-bar").style.width, scrollY: window.scrollY,
    });
  };
  snap();
  new MutationObserver(snap).observe(box, {subtree: true, childList: true, characterData: true, attributes: true});
  new MutationObserver(snap).observe(document.getElementById("run-status"), {childList: true, characterData: true, subtree: true});
}"""


def legend_names(page, chart_id: str) -> list[str]:
    return page.locator(f"#chart-{chart_id} ul.chart-legend li").all_text_contents()


def test_generate_watch_the_progress_move_and_see_the_finished_charts(stack, stella, tenant_a):
    daphne, worker = stack
    rows = seed_traffic(tenant_a)
    seed_past_runs([30, 8, 9, 7, 10])  # median 9 s
    today = timezone.now().date()
    yesterday = today - timedelta(days=1)

    with admin_page(daphne.url, "stella", PASSWORD) as page:
        page.goto(f"{daphne.url}/admin/usage/reportrun/generate/")
        page.fill("input[name=date_from]", yesterday.isoformat())
        page.fill("input[name=date_to]", today.isoformat())
        page.check(f"input[name=tenants][value='{tenant_a.pk}']")
        page.click("#generate-report")
        page.wait_for_url(f"{daphne.url}/dashboard/reports/*/")
        page.evaluate(RECORD_PROGRESS)
        page.wait_for_selector("#run-status:text-matches('Published|Failed|Cancelled')", timeout=240_000)
        status = page.inner_text("#run-status")
        assert status == "Published", page.inner_text("div.usage")[-3000:] + "\n" + worker.log()[-3000:]
        seen = page.evaluate("window.__seen")
        (ARTIFACTS / "usage-run-progress-seen.json").write_text(json.dumps(seen, indent=1))
        # What the page showed while the job worked, in order.
        working = [s for s in seen if s["status"] == "Running" and s["step"] not in (None, "Waiting for a worker")]
        assert len(working) >= 3, seen
        steps = [s["step"] for s in working]
        assert len(set(steps)) >= 2, steps  # the step moved on while the page watched
        numbers = [int(s["stepno"].split()[1]) for s in working if s["stepno"]]
        # Never backwards. (The other steps of a 173-row report on a warm engine can each end
        # between two of the page's polls, so only computing is sure to be seen numbered.)
        assert numbers == sorted(numbers) and STEPS.index("computing the report") + 1 in numbers, working
        assert {s["stepno"].split(" of ")[-1] for s in working if s["stepno"]} == {f"{len(STEPS)})"}
        tasks = [tuple(int(x) for x in s["tasks"].split(" of ")) for s in working]
        assert any(total > 0 for _, total in tasks) and all(done <= total for done, total in tasks), tasks
        assert working[-1]["rows"] == f"{rows:,}"  # the metering rows in range, known from the bounds query
        elapsed = [int(s["elapsed"].removesuffix(" s")) for s in working]
        assert elapsed == sorted(elapsed) and elapsed[-1] > elapsed[0], elapsed
        assert {s["typical"] for s in working} == {"9 s"}
        assert any(s["bar"] not in ("", "0%") for s in working)
        assert {s["scrollY"] for s in seen} == {0}
        assert set(steps) <= set(STEP_WORDS.values()), steps  # staff words, not the job's names
        bars = [int(s["bar"].rstrip("%") or 0) for s in seen]
        assert bars == sorted(bars), bars  # the bar never goes backwards
        # The same document all along: run.js updated it in place and swapped the results in once.
        assert page.evaluate("window.__sameDocument") is True
        page.wait_for_selector("#chart-commands-by-type svg.usage-chart")
        assert page.locator("#run-progress").count() == 0
        # Every stage the run went through, in order: the worker's first run checked the engine
        # and connected its job process to it.
        assert stages_shown(page) == FIRST_RUN_STAGES
        page.screenshot(path=str(ARTIFACTS / "usage-run-finished-1440.png"), full_page=True)

        # Every command type that carried traffic has its own legend entry, by name: none is "other".
        expected = {chart_name(p, t) for p, _, t, *counts in TRAFFIC if sum(counts)}
        names = legend_names(page, "commands-by-type")
        assert sorted(names) == sorted(expected)
        assert "TWO_WAY_PRIVATE" == names[0]  # the busiest type first
        assert page.locator("#chart-commands-by-type rect.bar").count() == 2 * len(expected) - 1  # no publish today
        by_type_rows = page.locator("#by-type tbody tr").count()
        assert by_type_rows == 2 * len(expected) - 1
        problems = page.evaluate(LAYOUT_PROBLEMS, [True])
        assert problems == [], "\n".join(problems)

        page.set_viewport_size({"width": 390, "height": 844})
        page.reload()
        page.wait_for_selector("#chart-commands-by-type svg.usage-chart")
        page.screenshot(path=str(ARTIFACTS / "usage-run-finished-390.png"), full_page=True)
        problems = page.evaluate(LAYOUT_PROBLEMS, [False])
        assert problems == [], "\n".join(problems)

        # The same report again: the worker's job process kept its Spark session, so this run
        # neither checks the engine nor connects; it starts with the export.
        page.set_viewport_size({"width": 1440, "height": 1000})
        page.goto(f"{daphne.url}/admin/usage/reportrun/generate/")
        page.fill("input[name=date_from]", yesterday.isoformat())
        page.fill("input[name=date_to]", today.isoformat())
        page.check(f"input[name=tenants][value='{tenant_a.pk}']")
        page.click("#generate-report")
        page.wait_for_selector("#run-status:text-matches('Published|Failed|Cancelled')", timeout=240_000)
        assert page.inner_text("#run-status") == "Published", worker.log()[-3000:]
        page.wait_for_selector("#chart-commands-by-type svg.usage-chart")
        assert stages_shown(page) == [s for s in FIRST_RUN_STAGES if s not in ("starting engine", "connecting")]

    first, again = ReportRun.objects.filter(status=ReportRun.Status.SUCCEEDED, date_to=today).order_by("pk")
    assert first.progress["rows_total"] == rows and again.progress["rows_total"] == rows
    assert ReportDaily.objects.filter(run=first).count() == ReportDaily.objects.filter(run=again).count() == 2
    assert [s["stage"] for s in stage_list(first)] == FIRST_RUN_STAGES


FIRST_RUN_STAGES = ["queued", "claimed", "starting engine", *STEPS, "publishing", "published"]


def stages_shown(page) -> list[str]:
    """The stages the run page lists, in its order."""
    return page.eval_on_selector_all("#run-stages li", "items => items.map(li => li.dataset.stage)")


def _job_pids() -> list[int]:
    """The report job processes over this test's database (a worker keeps one, serving run after run)."""
    db = servers.test_database_url().rsplit("/", 1)[1]
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
            if b"spark_reports.usage_report" not in argv:
                continue
            env = (proc / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(e.startswith(b"REPORT_DATABASE_URL=") and e.endswith(f"/{db}".encode()) for e in env):
            pids.append(int(proc.name))
    return pids


def _engine_connections() -> int:
    """The Spark engine's JDBC connections to this test's database (its reads and writes)."""
    db = servers.test_database_url().rsplit("/", 1)[1]
    with psycopg.connect(servers.test_database_url(), autocommit=True) as conn:
        return conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND application_name = 'PostgreSQL JDBC Driver'",
            [db],
        ).fetchone()[0]


# True while the job is inside a Spark operation on the engine: computing the report (step 4 or
# later) with tasks scheduled and not all done.
IN_SPARK_OPERATION = """() => {
  const stepno = document.getElementById("progress-stepno"), tasks = document.getElementById("progress-tasks");
  if (!stepno || !tasks) return false;
  const no = /step (\\d) of/.exec(stepno.textContent);
  const [done, total] = tasks.textContent.split(" of ").map(Number);
  return !!no && Number(no[1]) >= 4 && total > 0 && done < total;
}"""


def seed_bulk(tenant, rows: int) -> None:
    """`rows` more metering rows for `tenant` over yesterday and today, in one INSERT … SELECT: enough
    that the report's Spark operation lasts seconds on any machine, so that a cancel lands in it."""
    from django.db import connection

    now = timezone.now()
    start = now.replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(days=1)
    span = (now - start).total_seconds() - 1
    with connection.cursor() as cur:
        cur.execute(
            """INSERT INTO usage_commandmeter (tenant_id, at, transport, protocol, channel, command_type, code,
                   http_status, bytes_in, bytes_out, duration_ms, sender_did)
               SELECT %s, %s + (g::float / %s * %s) * INTERVAL '1 second', 'http', 'decentrl', 'TWO_WAY_PRIVATE',
                      'TWO_WAY_PRIVATE', 'SUCCESS', 200, 400, 150, (g %% 9) + 1.0, 'did:decentrl:bulk-' || (g %% 500)
               FROM generate_series(1, %s) g""",
            [tenant.pk, start, rows, span, rows],
        )


def test_cancel_stops_the_spark_job_and_the_run_says_cancelled(stack, stella, tenant_a, spark_engine):
    from spark_reports import engine

    daphne, worker = stack
    seed_traffic(tenant_a)
    # Enough rows that the merge job outlasts the engine's progress interval on a quiet box: with each
    # range one hashed query, 1M rows merged fast enough that the wait below once timed out.
    seed_bulk(tenant_a, 3_000_000)
    with admin_page(daphne.url, "stella", PASSWORD) as page:
        # The dashboard says how fresh its numbers are and offers to refresh: that starts the run.
        page.goto(f"{daphne.url}/dashboard/")
        assert page.inner_text("#freshness").startswith("No report has been published yet.")
        page.click("#refresh-report")
        page.wait_for_url(f"{daphne.url}/dashboard/reports/*/")
        run_id = int(page.url.rstrip("/").rsplit("/", 1)[1])
        # Wait until the job is inside a Spark operation on the engine, then press Cancel.
        page.wait_for_function(IN_SPARK_OPERATION, timeout=240_000, polling=100)
        jobs = _job_pids()
        assert len(jobs) == 1, jobs
        page.click("#cancel-run")
        page.click("#confirm-cancel")
        # run.js shows the status first, then swaps the finished page in once.
        page.wait_for_selector("#run-cancelled", timeout=60_000)
        assert page.inner_text("#run-status") == "Cancelled"
        assert page.locator("#run-progress").count() == 0 and page.locator("#cancel-run").count() == 0
        assert page.inner_text("#run-cancelled").startswith("This run was cancelled at ")
        assert page.inner_text("#run-cancelled").endswith("; nothing was published.")
        page.screenshot(path=str(ARTIFACTS / "usage-run-cancelled.png"), full_page=True)
        # The job process is gone, and the engine's reads and writes for the run have ended: it
        # holds no connection to the database (it stays up for the next report). The cancel
        # interrupted the run's operations by their tag, and a cancelled stage launches no more
        # tasks, so once its last task has let go of its connection none opens again: the wait is
        # for that condition, with a deadline, and nothing is waited for after it.
        assert _job_pids() == []
        deadline = time.monotonic() + 15
        while _engine_connections() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _engine_connections() == 0
        assert engine.is_up("127.0.0.1", spark_engine)
        # Reloading later shows the same: never back to "running".
        page.reload()
        assert page.inner_text("#run-status") == "Cancelled"

    run = ReportRun.objects.get(pk=run_id)
    assert (run.status, run.finished_at is not None, run.cancel_requested_at is not None) == ("cancelled", True, True)
    # The job took the cancel: it interrupted the run's Spark operations (interruptTag's answer: how
    # many were running at that instant) and exited without a result. The count is not asserted: the
    # page's progress lags the engine by its polling, and since each id range is one hashed query an
    # operation can end between the click and the signal, so 0 is a correct answer too; that the
    # engine really stopped is what the checks below show (no rows, no connection left to the database).
    marker = re.search(r'^USAGE_REPORT_CANCELLED \{"interrupted": (\d+)\}$', run.log_tail, re.M)
    assert marker, run.log_tail[-2000:]
    assert "USAGE_REPORT_RESULT" not in run.log_tail
    for model in (ReportDaily, ReportCommandType, ReportErrorCode, ReportTopIdentity):
        assert model.objects.filter(run_id=run_id).count() == 0, model.__name__
    assert "Traceback" not in worker.log()
