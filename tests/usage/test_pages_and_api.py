"""Staff pages (dashboard, run pages, CSV), the admin launch page and the operator API."""

from __future__ import annotations

import csv
import io
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from apps.tenants.services import api_token_issue
from apps.usage.models import CommandMeter, ReportCommandType, ReportDaily, ReportRun
from apps.wire.display import utc_iso

pytestmark = pytest.mark.django_db


@pytest.fixture
def published(tenant_a, tenant_b):
    """A succeeded run over the last three days, and a newer still-running run that must stay invisible."""
    today = timezone.now().date()
    run = ReportRun.objects.create(
        date_from=today - timedelta(days=2),
        date_to=today,
        status=ReportRun.Status.SUCCEEDED,
        started_at=timezone.now(),
        finished_at=timezone.now(),
        row_counts={"daily": 3},
    )
    for i, (tenant, n) in enumerate([(tenant_a, 40), (tenant_a, 60), (tenant_b, 7)]):
        day = today - timedelta(days=i % 2)
        ReportDaily.objects.create(
            run=run,
            tenant=tenant,
            day=day,
            commands=n,
            errors=2,
            error_rate=2 / n,
            bytes_in=1000,
            latency_p50_ms=3.5,
            latency_p95_ms=9.0,
        )
        ReportCommandType.objects.create(
            run=run, tenant=tenant, day=day, command_type="QUERY_EVENTS", commands=n, errors=2
        )
    staging = ReportRun.objects.create(date_from=today, date_to=today, status=ReportRun.Status.RUNNING)
    ReportDaily.objects.create(run=staging, tenant=tenant_a, day=today, commands=999_999)
    return run


def test_the_dashboard_is_for_staff_only(client, django_user_model):
    resp = client.get("/dashboard/")
    assert resp.status_code == 302 and "/admin/login/" in resp["Location"]
    django_user_model.objects.create_user("user", password="pw-123456")
    client.login(username="user", password="pw-123456")
    assert client.get("/dashboard/").status_code == 302
    assert client.get("/dashboard/reports/").status_code == 302


def test_the_dashboard_charts_only_published_reports(client, staff_user, published, tenant_a):
    client.force_login(staff_user)
    resp = client.get("/dashboard/?days=7")
    assert resp.status_code == 200
    html = resp.content.decode()
    assert html.count('<svg class="usage-chart"') == 9
    assert "Commands per day by type" in html
    assert resp.context["totals"]["commands"] == 107
    assert "999999" not in html and "999.9k" not in html  # the running run's staged rows stay invisible
    one = client.get(f"/dashboard/?tenant={tenant_a.slug}&days=7")
    assert one.context["totals"]["commands"] == 100
    assert [c.tenant.slug for c in one.context["live"]] == [tenant_a.slug]


def test_live_counters_count_commands_without_a_verified_sender_in_the_tenant_totals(
    client, staff_user, published, tenant_a
):
    # Issue 13 item 9: unverified commands are stored with a NULL sender; they still count.
    now = timezone.now()
    common = dict(tenant=tenant_a, at=now, transport="http", http_status=200, bytes_in=100, bytes_out=10, duration_ms=1)
    CommandMeter.objects.create(**common, command_type="QUERY_EVENTS", code="SUCCESS", sender_did="did:decentrl:a")
    for code in ("INVALID_SIGNATURE", "INVALID_SIGNATURE", "INVALID_COMMAND"):
        CommandMeter.objects.create(**common, command_type="QUERY_EVENTS", code=code, sender_did=None)
    client.force_login(staff_user)
    live = client.get(f"/dashboard/?tenant={tenant_a.slug}&days=7").context["live"]
    assert [(c.commands_last_hour, c.errors_last_hour, c.bytes_last_hour) for c in live] == [(4, 3, 440)]


def test_the_run_page_shows_tables_charts_and_csv(client, staff_user, published):
    client.force_login(staff_user)
    html = client.get(f"/dashboard/reports/{published.pk}/").content.decode()
    assert 'id="daily-table"' in html and '<svg class="usage-chart"' in html
    # The percentiles' error bound is stated beside them (spark_reports/transform.py).
    assert "at most 0.1&nbsp;% above the exact value" in html
    resp = client.get(f"/dashboard/reports/{published.pk}/csv?table=daily")
    assert resp["Content-Type"] == "text/csv"
    rows = list(csv.reader(io.StringIO(b"".join(resp.streaming_content).decode())))
    assert rows[0][:4] == ["tenant", "day", "commands", "errors"]
    assert sorted(int(r[2]) for r in rows[1:]) == [7, 40, 60]
    assert client.get(f"/dashboard/reports/{published.pk}/csv?table=nope").status_code == 404


