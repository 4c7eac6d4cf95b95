"""The console shows DIDComm beside Decentrl: a tenant's page (both queues, live connections of
both protocols, the DNS/TLS checklist and the invitations first), and the tenant list, the overview
and the usage dashboard count both protocols' queues."""

from __future__ import annotations

import html as html_lib
import re
import time

import pytest

from apps.didcomm.models import Mediation, presence_key
from apps.messaging.models import PendingEvent
from apps.messaging.presence import lease_s, socket_entered, socket_left
from apps.tenants.models import Tenant
from tests.console.test_admin import ADD, _add_form, change_url
from tests.support.didcomm_agent import CM2, forward_for, routed_did


@pytest.fixture
def grant(didcomm_a, wallet):
    """A granted wallet of tenant A with one recipient DID and 3 queued forwards."""
    med = didcomm_a.mediator_did
    didcomm_a.send(wallet, wallet.message(CM2 + "mediate-request"))
    rcpt = routed_did(med)
    didcomm_a.send(
        wallet, wallet.message(CM2 + "keylist-update", {"updates": [{"recipient_did": rcpt.did, "action": "add"}]})
    )
    for _ in range(3):
        assert didcomm_a.post(forward_for(rcpt, med)).status_code == 202
    return Mediation.objects.get(), rcpt


def _section(page: str, start: str, end: str) -> str:
    return page[page.index(start) : page.index(end, page.index(start))]


def test_the_tenant_page_shows_the_queues_of_both_protocols(admin_client, grant, tenant_a, alice, bob):
    mediation, rcpt = grant
    for i in range(2):
        PendingEvent.objects.create(tenant=tenant_a, sender_did=bob.did, recipient_did=alice.did, payload=f"x{i}")
    page = admin_client.get(change_url(tenant_a)).content.decode()
    decentrl = _section(page, 'id="figures-decentrl"', "</table>")
    assert "Pending events</th><td data-figure>2<" in decentrl
    didcomm = _section(page, 'id="figures-didcomm"', "</table>")
    cells = dict(re.findall(r'<th scope="row">(.*?)</th><td data-figure>(.*?)</td>', didcomm))
    assert (cells["Granted mediation clients"], cells["Recipient DIDs"], cells["Queued messages"]) == ("1", "1", "3")
    # The largest DIDComm queue names its recipient shortened, the full DID in its title and copy button.
    largest = html_lib.unescape(cells["Largest recipient queue"])
    assert largest.startswith('<span class="queue-cell">3 <span class="did-cell">')
    assert f'title="{rcpt.did}"' in largest and f'data-copy="{rcpt.did}"' in largest
    assert f">{rcpt.did}<" not in html_lib.unescape(page)


def test_the_tenant_page_counts_and_lists_open_sockets_of_both_protocols(
    admin_client, grant, tenant_a, tenant_b, alice, carol
):
    mediation, _ = grant
    now = int(time.time())
    for _ in range(2):
        socket_entered(tenant_id=tenant_a.pk, did=alice.did, now_s=now)  # two /ws sockets of alice
    socket_entered(tenant_id=tenant_a.pk, did=presence_key(mediation.client_hash), now_s=now)  # live mode
    socket_entered(tenant_id=tenant_a.pk, did="did:example:closed", now_s=now)
    socket_left(tenant_id=tenant_a.pk, did="did:example:closed")
    socket_entered(tenant_id=tenant_a.pk, did="did:example:stale", now_s=now - lease_s() - 5)  # lease over
    socket_entered(tenant_id=tenant_b.pk, did=carol.did, now_s=now)  # another tenant's
    page = html_lib.unescape(admin_client.get(change_url(tenant_a)).content.decode())
    counts = _section(page, 'id="live-counts"', "</p>")
    assert re.sub(r"<[^>]+>", "", counts).endswith(
        "Decentrl /ws: 2 socket(s) for 1 DID(s) · DIDComm /didcomm/ws in live mode: 1 socket(s) for 1 client(s)"
    )
    rows = re.findall(r"<tr><td>(Decentrl|DIDComm)</td><td>(.*?)</td><td class=\"num\">(\d+)</td>", page)
    # same lease: ordered by key, and "did:…" sorts before "didcomm:…"
    assert [(p, n) for p, _, n in rows] == [("Decentrl", "2"), ("DIDComm", "1")]
    dids = {p: cell for p, cell, _ in rows}
    assert f'data-copy="{alice.did}"' in dids["Decentrl"] and f'data-copy="{mediation.client_did}"' in dids["DIDComm"]
    for absent in ("did:example:closed", "did:example:stale", carol.did):
        assert absent not in page


