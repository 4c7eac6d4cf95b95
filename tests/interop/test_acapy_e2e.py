"""Two unmodified ACA-Py 1.7.0 agents (their own Python 3.13 venv) against a real mediator (Daphne and a
Celery worker for outbound POSTs): the recipient gets mediation from its `--mediator-invitation`, a sender
connects to it through an invitation that routes via us, and the message arrives; the keylist is checked
through ACA-Py's admin API with pagination, and a removed key stops routing.

ACA-Py comes from scripts/ensure_extra_acapy.sh (run by scripts/ensure_services.sh and again here). With no
Python >= 3.13 on the machine the test fails and says so."""

from __future__ import annotations

import re

import pytest

from apps.didcomm.core.did_key import did_key_to_verkey
from apps.didcomm.models import Connection, Mediation, Outbound, RecipientKey
from apps.usage.models import CommandMeter
from tests.interop import acapy

from .recorded import open_recorded
from .v1_server import V1Mediator

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

DIDX_11 = "https://didcomm.org/didexchange/1.1"


@pytest.fixture
def mediator(transactional_db, tmp_path):
    m = V1Mediator(tmp_path)
    yield m
    m.close()


@pytest.fixture
def agents(mediator, tmp_path):
    """The recipient (mediated by us) and the sender (its own endpoint), started side by side."""
    acapy.ensure_installed()  # fails here, loudly, without a Python >= 3.13
    started: list[acapy.AcaPyAgent] = []
    try:
        started.append(acapy.start_agent(tmp_path, "recipient", mediator_invitation=mediator.invitation_url))
        started.append(acapy.start_agent(tmp_path, "sender"))
        yield started
    finally:
        for agent in started:
            agent.stop()


def default_mediation(agent: acapy.AcaPyAgent) -> dict | None:
    resp = agent.admin.get("/mediation/default-mediator")
    record = resp.json() if resp.status_code == 200 else None
    return record if record and record.get("state") == "granted" else None


def keylists_received(agent: acapy.AcaPyAgent) -> list[list[str]]:
    """The keys of each `keylist` ACA-Py received, in order (its keylist handler only logs them)."""
    lines = [line for line in agent.log().splitlines() if "Keylist received:" in line]
    return [re.findall(r"recipient_key='([^']+)'", line) for line in lines]


def _invitation_keys(opened) -> set[str]:
    """Every key the recipient ever added (its invitation key included)."""
    return {
        u["recipient_key"]
        for o in opened
        if o.type.endswith("keylist-update")
        for u in o.message["updates"]
        if u["action"] == "add"
    }


def connection_state(agent: acapy.AcaPyAgent, connection_id: str) -> str:
    return agent.get(f"/connections/{connection_id}")["state"]


