"""What a new operator found in the console (issue 42 §3), the parts a page's HTML shows: the sidebar
lists only what the user may open, an empty overview says why, a refusal is a console page with a
way back, the DNS/TLS checklist says what /health and the DID document answer in the tenant's state,
a finished report is "Published" on every page, and a tenant is named by its display name. The
browser-only parts (keyboard, dark mode, scroll hints, wrapping) are in test_browser_walk.py."""

from __future__ import annotations

import html as html_lib
import re
from datetime import UTC, date, datetime

import pytest
from django.contrib.auth.models import Permission
from django.test import Client

from apps.tenants.services import tenant_create, tenant_suspend
from apps.usage.models import ReportRun
from tests.console.test_admin import change_url

pytestmark = pytest.mark.django_db

AT = datetime(2026, 11, 8, 6, 30, tzinfo=UTC)


def _text(html: str) -> str:
    """The words of an HTML fragment, as a browser joins them (tags removed, white space collapsed)."""
    return " ".join(html_lib.unescape(re.sub(r"<[^>]+>", "", html)).split())


def _sidebar(html: str) -> list[str]:
    nav = html[html.index('id="nav-sidebar-apps"') :]
    nav = nav[: nav.index('id="user-menu"')]
    return re.findall(r'<a href="([^"]+)"', nav)


@pytest.fixture
def sam(django_user_model):
    """A staff member without a single permission."""
    return django_user_model.objects.create_user("sam", "", "correct-horse-battery", is_staff=True)


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_a_staff_member_without_permissions_is_told_why_the_overview_is_empty(sam):
    page = _client(sam).get("/admin/").content.decode()
    assert _sidebar(page) == ["/api/v1/docs/"]  # the API docs are for every staff member (IsAdminUser)
    nothing = _text(page[page.index('id="overview-nothing">') + 22 : page.index('id="console-overview"')])
    assert nothing.startswith(
        "Nothing to show yet Your account, sam, is a staff member without permission to read tenants, "
        "the audit log or usage reports, so the overview is empty and the sidebar lists only what you may open."
    )


def test_the_sidebar_offers_the_usage_dashboard_only_to_those_who_may_open_it(sam):
    sam.user_permissions.set(Permission.objects.filter(codename="view_reportrun"))
    page = _client(sam).get("/admin/").content.decode()
    assert _sidebar(page) == ["/dashboard/", "/admin/usage/reportrun/", "/api/v1/docs/"]
    assert 'id="overview-nothing"' not in page


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("/dashboard/", ": “Can view report run” (usage)."),
        ("/dashboard/reports/", ": “Can view report run” (usage)."),
        ("/admin/tenants/tenant/", "."),  # the admin's own refusal carries no reason
    ],
)
def test_a_refusal_is_a_console_page_that_says_why_and_leads_back(sam, path, reason):
    resp = _client(sam).get(path)
    assert resp.status_code == 403
    page = resp.content.decode()
    assert 'id="nav-sidebar"' in page and "/static/console/console.css" in page  # inside the console frame
    assert _text(page[page.index('id="refused-reason"') :].split("</p>")[0] + "</p>").endswith(
        f"Your account, sam, lacks a permission this page needs{reason}"
    )
    assert '<a class="console-back-link" id="refused-back" href="/admin/">' in page
    assert _sidebar(page) == ["/api/v1/docs/"]


def test_a_refusal_elsewhere_keeps_its_own_shape(sam):
    # The API answers its own 403 (DRF), as JSON.
    resp = _client(sam).get("/api/v1/tenants/")
    assert (resp.status_code, resp["Content-Type"]) == (403, "application/json")


def _checklist(client: Client, tenant) -> str:
    page = client.get(change_url(tenant)).content.decode()
    start = page.index('id="domain-checklist"') - 200
    return _text(page[start : page.index("</ol>", start)])


