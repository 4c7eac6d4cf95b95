"""Lists and the home page fit the screen (issue 33 item 26), in headless Chromium: the tenant list
and the command meters never scroll sideways at 1280 px with long names, domains and command types,
timestamps stay on one line, and the home page's recent actions fit a 390 px phone."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.tenants.models import Tenant
from apps.tenants.services import Actor, tenant_create, tenant_rotate_keys, tenant_suspend
from apps.usage.models import CommandMeter
from tests.support.browser import ARTIFACTS, PASSWORD, admin_page

pytestmark = [pytest.mark.e2e, pytest.mark.browser]

# The page and the list's own box: neither may be wider than what shows.
SIDEWAYS = """() => {
  const root = document.scrollingElement, problems = [];
  if (root.scrollWidth > root.clientWidth + 1) problems.push(`page ${root.scrollWidth} > ${root.clientWidth}`);
  for (const e of document.querySelectorAll("#content *")) {
    const style = getComputedStyle(e);
    if (["auto", "scroll"].includes(style.overflowX) && e.scrollWidth > e.clientWidth + 1)
      problems.push(`${e.tagName}.${e.className.toString().slice(0, 40)} ${e.scrollWidth} > ${e.clientWidth}`);
  }
  // A timestamp never wraps at a hyphen: a list's time column is one line, and a <time> breaks at
  // most before its T (each of its two halves is one line).
  const lines = (node) => { const r = document.createRange(); r.selectNodeContents(node);
    return new Set([...r.getClientRects()].filter(x => x.width > 0).map(x => Math.round(x.top))).size; };
  for (const t of document.querySelectorAll("time.utc > span, td.field-time, th.field-time, td.field-at, th.field-at"))
    if (t.textContent.trim() && lines(t) > 1) problems.push(`"${t.textContent.trim()}" wraps`);
  return problems;
}"""


@pytest.fixture
def world(django_user_model, tenant_a):
    olivia = django_user_model.objects.create_superuser("olivia", "olivia@ops.test", PASSWORD)
    actor = Actor(user=olivia, via="admin")
    long = tenant_create(
        actor=actor,
        slug="globex-europe-west",
        name="Globex Corporation, Europe West region",
        domain="mediator.europe-west.globex-corporation.example",
    )
    tenant_rotate_keys(tenant=long, actor=actor)
    tenant_suspend(tenant=tenant_a, actor=actor)
    now = timezone.now()
    types = ["QUERY_PENDING_CONTRACT_REQUESTS", "didcomm: messagepickup/3.0/delivery-request", "TWO_WAY_PRIVATE"]
    CommandMeter.objects.bulk_create(
        CommandMeter(
            tenant=long,
            at=now - timedelta(seconds=i),
            transport="ws",
            command_type=types[i % 3],
            code="COMMUNICATION_CONTRACT_NOT_FOUND",
            http_status=404,
            bytes_in=6_000_000,
            bytes_out=123_456,
            duration_ms=1234.5,
        )
        for i in range(6)
    )
    return Tenant.objects.get(slug="globex-europe-west")


def test_lists_fit_1280_px_and_the_home_page_fits_a_phone(daphne, world):
    with admin_page(daphne.url, "olivia", PASSWORD, width=1280, height=800) as page:
        for path in ("/admin/tenants/tenant/", "/admin/usage/commandmeter/", "/admin/tenants/auditentry/"):
            page.goto(daphne.url + path)
            page.screenshot(path=str(ARTIFACTS / f"console-width-1280-{path.strip('/').replace('/', '-')}.png"))
            assert page.evaluate(SIDEWAYS) == [], path
    with admin_page(daphne.url, "olivia", PASSWORD, width=390, height=844) as page:
        page.goto(f"{daphne.url}/admin/")
        page.screenshot(path=str(ARTIFACTS / "console-width-390-home.png"), full_page=True)
        assert page.evaluate(SIDEWAYS) == []
