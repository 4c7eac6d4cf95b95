"""The usage pages wear the console's theme in light and in dark mode (headless Chromium): every
text reads against what is behind it, cards and charts take the theme's surfaces, and form fields
and buttons look like the admin's own (unfold's colour variables, not a palette of their own)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.usage.models import ReportRun
from tests.support.browser import ARTIFACTS, PASSWORD, admin_page, usage_staff
from tests.usage.test_browser_layout import published_run

pytestmark = [pytest.mark.e2e, pytest.mark.browser]


@pytest.fixture
def daphne_env(tmp_path):
    # A queue no worker consumes, as in test_browser_layout.py.
    return {"USAGE_REPORT_QUEUE": f"nobody-{tmp_path.name}"}


@pytest.fixture
def stella(django_user_model):
    return usage_staff(django_user_model, "add_reportrun", "view_reportrun")


# Text whose contrast with its background is below 4.5 (WCAG AA), and cards or charts drawn in a
# colour other than the page's surface in dark mode. Colours go through a canvas, so any CSS
# colour syntax (the theme's oklch variables included) compares as RGB.
READABILITY = """([selectors, dark]) => {
  const ctx = document.createElement("canvas").getContext("2d", {willReadFrequently: true});
  const rgba = (c) => { ctx.clearRect(0, 0, 1, 1); ctx.fillStyle = "#000"; ctx.fillStyle = c; ctx.fillRect(0, 0, 1, 1); return [...ctx.getImageData(0, 0, 1, 1).data]; };
  const lum = ([r, g, b]) => { const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; }; return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b); };
  const background = (e) => { for (; e; e = e.parentElement) { const c = getComputedStyle(e).backgroundColor; const v = rgba(c); if (c !== "rgba(0, 0, 0, 0)" && c !== "transparent" && v[3] > 200) return v; } return rgba(getComputedStyle(document.body).backgroundColor); };
  const problems = [];
  let checked = 0;
  for (const sel of selectors) for (const e of document.querySelectorAll(sel)) {
    if (!e.textContent.trim() || !e.getClientRects().length) continue;
    checked++;
    const fg = lum(rgba(getComputedStyle(e).color)), bg = lum(background(e));
    const ratio = (Math.max(fg, bg) + 0.05) / (Math.min(fg, bg) + 0.05);
    if (ratio < 4.5) problems.push(`${sel} "${e.textContent.trim().slice(0, 40)}": contrast ${ratio.toFixed(2)}`);
  }
  if (dark) for (const e of document.querySelectorAll(".usage .card, .usage figure.chart-card, .usage table.data, .usage .progress")) {
    const [r, g, b] = background(e);
    if (r + g + b > 3 * 128) problems.push(`${e.className} is light (${r},${g},${b}) in dark mode`);
  }
  return {problems, checked};
}"""

DASHBOARD_TEXT = ["h2", ".card .label", ".card .value", "table.data th", "table.data td", ".freshness span", ".hint"]
RUN_TEXT = ["#run-status", "dl.facts dt", "dl.facts dd", "figcaption", "ul.chart-legend li", ".downloads a"]
PROGRESS_TEXT = ["#run-status", "dl.facts dd", "#progress-step", ".progress dt", ".progress dd"]


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_every_text_of_the_usage_pages_reads_in_light_and_dark_mode(daphne, stella, tenant_a, tenant_b, scheme):
    run = published_run([tenant_a, tenant_b], timezone.now().date() - timedelta(days=4), 4)
    now = timezone.now()
    running = ReportRun.objects.create(
        date_from=now.date(),
        date_to=now.date(),
        status=ReportRun.Status.RUNNING,
        started_at=now,
        progress={"step": "computing the report", "step_no": 3, "steps": 4},
    )
    pages = [
        ("/dashboard/", DASHBOARD_TEXT),
        (f"/dashboard/reports/{run.pk}/", RUN_TEXT),
        (f"/dashboard/reports/{running.pk}/", PROGRESS_TEXT),
        ("/dashboard/reports/", ["table.data th", "table.data td", ".status"]),
    ]
    with admin_page(daphne.url, "stella", PASSWORD, width=1280, height=800, color_scheme=scheme) as page:
        for path, selectors in pages:
            page.goto(daphne.url + path)
            found = page.evaluate(READABILITY, [selectors, scheme == "dark"])
            page.screenshot(path=str(ARTIFACTS / f"usage-theme-{scheme}-{path.strip('/').replace('/', '-')}.png"))
            assert found["checked"] >= len(selectors), (path, found)
            assert found["problems"] == [], f"{path}: " + "\n".join(found["problems"])


def test_report_forms_and_buttons_look_like_the_consoles_own(daphne, stella, tenant_a):
    with admin_page(daphne.url, "stella", PASSWORD, width=1280, height=800) as page:
        page.goto(f"{daphne.url}/admin/usage/reportrun/generate/")
        theme = page.evaluate(
            """() => { const probe = document.createElement("div"); probe.className = "bg-primary-600";
                 document.body.appendChild(probe); const c = getComputedStyle(probe).backgroundColor; probe.remove(); return c; }"""
        )
        button = page.locator("#generate-report").evaluate("e => getComputedStyle(e).backgroundColor")
        assert button == theme  # the theme's primary, not an indigo of its own
        for name in ("date_from", "date_to"):
            style = page.locator(f"[name={name}]").evaluate(
                "e => [getComputedStyle(e).borderTopWidth, getComputedStyle(e).borderTopStyle]"
            )
            assert style == ["1px", "solid"], name
        page.goto(f"{daphne.url}/dashboard/")
        for select in ("tenant", "days"):
            radius = page.locator(f"#usage-filters select[name={select}]").evaluate(
                "e => [getComputedStyle(e).borderTopWidth, getComputedStyle(e).borderTopLeftRadius]"
            )
            assert radius[0] == "1px" and radius[1] != "0px", (select, radius)
