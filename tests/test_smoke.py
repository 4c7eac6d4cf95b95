"""A first end-to-end check of the in-process path: register, contract, send, query, ack."""

from tests.support.registration import contract_both_ways, register


def test_alice_sends_bob_a_private_event_and_bob_acks_it(post_a, tenant_a, alice, bob):
    register(post_a, alice, tenant_a)
    register(post_a, bob, tenant_a)
    contract_both_ways(post_a, alice, bob, tenant_a)
    status, body = post_a.command(alice, "opaque-blob", recipient_did=bob.did, channel="TWO_WAY_PRIVATE")
    assert status == 200 and body["type"] == "SUCCESS" and set(body) == {"type", "pendingEventId"}
    status, body = post_a.command(bob, {"type": "QUERY_PENDING_EVENTS"}, recipient_did=tenant_a.did)
    assert status == 200
    assert body["payload"]["pending_events"] == [
        {"id": body["payload"]["pending_events"][0]["id"], "payload": "opaque-blob", "sender_did": alice.did}
    ]
    assert body["payload"]["pagination"] == {"page": 0, "page_size": 10, "total": 1}
