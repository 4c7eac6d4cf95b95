"""The mediator's legacy DID (one string-form service, for older did:peer:2 libraries) and peerdid 0.5's short
key ids (`#6LSqg4J8`): both DIDs reach one identity, and answers come from the DID and key id a client named.
The stock library itself runs in tests/interop/test_sicpa_e2e.py."""

from __future__ import annotations

import base64
import json

from apps.didcomm import identity
from apps.didcomm.core import jwe
from apps.didcomm.core.resolver import key_agreement_key, resolve_did
from apps.didcomm.models import MediatorIdentity
from apps.didcomm.selectors import identity_summary
from apps.tenants.services import Actor
from tests.support.didcomm_agent import CM2, PICKUP, Agent, forward_for, routed_did


def legacy_invitation(poster) -> dict:
    resp = poster.http.get("/didcomm/invitation?did=legacy")
    assert resp.status_code == 200, resp.content
    return json.loads(resp.content)


def short(kid_did: str, key) -> str:
    return f"{kid_did}#{key.multibase[1:9]}"


def test_the_legacy_invitation_names_the_same_keys_in_one_string_form_http_service(didcomm_a, tenant_a):
    primary, legacy = didcomm_a.invitation(), legacy_invitation(didcomm_a)
    assert legacy["from"] == MediatorIdentity.objects.get(tenant=tenant_a).legacy_did != primary["from"]
    assert {k: v for k, v in legacy.items() if k not in ("id", "from")} == {
        k: v for k, v in primary.items() if k not in ("id", "from")
    }
    new, old = resolve_did(primary["from"]), resolve_did(legacy["from"])
    assert [vm.key for vm in old.key_agreement] == [vm.key for vm in new.key_agreement]
    assert [vm.key for vm in old.authentication] == [vm.key for vm in new.authentication]
    assert legacy["from"].count(".S") == 1
    assert old.json["service"] == [
        {
            "type": "DIDCommMessaging",
            "serviceEndpoint": "http://a.mediator.test/didcomm",
            "routingKeys": [],
            "accept": ["didcomm/v2"],
            "recipientKeys": [],
            "id": "#service",
        }
    ]
    url = didcomm_a.http.get("/didcomm/invitation?did=legacy&form=url").content.decode()
    encoded = url.split("?_oob=", 1)[1]
    assert json.loads(base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4))) == legacy
    assert legacy_invitation(didcomm_a) == legacy  # stable


def test_an_unknown_did_variant_of_the_invitation_is_a_400_problem_report(didcomm_a):
    resp = didcomm_a.http.get("/didcomm/invitation?did=old")
    assert resp.status_code == 400 and resp["Content-Type"] == "application/json"
    assert json.loads(resp.content)["body"] == {"code": "e.p.msg", "comment": "did must be `legacy` or absent"}


def test_a_client_of_the_legacy_did_is_answered_from_it_and_granted_it_as_routing_did(didcomm_a, wallet):
    legacy = legacy_invitation(didcomm_a)["from"]
    resp = didcomm_a.post(wallet.pack(wallet.message(CM2 + "mediate-request"), legacy))
    grant, decrypted = wallet.unpack(resp.content)
    assert (grant["type"], grant["body"], grant["from"]) == (CM2 + "mediate-grant", {"routing_did": legacy}, legacy)
    assert decrypted.sender_kid == legacy + "#key-2"


def test_short_key_ids_are_read_and_answered_as_named(didcomm_a):
    """peerdid 0.5 names keys `#` + 8 characters of the fingerprint: ours when it addresses us, its own as skid."""
    legacy = legacy_invitation(didcomm_a)["from"]
    ours = resolve_did(legacy).key_agreement[0].key
    client = Agent()
    client_kid = short(client.did, client.x.public)
    message = {**client.message(CM2 + "mediate-request"), "to": [legacy]}
    body = jwe.encrypt(json.dumps(message).encode(), to=[(short(legacy, ours), ours)], sender=(client_kid, client.x))
    resp = didcomm_a.post(json.dumps(body).encode())
    assert resp.status_code == 200, resp.content
    decrypted = jwe.decrypt(
        resp.content,
        private_key_for=lambda kid: client.x if kid == client_kid else None,
        sender_key_for=key_agreement_key,
    )
    assert (decrypted.sender_kid, decrypted.recipient_kids) == (short(legacy, ours), (client_kid,))
    assert json.loads(decrypted.plaintext)["body"] == {"routing_did": legacy}


def test_a_forward_to_the_legacy_did_is_picked_up_by_a_client_of_the_published_one(didcomm_a, wallet):
    med, legacy = didcomm_a.mediator_did, legacy_invitation(didcomm_a)["from"]
    didcomm_a.send(wallet, wallet.message(CM2 + "mediate-request"))
    rcpt = routed_did(med)
    didcomm_a.send(
        wallet, wallet.message(CM2 + "keylist-update", {"updates": [{"recipient_did": rcpt.did, "action": "add"}]})
    )
    assert didcomm_a.post(forward_for(rcpt, legacy)).status_code == 202
    _, delivery, _ = didcomm_a.send(wallet, wallet.message(PICKUP + "delivery-request", {"limit": 10}))
    [attachment] = delivery["attachments"]
    assert rcpt.unpack(attachment["data"]["json"])[0]["body"] == {"n": 1}
    assert delivery["from"] == med


def test_a_retired_identitys_legacy_did_keeps_working_in_the_grace_period(didcomm_a, tenant_a, wallet):
    old_legacy = legacy_invitation(didcomm_a)["from"]
    new = identity.identity_rotate(tenant=tenant_a, actor=Actor(None, "cli"))
    summary = identity_summary(tenant=tenant_a)  # what the operator API answers
    assert (summary["legacy_did"], summary["did"]) == (new.legacy_did, new.did) and new.legacy_did != old_legacy
    assert (
        summary["legacy_invitation_url"]
        == didcomm_a.http.get("/didcomm/invitation?did=legacy&form=url").content.decode()
    )
    resp = didcomm_a.post(wallet.pack(wallet.message(CM2 + "mediate-request"), old_legacy))
    grant, decrypted = wallet.unpack(resp.content)
    assert (grant["from"], grant["body"], decrypted.sender_kid) == (
        old_legacy,
        {"routing_did": old_legacy},
        old_legacy + "#key-2",
    )
