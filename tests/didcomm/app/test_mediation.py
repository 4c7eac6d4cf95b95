"""POST /didcomm: invitation, Coordinate Mediation 2.0 and 3.0, forward, Pickup 3.0 (in-process, real PostgreSQL)."""

from __future__ import annotations

import json

from apps.didcomm.core.resolver import resolve_did
from tests.support.didcomm_agent import CM2, CM3, PICKUP, forward_for, routed_did


def test_the_invitation_names_a_did_peer_2_with_http_then_ws_service(didcomm_a, tenant_a):
    inv = didcomm_a.invitation()
    assert inv["type"] == "https://didcomm.org/out-of-band/2.0/invitation"
    assert inv["body"] == {
        "goal_code": "request-mediate",
        "goal": "Request mediation",
        "label": "Tenant A",
        "accept": ["didcomm/v2"],
    }
    doc = resolve_did(inv["from"])
    assert [e.uri for e in doc.didcomm_endpoints()] == [
        "http://a.mediator.test/didcomm",
        "ws://a.mediator.test/didcomm/ws",
    ]
    assert [vm.key.crv for vm in doc.key_agreement] == ["X25519"]
    assert [vm.key.crv for vm in doc.authentication] == ["Ed25519"]
    assert didcomm_a.invitation() == inv  # stable


def test_cm2_grant_keylist_forward_pickup_and_ack(didcomm_a, wallet):
    med = didcomm_a.mediator_did
    status, grant, resp = didcomm_a.send(wallet, wallet.message(CM2 + "mediate-request"))
    assert status == 200 and resp["Content-Type"] == "application/didcomm-encrypted+json"
    assert grant["type"] == CM2 + "mediate-grant"
    assert grant["body"] == {"routing_did": med}
    assert grant["from"] == med and grant["to"] == [wallet.did]

    rcpt = routed_did(med)
    status, answer, _ = didcomm_a.send(
        wallet, wallet.message(CM2 + "keylist-update", {"updates": [{"recipient_did": rcpt.did, "action": "add"}]})
    )
    assert answer["type"] == CM2 + "keylist-update-response"
    assert answer["body"] == {"updated": [{"recipient_did": rcpt.did, "action": "add", "result": "success"}]}

    resp = didcomm_a.post(forward_for(rcpt, med))
    assert resp.status_code == 202 and resp.content == b""

    status, delivery, _ = didcomm_a.send(wallet, wallet.message(PICKUP + "delivery-request", {"limit": 10}))
    assert delivery["type"] == PICKUP + "delivery"
    assert len(delivery["attachments"]) == 1
    attachment = delivery["attachments"][0]
    inner, _ = rcpt.unpack(attachment["data"]["json"])
    assert inner["body"] == {"n": 1}

    status, st, _ = didcomm_a.send(
        wallet, wallet.message(PICKUP + "messages-received", {"message_id_list": [attachment["id"]]})
    )
    assert st["type"] == PICKUP + "status"
    assert st["body"] == {"message_count": 0, "live_delivery": False}


def test_cm3_grant_has_a_routing_did_list_and_recipient_update_query(didcomm_a, wallet):
    med = didcomm_a.mediator_did
    _, grant, _ = didcomm_a.send(wallet, wallet.message(CM3 + "mediate-request"))
    assert grant["type"] == CM3 + "mediate-grant" and grant["body"] == {"routing_did": [med]}
    dids = [routed_did(med).did for _ in range(3)]
    _, answer, _ = didcomm_a.send(
        wallet,
        wallet.message(CM3 + "recipient-update", {"updates": [{"recipient_did": d, "action": "add"} for d in dids]}),
    )
    assert answer["type"] == CM3 + "recipient-update-response"
    assert [u["result"] for u in answer["body"]["updated"]] == ["success"] * 3
    _, page, _ = didcomm_a.send(
        wallet, wallet.message(CM3 + "recipient-query", {"paginate": {"limit": 2, "offset": 1}})
    )
    assert page["type"] == CM3 + "recipient"
    assert page["body"] == {
        "dids": [{"recipient_did": dids[1]}, {"recipient_did": dids[2]}],
        "pagination": {"count": 2, "offset": 1, "remaining": 0},
    }
    # CM 2.0 on the same store
    _, keylist, _ = didcomm_a.send(
        wallet, wallet.message(CM2 + "keylist-query", {"paginate": {"limit": 1, "offset": 0}})
    )
    assert keylist["body"] == {
        "keys": [{"recipient_did": dids[0]}],
        "pagination": {"count": 1, "offset": 0, "remaining": 2},
    }


def test_a_forward_to_an_unknown_recipient_is_400_not_found(didcomm_a):
    med = didcomm_a.mediator_did
    resp = didcomm_a.post(forward_for(routed_did(med), med))
    assert resp.status_code == 400
    report = json.loads(resp.content)
    assert report["type"] == "https://didcomm.org/report-problem/2.0/problem-report"
    assert report["body"] == {"code": "e.p.me.res.not-found", "comment": "Recipient not registered with this mediator"}
    assert report["pthid"]


def test_cross_tenant_a_recipient_of_tenant_a_is_unknown_on_tenant_b(didcomm_a, didcomm_b, wallet):
    med_a = didcomm_a.mediator_did
    didcomm_a.send(wallet, wallet.message(CM2 + "mediate-request"))
    rcpt = routed_did(med_a)
    didcomm_a.send(
        wallet, wallet.message(CM2 + "keylist-update", {"updates": [{"recipient_did": rcpt.did, "action": "add"}]})
    )
    resp = didcomm_b.post(forward_for(rcpt, didcomm_b.mediator_did))
    assert resp.status_code == 400 and json.loads(resp.content)["body"]["code"] == "e.p.me.res.not-found"
    # tenant A's mediator DID does not decrypt on tenant B
    resp = didcomm_b.post(forward_for(rcpt, med_a))
    assert resp.status_code == 400 and json.loads(resp.content)["body"]["code"] == "e.p.trust.crypto.unknown-key"
