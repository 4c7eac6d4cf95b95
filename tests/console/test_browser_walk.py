"""What a new operator found in the console (issue 42 §3), in headless Chromium at 1280×800 and 390×844:
the sidebar toggles and the user menu work from the keyboard; in dark mode the overview's cards and
Swagger UI read; a sidebar or a table that scrolls fades its edge; breadcrumbs and the recent
actions' times are never cut or broken; Cancel asks first. Each test leaves screenshots in
test-artifacts/ (console-walk-*.png). Fixed timestamps throughout: nothing here reads today's date."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest

from apps.tenants.models import AuditEntry
from apps.tenants.services import Actor, tenant_create, tenant_suspend
from apps.usage.models import ReportRun
from tests.support.browser import ARTIFACTS, PASSWORD, admin_page
from tests.usage.test_browser_layout import published_run
from tests.usage.test_browser_theme import READABILITY

pytestmark = [pytest.mark.e2e, pytest.mark.browser]

AT = datetime(2026, 11, 8, 6, 30, 5, tzinfo=UTC)


@pytest.fixture
def globex(olivia):
    """A suspended tenant with a display name, and recent operator actions with long names beside their times."""
    tenant = tenant_create(slug="globex", domain="mediator.globex.example", name="Globex Corporation")
    tenant_suspend(tenant=tenant, actor=Actor(user=olivia, via="console"))
    AuditEntry.objects.all().update(at=AT)
    for n in range(6):
        AuditEntry.objects.create(
            at=AT.replace(minute=40 + n),
            actor_name="olivia.operator-on-call",
            via="api",
            action="tenant.rotate_didcomm",
            tenant_slug="globex-corporation-eu-west-1",
        )
    return tenant


def _focus(page) -> str:
    return page.evaluate("() => document.activeElement.id || document.activeElement.textContent.trim()")


def _tab_to(page, element_id: str, limit: int = 80) -> None:
    for _ in range(limit):
        page.keyboard.press("Tab")
        if page.evaluate("() => document.activeElement.id") == element_id:
            return
    pytest.fail(f"Tab never reached #{element_id}")


def test_the_sidebar_toggles_and_the_user_menu_work_from_the_keyboard(daphne, olivia, globex):
    with admin_page(daphne.url, "olivia", PASSWORD, width=1280, height=800) as page:
        # Desktop: the collapse toggle is a button Tab reaches; Enter hides the sidebar and shows it again.
        page.goto(f"{daphne.url}/admin/")
        _tab_to(page, "sidebar-toggle-desktop")
        toggle = page.locator("#sidebar-toggle-desktop")
        assert toggle.get_attribute("aria-expanded") == "true"
        page.keyboard.press("Enter")
        page.locator("#nav-sidebar").wait_for(state="hidden")
        assert toggle.get_attribute("aria-expanded") == "false"
        page.keyboard.press("Enter")
        page.locator("#nav-sidebar").wait_for(state="visible")
        # The user menu: Tab reaches its button; Enter opens it with focus on its first item; every
        # item (theme, password, logout) is reached by Tab; Enter picks a theme; Escape closes it.
        _tab_to(page, "user-menu-button")
        page.keyboard.press("Enter")
        page.locator("#user-menu").wait_for(state="visible")
        assert page.locator("#user-menu-button").get_attribute("aria-expanded") == "true"
        page.wait_for_function("() => document.activeElement.id === 'theme-light'")
        reached = [_focus(page)]
        for _ in range(5):
            page.keyboard.press("Tab")
            reached.append(_focus(page))
        assert reached == ["theme-light", "theme-dark", "theme-auto", "View site", "Change password", "Log out logout"]
        page.screenshot(path=str(ARTIFACTS / "console-walk-user-menu.png"))
        for _ in range(4):
            page.keyboard.press("Shift+Tab")
        assert _focus(page) == "theme-dark"
        page.keyboard.press("Enter")
        page.wait_for_function("() => document.documentElement.classList.contains('dark')")
        page.keyboard.press("Escape")
        page.locator("#user-menu").wait_for(state="hidden")
        page.wait_for_function("() => document.activeElement.id === 'user-menu-button'")

        # Phone: the menu toggle is a button Tab reaches; Enter opens the menu and moves focus into
        # it; Escape closes it and focus returns to the toggle.
        page.set_viewport_size({"width": 390, "height": 844})
        page.goto(f"{daphne.url}/admin/")
        assert page.locator("#nav-sidebar").is_hidden()
        _tab_to(page, "sidebar-toggle-mobile")
        page.keyboard.press("Enter")
        page.locator("#nav-sidebar").wait_for(state="visible")
        assert page.locator("#sidebar-toggle-mobile").get_attribute("aria-expanded") == "true"
        page.wait_for_function("() => document.activeElement.id === 'sidebar-close'")
        page.keyboard.press("Tab")
        page.keyboard.press("Tab")  # past the list's scroll box (SimpleBar's, focusable to scroll by keys)
        assert page.evaluate(
            "() => [document.activeElement.closest('#nav-sidebar') !== null, document.activeElement.getAttribute('href')]"
        ) == [True, "/admin/tenants/tenant/"]
        page.screenshot(path=str(ARTIFACTS / "console-walk-phone-menu.png"))
        page.keyboard.press("Escape")
        page.locator("#nav-sidebar").wait_for(state="hidden")
        page.wait_for_function("() => document.activeElement.id === 'sidebar-toggle-mobile'")


# The overview's text and Swagger UI's, against what is behind each (READABILITY: WCAG AA, 4.5).
OVERVIEW_TEXT = [
    ".console-card h2",
    ".console-stats > div",
    ".console-card .muted",
    ".console-card td",
    ".console-card p",
]
SWAGGER_TEXT = [
    ".swagger-ui .info .title",
    ".swagger-ui .info p",
    ".swagger-ui .renderedMarkdown code",
    ".swagger-ui .opblock-tag",
    ".swagger-ui .opblock-summary-path",
    ".swagger-ui .opblock-summary-description",
    ".swagger-ui .opblock-description-wrapper p",
    ".swagger-ui .opblock-section-header h4",
    ".swagger-ui .parameter__name",
    ".swagger-ui .parameter__type",
    ".swagger-ui table thead tr th",
    ".swagger-ui .response-col_status",
    ".swagger-ui .models h4",
    "#console-back a",
]
SURFACES = """(selectors) => selectors.flatMap(sel => [...document.querySelectorAll(sel)].map(e => {
  const ctx = document.createElement("canvas").getContext("2d");
  ctx.fillStyle = getComputedStyle(e).backgroundColor; ctx.fillRect(0, 0, 1, 1);
  const [r, g, b] = ctx.getImageData(0, 0, 1, 1).data; return `${sel} ${r + g + b > 3 * 128 ? "light" : "dark"}`;
}))"""


def test_the_overview_cards_and_swagger_ui_read_in_dark_and_light_mode(daphne, olivia, globex):
    with admin_page(daphne.url, "olivia", PASSWORD, width=1280, height=800, color_scheme="dark") as page:
        for scheme in ("dark", "light"):
            page.emulate_media(color_scheme=scheme)
            page.goto(f"{daphne.url}/admin/")
            assert page.evaluate("() => document.documentElement.classList.contains('dark')") == (scheme == "dark")
            found = page.evaluate(READABILITY, [OVERVIEW_TEXT, False])
            page.screenshot(path=str(ARTIFACTS / f"console-walk-overview-{scheme}.png"))
            assert found["checked"] >= 20 and found["problems"] == [], found
            in_total = page.locator("#overview-tenants .console-stats > div").first
            assert in_total.inner_text().split() == ["1", "in", "total"]
            assert set(page.evaluate(SURFACES, [".console-card"])) == {f".console-card {scheme}"}

            page.goto(f"{daphne.url}/api/v1/docs/")
            page.locator(".opblock-summary").first.click()
            page.locator(".opblock .parameter__name").first.wait_for()
            page.locator(".models h4").first.wait_for()
            found = page.evaluate(READABILITY, [SWAGGER_TEXT, False])
            page.screenshot(path=str(ARTIFACTS / f"console-walk-swagger-{scheme}.png"))
            assert found["checked"] >= 40 and found["problems"] == [], found
            assert page.evaluate(SURFACES, ["body", ".swagger-ui .scheme-container"]) == [
                f"body {scheme}",
                f".swagger-ui .scheme-container {scheme}",
            ]


# Every line box of an element's text: one top means the text is on one line.
LINES = "e => { const r = document.createRange(); r.selectNodeContents(e); return new Set([...r.getClientRects()].filter(x => x.width > 0).map(x => Math.round(x.top))).size; }"
# Cells of a card that reach past its right edge: [text] (none when everything fits).
FITS = """(card) => { const box = document.querySelector(card).getBoundingClientRect();
  return [...document.querySelectorAll(card + " td")].filter(td => td.getBoundingClientRect().right > box.right + 0.5).map(td => td.innerText); }"""
# The breadcrumb parts a user sees: [text, whole (not cut)].
CRUMBS = """() => [...document.querySelectorAll("#header-inner h1 .console-crumb")].filter(e => e.getClientRects().length)
  .map(e => [e.innerText.trim(), e.scrollWidth <= e.clientWidth && e.scrollHeight <= e.clientHeight + 1])"""


def _mask(page, selector: str) -> str:
    return page.locator(selector).first.evaluate(
        "e => getComputedStyle(e).maskImage || getComputedStyle(e).webkitMaskImage"
    )


def test_scroll_hints_whole_breadcrumbs_one_line_times_and_a_cancel_that_asks(daphne, olivia, globex):
    run = published_run([globex], date(2026, 11, 1), 7)
    ReportRun.objects.filter(pk=run.pk).update(started_at=AT, finished_at=AT)
    queued = ReportRun.objects.create(date_from=date(2026, 11, 1), date_to=date(2026, 11, 7))
    with admin_page(daphne.url, "olivia", PASSWORD, width=1280, height=800) as page:
        # 1280×800: the sidebar is taller than the window; its bottom edge fades until scrolled there.
        page.goto(f"{daphne.url}/admin/")
        sidebar = page.locator("#nav-sidebar-apps")
        page.wait_for_function("() => document.querySelector('#nav-sidebar-apps').dataset.more === 'down'")
        assert "linear-gradient" in _mask(page, "#nav-sidebar-apps")
        tokens = page.locator("#nav-sidebar-apps a", has_text="API tokens")
        assert tokens.bounding_box()["y"] > 800 - 64  # below the fold (the user menu holds the last 64 px)
        assert page.locator("#overview-actions time.utc").count() == 7
        assert set(page.locator("#overview-actions time.utc").evaluate_all(f"ts => ts.map({LINES})")) == {1}
        assert page.evaluate(FITS, "#overview-actions") == []
        page.screenshot(path=str(ARTIFACTS / "console-walk-sidebar-1280.png"))
        sidebar.locator(".simplebar-content-wrapper").evaluate("e => e.scrollTo(0, e.scrollHeight)")
        page.wait_for_function("() => document.querySelector('#nav-sidebar-apps').dataset.more === 'up'")
        assert tokens.bounding_box()["y"] + tokens.bounding_box()["height"] <= 800 - 64
        # The tenant's breadcrumb: whole parts, the tenant by its display name.
        page.goto(f"{daphne.url}/admin/tenants/tenant/{globex.pk}/change/")
        assert page.evaluate(CRUMBS) == [["Hosted mediators", True], ["Tenants", True], ["Globex Corporation", True]]
        page.screenshot(path=str(ARTIFACTS / "console-walk-tenant-1280.png"))

        # 390×844: only the last part of the breadcrumb, whole; times on one line; a wide table fades
        # its right edge until scrolled to its end.
        page.set_viewport_size({"width": 390, "height": 844})
        page.reload()
        assert page.evaluate(CRUMBS) == [["Globex Corporation", True]]
        page.screenshot(path=str(ARTIFACTS / "console-walk-tenant-390.png"))
        page.goto(f"{daphne.url}/admin/")
        assert set(page.locator("#overview-actions time.utc").evaluate_all(f"ts => ts.map({LINES})")) == {1}
        assert page.evaluate(FITS, "#overview-actions") == []
        page.screenshot(path=str(ARTIFACTS / "console-walk-overview-390.png"))
        page.goto(f"{daphne.url}/dashboard/reports/{run.pk}/")
        table = page.locator("#daily-table").locator("xpath=..")
        assert table.evaluate("e => e.scrollWidth > e.clientWidth")
        page.wait_for_function("() => document.getElementById('daily-table').parentElement.dataset.more === 'right'")
        assert "linear-gradient" in table.evaluate("e => getComputedStyle(e).maskImage")
        table.scroll_into_view_if_needed()
        page.screenshot(path=str(ARTIFACTS / "console-walk-table-390.png"))
        table.evaluate("e => e.scrollTo(e.scrollWidth, 0)")
        page.wait_for_function("() => document.getElementById('daily-table').parentElement.dataset.more === 'left'")

        # Cancel asks first: the button only opens the question; its second button cancels.
        page.goto(f"{daphne.url}/dashboard/reports/{queued.pk}/")
        assert page.locator("#confirm-cancel").is_hidden()
        page.click("#cancel-run")
        page.locator("#confirm-cancel").wait_for(state="visible")
        assert page.inner_text("#cancel-question").startswith(f"Cancel usage report #{queued.pk}?")
        page.screenshot(path=str(ARTIFACTS / "console-walk-cancel-390.png"))
        status_url = f"{daphne.url}/dashboard/reports/{queued.pk}/status"
        assert page.request.get(status_url).json()["status"] == "queued"  # nothing cancelled yet
        page.click("#confirm-cancel")
        page.wait_for_selector("#run-status:text-is('Cancelled')")
    queued.refresh_from_db()
    assert queued.status == ReportRun.Status.CANCELLED
