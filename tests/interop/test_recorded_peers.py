"""What real ACA-Py 1.7.0 and Credo 0.6.3 agents sent to the mediator, recorded in an end-to-end run
(tests/interop/test_acapy_e2e.py and test_credo_e2e.py with MEDIATOR_RECORD_FIXTURES=1) with the mediator
keys that open it: every envelope opens, the shapes the notes describe hold, and replaying the whole
conversation byte for byte through POST /didcomm reaches the same state, without starting any agent."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from apps.didcomm.core.keys import X25519, PrivateKey
from apps.didcomm.identity import identity_current
from apps.didcomm.models import Connection, Mediation, MediatorIdentity, Outbound, QueuedMessage, RecipientKey
from apps.tenants.services import tenant_create
from tests.support.entry import Poster

from .recorded import mediator_key, open_recorded

HERE = Path(__file__).resolve().parent / "fixtures"
ACAPY = json.loads((HERE / "acapy_1.7.0.json").read_text())
CREDO = json.loads((HERE / "credo_0.6.3.json").read_text())
CREDO_PICKUP_10 = json.loads((HERE / "credo_0.6.3_pickup_1.0.json").read_text())
ACAPY_DIDX_10 = json.loads((HERE / "acapy_1.7.0_didexchange_1.0.json").read_text())
CREDO_IMPLICIT = json.loads((HERE / "credo_0.6.3_implicit.json").read_text())


@pytest.mark.parametrize("fixture", [ACAPY, CREDO, CREDO_IMPLICIT], ids=["acapy", "credo", "credo-implicit"])
def test_every_recorded_envelope_opens_with_the_recorded_mediator_key(fixture):
    opened = open_recorded(fixture)
    assert len(opened) == len(fixture["messages"])
    forwards = [o for o in opened if o.type == "routing/1.0/forward"]
    assert forwards and all(o.sender_verkey is None for o in forwards)
    assert all(o.sender_verkey for o in opened if o.type != "routing/1.0/forward")


def replay(fixture) -> list[int]:
    """A tenant at the recorded host with the recorded mediator keys; every recorded HTTP message POSTed in
    order, exactly as sent. Returns the statuses."""
    tenant = tenant_create(slug="replay", domain=fixture["host"])
    rec = fixture["identity"]
    identity = MediatorIdentity(tenant=tenant, did=rec["did"], http_uri=rec["http_uri"], ws_uri=rec["ws_uri"])
    identity.seal(
        authentication=mediator_key(fixture),
        agreement=PrivateKey.from_secret(X25519, bytes.fromhex(rec["agreement_secret"])),
    )
    identity.save()
    assert identity_current(tenant=tenant).pk == identity.pk
    statuses = []
    poster = Poster(fixture["host"])  # POST /didcomm: the production entry, in process
    for sent in fixture["messages"]:
        if sent["transport"] != "http":
            continue
        resp = poster.post("/didcomm", json.dumps(sent["envelope"]), sent["content_type"])
        statuses.append(resp.status_code)
    return statuses


@pytest.mark.django_db
def test_acapys_recorded_conversation_replays_to_a_granted_connection_with_its_keys_removed(client):
    types = [o.type for o in open_recorded(ACAPY)]
    statuses = replay(ACAPY)
    # the last forward names a key the recipient had removed just before: refused, as in the live run
    assert statuses == [200] * (len(types) - 1) + [400]
    assert types[-2:] == ["coordinate-mediation/1.0/keylist-update", "routing/1.0/forward"]
    [conn] = Connection.objects.all()
    assert conn.state == "completed" and conn.endpoint.startswith("http://127.0.0.1:")
    assert Mediation.objects.get(connection=conn).state == "granted"
    assert not RecipientKey.objects.exists()
    # ACA-Py never asks for a return route: every answer became an outbound POST (DIDX response, grant,
    # ping_response, three keylist-update-responses, two keylists)
    assert Outbound.objects.filter(queued__isnull=True).count() == 8


@pytest.mark.django_db
def test_credos_recorded_conversation_replays_with_every_answer_on_the_return_route(client):
    opened = [o for o in open_recorded(CREDO) if o.transport == "http"]
    statuses = replay(CREDO)
    assert statuses == [200] * len(opened)
    assert sorted(Connection.objects.values_list("state", "endpoint")) == [("completed", "")] * 2
    assert sorted(Mediation.objects.values_list("state", flat=True)) == ["granted"] * 2
    added = {u["recipient_key"] for o in opened if o.type.endswith("keylist-update") for u in o.message["updates"]}
    assert set(RecipientKey.objects.values_list("recipient_did", flat=True)) == added
    # every forward stored; the recorded messages-received name the original run's ids, so none is removed
    assert QueuedMessage.objects.count() == sum(o.type == "routing/1.0/forward" for o in opened)
    assert not Outbound.objects.exists()


@pytest.mark.django_db
def test_acapys_recorded_did_exchange_1_0_with_an_unqualified_did_replays_to_a_granted_connection(client):
    opened = open_recorded(ACAPY_DIDX_10)
    assert [o.type for o in opened] == [
        "didexchange/1.0/request",
        "didexchange/1.0/complete",
        "trust_ping/1.0/ping",
        "coordinate-mediation/1.0/mediate-request",
    ]
    request = opened[0].message
    doc = json.loads(base64.b64decode(request["did_doc~attach"]["data"]["base64"]))
    assert doc["id"] == "did:sov:" + request["did"] and doc["service"][0]["type"] == "IndyAgent"
    assert replay(ACAPY_DIDX_10) == [200] * 4
    [conn] = Connection.objects.all()
    assert (conn.their_did, conn.protocol, conn.state) == (request["did"], "didexchange/1.0", "completed")
    assert conn.endpoint == doc["service"][0]["serviceEndpoint"]
    assert Mediation.objects.get(connection=conn).state == "granted"
    # DIDX response, ping_response and grant, each an outbound POST to the agent's endpoint
    assert Outbound.objects.filter(queued__isnull=True).count() == 3


@pytest.mark.django_db
def test_credos_recorded_pickup_1_0_conversation_replays_with_the_batches_emptying_its_queue(client):
    """A Credo `PickUpV1` recipient (batch-pickup polling) and a Credo `PickUpV2` sender: replayed, every
    message is accepted, and the recipient's batches leave nothing queued for it (a batch has no ack);
    the sender's messages-received name the original run's ids, so its one message stays."""
    opened = open_recorded(CREDO_PICKUP_10)
    batches = [o for o in opened if o.type == "messagepickup/1.0/batch-pickup"]
    assert batches and {o.message["~transport"]["return_route"] for o in batches} == {"all"}
    assert {type(o.message["batch_size"]) for o in batches} == {int}
    assert replay(CREDO_PICKUP_10) == [200] * len(opened)
    batch_verkey = batches[0].sender_verkey
    assert {o.sender_verkey for o in batches} == {batch_verkey}
    recipient = Connection.objects.get(their_verkey=batch_verkey)
    assert not QueuedMessage.objects.filter(mediation__connection=recipient).exists()
    assert QueuedMessage.objects.exclude(mediation__connection=recipient).count() == 1


def test_credos_implicit_strategy_asks_for_return_routes_on_the_socket_and_never_for_live_delivery():
    """Credo's `Implicit` pickup (docs/didcomm.md "Implicit pickup"): on the socket, its mediate-request
    and a trust ping without a requested response, both `return_route: "all"`; never a
    live-delivery-change; each pushed `delivery` acked with messages-received."""
    opened = open_recorded(CREDO_IMPLICIT)
    on_socket = [o for o in opened if o.transport == "ws"]
    pings = [o for o in on_socket if o.type == "trust_ping/1.0/ping"]
    assert pings and all(o.message["response_requested"] is False for o in pings)
    assert {o.message["~transport"]["return_route"] for o in on_socket} == {"all"}
    assert not [o for o in opened if o.type.endswith("live-delivery-change")]
    assert [o for o in opened if o.type == "messagepickup/2.0/messages-received"]
