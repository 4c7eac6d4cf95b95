"""Headless Debian Chromium through Playwright, logged into the admin as a staff user; and the
browser tests' setup (registered by tests/conftest.py): a real Daphne per test, the operator olivia,
and the staff member stella with the usage permissions a module gives her."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from django.contrib.auth.models import Permission
from playwright.sync_api import Page, sync_playwright

from tests.support.servers import ROOT, Server, start_daphne

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
PASSWORD = "correct-horse-battery"


@pytest.fixture
def daphne_env() -> dict[str, str]:
    """The environment `daphne` adds to the server's; a module that needs more overrides this."""
    return {}


@pytest.fixture
def daphne(transactional_db, tmp_path, daphne_env) -> Iterator[Server]:
    """A real Daphne for one test, on the test's committed data (a browser reads it from another process)."""
    server = start_daphne(tmp_path, env=daphne_env)
    yield server
    server.stop()


@pytest.fixture
def olivia(django_user_model):
    """The operator: a superuser who logs in with PASSWORD."""
    return django_user_model.objects.create_superuser("olivia", "olivia@ops.test", PASSWORD)


def usage_staff(django_user_model, *codenames: str):
    """stella, a staff member (not a superuser) who logs in with PASSWORD and holds only the usage
    app's permissions `codenames`."""
    user = django_user_model.objects.create_user("stella", "stella@ops.test", PASSWORD, is_staff=True)
    user.user_permissions.set(Permission.objects.filter(content_type__app_label="usage", codename__in=codenames))
    return user


def server_errors(page: Page) -> list[str]:
    """Every response the page receives from now on that is a server error (filled as it browses)."""
    seen: list[str] = []
    page.on("response", lambda r: seen.append(f"{r.status} {r.url}") if r.status >= 500 else None)
    return seen


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