def test_a_running_report_page_follows_progress_without_reloading_and_has_no_download(client, staff_user, published):
    client.force_login(staff_user)
    running = ReportRun.objects.get(status=ReportRun.Status.RUNNING)
    progress = {"step": "computing the report", "step_no": 3, "steps": 4, "tasks_done": 2, "tasks_total": 8}
    stages = {"queued": 1000.0, "claimed": 1000.5, "exporting": 1001.0, "computing the report": 1003.25}
    ReportRun.objects.filter(pk=running.pk).update(
        started_at=timezone.now() - timedelta(seconds=30), progress=progress, stages=stages
    )
    html = client.get(f"/dashboard/reports/{running.pk}/").content.decode()
    assert 'http-equiv="refresh"' not in html  # the page's script polls the status; it never reloads
    assert 'id="run-progress"' in html and 'id="cancel-run"' in html
    assert "Computing the report" in html and "(step 3 of 4)" in html
    # The stages so far, each with how long it took; the one under way without.
    assert (
        '<ol class="stages" id="run-stages"><li data-stage="queued">Waiting for a worker <span class="seconds">'
        '0.50 s</span></li><li data-stage="claimed">Starting the report job <span class="seconds">0.50 s</span></li>'
        '<li data-stage="exporting">Exporting new metering rows to the lake <span class="seconds">2.25 s</span></li>'
        '<li data-stage="computing the report">Computing the report</li></ol>'
    ) in html
    assert client.get(f"/dashboard/reports/{running.pk}/csv").status_code == 404
    status = client.get(f"/dashboard/reports/{running.pk}/status").json()
    assert 30 <= status.pop("elapsed_s") < 40
    # The page's facts follow too: a page opened while the run was queued says when it started.
    assert status.pop("started_at") == utc_iso(ReportRun.objects.get(pk=running.pk).started_at)
    assert status.pop("finished_at") is None
    assert status == {
        "id": running.pk,
        "status": "running",
        "status_display": "Running",
        "finished": False,
        "progress": progress,
        "stages": [
            {"stage": "queued", "words": "Waiting for a worker", "seconds": 0.5},
            {"stage": "claimed", "words": "Starting the report job", "seconds": 0.5},
            {"stage": "exporting", "words": "Exporting new metering rows to the lake", "seconds": 2.25},
            {"stage": "computing the report", "words": "Computing the report", "seconds": None},
        ],
        "step_words": "Computing the report",
        "typical_s": 0.0,  # the one succeeded run of the fixture started and finished at once
        "cancel_requested": False,
        "error": "",
    }


def test_cancel_from_the_run_page(client, staff_user, published, django_user_model):
    running = ReportRun.objects.get(status=ReportRun.Status.RUNNING)
    viewer = django_user_model.objects.create_user("viewer", "v@example.test", "pw-123456789", is_staff=True)
    client.force_login(viewer)
    assert client.post(f"/dashboard/reports/{running.pk}/cancel").status_code == 403
    assert client.get(f"/dashboard/reports/{running.pk}/cancel").status_code == 405
    client.force_login(staff_user)
    resp = client.post(f"/dashboard/reports/{running.pk}/cancel")
    assert resp.status_code == 302 and resp["Location"] == f"/dashboard/reports/{running.pk}/"
    running.refresh_from_db()
    assert running.status == "running" and running.cancel_requested_at is not None  # its launcher stops it
    assert client.get(f"/dashboard/reports/{running.pk}/status").json()["cancel_requested"] is True
    resp = client.post(f"/dashboard/reports/{published.pk}/cancel", follow=True)
    assert "has already finished" in resp.content.decode()
    assert client.post("/dashboard/reports/999999/cancel").status_code == 404


def test_a_failed_run_says_why_in_words_with_the_log_folded(client, staff_user, tenant_a):
    run = ReportRun.objects.create(
        date_from="2026-01-01",
        date_to="2026-01-01",
        status=ReportRun.Status.FAILED,
        error="Spark could not read the mediator's database.",
        log_tail="org.postgresql.util.PSQLException: Connection to 127.0.0.1:5 refused",
    )
    client.force_login(staff_user)
    html = client.get(f"/dashboard/reports/{run.pk}/").content.decode()
    assert "<strong>Spark could not read the mediator&#x27;s database.</strong>" in html
    assert "<details><summary>Technical details</summary>" in html and "PSQLException" in html


def test_the_admin_page_of_a_run_is_the_run_page(client, staff_user, published):
    client.force_login(staff_user)
    resp = client.get(reverse("admin:usage_reportrun_change", args=[published.pk]))
    assert resp.status_code == 302 and resp["Location"] == f"/dashboard/reports/{published.pk}/"


