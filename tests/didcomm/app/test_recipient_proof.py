"""Who may register a recipient DID (docs/didcomm.md "Who may register a recipient"): a request that
proves control of the DID (authcrypted or signed with one of its keys) always, taking it over from a
client that registered it without proof; without proof, never another client's own identity, and
otherwise as the tenant's `unproven_recipients` says; a DID another client holds is refused with a
problem report and counted on the holder's row, which the admin lists."""

from __future__ import annotations

import json

import pytest

from apps.didcomm.core import jwe, jws
from apps.didcomm.core.did_key import did_key_from_key
from apps.didcomm.core.resolver import resolve_did
from apps.didcomm.models import DidcommPolicy, QueuedMessage, RecipientKey
from apps.didcomm.policy import policy_for
from tests.support.didcomm_agent import Agent, forward_for, routed_did
from tests.support.didcomm_agent_v1 import CM1, AgentV1

from .test_v1 import V1Door, _problem

pytestmark = pytest.mark.django_db

CM2 = "https://didcomm.org/coordinate-mediation/2.0/"
CM3 = "https://didcomm.org/coordinate-mediation/3.0/"
REPORT = "https://didcomm.org/report-problem/2.0/problem-report"


def _add(didcomm, agent: Agent, *dids: str, base: str = CM2, signed: bool = False):
    """(status, answer) of an authcrypt keylist-update (CM 3.0: recipient-update) adding `dids`."""
    kind = "keylist-update" if base == CM2 else "recipient-update"
    msg = agent.message(base + kind, {"updates": [{"recipient_did": d, "action": "add"} for d in dids]})
    if not signed:
        status, answer, _ = didcomm.send(agent, msg)
        return status, answer
    # anoncrypt-free authcrypt(signed(plaintext)): the signature is by the agent's Ed25519 key (#key-2)
    med = didcomm.mediator_did
    plaintext = json.dumps({**msg, "to": [med]}).encode()
    signed_msg = jws.sign(plaintext, kid=agent.did + "#key-2", key=agent.ed)
    vm = resolve_did(med).key_agreement[0]
    body = json.dumps(
        jwe.encrypt(json.dumps(signed_msg).encode(), to=[(vm.id, vm.key)], sender=(agent.kid, agent.x))
    ).encode()
    resp = didcomm.post(body)
    return resp.status_code, agent.unpack(resp.content)[0]


def _granted(didcomm, *agents: Agent) -> None:
    for agent in agents:
        status, answer, _ = didcomm.send(agent, agent.message(CM2 + "mediate-request"))
        assert answer["type"] == CM2 + "mediate-grant"


def _refused(answer: dict, code: str) -> str:
    assert answer["type"] == REPORT and answer["body"]["code"] == code, answer
    return answer["body"]["comment"]


def test_fresh_dids_are_registered_without_proof_first_come_and_a_conflict_is_a_409_counted_for_operators(
    didcomm_a, wallet
):
    """What the Identus SDK does: its mediation DID registers a new did:peer:2 with keys of its own,
    which nothing in the request proves. Accepted (the default policy); another client asking for it
    gets `e.p.req.recipient-conflict` and the holder's row counts it."""
    other, rcpt = Agent(), routed_did(didcomm_a.mediator_did)
    _granted(didcomm_a, wallet, other)
    status, answer = _add(didcomm_a, wallet, rcpt.did)
    assert (status, answer["body"]["updated"][0]["result"]) == (200, "success")
    row = RecipientKey.objects.get()
    assert (row.proven, row.contested, row.last_contested_at) == (False, 0, None)
    for base in (CM2, CM3):
        status, answer = _add(didcomm_a, other, routed_did(didcomm_a.mediator_did).did, rcpt.did, base=base)
        assert status == 409
        comment = _refused(answer, "e.p.req.recipient-conflict")
        assert comment == "updates[1]: this DID is registered to another client of this mediator"
        assert answer["pthid"]  # the refused message's thread
    row.refresh_from_db()
    assert (row.mediation.client_did, row.contested, row.last_contested_at is not None) == (wallet.did, 2, True)
    assert RecipientKey.objects.count() == 1  # the refused message's other entry was not applied either


def test_a_request_authcrypted_with_the_dids_key_proves_control(didcomm_a, wallet):
    _granted(didcomm_a, wallet)
    x_did_key = did_key_from_key(wallet.x.public)  # the key the request is authcrypted with
    assert _add(didcomm_a, wallet, wallet.did, x_did_key)[0] == 200
    assert set(RecipientKey.objects.values_list("recipient_did", "proven")) == {(wallet.did, True), (x_did_key, True)}


