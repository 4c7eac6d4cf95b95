"""Smaller console details (issue 33 item 26): a tenant's History lists its audit entries, scheduled
jobs are named, not dotted paths, the favicon exists, the login page sends nobody in a circle,
Swagger UI and Redoc lead back to the console, the home page's usage card headlines the latest
published report, run pages are titled by what they cover, and before the first report the
dashboard explains its totals instead of tiles of "no data"."""

from __future__ import annotations

import re
from datetime import date

import pytest
from django.test import Client
from django.utils import timezone

from apps.ops.signals import _task_name
from apps.tenants.services import tenant_resume, tenant_rotate_keys, tenant_suspend
from apps.usage.models import ReportRun

pytestmark = pytest.mark.django_db


def test_a_tenants_history_lists_its_audit_entries(staff_client, tenant_a, actor):
    tenant_suspend(tenant=tenant_a, actor=actor)
    tenant_resume(tenant=tenant_a, actor=actor)
    tenant_rotate_keys(tenant=tenant_a, actor=actor)
    html = staff_client.get(f"/admin/tenants/tenant/{tenant_a.pk}/history/").content.decode()
    section = html[html.index('id="tenant-audit-history"') :]
    assert [a for a in ("tenant.rotate_keys", "tenant.resume", "tenant.suspend") if a in section] == [
        "tenant.rotate_keys",
        "tenant.resume",
        "tenant.suspend",
    ]
    assert section.index("tenant.rotate_keys") < section.index("tenant.resume") < section.index("tenant.suspend")
    assert "doesn’t have a change history" not in html  # it has: the audit log's


def test_scheduled_jobs_are_counted_under_names_not_dotted_paths():
    from apps.didcomm import tasks as didcomm_tasks
    from apps.ops import tasks as ops_tasks
    from apps.usage import tasks as usage_tasks

    assert _task_name(usage_tasks.prune_metering) == "prune_metering"
    assert _task_name(usage_tasks.nightly_usage_report) == "nightly_usage_report"
    assert _task_name(didcomm_tasks.deliver_outbound) == "deliver_outbound"
    # These run through run_job, which counts them under their job's name already.
    assert _task_name(didcomm_tasks.purge_messages) is None
    assert _task_name(ops_tasks.prune_nonces) is None


def test_the_favicon_is_served_on_every_host(client):
    resp = client.get("/favicon.ico")
    assert resp.status_code == 302 and resp["Location"].endswith("console/favicon.svg")


def test_the_login_page_has_no_return_to_site_that_leads_back_to_the_login(staff_client):
    html = Client().get("/admin/login/").content.decode()
    assert "Return to site" not in html and 'href="/dashboard/"' not in html
    assert 'rel="icon"' in html
    assert 'href="/dashboard/"' in staff_client.get("/admin/").content.decode()  # who may open it has it


@pytest.mark.parametrize("path", ["/api/v1/docs/", "/api/v1/redoc/"])
def test_the_api_docs_lead_back_to_the_console(staff_client, path):
    html = staff_client.get(path).content.decode()
    assert re.search(r'<nav class="console-back"[^>]*>\s*<a href="/admin/">', html), html[:2000]


def test_the_home_page_headlines_the_latest_published_report_not_a_newer_cancelled_one(staff_client):
    now = timezone.now()
    good = ReportRun.objects.create(
        date_from=date(2026, 11, 1), date_to=date(2026, 11, 7), status=ReportRun.Status.SUCCEEDED, finished_at=now
    )
    cancelled = ReportRun.objects.create(
        date_from=date(2026, 11, 8), date_to=date(2026, 11, 8), status=ReportRun.Status.CANCELLED, finished_at=now
    )
    html = staff_client.get("/admin/").content.decode()
    headline = re.sub(r"<[^>]+>", "", re.search(r'id="overview-last-report">(.*?)</p>', html, re.S).group(1))
    assert headline.startswith(f"Latest report #{good.pk}: days 2026-11-01 – 2026-11-07")
    newer = re.sub(r"<[^>]+>", "", re.search(r'id="overview-newer-run">(.*?)</p>', html, re.S).group(1))
    assert newer == f"Newer: #{cancelled.pk}, cancelled."


def test_a_run_page_is_titled_by_the_days_and_tenants_it_covers(staff_client, tenant_a):
    run = ReportRun.objects.create(date_from=date(2026, 11, 1), date_to=date(2026, 11, 7))
    run.tenants.set([tenant_a])
    html = staff_client.get(f"/dashboard/reports/{run.pk}/").content.decode()
    title = re.search(r"<title>(.*?)</title>", html, re.S).group(1).strip()
    assert title.startswith(f"Usage report #{run.pk}: 2026-11-01 – 2026-11-07, tenant-a |"), title


def test_generating_a_report_leaves_no_queued_note_that_outlives_the_run(staff_client):
    resp = staff_client.post(
        "/admin/usage/reportrun/generate/", {"date_from": "2026-11-01", "date_to": "2026-11-02"}, follow=True
    )
    assert resp.status_code == 200
    assert "queued." not in resp.content.decode()


def test_before_the_first_report_the_dashboard_explains_its_totals(staff_client, tenant_a):
    html = staff_client.get("/dashboard/").content.decode()
    assert "no data" not in html and 'id="usage-totals"' not in html
    assert "none has been published yet" in html
