"""From the button to the chart, with every real component: headless Chromium logs into the admin
of a real Daphne, presses "Generate usage report"; a real Celery worker on Redis takes the task and
runs the Spark job as its own process over the test's PostgreSQL database; the page follows the
run to `succeeded` and shows the charts. The operator API then lists, retrieves and downloads it.
"""

from __future__ import annotations

import csv
import io
from datetime import timedelta

import httpx
import pytest
from django.contrib.auth.models import Permission
from django.utils import timezone

from apps.tenants.services import api_token_issue
from apps.usage.models import CommandMeter, ReportDaily, ReportRun
from tests.support.browser import ARTIFACTS, admin_page
from tests.support.servers import start_celery_worker, start_daphne

SPARK_ENV = {"SPARK_SHUFFLE_PARTITIONS": "2", "SPARK_JDBC_PARTITIONS": "2"}

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.spark]


@pytest.fixture
def stack(spark_engine, transactional_db, tmp_path):
    # The session's warm engine (SPARK_ENGINE_PORT in os.environ), never a lazy one on the default port.
    worker = start_celery_worker(tmp_path, env=SPARK_ENV)
    daphne = start_daphne(tmp_path, env={"CELERY_BROKER_URL": worker.broker_url, "USAGE_REPORT_QUEUE": worker.queue})
    yield daphne, worker
    daphne.stop()
    worker.stop()


def test_a_staff_member_generates_a_report_in_the_browser_and_sees_the_chart(
    stack, tenant_a, tenant_b, django_user_model
):
    daphne, worker = stack
    now = timezone.now()
    today, yesterday = now.date(), now.date() - timedelta(days=1)
    base = now.replace(hour=12, minute=0, second=0, microsecond=0)
    common = dict(transport="http", channel="DIRECT_AUTHENTICATED", http_status=200, bytes_in=500, bytes_out=200)
    rows = []
    for i in range(30):
        rows.append(
            CommandMeter(
                tenant=tenant_a,
                at=base - timedelta(days=1, minutes=i),
                command_type="QUERY_EVENTS",
                code="SUCCESS",
                duration_ms=1.0 + i,
                sender_did=f"did:decentrl:u{i % 4}",
                **common,
            )
        )
    for i in range(12):
        rows.append(
            CommandMeter(
                tenant=tenant_a,
                at=base - timedelta(minutes=i),
                command_type="SAVE_EVENTS",
                code="SUCCESS" if i % 4 else "INVALID_SIGNATURE",
                duration_ms=2.0,
                sender_did="did:decentrl:u1",
                **common,
            )
        )
    rows.append(
        CommandMeter(
            tenant=tenant_b,
            at=base - timedelta(minutes=1),
            command_type="QUERY_EVENTS",
            code="SUCCESS",
            duration_ms=1.0,
            sender_did="did:decentrl:carol",
            **common,
        )
    )
    CommandMeter.objects.bulk_create(rows)
    staff = django_user_model.objects.create_user("stella", "stella@ops.test", "correct-horse-battery", is_staff=True)
    # Requesting a run and reading it back (docs/operators.md#permissions).
    staff.user_permissions.set(
        Permission.objects.filter(content_type__app_label="usage", codename__in=["add_reportrun", "view_reportrun"])
    )

    with admin_page(daphne.url, "stella", "correct-horse-battery") as page:
        page.goto(f"{daphne.url}/admin/usage/reportrun/generate/")
        page.fill("input[name=date_from]", yesterday.isoformat())
        page.fill("input[name=date_to]", today.isoformat())
        page.check(f"input[name=tenants][value='{tenant_a.pk}']")
        page.click("#generate-report")
        page.wait_for_url(f"{daphne.url}/dashboard/reports/*/")
        # The page follows the run in place (run.js) until the Spark job has finished.
        page.wait_for_selector("#run-status:text-matches('Published|Failed')", timeout=300_000)
        # (No ORM in here: Playwright's sync API runs an event loop in this thread.)
        status = page.inner_text("#run-status")
        assert status == "Published", page.inner_text("body")[-3000:] + "\n" + worker.log()[-3000:]
        chart = page.wait_for_selector("#chart-commands-by-type svg.usage-chart")
        assert chart.is_visible()
        assert page.locator("#chart-commands-by-type rect.bar").count() == 2  # one bar per type-day
        assert "QUERY_EVENTS" in page.inner_text("#chart-commands-by-type")
        page.screenshot(path=str(ARTIFACTS / "usage-report.png"), full_page=True)

        page.goto(f"{daphne.url}/dashboard/?tenant={tenant_a.slug}&days=7")
        page.wait_for_selector("#chart-commands-by-type svg.usage-chart")
        page.screenshot(path=str(ARTIFACTS / "usage-dashboard.png"), full_page=True)

    run = ReportRun.objects.get()
    assert run.status == ReportRun.Status.SUCCEEDED and run.requested_by == staff
    # What the job published equals what the test wrote, tenant B excluded.
    daily = {r.day: r for r in ReportDaily.objects.filter(run=run)}
    assert set(daily) == {yesterday, today}
    assert {t for t in ReportDaily.objects.filter(run=run).values_list("tenant_id", flat=True)} == {tenant_a.pk}
    assert (daily[yesterday].commands, daily[yesterday].errors, daily[yesterday].active_identities) == (30, 0, 4)
    assert (daily[today].commands, daily[today].errors, daily[today].bytes_in) == (12, 3, 6000)
    assert daily[yesterday].latency_p50_ms == 15.0 and daily[yesterday].latency_p95_ms == 29.0  # nearest rank of 1..30
    assert run.started_at and run.finished_at and run.row_counts["daily"] == 2

    # The operator API over the real server: list, retrieve, download.
    headers = {"Authorization": f"Token {api_token_issue(user=staff).key}"}
    listing = httpx.get(f"{daphne.url}/api/v1/usage/reports/", headers=headers, timeout=10).json()
    assert [r["id"] for r in listing["results"]] == [run.pk]
    detail = httpx.get(f"{daphne.url}/api/v1/usage/reports/{run.pk}/", headers=headers, timeout=10).json()
    assert detail["status"] == "succeeded" and detail["tenants"] == [tenant_a.slug]
    assert sorted(r["commands"] for r in detail["daily"]) == [12, 30]
    body = httpx.get(f"{daphne.url}/api/v1/usage/reports/{run.pk}/csv?table=by_type", headers=headers, timeout=10).text
    table = list(csv.DictReader(io.StringIO(body)))
    assert sorted((r["command_type"], r["commands"], r["errors"]) for r in table) == [
        ("QUERY_EVENTS", "30", "0"),
        ("SAVE_EVENTS", "12", "3"),
    ]