def test_a_signed_request_proves_control_of_the_signing_key(didcomm_a, tenant_a, wallet):
    """The Ed25519 key is not the one the request is authcrypted with: only its signature proves it."""
    _granted(didcomm_a, wallet)
    policy_for(tenant=tenant_a)
    DidcommPolicy.objects.filter(tenant=tenant_a).update(unproven_recipients="refuse")
    ed_did_key = did_key_from_key(wallet.ed.public)
    status, answer = _add(didcomm_a, wallet, ed_did_key)
    assert status == 403
    assert _refused(answer, "e.p.req.recipient-unproven") == (
        "updates[0]: this mediator registers this DID only in a request authcrypted or signed with one of its keys"
    )
    assert not RecipientKey.objects.exists()
    status, answer = _add(didcomm_a, wallet, ed_did_key, signed=True)
    assert (status, answer["body"]["updated"][0]["result"]) == (200, "success")
    assert RecipientKey.objects.get().proven


def test_policy_refuse_refuses_unproven_dids_and_applies_nothing_of_the_message(didcomm_a, tenant_a, wallet):
    _granted(didcomm_a, wallet)
    policy_for(tenant=tenant_a)
    DidcommPolicy.objects.filter(tenant=tenant_a).update(unproven_recipients="refuse")
    rcpt = routed_did(didcomm_a.mediator_did)
    status, answer = _add(didcomm_a, wallet, wallet.did, rcpt.did)
    assert status == 403
    assert _refused(answer, "e.p.req.recipient-unproven").startswith("updates[1]:")
    assert not RecipientKey.objects.exists()
    assert _add(didcomm_a, wallet, wallet.did)[0] == 200


def test_another_clients_own_did_needs_proof_whatever_the_policy(didcomm_a, wallet):
    """The squatting the issue saw: a client registers a victim's did:peer:2 (here the victim's own DID,
    which it authenticates to us with) so that the victim's forwards reach the squatter's queue."""
    victim, squatter = wallet, Agent()
    _granted(didcomm_a, victim, squatter)
    status, answer = _add(didcomm_a, squatter, victim.did)
    assert status == 403
    _refused(answer, "e.p.req.recipient-unproven")
    assert _add(didcomm_a, victim, victim.did)[0] == 200
    assert didcomm_a.post(forward_for(victim, didcomm_a.mediator_did)).status_code == 202
    assert QueuedMessage.objects.get().mediation.client_did == victim.did


def test_proof_takes_a_did_over_from_an_unproven_registration_with_its_queued_messages(didcomm_a, wallet):
    """A squatter that registered the DID before its owner became a client: the owner's proven request
    takes it over, with what was queued for it (encrypted to the owner: the squatter could not read it)."""
    victim, squatter = wallet, Agent()
    _granted(didcomm_a, squatter)
    assert _add(didcomm_a, squatter, victim.did)[1]["body"]["updated"][0]["result"] == "success"
    assert didcomm_a.post(forward_for(victim, didcomm_a.mediator_did)).status_code == 202
    _granted(didcomm_a, victim)
    status, answer = _add(didcomm_a, victim, victim.did)
    assert (status, answer["body"]["updated"][0]["result"]) == (200, "success")
    row = RecipientKey.objects.get()
    assert (row.mediation.client_did, row.proven, row.contested) == (victim.did, True, 1)
    assert QueuedMessage.objects.get().mediation_id == row.mediation_id
    # the squatter cannot take it back: it is the victim's now
    status, answer = _add(didcomm_a, squatter, victim.did)
    assert status == 409
    _refused(answer, "e.p.req.recipient-conflict")


def test_cross_tenant_the_same_did_on_another_tenant_is_no_conflict(didcomm_a, didcomm_b, wallet):
    rcpt = routed_did(didcomm_a.mediator_did)
    carol = Agent()
    _granted(didcomm_a, wallet)
    _granted(didcomm_b, carol)
    assert _add(didcomm_a, wallet, rcpt.did)[0] == 200
    assert _add(didcomm_b, carol, rcpt.did)[0] == 200


# --- DIDComm v1 (RFC 0211 keylist-update) ---------------------------------------------------------


@pytest.fixture
def door(client, tenant_a) -> V1Door:
    from tests.conftest import HOST_A

    return V1Door(HOST_A)


def _keylist(door: V1Door, agent: AgentV1, *keys: str):
    updates = [{"recipient_key": k, "action": "add"} for k in keys]
    return door.send(agent, agent.message(CM1 + "keylist-update", updates=updates))


