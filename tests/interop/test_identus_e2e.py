"""Issue 15 §6: the Identus SDK 7.0.0 (npm; nobody here wrote it) as the recipient of a real Daphne server.

Identus gets mediation from the OOB invitation, adds its peer DID, goes offline; senders forward three
messages through POST /didcomm (202 each, stored), two built by didcomm-node (npm) and one by SICPA's
Python `didcomm` in its own venv; Identus comes back, picks
them up with Pickup 3.0 and acknowledges (the queue is empty afterwards); Identus goes live and a fourth
forward is pushed over /didcomm/ws. Install with scripts/ensure_extra_identus.sh, ensure_extra_didcomm_node.sh
and ensure_extra_sicpa.sh (all run by scripts/ensure_services.sh).

Every run records the exact bytes on the wire (and the test keys of all parties) in
test-artifacts/identus/identus_<version>.json; a copy of one such recording is
tests/interop/fixtures/identus/, replayed without Node by test_identus_fixtures.py.
"""

from __future__ import annotations

import json
import time
import uuid

import httpx
import pytest

from apps.didcomm.models import Mediation, MediatorIdentity, QueuedMessage, RecipientKey
from tests.interop import didcomm_node, identus
from tests.interop.didcomm_node import Party
from tests.interop.identus import IdentusRecipient
from tests.support.servers import ROOT, free_port, start_daphne

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

BASIC = "https://didcomm.org/basicmessage/2.0/message"
ENCRYPTED = "application/didcomm-encrypted+json"
ARTIFACT = ROOT / "test-artifacts" / "identus" / f"identus_{identus.VERSION}.json"


@pytest.fixture(scope="module", autouse=True)
def _installed():
    assert identus.installed_version() == identus.VERSION, "run scripts/ensure_extra_identus.sh"
    assert didcomm_node.installed_version() == didcomm_node.VERSION, "run scripts/ensure_extra_didcomm_node.sh"
    assert didcomm_node.SICPA_PYTHON.exists(), "run scripts/ensure_extra_sicpa.sh"


@pytest.fixture
def server(transactional_db, tmp_path):
    from apps.tenants.services import tenant_create

    port = free_port()
    host = f"127.0.0.1:{port}"
    tenant = tenant_create(slug="identus", domain=host)  # public URL http://127.0.0.1:<port>
    daphne = start_daphne(tmp_path, port=port, wait_host=host)
    yield tenant, daphne
    daphne.stop()


@pytest.fixture
def recipient(server):
    tenant, daphne = server
    wallet = IdentusRecipient(daphne.url + "/didcomm/invitation?form=url", record=True)
    yield wallet
    wallet.close()


def basic_message(sender: Party, to: str, text: str) -> dict:
    return {
        "id": str(uuid.uuid4()),
        "typ": "application/didcomm-plain+json",
        "type": BASIC,
        "from": sender.did,
        "to": [to],
        "created_time": int(time.time()),
        "body": {"content": text},
    }


def queued(tenant, recipient_did: str) -> int:
    return QueuedMessage.objects.filter(tenant=tenant, recipient__recipient_did=recipient_did).count()


def send_forward(daphne, recipient: IdentusRecipient, body: str, content_type: str) -> None:
    """POST a forward as the sender; it goes into the transcript in order."""
    recipient.note({"event": "sender-forward", "content_type": content_type, "body": body})
    resp = httpx.post(daphne.url + "/didcomm", content=body, headers={"Content-Type": content_type})
    assert (resp.status_code, resp.content) == (202, b"")


def save_transcript(tenant, recipient: IdentusRecipient, senders: dict[str, Party]) -> None:
    identity = MediatorIdentity.objects.get(tenant=tenant, retired_at__isnull=True)
    mediator = Party(identity.did, identity.agreement_key, identity.authentication_key)
    data = identus.transcript(recipient=recipient, mediator=mediator, senders=senders, public_url=tenant.public_url)
    ARTIFACT.parent.mkdir(parents=True, exist_ok=True)
    ARTIFACT.write_text(json.dumps(data, indent=1) + "\n")


def test_identus_gets_mediation_picks_up_what_arrived_offline_then_receives_live(server, recipient):
    tenant, daphne = server
    mediator_did = httpx.get(daphne.url + "/didcomm/invitation").json()["from"]
    sender, sicpa_sender = Party.create(), Party.create()

    mediated = recipient.expect("mediated")
    assert mediated["mediator_did"] == mediator_did
    assert mediated["routing_did"] == mediator_did  # CM 2.0: the grant's routing_did, a string
    host_did = mediated["host_did"]
    assert Mediation.objects.get(tenant=tenant, client_did=host_did).state == Mediation.State.GRANTED
    peer_did = recipient.expect("ready")["peer_did"]
    # The SDK awaited its keylist-update before reporting: the DID is registered to its grant.
    assert RecipientKey.objects.get(tenant=tenant, recipient_did=peer_did).mediation.client_did == host_did

    recipient.command("offline")
    recipient.expect("offline")
    # Two senders nobody here wrote: didcomm-node (npm) and SICPA didcomm (Python, its own venv).
    builders = [
        (sender, didcomm_node.forward_via, "A256gcmEcdhEsA256kw"),
        (sicpa_sender, didcomm_node.sicpa_forward_via, "Xc20pEcdhEsA256kw"),
        (sender, didcomm_node.forward_via, "A256cbcHs512EcdhEsA256kw"),
    ]
    sent = []
    for n, (who, build, enc) in enumerate(builders, 1):
        msg = basic_message(who, peer_did, f"offline {n}")
        send_forward(daphne, recipient, build(mediator_did, who, peer_did, msg, enc_alg_anon=enc), ENCRYPTED)
        sent.append(msg)
    assert queued(tenant, peer_did) == 3

    recipient.command("pickup")
    recipient.expect("online")
    received = [recipient.expect("message") for _ in sent]
    assert [(m["id"], m["piuri"], m["from"], m["body"]) for m in received] == [
        (msg["id"], BASIC, msg["from"], msg["body"]) for msg in sent
    ]
    # The SDK emits only after its messages-received was answered: nothing is left queued.
    assert queued(tenant, peer_did) == 0

    recipient.command("live")
    assert recipient.expect("online") == {"event": "online", "live": True}
    recipient.expect("live")  # the mediator answered live-delivery-change on the socket
    live = basic_message(sender, peer_did, "live 4")
    body = didcomm_node.forward_via(mediator_did, sender, peer_did, live, enc_alg_anon="Xc20pEcdhEsA256kw")
    send_forward(daphne, recipient, body, "application/json")
    pushed = recipient.expect("message", timeout=15)
    assert (pushed["id"], pushed["from"], pushed["body"]) == (live["id"], sender.did, {"content": "live 4"})
    assert queued(tenant, peer_did) == 0  # acked over HTTP after the push
    assert len(recipient.of_kind("message")) == 4
    assert recipient.of_kind("socket-closed") == []
    save_transcript(tenant, recipient, {"sender": sender, "sicpa_sender": sicpa_sender})