def test_the_tenant_page_says_when_no_socket_is_open(admin_client, tenant_a):
    page = admin_client.get(change_url(tenant_a)).content.decode()
    assert '<strong data-live="decentrl">0</strong>' in page and '<strong data-live="didcomm">0</strong>' in page
    assert "No open socket." in page


def test_the_list_the_overview_and_the_dashboard_count_didcomm_queues(admin_client, grant, tenant_a, tenant_b):
    resp = admin_client.get("/admin/tenants/tenant/")
    depths = {t.slug: (t.stat_pending, t.stat_didcomm_queued) for t in resp.context["cl"].result_list}
    assert depths == {"tenant-a": (0, 3), "tenant-b": (0, 0)}
    assert "DIDComm queue" in resp.content.decode()

    overview = admin_client.get("/admin/").content.decode()
    queues = _section(overview, 'id="overview-queues"', "</section>")
    assert re.findall(r">(tenant-[ab])</a></td><td class=\"num\" data-queue=\"decentrl\">(\d+)</td>"
                      r"<td class=\"num\" data-queue=\"didcomm\">(\d+)<", queues) == [("tenant-a", "0", "3")]  # fmt: skip

    dashboard = admin_client.get("/dashboard/").content.decode()
    live = re.findall(r'>(tenant-[ab])</a>.*?data-queue="decentrl">(\d+)<.*?data-queue="didcomm">(\d+)<', dashboard)
    assert sorted(live) == [("tenant-a", "0", "3"), ("tenant-b", "0", "0")]


def test_a_new_tenant_opens_on_its_page_with_the_checklist_and_invitations_first(admin_client):
    resp = admin_client.post(ADD, _add_form())
    tenant_url = change_url(Tenant.objects.get(slug="acme"))
    assert (resp.status_code, resp["Location"]) == (302, tenant_url)
    page = html_lib.unescape(admin_client.get(tenant_url).content.decode())
    assert "Added acme. Next: its DNS and TLS checklist and its invitations, at the top of this page." in page
    order = [page.index(marker) for marker in ('id="domain-checklist"', 'id="didcomm-oob-url"', 'name="name"')]
    assert order == sorted(order)
    checklist = re.sub(r"<[^>]+>", "", _section(page, 'id="domain-checklist"', "</ol>"))
    for text in (
        "DNS: mediator.acme.test, acme-mediator.test, mediator.acme.test:8443 resolve to this deployment",
        "TLS: not needed while MEDIATOR_PUBLIC_SCHEME is http (development)",
        "DID document: http://mediator.acme.test/.well-known/did.json answers with did:web:mediator.acme.test",
        "Health: http://mediator.acme.test/health answers 200.",
    ):
        assert text in checklist, text


def test_the_checklist_asks_for_a_certificate_when_served_over_https(admin_client, tenant_a, settings):
    settings.MEDIATOR_PUBLIC_SCHEME = "https"
    page = html_lib.unescape(admin_client.get(change_url(tenant_a)).content.decode())
    checklist = re.sub(r"<[^>]+>", "", _section(page, 'id="domain-checklist"', "</ol>"))
    assert (
        "TLS: a certificate on whatever terminates TLS in front of this deployment covers a.mediator.test." in checklist
    )
    assert "https://a.mediator.test/.well-known/did.json" in checklist
