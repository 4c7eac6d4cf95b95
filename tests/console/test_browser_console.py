"""Headless Chromium on a real Daphne (issue 18): the console's overview, the tenant form with its
help and errors, the registrations page at 1440 px with every column on screen, Swagger UI's
"Try it out" as a logged-in operator, and the usage dashboard at 390 px. Each test leaves a
screenshot in test-artifacts/ (the ones in docs/screenshots/ come from these)."""

from __future__ import annotations

import re
from datetime import date

import pytest
from django.utils import timezone

from apps.tenants.models import Tenant
from apps.tenants.services import Actor, tenant_suspend
from apps.usage.models import ReportDaily, ReportRun
from tests.support.browser import ARTIFACTS, PASSWORD, admin_page, server_errors
from tests.support.registration import register

pytestmark = [pytest.mark.e2e, pytest.mark.browser]


def test_the_console_opens_on_an_overview_with_tenants_first_in_the_sidebar(daphne, olivia, tenant_a, tenant_b):
    tenant_suspend(tenant=tenant_b, actor=Actor(user=olivia, via="cli"))
    with admin_page(daphne.url, "olivia", PASSWORD) as page:
        errors = server_errors(page)
        page.goto(f"{daphne.url}/admin/")
        assert page.locator("#console-overview").is_visible()
        sidebar = page.locator("#nav-sidebar-inner a span:not(.material-symbols-outlined)").all_inner_texts()
        assert [t.strip() for t in sidebar if t.strip()][:5] == [
            "Tenants",
            "Usage dashboard",
            "Report runs",
            "Audit log",
            "API docs",
        ]
        assert page.locator("#overview-suspended").inner_text().strip().startswith("tenant-b")
        assert "tenant.suspend" in page.locator("#overview-actions").inner_text()
        page.screenshot(path=str(ARTIFACTS / "console-overview.png"))
        # The dashboard is the same product: same sidebar, same header.
        page.click("#nav-sidebar-inner >> text=Usage dashboard")
        page.wait_for_url(f"{daphne.url}/dashboard/")
        assert page.locator("#nav-sidebar-inner").is_visible() and page.locator(".usage-tabs").is_visible()
        assert errors == []


def test_the_tenant_form_explains_its_fields_and_its_errors(daphne, olivia, tenant_a):
    with admin_page(daphne.url, "olivia", PASSWORD) as page:
        page.goto(f"{daphne.url}/admin/tenants/tenant/add/")
        assert page.locator("#form-heading").inner_text() == "Add tenant"
        assert page.locator("label[for=id_max_body_bytes]").inner_text().startswith("Largest request body (bytes)")
        body = page.locator("body").inner_text()
        assert "Default 6291456 (6.0 MiB)." in body and "Blank = the deployment default" in body
        # The public URL and aliases boxes have a visible border like every other input.
        for name in ("public_url", "aliases"):
            width = page.locator(f"[name={name}]").evaluate("e => getComputedStyle(e).borderTopWidth")
            assert width == "1px", name
        page.fill("input[name=slug]", "globex")
        page.fill("input[name=domain]", "https://A.Mediator.test/")
        page.fill("input[name=max_page_size]", "500")
        page.click("button[name=_save]")
        page.wait_for_load_state()
        text = page.locator("body").inner_text()
        assert "a.mediator.test is already served by tenant tenant-a." in text
        assert "Ensure this value is less than or equal to 100." in text or "Must be between 1 and 100." in text
        page.locator(".errorlist").first.scroll_into_view_if_needed()
        page.screenshot(path=str(ARTIFACTS / "console-tenant-form-errors.png"))
        # Fixed, the pasted URL is reduced to its host and the tenant is created.
        page.fill("input[name=domain]", "https://Mediator.Globex.example/")
        page.fill("input[name=max_page_size]", "100")
        page.click("button[name=_save]")
        page.wait_for_url(re.compile(r".*/admin/tenants/tenant/\d+/change/$"))  # the new tenant's page
    assert Tenant.objects.get(slug="globex").domain == "mediator.globex.example"


