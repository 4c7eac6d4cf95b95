"""Headless Debian Chromium through Playwright, logged into the admin as a staff user."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager

from playwright.sync_api import Page, sync_playwright

from tests.support.servers import ROOT

CHROMIUM = "/usr/bin/chromium"
# The closed network refuses Chromium's background connections; these flags keep it quiet.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
ARTIFACTS = ROOT / "test-artifacts"


@contextmanager
def admin_page(
    base_url: str,
    username: str,
    password: str,
    *,
    width: int = 1440,
    height: int = 1000,
    color_scheme: str = "light",
) -> Iterator[Page]:
    """A page logged into `base_url`/admin/ (never `playwright install`: Debian's chromium); the
    console follows the browser's `color_scheme` ("light" or "dark")."""
    assert shutil.which(CHROMIUM), "run scripts/ensure_extra_chromium.sh (make test does)"
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": width, "height": height}, color_scheme=color_scheme)
            page.set_default_timeout(20_000)
            page.goto(f"{base_url}/admin/login/")
            page.fill("input[name=username]", username)
            page.fill("input[name=password]", password)
            page.click("button[type=submit]")
            page.wait_for_url(f"{base_url}/admin/")
            yield page
        finally:
            browser.close()
