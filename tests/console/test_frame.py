"""The console as one product (issue 18): the sidebar leads with Tenants, then the dashboard, report
runs, audit log and API docs; the home page is an overview; the usage pages wear the admin's theme."""

from __future__ import annotations

import re
from datetime import date

import pytest
from django.contrib.auth.models import Permission
from django.test import Client
from django.utils import timezone

from apps.console.site import console_navigation
from apps.messaging.models import PendingEvent
from apps.tenants.services import tenant_suspend
from apps.usage.models import ReportRun

pytestmark = pytest.mark.django_db


def sidebar_titles(html: str) -> list[str]:
    nav = html[html.index('id="nav-sidebar-inner"') :]
    return [t.strip() for t in re.findall(r"<li>\s*<a href=\"[^\"]*\"[^>]*>.*?<span>([^<]+)</span>", nav, re.S)]


def test_the_sidebar_leads_with_tenants_then_dashboard_reports_audit_and_api_docs(staff_client):
    html = staff_client.get("/admin/").content.decode()
    titles = sidebar_titles(html)
    assert titles[:5] == ["Tenants", "Usage dashboard", "Report runs", "Audit log", "API docs"]
    didcomm = [
        "DIDComm mediation grants",
        "DIDComm mediator identities",
        "DIDComm policies",
        "DIDComm recipient DIDs",
        "DIDComm v1 connections",
    ]
    assert sorted(titles[5:10]) == didcomm  # the DIDComm group: every admin page of apps/didcomm
    assert titles[10:] == ["Scheduled jobs", "Command meters", "Users", "Groups", "API tokens"]
    assert 'href="/dashboard/"' in html and 'href="/api/v1/docs/"' in html


def test_an_app_entry_lists_every_admin_page_of_that_app_and_vanishes_without_one(rf, operator, settings):
    request = rf.get("/admin/")
    request.user = operator
    settings.CONSOLE_NAVIGATION = [("Usage", [{"app": "usage"}]), ("DIDComm", [{"app": "no_such_app"}])]
    groups = console_navigation(request)
    assert [(g["title"], [i["title"] for i in g["items"]]) for g in groups] == [
        ("Usage", ["Command meters", "Report runs"])
    ]
    assert [i["link"] for i in groups[0]["items"]] == ["/admin/usage/commandmeter/", "/admin/usage/reportrun/"]


def test_a_staff_user_sees_only_the_entries_their_permissions_open(django_user_model):
    viewer = django_user_model.objects.create_user("vera", "vera@ops.test", "pw", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_tenant"))
    client = Client()
    client.force_login(viewer)
    html = client.get("/admin/").content.decode()
    # No "Usage dashboard": it needs usage.view_reportrun (issue 42 §3.2; it led to a 403).
    assert sidebar_titles(html) == ["Tenants", "API docs"]
    assert 'id="overview-tenants"' in html and 'id="overview-actions"' not in html


def test_the_home_page_is_an_overview(staff_client, tenant_a, tenant_b, actor, alice):
    tenant_suspend(tenant=tenant_b, actor=actor)
    for i in range(3):
        PendingEvent.objects.create(tenant=tenant_a, sender_did=alice.did, recipient_did=alice.did, payload=f"blob-{i}")
    now = timezone.now()
    run = ReportRun.objects.create(
        date_from=date(2026, 11, 1), date_to=date(2026, 11, 7), status=ReportRun.Status.SUCCEEDED, finished_at=now
    )
    html = staff_client.get("/admin/").content.decode()
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))
    assert "2 in total" in text and "1 active" in text and "1 suspended" in text
    suspended = html[html.index('id="overview-suspended"') :]
    assert suspended.index("tenant-b") < suspended.index("</ul>")
    queues = html[html.index('id="overview-queues"') : html.index('id="overview-actions"')]
    assert re.findall(r">(tenant-[ab])</a></td><td class=\"num\" data-queue=\"decentrl\">(\d+)<", queues) == [
        ("tenant-a", "3")
    ]
    assert "tenant.suspend" in html[html.index('id="overview-actions"') :]
    assert f"Latest report #{run.pk} : days 2026-11-01 – 2026-11-07, published" in text
    assert "Auth Token" not in text


def test_the_dashboard_and_report_pages_wear_the_console_theme(staff_client):
    for url in ("/dashboard/", "/dashboard/reports/"):
        html = staff_client.get(url).content.decode()
        assert 'id="nav-sidebar-inner"' in html, url
        assert sidebar_titles(html)[:2] == ["Tenants", "Usage dashboard"], url
        assert "Mediator usage" not in html and "style=" not in html.split('id="content"')[1].split("</main>")[0]
