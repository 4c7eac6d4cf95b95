"""DID Exchange 1.0 as responder (RFC 0023), beside 1.1: the request ACA-Py 1.7 sends for 1.0 (an
unqualified base58 DID with a signed legacy `did_doc~attach`, `did:sov:` ids and an `IndyAgent`
service with base58 keys), a 1.0 request with a did:peer:4 and no attachment, the 1.0 response
(a signed `did_doc~attach`, no `did_rotate~attach`), mediation over such a connection, and every
refusal of an attached document."""

from __future__ import annotations

import base64
import json
import uuid

import pytest

from apps.didcomm.core.message_v1 import signed_text_attachment, verify_attachment
from apps.didcomm.core.resolver import resolve_did
from apps.didcomm.models import Connection
from apps.wire.encoding import b58encode
from tests.conftest import HOST_A
from tests.support.didcomm_agent_v1 import CM1, AgentV1, forward_to

from .test_v1 import V1Door, _problem

DIDX10 = "https://didcomm.org/didexchange/1.0/"


@pytest.fixture
def door(client, tenant_a) -> V1Door:
    return V1Door(HOST_A)


def legacy_doc(agent: AgentV1, did: str, endpoint: str, routing_keys: list[str] | None = None) -> dict:
    """ACA-Py 1.7's `DIDDoc.serialize()` for an unqualified DID (printed from acapy_agent 1.7.0)."""
    sov = "did:sov:" + did
    service = {
        "id": sov + ";indy",
        "type": "IndyAgent",
        "priority": 0,
        "recipientKeys": [agent.verkey],
        "serviceEndpoint": endpoint,
    }
    if routing_keys:
        service["routingKeys"] = routing_keys
    return {
        "@context": "https://w3id.org/did/v1",
        "id": sov,
        "publicKey": [
            {
                "id": sov + "#1",
                "type": "Ed25519VerificationKey2018",
                "controller": sov,
                "publicKeyBase58": agent.verkey,
            }
        ],
        "authentication": [{"type": "Ed25519SignatureAuthentication2018", "publicKey": sov + "#1"}],
        "service": [service],
    }


def unqualified(agent: AgentV1) -> str:
    return b58encode(agent.key.public.raw[:16])  # how ACA-Py (and Indy) derive a DID from its verkey


def request_10(agent: AgentV1, invitation: dict, *, did: str, doc: dict | None, signer=None, **kw) -> dict:
    """`didexchange/1.0/request` as ACA-Py 1.7 sends it for 1.0 (`_legacy_did_with_attached_doc`)."""
    msg = agent.message(DIDX10 + "request", label="legacy agent", did=did, **kw)
    if doc is not None:
        attach = signed_text_attachment(str(uuid.uuid4()), json.dumps(doc), signer or agent.key)
        attach["mime-type"] = "application/json"
        msg["did_doc~attach"] = attach
    msg["~thread"] = {"thid": msg["@id"], "pthid": invitation["@id"]}
    return msg


def test_did_exchange_1_0_with_an_unqualified_did_and_a_legacy_did_doc_then_mediation(door):
    agent, routed = AgentV1(), AgentV1()
    did = unqualified(agent)
    request = request_10(agent, door.invitation, did=did, doc=legacy_doc(agent, did, "https://agent.example/in"))
    status, response, _ = door.send(agent, request)
    assert status == 200, response
    assert response["@type"] == DIDX10 + "response"
    assert response["~thread"] == {"thid": request["@id"], "pthid": door.invitation["@id"]}
    assert "did_rotate~attach" not in response  # 1.1 only
    attach = response["did_doc~attach"]
    assert attach["mime-type"] == "application/json"
    content, signer = verify_attachment(attach)
    assert "did:key:" + signer.multibase == door.key  # signed by the invitation key
    assert json.loads(content) == resolve_did(response["did"]).json
    assert json.loads(base64.b64decode(attach["data"]["base64"]))["id"] == response["did"]
    conn = Connection.objects.get()
    assert (conn.their_did, conn.their_verkey, conn.endpoint, conn.protocol, conn.state) == (
        did,
        agent.verkey,
        "https://agent.example/in",
        "didexchange/1.0",
        "response",
    )
    _, grant, _ = door.send(agent, agent.message(CM1 + "mediate-request"))
    assert grant["@type"] == CM1 + "mediate-grant" and grant["routing_keys"] == [door.key]
    update = agent.message(CM1 + "keylist-update", updates=[{"recipient_key": routed.verkey, "action": "add"}])
    assert door.send(agent, update)[1]["updated"] == [
        {"recipient_key": routed.verkey, "action": "add", "result": "success"}
    ]
    assert door.post(forward_to(routed.did_key, door.key, {"protected": "x"})).status_code == 200


