"""The Content-Security-Policy violations a Playwright page reports, and a marker that says when
all of them so far have been reported (issue 42: no fixed wait for "late violations").

`violations(page)` listens, before the page's scripts run, for the `securitypolicyviolation` events
the browser fires on the document, and collects them as "CSP violation: <directive> <blocked URI>".
`reported(page, found)` waits for the page's fonts, then makes one violation itself (an image from a
host the policy does not allow, which img-src refuses) and waits until that one is reported: the
browser fires a document's violation events in the order it found the violations (each is a task
queued when found), and the console messages reach Playwright in order, so every violation found
before the marker has been collected by then.
"""

from __future__ import annotations

import itertools

from playwright.sync_api import Page

LISTENER = (
    "document.addEventListener('securitypolicyviolation',"
    " e => console.error('CSP violation: ' + e.violatedDirective + ' ' + e.blockedURI))"
)
MARKER = "https://csp-marker.invalid/marker-"
_markers = itertools.count(1)


def violations(page: Page) -> list[str]:
    """The violations `page` reports from now on (the list fills as it browses)."""
    found: list[str] = []
    page.on("console", lambda m: found.append(m.text) if m.text.startswith("CSP violation") else None)
    page.add_init_script(LISTENER)
    return found


def reported(page: Page, found: list[str]) -> list[str]:
    """`found` (from `violations`) once every violation of the page so far is in it: the marker's
    own report has arrived (and is taken out again)."""
    page.evaluate("document.fonts.ready.then(() => true)")
    uri = f"{MARKER}{next(_markers)}.png"
    marker = f"CSP violation: img-src {uri}"
    with page.expect_console_message(lambda m: m.text == marker, timeout=10_000):
        page.evaluate("uri => { new Image().src = uri; }", uri)
    assert found[-1] == marker, found
    found.pop()
    return found
