"""Headless Chromium on a real Daphne: a fresh deployment's dashboard, a tenant without traffic and
a range with no days each show their sentence, and no request on the way answers 5xx."""

from __future__ import annotations

from datetime import date

import pytest
from django.utils import timezone

from apps.usage.models import ReportDaily, ReportRun
from tests.support.browser import ARTIFACTS, PASSWORD, admin_page, server_errors, usage_staff

pytestmark = [pytest.mark.e2e, pytest.mark.browser]


@pytest.fixture
def stella(django_user_model):
    """A staff member who may read usage reports (the dashboard needs usage.view_reportrun)."""
    return usage_staff(django_user_model, "view_reportrun")


def test_a_fresh_deployment_dashboard_says_no_report_has_been_published(daphne, stella, tenant_a):
    with admin_page(daphne.url, "stella", PASSWORD) as page:
        errors_5xx = server_errors(page)
        resp = page.goto(f"{daphne.url}/dashboard/")
        message = page.locator("#usage-empty")
        assert (resp.status, message.is_visible()) == (200, True)
        assert message.inner_text() == "No usage report has been published yet. Generate one."
        assert page.locator("svg.usage-chart").count() == 0
        assert page.locator("table.live").inner_text().count("tenant-a") == 1
        page.screenshot(path=str(ARTIFACTS / "usage-dashboard-fresh.png"), full_page=True)
        assert errors_5xx == []
    assert "Internal Server Error" not in daphne.log()


def test_a_tenant_without_traffic_and_an_empty_range_say_so(daphne, stella, tenant_a, tenant_b):
    now = timezone.now()
    run = ReportRun.objects.create(
        date_from=date(2026, 11, 1),
        date_to=date(2026, 11, 7),
        status=ReportRun.Status.SUCCEEDED,
        started_at=now,
        finished_at=now,
        row_counts={"daily": 1},
    )
    ReportDaily.objects.create(run=run, tenant=tenant_a, day=date(2026, 11, 2), commands=12, errors=1)
    with admin_page(daphne.url, "stella", PASSWORD) as page:
        errors_5xx = server_errors(page)
        resp = page.goto(f"{daphne.url}/dashboard/?tenant=tenant-b&date_from=2026-11-01&date_to=2026-11-07")
        message = page.locator("#usage-empty")
        assert (resp.status, message.is_visible()) == (200, True)
        assert message.inner_text() == "No traffic for tenant-b in 2026-11-01 – 2026-11-07."
        assert page.locator("svg.usage-chart").count() == 0
        page.screenshot(path=str(ARTIFACTS / "usage-dashboard-no-traffic.png"), full_page=True)

        # The same range for tenant A draws its charts.
        resp = page.goto(f"{daphne.url}/dashboard/?tenant=tenant-a&date_from=2026-11-01&date_to=2026-11-07")
        assert resp.status == 200 and page.locator("svg.usage-chart").count() == 9

        resp = page.goto(f"{daphne.url}/dashboard/?date_from=2026-11-07&date_to=2026-11-01")
        errors = page.locator("#filter-errors")
        assert (resp.status, errors.is_visible()) == (400, True)
        assert errors.inner_text() == (
            "The range 2026-11-07 – 2026-11-01 has no days: the end date is before the start date."
        )
        # --bad: the theme's red (unfold's --color-red-600), as its own .text-red-600 draws it.
        theme_red = page.evaluate(
            """() => { const p = document.createElement("span"); p.className = "text-red-600";
                 document.body.appendChild(p); const c = getComputedStyle(p).color; p.remove(); return c; }"""
        )
        assert errors.locator("li").evaluate("e => getComputedStyle(e).color") == theme_red
        assert page.locator("svg.usage-chart").count() == 0
        page.screenshot(path=str(ARTIFACTS / "usage-dashboard-empty-range.png"), full_page=True)
        assert errors_5xx == []
    assert "Internal Server Error" not in daphne.log()
