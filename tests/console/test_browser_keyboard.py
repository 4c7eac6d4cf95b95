"""The console by keyboard in headless Chromium (issue 33 item 25): the first Tab offers a skip link
past the sidebar; the tenant page's "Data and keys" menu is reached by Tab, opens with Enter, moves
focus to its first item, shows every item's whole title and closes with Escape."""

from __future__ import annotations

import pytest

from tests.support.browser import ARTIFACTS, PASSWORD, admin_page

pytestmark = [pytest.mark.e2e, pytest.mark.browser]


def _focused(page) -> str:
    return page.evaluate("() => (document.activeElement.id || '') + '|' + document.activeElement.textContent.trim()")


def test_the_first_tab_offers_a_skip_link_that_lands_past_the_sidebar(daphne, olivia, tenant_a):
    with admin_page(daphne.url, "olivia", PASSWORD, width=1280, height=800) as page:
        page.goto(f"{daphne.url}/admin/tenants/tenant/")
        page.keyboard.press("Tab")
        assert _focused(page) == "skip-link|Skip to content"
        assert page.locator("#skip-link").is_visible()
        page.screenshot(path=str(ARTIFACTS / "console-skip-link.png"))
        page.keyboard.press("Enter")
        page.keyboard.press("Tab")
        inside = page.evaluate("() => !!document.activeElement.closest('#content')")
        assert inside, _focused(page)


def test_the_data_and_keys_menu_works_from_the_keyboard_and_shows_whole_titles(daphne, olivia, tenant_a):
    with admin_page(daphne.url, "olivia", PASSWORD, width=1280, height=800) as page:
        page.goto(f"{daphne.url}/admin/tenants/tenant/{tenant_a.pk}/change/")
        toggle = page.get_by_role("button", name="Data and keys")
        assert toggle.get_attribute("aria-expanded") == "false"
        for _ in range(80):  # Tab reaches it (an <a> without href is skipped)
            page.keyboard.press("Tab")
            if page.evaluate("() => document.activeElement.textContent.includes('Data and keys')"):
                break
        else:
            pytest.fail("Tab never reached the Data and keys menu")
        page.keyboard.press("Enter")
        menu = page.locator("nav.console-action-menu")
        menu.wait_for(state="visible")
        assert toggle.get_attribute("aria-expanded") == "true"
        assert page.evaluate("() => !!document.activeElement.closest('nav.console-action-menu')")
        items = menu.locator("a")
        titles = [t.strip() for t in items.all_inner_texts()]
        assert any("Rotate DIDComm identity" in t for t in titles), titles
        cut = menu.evaluate(
            "m => [...m.querySelectorAll('a, a span')].filter(e => e.scrollWidth > e.clientWidth + 1).map(e => e.textContent.trim())"
        )
        assert cut == []
        page.screenshot(path=str(ARTIFACTS / "console-data-and-keys-menu.png"))
        page.keyboard.press("Escape")
        menu.wait_for(state="hidden")
        assert toggle.get_attribute("aria-expanded") == "false"
        assert page.evaluate("() => document.activeElement.textContent.includes('Data and keys')")
