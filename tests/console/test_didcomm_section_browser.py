"""The tenant page, a grant's page and its revocation in headless Chromium at 1280×800 and 390×844
(a laptop and a phone), with DIDs of real length everywhere a DID is shown: no page grows sideways,
figure labels stay on one line; and a tenant made in the browser opens on its page with its
checklist and invitations (QR with its text alternative) on the first screen."""

from __future__ import annotations

import re
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from apps.didcomm.identity import identity_current
from apps.didcomm.models import Mediation, QueuedMessage, RecipientKey, presence_key
from apps.didcomm.recipients import did_hash
from apps.messaging.models import PendingEvent
from apps.messaging.presence import socket_entered
from apps.tenants.services import tenant_create
from apps.wire.client import Identity
from tests.support.browser import ARTIFACTS, PASSWORD, admin_page
from tests.support.didcomm_agent import Agent, routed_did

pytestmark = [pytest.mark.e2e, pytest.mark.browser]

VIEWPORTS = [(1280, 800), (390, 844)]


def _busy_tenant():
    """A tenant whose largest queues, live sockets and grant all name long DIDs (a did:decentrl
    with an alias, a wallet's did:peer:2, a routed did:peer:2 recipient of ~700 characters)."""
    tenant = tenant_create(slug="globex", domain="mediator.globex.example", name="Globex")
    alice = Identity.create("alice-of-accounting", tenant.did)
    bob = Identity.create("bob", tenant.did)
    for i in range(3):
        PendingEvent.objects.create(tenant=tenant, sender_did=bob.did, recipient_did=alice.did, payload=f"x{i}")
    client = Agent().did
    mediation = Mediation.objects.create(
        tenant=tenant, client_did=client, client_hash=did_hash(client), state=Mediation.State.GRANTED
    )
    recipient = routed_did(identity_current(tenant=tenant).did).did
    assert len(recipient) > 600
    rk = RecipientKey.objects.create(
        tenant=tenant, mediation=mediation, recipient_did=recipient, lookup_hash=did_hash(recipient)
    )
    now = timezone.now()
    for _ in range(2):
        QueuedMessage.objects.create(
            tenant=tenant, mediation=mediation, recipient=rk, data='{"n":1}', size=7,
            received_at=now, expires_at=now + timedelta(hours=1),
        )  # fmt: skip
    socket_entered(tenant_id=tenant.pk, did=alice.did, now_s=int(time.time()))
    socket_entered(tenant_id=tenant.pk, did=presence_key(mediation.client_hash), now_s=int(time.time()))
    return tenant, mediation


WIDTH = "document.documentElement.scrollWidth"
# The heights of the figure labels: one line each, so all the same.
LABEL_HEIGHTS = "[...document.querySelectorAll('table.live-figures th')].map(th => th.getBoundingClientRect().height)"


def test_pages_with_long_dids_never_grow_sideways_at_laptop_and_phone_width(daphne, olivia):
    tenant, mediation = _busy_tenant()
    pages = {
        "tenant": f"/admin/tenants/tenant/{tenant.pk}/change/",
        "grant": f"/admin/didcomm/mediation/{mediation.pk}/change/",
        "revoke": f"/admin/didcomm/mediation/{mediation.pk}/revoke/",
        "grants": "/admin/didcomm/mediation/",
    }
    for width, height in VIEWPORTS:
        with admin_page(daphne.url, "olivia", PASSWORD, width=width, height=height) as page:
            for name, path in pages.items():
                page.goto(f"{daphne.url}{path}")
                page.screenshot(path=str(ARTIFACTS / f"console-{name}-{width}.png"), full_page=True)
                assert page.evaluate(WIDTH) <= width, (name, width, page.evaluate(WIDTH))
            page.goto(f"{daphne.url}{pages['tenant']}")
            heights = page.evaluate(LABEL_HEIGHTS)
            assert len(heights) == 12 and max(heights) == min(heights), heights
            # the largest queues' DIDs are shortened on screen, whole in their title
            cell = page.locator("#figures-didcomm .did-short")
            assert "…" in cell.inner_text() and len(cell.get_attribute("title")) > 600
            assert page.locator("#live-connections tbody tr").count() == 2


def test_a_tenant_made_in_the_browser_opens_with_its_checklist_and_invitations_on_the_first_screen(daphne, olivia):
    with admin_page(daphne.url, "olivia", PASSWORD, width=1280, height=800) as page:
        page.goto(f"{daphne.url}/admin/tenants/tenant/add/")
        page.fill("input[name=slug]", "initech")
        page.fill("input[name=domain]", "mediator.initech.example")
        page.click("button[name=_save]")
        page.wait_for_url(re.compile(r".*/admin/tenants/tenant/\d+/change/$"))
        page.screenshot(path=str(ARTIFACTS / "console-new-tenant-1280.png"))
        assert page.locator("#domain-checklist").is_visible()
        copy = page.locator("button[data-copy-target=didcomm-oob-url]").bounding_box()
        assert copy is not None and copy["y"] + copy["height"] <= 800, copy
        qr = page.get_by_role("img", name="QR code of the DIDComm v2 invitation of initech")
        assert qr.count() == 1
        assert page.get_by_role("img", name="QR code of the DIDComm v1 invitation of initech").count() == 1
        assert page.evaluate(WIDTH) <= 1280