def test_the_checklist_says_what_health_and_the_did_document_answer_in_the_tenants_state(staff_client, operator):
    from apps.tenants.services import Actor

    tenant = tenant_create(slug="globex", domain="mediator.globex.example", name="Globex Corporation")
    health = Client().get("/health", HTTP_HOST="mediator.globex.example")
    did = Client().get("/.well-known/did.json", HTTP_HOST="mediator.globex.example")
    assert (health.status_code, did.status_code) == (200, 200)
    active = _checklist(staff_client, tenant)
    assert "Suspended" not in active
    assert (
        "DID document: http://mediator.globex.example/.well-known/did.json answers with did:web:mediator.globex.example"
        in active
    )
    assert "Health: http://mediator.globex.example/health answers 200." in active

    tenant_suspend(tenant=tenant, actor=Actor(user=operator, via="cli"))
    health = Client().get("/health", HTTP_HOST="mediator.globex.example")
    did = Client().get("/.well-known/did.json", HTTP_HOST="mediator.globex.example")
    assert (health.status_code, health.json()["detail"]) == (503, "mediator suspended")
    assert (did.status_code, did.json()["code"]) == (503, "MEDIATOR_UNAVAILABLE")
    suspended = _checklist(staff_client, tenant)
    assert "Suspended: globex serves nothing until it is resumed (Resume above)." in suspended
    assert (
        "DID document: http://mediator.globex.example/.well-known/did.json answers 503 MEDIATOR_UNAVAILABLE while "
        "the tenant is suspended; with did:web:mediator.globex.example once resumed" in suspended
    )
    assert (
        "Health: http://mediator.globex.example/health answers 503 (mediator suspended) while the tenant is "
        "suspended; 200 once resumed." in suspended
    )
    assert "answers 200." not in suspended


def test_a_finished_report_is_published_on_every_page(staff_client):
    run = ReportRun.objects.create(
        date_from=date(2026, 11, 1),
        date_to=date(2026, 11, 7),
        status=ReportRun.Status.SUCCEEDED,
        started_at=AT,
        finished_at=AT,
        row_counts={"daily": 0, "by_type": 0, "by_code": 0, "top": 0},
    )
    assert run.get_status_display() == "Published"
    detail = staff_client.get(f"/dashboard/reports/{run.pk}/").content.decode()
    assert '<span class="status status-succeeded" id="run-status">Published</span>' in detail
    listing = _text(staff_client.get("/dashboard/reports/").content.decode())
    admin_list = _text(staff_client.get("/admin/usage/reportrun/").content.decode())
    overview = _text(staff_client.get("/admin/").content.decode())
    assert "Published" in listing and "Published" in admin_list.title()
    assert f"Latest report #{run.pk}: days 2026-11-01 – 2026-11-07, published 2026-11-08T06:30:00Z." in overview
    for page in (detail, listing, admin_list, overview):
        assert "Succeeded" not in page


def test_a_running_reports_cancel_asks_before_it_posts(staff_client):
    run = ReportRun.objects.create(
        date_from=date(2026, 11, 1), date_to=date(2026, 11, 7), status=ReportRun.Status.RUNNING, started_at=AT
    )
    page = staff_client.get(f"/dashboard/reports/{run.pk}/").content.decode()
    box = page[page.index('id="cancel-box"') : page.index("</details>")]
    assert '<summary class="button danger" id="cancel-run">Cancel…</summary>' in box  # opens the question only
    assert re.findall(r"<button[^>]*>[^<]*</button>", box) == [
        '<button type="submit" class="button danger" id="confirm-cancel">Cancel the run</button>'
    ]
    assert f"Cancel usage report #{run.pk}? Its Spark job stops and nothing is published" in _text(box)


def test_a_tenant_is_named_by_the_name_entered_in_its_breadcrumb_and_title(staff_client):
    tenant = tenant_create(slug="globex", domain="mediator.globex.example", name="Globex Corporation")
    page = staff_client.get(change_url(tenant)).content.decode()
    header = page[page.index('id="header-inner"') :]
    crumbs = re.findall(r'class="console-crumb [^"]*">\s*(.*?)\s*</a', header[: header.index("</h1>")], re.S)
    assert crumbs == ["Hosted mediators", "Tenants", "Globex Corporation"]
    assert re.search(r"<title>\s*Globex Corporation \| Change tenant \|", page)
