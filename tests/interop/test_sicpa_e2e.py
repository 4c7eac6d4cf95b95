"""A stock SICPA client (`didcomm` 0.3.2 + `peerdid` 0.5.2, PyPI, nobody here wrote it) against a real Daphne server.

Older did:peer:2 libraries parse one service segment in the string form and name keys `#6LS…` (the first
8 characters of the fingerprint). The client takes the mediator's legacy DID from
`GET /didcomm/invitation?did=legacy`, gets mediation (Coordinate Mediation 2.0) and registers a routed DID;
a second stock client forwards to that DID exactly as its DID document says (pack_encrypted wraps it
in a routing/2.0 forward), and the recipient picks it up (Pickup 3.0 status and delivery) and acks it
(messages-received). Install with scripts/ensure_extra_sicpa.sh (run by scripts/ensure_services.sh).

Every run records the exact bytes on the wire (and the test keys of all parties) in
test-artifacts/sicpa/sicpa_<versions>.json; a copy of one such recording is
tests/interop/fixtures/sicpa/, replayed in-process by test_sicpa_fixtures.py.
"""

from __future__ import annotations

import json

import pytest

from apps.didcomm.models import Mediation, MediatorIdentity, QueuedMessage, RecipientKey
from apps.tenants.services import tenant_create
from tests.interop import sicpa_stock
from tests.interop.didcomm_node import Party
from tests.interop.sicpa_stock import StockClient
from tests.support.servers import ROOT, free_port, start_daphne

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

CM2 = "https://didcomm.org/coordinate-mediation/2.0/"
PICKUP = "https://didcomm.org/messagepickup/3.0/"
NAME = f"sicpa_{sicpa_stock.VERSIONS['didcomm']}_peerdid_{sicpa_stock.VERSIONS['peerdid']}"
ARTIFACT = ROOT / "test-artifacts" / "sicpa" / f"{NAME}.json"


@pytest.fixture(scope="module", autouse=True)
def _installed():
    assert sicpa_stock.installed_versions() == sicpa_stock.VERSIONS, "run scripts/ensure_extra_sicpa.sh"


@pytest.fixture
def server(transactional_db, tmp_path):
    port = free_port()
    host = f"127.0.0.1:{port}"
    tenant = tenant_create(slug="sicpa", domain=host)  # public URL http://127.0.0.1:<port>
    daphne = start_daphne(tmp_path, port=port, wait_host=host)
    yield tenant, daphne
    daphne.stop()


@pytest.fixture
def client():
    stock = StockClient()
    yield stock
    stock.close()


def queued(tenant, recipient_did: str) -> int:
    return QueuedMessage.objects.filter(tenant=tenant, recipient__recipient_did=recipient_did).count()


def test_a_stock_sicpa_client_gets_mediation_and_picks_up_and_acks_a_stock_forward(server, client):
    tenant, daphne = server
    mediated = client.call("mediate", invitation_url=daphne.url + "/didcomm/invitation?did=legacy")
    identity = MediatorIdentity.objects.get(tenant=tenant, retired_at__isnull=True)
    # It could resolve only the legacy DID, and the grant names the DID it addressed.
    assert mediated["mediator_did"] == mediated["routing_did"] == identity.legacy_did != identity.did
    host = mediated["host_did"]
    assert Mediation.objects.get(tenant=tenant, client_did=host).state == Mediation.State.GRANTED

    registered = client.call("register")
    peer = registered["peer_did"]
    assert registered["update_response"]["type"] == CM2 + "keylist-update-response"
    assert registered["update_response"]["body"]["updated"] == [
        {"recipient_did": peer, "action": "add", "result": "success"}
    ]
    assert [k["recipient_did"] for k in registered["keylist"]["body"]["keys"]] == [peer]
    assert RecipientKey.objects.get(tenant=tenant, recipient_did=peer).mediation.client_did == host

    sent = client.call("send", to=peer, text="from a stock SICPA sender")
    # pack_encrypted found our endpoint and routing key in the peer DID and wrapped a forward: 202, stored.
    assert (sent["endpoint"], sent["status"], sent["body"]) == (identity.http_uri, 202, "")
    assert queued(tenant, peer) == 1

    picked = client.call("pickup")
    assert picked["status_before"]["body"]["message_count"] == 1
    assert picked["delivery_type"] == PICKUP + "delivery"
    [message] = picked["messages"]
    assert (message["id"], message["from"], message["body"]) == (
        sent["id"],
        sent["sender_did"],
        {"content": "from a stock SICPA sender"},
    )
    assert picked["status_after"]["body"]["message_count"] == 0
    assert queued(tenant, peer) == 0

    mediator = Party(identity.legacy_did, identity.agreement_key, identity.authentication_key)
    data = sicpa_stock.transcript(client=client, mediator=mediator, public_url=tenant.public_url)
    ARTIFACT.parent.mkdir(parents=True, exist_ok=True)
    ARTIFACT.write_text(json.dumps(data, indent=1) + "\n")