def test_acapy_gets_mediation_registers_keys_and_receives_a_message_routed_through_us(mediator, agents):
    recipient, sender = agents

    # 1. mediation from `--mediator-invitation`: granted with our endpoint and routing key
    record = recipient.wait_for("mediation granted", lambda: default_mediation(recipient), timeout=30)
    identity_verkey = mediator.invitation["services"][0]["recipientKeys"][0].split("#")[0]
    assert record["endpoint"] == mediator.endpoint
    assert [k.split("#")[0] for k in record["routing_keys"]] == [identity_verkey]
    conn = Connection.objects.get(tenant=mediator.tenant)
    assert conn.endpoint == recipient.endpoint
    assert Mediation.objects.get(connection=conn).state == "granted"

    # 2. the recipient's invitation routes via us; the sender connects and sends a basic message
    invitation = recipient.post(
        "/out-of-band/create-invitation", {"handshake_protocols": [DIDX_11]}, auto_accept="true"
    )["invitation"]
    [service] = invitation["services"]
    assert (service["serviceEndpoint"], [k.split("#")[0] for k in service["routingKeys"]]) == (
        mediator.endpoint,
        [identity_verkey],
    )
    sender_conn = sender.post("/out-of-band/receive-invitation", invitation, auto_accept="true")["connection_id"]
    sender.wait_for("connection", lambda: connection_state(sender, sender_conn) in ("active", "completed"))
    sender.post(f"/connections/{sender_conn}/send-message", {"content": "hello through the mediator"})
    [message] = recipient.wait_for("basic message", lambda: recipient.webhooks.of("basicmessages"), timeout=20)
    assert message["content"] == "hello through the mediator"

    # 3. the keylist, as ACA-Py registered it and as it reads it back a page at a time
    mediation_id = record["mediation_id"]
    client_keys = {r["recipient_key"] for r in recipient.get("/mediation/keylists", role="client")["results"]}
    ours = {r.recipient_did for r in RecipientKey.objects.filter(mediation__connection=conn)}
    assert {did_key_to_verkey(k) for k in client_keys} == {did_key_to_verkey(k) for k in ours}
    # one connection: ACA-Py keeps its connection key and has removed the invitation key
    [client_key] = client_keys
    pages = []
    for offset in (0, 1):
        before = len(keylists_received(recipient))
        recipient.post(
            f"/mediation/keylists/{mediation_id}/send-keylist-query",
            {"filter": {}},
            paginate_limit="1",
            paginate_offset=str(offset),
        )
        recipient.wait_for("keylist", lambda b=before: len(keylists_received(recipient)) > b, timeout=15)
        pages.append(keylists_received(recipient)[-1])
    assert pages == [[client_key], []]

    # 4. keys the recipient removes stop routing: the sender's next message is not delivered
    recipient.post(
        f"/mediation/keylists/{mediation_id}/send-keylist-update",
        {"updates": [{"recipient_key": k, "action": "remove"} for k in sorted(client_keys)]},
    )
    recipient.wait_for(
        "keys removed", lambda: not RecipientKey.objects.filter(mediation__connection=conn).exists(), timeout=15
    )
    recipient.wait_for(
        "client keylist emptied", lambda: not recipient.get("/mediation/keylists", role="client")["results"]
    )
    # ACA-Py sends in the background: wait until the mediator has answered its forward (metered), then
    # nothing may have been queued for it. Outbound rows of earlier answers may leave meanwhile (the
    # worker delivers them), so the check is on rows made after the send, not on a count.
    forwards = CommandMeter.objects.filter(tenant=mediator.tenant, command_type="routing/1.0/forward")
    forwards_before = forwards.count()
    last_outbound = Outbound.objects.filter(tenant=mediator.tenant).order_by("-id").values_list("id", flat=True).first()
    sender.post(f"/connections/{sender_conn}/send-message", {"content": "after removal"})
    recipient.wait_for("the forward answered", lambda: forwards.count() > forwards_before, timeout=20)
    assert not Outbound.objects.filter(tenant=mediator.tenant, id__gt=last_outbound or 0).exists()
    assert [m["content"] for m in recipient.webhooks.of("basicmessages")] == ["hello through the mediator"]
    # 5. what the two agents sent us, recorded (MEDIATOR_RECORD_FIXTURES=1 writes the fixture)
    opened = open_recorded(mediator.record("acapy_1.7.0.json", agent="ACA-Py 1.7.0"))
    assert opened[0].type == "didexchange/1.1/request"
    assert {o.type for o in opened} == {
        "didexchange/1.1/request",
        "didexchange/1.1/complete",
        "trust_ping/1.0/ping",
        "coordinate-mediation/1.0/mediate-request",
        "coordinate-mediation/1.0/keylist-update",
        "coordinate-mediation/1.0/keylist-query",
        "routing/1.0/forward",
    }
    forwards = [o for o in opened if o.type == "routing/1.0/forward"]
    assert all(o.sender_verkey is None for o in forwards)  # anoncrypt, to our routing key
    assert all(o.sender_verkey for o in opened if o not in forwards)  # authcrypt
    assert {o.message["to"] for o in forwards} <= {did_key_to_verkey(k) for k in client_keys} | {
        did_key_to_verkey(k) for k in _invitation_keys(opened)
    }
    assert [o.message["paginate"] for o in opened if o.type.endswith("keylist-query")] == [
        {"limit": 1, "offset": 0},
        {"limit": 1, "offset": 1},
    ]


def test_acapy_over_did_exchange_1_0_sends_its_unqualified_did_with_a_signed_doc_and_gets_mediation(mediator, tmp_path):
    """An agent that only speaks DID Exchange 1.0 (our invitation as it would see it, with 1.1 left out):
    ACA-Py then sends its legacy request (an unqualified DID and a signed `did_doc~attach`), accepts our
    1.0 response and gets mediation over that connection."""
    acapy.ensure_installed()
    agent = acapy.start_agent(tmp_path, "legacy")
    try:
        # Its start is over (the wallet upgrade re-saves every connection record): an invitation given
        # before could have its record saved back over the handshake's state (acapy.start_agent).
        assert acapy.STARTED_LINE in agent.log()
        invitation = {**mediator.invitation, "handshake_protocols": ["https://didcomm.org/didexchange/1.0"]}
        conn_id = agent.post("/out-of-band/receive-invitation", invitation, auto_accept="true")["connection_id"]
        try:
            agent.wait_for("connection", lambda: connection_state(agent, conn_id) in ("active", "completed"))
        except AssertionError as failed:  # what both sides saw, for a failure that did not reproduce
            state = connection_state(agent, conn_id)
            raise AssertionError(f"{failed}\nACA-Py's state: {state}\n{mediator.logs()}") from None
        assert agent.get(f"/connections/{conn_id}")["connection_protocol"] == "didexchange/1.0"
        requested = agent.post(f"/mediation/request/{conn_id}", {})
        agent.wait_for(
            "mediation granted",
            lambda: agent.get(f"/mediation/requests/{requested['mediation_id']}")["state"] == "granted",
            timeout=20,
        )
        conn = Connection.objects.get(tenant=mediator.tenant)
        assert conn.protocol == "didexchange/1.0" and not conn.their_did.startswith("did:")
        assert conn.endpoint == agent.endpoint
        assert Mediation.objects.get(connection=conn).state == "granted"
        opened = open_recorded(mediator.record("acapy_1.7.0_didexchange_1.0.json", agent="ACA-Py 1.7.0"))
        request = opened[0]
        assert request.type == "didexchange/1.0/request"
        assert request.message["did"] == conn.their_did and "did_rotate~attach" not in request.message
        assert request.message["did_doc~attach"]["mime-type"] == "application/json"
        assert "coordinate-mediation/1.0/mediate-request" in {o.type for o in opened}
    finally:
        agent.stop()