def test_a_legacy_did_doc_with_routing_keys_and_a_did_sov_did_are_accepted(door):
    agent, mediator = AgentV1(), AgentV1()
    did = unqualified(agent)
    doc = legacy_doc(agent, did, "https://other-mediator.example", routing_keys=[mediator.verkey])
    status, response, _ = door.send(agent, request_10(agent, door.invitation, did="did:sov:" + did, doc=doc))
    assert status == 200 and response["@type"] == DIDX10 + "response"
    conn = Connection.objects.get()
    assert (conn.their_did, conn.endpoint, conn.routing_keys) == (
        "did:sov:" + did,
        "https://other-mediator.example",
        [mediator.verkey],
    )


def test_did_exchange_1_0_with_a_did_peer_4_and_no_attachment(door):
    agent = AgentV1()
    status, response, _ = door.send(agent, request_10(agent, door.invitation, did=agent.did, doc=None))
    assert status == 200 and response["@type"] == DIDX10 + "response"
    assert "did_doc~attach" in response and "did_rotate~attach" not in response
    assert Connection.objects.get().their_did == agent.did


def test_refusals_of_unqualified_dids_and_attached_documents(door):
    agent, other = AgentV1(), AgentV1()
    did = unqualified(agent)
    doc = legacy_doc(agent, did, "https://agent.example/in")

    def refused(msg: dict) -> tuple[int, dict]:
        return _problem(door.post(agent.pack(msg, door.key)), agent)

    assert refused(request_10(agent, door.invitation, did=did, doc=None)) == (
        400,
        {"code": "e.p.did.unresolvable", "en": "an unqualified did needs its did_doc~attach"},
    )
    assert refused(request_10(agent, door.invitation, did="not a did!", doc=doc)) == (
        400,
        {"code": "e.p.msg.invalid-body", "en": "did must be a DID or an unqualified base58 DID"},
    )
    assert refused(request_10(agent, door.invitation, did=did, doc=doc, signer=other.key)) == (
        400,
        {"code": "e.p.trust.sender-mismatch", "en": "did_doc~attach must be signed by the envelope's sender key"},
    )
    tampered = request_10(agent, door.invitation, did=did, doc=doc)
    tampered["did_doc~attach"]["data"]["base64"] = base64.b64encode(
        json.dumps({**doc, "service": []}).encode()
    ).decode()
    assert refused(tampered) == (
        400,
        {"code": "e.p.trust.sender-mismatch", "en": "did_doc~attach's signature does not verify"},
    )
    unsigned = request_10(agent, door.invitation, did=did, doc=doc)
    del unsigned["did_doc~attach"]["data"]["jws"]
    assert refused(unsigned) == (
        400,
        {"code": "e.p.msg.invalid-body", "en": "did_doc~attach must carry data.base64 and a data.jws signature"},
    )
    assert refused(request_10(agent, door.invitation, did=unqualified(other), doc=doc)) == (
        400,
        {"code": "e.p.msg.invalid-body", "en": "the attached DID document's id is not did"},
    )
    assert refused(request_10(agent, door.invitation, did=did, doc={"id": "did:sov:" + did, "publicKey": "x"})) == (
        400,
        {"code": "e.p.msg.invalid-body", "en": "did_doc~attach is not a DID document"},
    )
    theirs = legacy_doc(other, did, "https://agent.example/in")  # a document of someone else's key
    assert refused(request_10(agent, door.invitation, did=did, doc=theirs)) == (
        400,
        {"code": "e.p.trust.sender-mismatch", "en": "the envelope's sender key is not a key of did"},
    )
    bad = request_10(agent, door.invitation, did=did, doc=doc)
    bad["did_doc~attach"] = "x"
    assert refused(bad) == (400, {"code": "e.p.msg.invalid-body", "en": "did_doc~attach must be a signed attachment"})
    assert not Connection.objects.exists()