def test_v1_a_connection_key_proves_itself_and_another_connections_key_needs_proof(door):
    """What ACA-Py and Credo register (keys of new pairwise DIDs) is unproven and accepted; their own
    connection key is proven; another connection's key is refused without proof."""
    alice, mallory, pairwise = AgentV1(), AgentV1(), AgentV1()
    door.mediate(alice)
    door.mediate(mallory)
    status, answer, resp = _keylist(door, mallory, alice.did_key)
    assert _problem(resp, mallory)[0] == 403
    assert _problem(resp, mallory)[1]["code"] == "e.p.req.recipient-unproven"
    status, answer, _ = _keylist(door, alice, alice.verkey, pairwise.did_key)
    assert [u["result"] for u in answer["updated"]] == ["success", "success"]
    assert dict(RecipientKey.objects.values_list("recipient_did", "proven")) == {
        alice.did_key: True,
        pairwise.did_key: False,
    }
    status, answer, resp = _keylist(door, mallory, pairwise.verkey)
    assert _problem(resp, mallory) == (
        409,
        {
            "code": "e.p.req.recipient-conflict",
            "en": "updates[0]: this DID is registered to another client of this mediator",
        },
    )


def test_a_v1_connection_proving_its_key_takes_it_over_and_gets_its_queued_message_posted(didcomm_a, door):
    """A v2 client registered an ACA-Py agent's key before the agent connected; a forward for it was
    queued for the squatter. The agent's keylist-update (authcrypted with that key) takes it over, and
    the queued message is POSTed to the agent's own endpoint, as any forward to it would be."""
    from tests.support.didcomm_agent_v1 import ENVELOPE, Inbox, forward_to

    from .test_v1 import _drain

    inbox = Inbox()
    try:
        agent, squatter = AgentV1(endpoint=inbox.url), Agent()
        _granted(didcomm_a, squatter)
        assert _add(didcomm_a, squatter, agent.did_key)[0] == 200
        inner = json.loads(AgentV1().pack({"@type": "https://didcomm.org/basicmessage/1.0/message"}, agent.did_key))
        assert door.post(forward_to(agent.did_key, door.key, inner)).status_code == 200
        door.send(agent, agent.didx_request(door.invitation))
        door.send(agent, agent.message(CM1 + "mediate-request"))
        _, answer, _ = door.send(
            agent, agent.message(CM1 + "keylist-update", updates=[{"recipient_key": agent.verkey, "action": "add"}])
        )
        assert answer["updated"][0]["result"] == "success"
        row = RecipientKey.objects.get()
        assert (row.mediation.connection.their_verkey, row.proven, row.contested) == (agent.verkey, True, 1)
        assert _drain() == ["delivered"]
        [(ctype, body)] = inbox.bodies
        assert (ctype, json.loads(body)) == (ENVELOPE, inner)
        assert not QueuedMessage.objects.exists()
    finally:
        inbox.close()


# --- the console -----------------------------------------------------------------------------------


def test_the_admin_lists_contested_recipients_for_users_with_the_view_permission(
    client, admin_client, django_user_model, didcomm_a, wallet
):
    import html as html_lib

    from django.contrib.auth.models import Permission

    other, contested, quiet = Agent(), routed_did(didcomm_a.mediator_did), routed_did(didcomm_a.mediator_did)
    _granted(didcomm_a, wallet, other)
    _add(didcomm_a, wallet, contested.did, quiet.did)
    assert _add(didcomm_a, other, contested.did)[0] == 409
    page = html_lib.unescape(admin_client.get("/admin/didcomm/recipientkey/?contested=yes").content.decode())
    assert contested.did in page and quiet.did not in page
    page = html_lib.unescape(admin_client.get("/admin/didcomm/recipientkey/?contested=no").content.decode())
    assert quiet.did in page and contested.did not in page
    row = RecipientKey.objects.get(recipient_did=contested.did)
    detail = admin_client.get(f"/admin/didcomm/recipientkey/{row.pk}/change/")
    assert detail.status_code == 200 and b"Save" not in detail.content  # read-only
    staff = django_user_model.objects.create_user("op", password="pw", is_staff=True)
    client.force_login(staff)
    assert client.get("/admin/didcomm/recipientkey/").status_code == 403
    staff.user_permissions.add(Permission.objects.get(codename="view_recipientkey"))
    assert client.get("/admin/didcomm/recipientkey/?contested=yes").status_code == 200