def test_the_dashboard_says_how_fresh_it_is_and_offers_a_refresh(
    client, staff_user, published, tenant_a, django_capture_on_commit_callbacks
):
    ReportRun.objects.filter(status=ReportRun.Status.RUNNING).delete()
    client.force_login(staff_user)
    html = client.get(f"/dashboard/?tenant={tenant_a.slug}&days=7").content.decode()
    stamp = utc_iso(published.finished_at)
    day, clock = stamp.split("T")
    assert (
        f'finished <span class="when"><time class="utc" datetime="{stamp}"><span>{day}</span><wbr><span>T{clock}</span>'
        in html
    )
    assert 'id="refresh-report"' in html
    today = timezone.now().date()
    with django_capture_on_commit_callbacks(execute=False):
        resp = client.post(
            "/dashboard/refresh",
            {"tenant": tenant_a.slug, "date_from": str(today - timedelta(days=6)), "date_to": str(today)},
        )
    run = ReportRun.objects.get(status=ReportRun.Status.QUEUED)
    assert resp["Location"] == f"/dashboard/reports/{run.pk}/"
    assert (run.date_from, run.date_to, list(run.tenants.all())) == (today - timedelta(days=6), today, [tenant_a])
    html = client.get(f"/dashboard/?tenant={tenant_a.slug}&days=7").content.decode()
    assert f"Report #{run.pk} is queued" in html and 'id="refresh-report"' not in html


def test_the_admin_button_queues_a_run_for_the_chosen_tenants(
    client, staff_user, tenant_a, tenant_b, django_capture_on_commit_callbacks
):
    client.force_login(staff_user)
    url = reverse("admin:usage_reportrun_generate")
    assert "Generate usage report" in client.get(url).content.decode()
    assert "Generate usage report" in client.get(reverse("admin:usage_reportrun_changelist")).content.decode()
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        resp = client.post(url, {"date_from": "2026-01-01", "date_to": "2026-01-07", "tenants": [tenant_b.pk]})
    run = ReportRun.objects.get()
    assert resp.status_code == 302 and resp["Location"] == f"/dashboard/reports/{run.pk}/"
    assert (run.status, str(run.date_from), str(run.date_to), run.requested_by) == (
        "queued",
        "2026-01-01",
        "2026-01-07",
        staff_user,
    )
    assert list(run.tenants.all()) == [tenant_b]
    assert len(callbacks) == 1
    bad = client.post(url, {"date_from": "2026-01-07", "date_to": "2026-01-01"})
    assert bad.status_code == 200 and ReportRun.objects.count() == 1


@pytest.fixture
def api(staff_user) -> APIClient:
    c = APIClient()
    c.credentials(HTTP_AUTHORIZATION=f"Token {api_token_issue(user=staff_user).key}")
    return c


def test_the_api_lists_retrieves_and_downloads(api, published):
    listing = api.get("/api/v1/usage/reports/").json()
    assert [r["id"] for r in listing["results"]] == [published.pk + 1, published.pk]
    detail = api.get(f"/api/v1/usage/reports/{published.pk}/").json()
    assert detail["status"] == "succeeded" and len(detail["daily"]) == 3
    assert sorted(r["commands"] for r in detail["daily"]) == [7, 40, 60]
    resp = api.get(f"/api/v1/usage/reports/{published.pk}/csv?table=by_type")
    assert resp.status_code == 200 and b"QUERY_EVENTS" in b"".join(resp.streaming_content)
    assert api.get("/api/v1/usage/reports/999999/").status_code == 404


def test_the_api_triggers_a_run_for_one_tenant_only(api, tenant_a, tenant_b, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False):
        resp = api.post(
            "/api/v1/usage/reports/",
            {"date_from": "2026-01-01", "date_to": "2026-01-02", "tenants": [tenant_a.slug]},
            format="json",
        )
    assert resp.status_code == 202
    assert resp.json()["tenants"] == [tenant_a.slug] and resp.json()["kind"] == "api"
    unknown = api.post(
        "/api/v1/usage/reports/",
        {"date_from": "2026-01-01", "date_to": "2026-01-02", "tenants": ["nope"]},
        format="json",
    )
    assert unknown.status_code == 400 and unknown.json() == {"tenants": ["unknown tenant: nope"]}
    assert ReportRun.objects.count() == 1


def test_the_api_refuses_non_staff_tokens(django_user_model):
    user = django_user_model.objects.create_user("plain", password="pw-123456")
    c = APIClient()
    c.credentials(HTTP_AUTHORIZATION=f"Token {api_token_issue(user=user).key}")
    assert c.get("/api/v1/usage/reports/").status_code == 403
    assert APIClient().get("/api/v1/usage/reports/").status_code in (401, 403)


def test_every_step_of_the_job_has_staff_words():
    from apps.usage.views import STEP_WORDS
    from spark_reports.usage_report import STEPS

    assert set(STEPS) | {"starting"} <= set(STEP_WORDS)
    assert all(words[0].isupper() and "_" not in words for words in STEP_WORDS.values())
