"""Headless Chromium (Debian's package via Playwright) logs into the operator console on a real
Daphne, creates a tenant for `localhost:<port>`, and that host then serves the new DID document."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest

from tests.support.browser import ARTIFACTS, admin_page

pytestmark = [pytest.mark.e2e, pytest.mark.browser]


def test_an_operator_creates_a_tenant_in_the_browser_and_its_host_serves_the_did_document(daphne, django_user_model):
    django_user_model.objects.create_superuser("olivia", "olivia@ops.test", "correct-horse-battery")
    port = daphne.port
    new_host = f"localhost:{port}"

    # Before: no tenant claims localhost:<port> and there is no default tenant.
    assert httpx.get(f"http://{new_host}/", timeout=10).json() == {"type": "ERROR", "code": "UNKNOWN_MEDIATOR"}

    with admin_page(daphne.url, "olivia", "correct-horse-battery") as page:
        page.goto(f"{daphne.url}/admin/tenants/tenant/add/")
        page.fill("input[name=slug]", "browser-made")
        page.fill("input[name=name]", "Made in the browser")
        page.fill("input[name=domain]", new_host)
        page.fill("textarea[name=aliases]", "alias.browser.test")
        page.fill("input[name=max_identities]", "25")
        page.click("button[name=_save]")
        # A new tenant opens on its own page (its checklist and invitations first), then the list.
        page.wait_for_url(re.compile(r".*/admin/tenants/tenant/\d+/change/$"))
        page.goto(f"{daphne.url}/admin/tenants/tenant/")
        assert "browser-made" in page.content()
        page.screenshot(path=str(ARTIFACTS / "operator-console-list.png"))

        page.click("text=Made in the browser")
        page.wait_for_selector("table.live-figures")
        page.screenshot(path=str(ARTIFACTS / "operator-console-tenant.png"), full_page=True)
        figures = page.inner_text("table.live-figures")
        assert "Registered identities" in figures and "never" in figures

    doc = httpx.get(f"http://{new_host}/", timeout=10)
    assert doc.status_code == 200
    body = doc.json()
    assert body["id"] == f"did:web:localhost%3A{port}"
    assert body["service"][0]["serviceEndpoint"] == {"uri": f"http://{new_host}"}
    # The alias serves the same document; the address the admin was browsed at still serves none.
    alias = httpx.get(f"{daphne.url}/", headers={"Host": "alias.browser.test"}, timeout=10)
    assert alias.json()["id"] == body["id"]
    assert httpx.get(f"{daphne.url}/", timeout=10).json()["code"] == "UNKNOWN_MEDIATOR"
    assert Path(ARTIFACTS / "operator-console-tenant.png").stat().st_size > 10_000
