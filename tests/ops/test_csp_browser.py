"""The staff pages work under their Content-Security-Policy (apps/ops/middleware.py): headless
Chromium on a real Daphne opens the operator console, a tenant's page, the usage dashboard (its charts and filters) and reports list, Swagger UI and Redoc, and the browser reports no policy violation."""

from __future__ import annotations

import httpx
import pytest
from django.conf import settings

from tests.support.browser import ARTIFACTS, admin_page
from tests.support.csp_marker import reported
from tests.support.csp_marker import violations as csp_violations

pytestmark = [pytest.mark.e2e, pytest.mark.browser]


def test_the_staff_pages_render_under_their_content_security_policy(daphne, django_user_model):
    from django.utils import timezone

    from apps.tenants.services import tenant_create
    from apps.usage.models import ReportDaily, ReportRun

    tenant = tenant_create(slug="csp-tenant", domain="csp.mediator.test", name="CSP tenant")
    today = timezone.now().date()
    run = ReportRun.objects.create(
        date_from=today, date_to=today, status=ReportRun.Status.SUCCEEDED, finished_at=timezone.now()
    )
    ReportDaily.objects.create(run=run, tenant=tenant, day=today, commands=40, errors=2, error_rate=0.05)
    django_user_model.objects.create_superuser("olivia", "olivia@ops.test", "correct-horse-battery")
    login = httpx.get(f"{daphne.url}/admin/login/", timeout=10)
    assert login.headers["Content-Security-Policy"] == settings.MEDIATOR_CSP
    # Protocol endpoints answer machines and carry none.
    assert "Content-Security-Policy" not in httpx.get(f"{daphne.url}/health", timeout=10).headers

    with admin_page(daphne.url, "olivia", "correct-horse-battery") as page:
        violations = csp_violations(page)
        checks = [
            ("/admin/", "#content, main"),
            (f"/admin/tenants/tenant/{tenant.pk}/change/", "table.live-figures"),
            ("/dashboard/", "div.usage #usage-filters"),
            ("/dashboard/reports/", "div.usage nav.usage-tabs"),
            ("/api/v1/docs/", ".swagger-ui .info .title"),
            ("/api/v1/redoc/", "redoc h1, .api-content h1"),
        ]
        seen = {}
        for path, selector in checks:
            page.goto(f"{daphne.url}{path}")
            page.wait_for_selector(selector)
            reported(page, violations)  # this page's violations so far, before it is left
            seen[path] = page.inner_text(selector.split(",")[0].strip())
            page.screenshot(path=str(ARTIFACTS / f"csp{path.replace('/', '-').rstrip('-')}.png"), full_page=False)
            if path == "/dashboard/":
                assert page.locator("figure#chart-commands-by-type svg").count() == 1
                # The filters submit on change (apps/tenants/static/console/console.js, no inline handler).
                page.select_option("select[name=days]", "7")
                page.wait_for_url(f"{daphne.url}/dashboard/?tenant=&days=7")
    # The one refusal is the policy at work: Redoc's footer logo from its CDN (nothing third-party).
    assert violations == ["CSP violation: img-src https://cdn.redoc.ly/redoc/logo-mini.svg"]
    assert "Decentrl mediator operator API" in seen["/api/v1/docs/"]