def test_the_registrations_page_fits_every_column_at_1440_px(daphne, olivia, tenant_a, post_a, alice, bob):
    register(post_a, alice, tenant_a)
    register(post_a, bob, tenant_a)
    with admin_page(daphne.url, "olivia", PASSWORD) as page:
        # The tenant page's header keeps its whole breadcrumb beside its buttons at 1440 px.
        page.goto(f"{daphne.url}/admin/tenants/tenant/{tenant_a.pk}/change/")
        crumbs = page.locator("#header-inner h1 a").evaluate_all(
            "links => links.map(a => [a.innerText.trim(), a.scrollWidth <= a.clientWidth])"
        )
        assert crumbs == [
            ["Hosted mediators", True],
            ["Tenants", True],
            ["Tenant A", True],
        ]  # the tenant by the name entered (issue 42 §3.8)
        page.screenshot(path=str(ARTIFACTS / "console-tenant.png"))
        page.click("text=Data and keys")
        page.click("a:has-text('Registrations')")
        page.wait_for_url(f"{daphne.url}/admin/tenants/tenant/{tenant_a.pk}/registrations/")
        table = page.locator("#listing")
        box = table.evaluate("t => [t.scrollWidth, t.parentElement.clientWidth]")
        assert box[0] <= box[1], box
        viewport = page.viewport_size["width"]
        for header in ("Identity", "Expires", "Registered"):
            cell = page.locator("#listing th", has_text=header).bounding_box()
            assert cell["x"] + cell["width"] <= viewport, header
        assert page.locator(".did-alias").all_inner_texts() == ["bob", "alice"]
        page.screenshot(path=str(ARTIFACTS / "console-registrations.png"))
        page.fill("#listing-search input[name=q]", "alice")
        page.click("#listing-search button[type=submit]")
        page.wait_for_load_state()
        assert page.locator(".did-alias").all_inner_texts() == ["alice"]
        # The copy button puts the full DID on the clipboard.
        page.context.grant_permissions(["clipboard-read", "clipboard-write"])
        page.click(".did-copy")
        assert page.evaluate("navigator.clipboard.readText()") == alice.did


def test_swagger_try_it_out_works_for_a_logged_in_operator(daphne, olivia, tenant_a):
    with admin_page(daphne.url, "olivia", PASSWORD) as page:
        page.goto(f"{daphne.url}/api/v1/docs/")
        op = page.locator("#operations-tenants-tenants_list")
        op.locator(".opblock-summary").click()
        assert "List tenants" in op.inner_text()
        op.locator(".try-out__btn").click()
        op.locator(".execute").click()
        status = op.locator(".live-responses-table tbody .response-col_status").first
        status.wait_for()
        assert status.inner_text().strip() == "200"
        assert "tenant-a" in op.locator(".live-responses-table .microlight").first.inner_text()
        # A write: the session and the CSRF token go with it; 401/403 are documented.
        suspend = page.locator("#operations-tenants-tenants_suspend_create")
        suspend.locator(".opblock-summary").click()
        assert "401" in suspend.locator(".responses-table").first.inner_text()
        suspend.locator(".try-out__btn").click()
        suspend.locator("input[placeholder=slug]").fill("tenant-a")
        suspend.locator(".execute").click()
        status = suspend.locator(".live-responses-table tbody .response-col_status").first
        status.wait_for()
        assert status.inner_text().strip() == "200"
        page.screenshot(path=str(ARTIFACTS / "api-docs-try-it-out.png"))
    tenant_a.refresh_from_db()
    assert tenant_a.status == "suspended"


def test_the_dashboard_is_usable_at_390_px(daphne, olivia, tenant_a, tenant_b):
    now = timezone.now()
    run = ReportRun.objects.create(
        date_from=date(2026, 11, 1),
        date_to=date(2026, 11, 7),
        status=ReportRun.Status.SUCCEEDED,
        started_at=now,
        finished_at=now,
        row_counts={"daily": 2},
    )
    for day in (2, 3):
        ReportDaily.objects.create(run=run, tenant=tenant_a, day=date(2026, 11, day), commands=12 * day, errors=1)
    with admin_page(daphne.url, "olivia", PASSWORD, width=390, height=844) as page:
        errors = server_errors(page)
        page.goto(f"{daphne.url}/dashboard/")
        assert page.locator("svg.usage-chart").count() == 9
        width = page.evaluate("document.documentElement.scrollWidth")
        assert width <= 390, width
        for chart in page.locator("figure.chart-card").all():
            box = chart.bounding_box()
            assert box["x"] >= 0 and box["x"] + box["width"] <= 390
        page.screenshot(path=str(ARTIFACTS / "usage-dashboard-390.png"))
        page.goto(f"{daphne.url}/dashboard/reports/{run.pk}/")
        assert page.evaluate("document.documentElement.scrollWidth") <= 390
        assert errors == []
    with admin_page(daphne.url, "olivia", PASSWORD) as page:
        page.goto(f"{daphne.url}/dashboard/")
        page.screenshot(path=str(ARTIFACTS / "usage-dashboard.png"))
