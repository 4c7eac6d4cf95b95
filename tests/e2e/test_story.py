"""The Alice and Bob story end to end: a real Daphne process on a free port, PostgreSQL behind it,
and nothing but the client library talking HTTP to it (issue 2, part 6).

One deployment hosts two tenants on the same socket: tenant A answers for `127.0.0.1:<port>` and
tenant B for `localhost:<port>`. The story runs once with both people on tenant A and once with
Alice on A and Bob on B, where every client talks to the other party's mediator directly, picked
from the mediator segment of that party's DID (cross-mediator delivery).
"""

from __future__ import annotations

import time
import uuid

import pytest

from apps.wire import contract as wc
from apps.wire.canonical import canonical_bytes
from apps.wire.client import Identity, MediatorClient, MediatorDirectory, MediatorError
from tests.support.servers import free_port, start_daphne

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

DAY = 86_400
EVENT = {"type": "chat.message", "data": {"id": "m-1", "chatId": "c1", "content": "Hello Bob 👋 — ünïcödé"}}
T_EVENT = 1_699_123_456  # event time in the archive (Unix seconds, DCTRL-0004 §8.9 example)
T_ENVELOPE = 1_699_123_456_000  # envelope time inside the transit blob


def _uuid(value: str) -> str:
    """The id is an opaque server-generated string; ours are UUIDs. Returns it for reuse."""
    assert str(uuid.UUID(value)) == value
    return value


def _page(total: int, page: int = 0, page_size: int = 10) -> dict:
    return {"page": page, "page_size": page_size, "total": total}


@pytest.fixture
def deployment(transactional_db, tmp_path):
    """Two tenants on one Daphne process: A at 127.0.0.1:<port>, B at localhost:<port>."""
    from apps.tenants.services import tenant_create

    port = free_port()
    # Rate limits off (0): the story is a burst of ~40 commands from one IP.
    policy = {"rate_limit_per_did": 0, "rate_limit_per_ip": 0}
    tenant_a = tenant_create(
        slug="tenant-a", domain=f"127.0.0.1:{port}", public_url=f"http://127.0.0.1:{port}", **policy
    )
    tenant_b = tenant_create(
        slug="tenant-b", domain=f"localhost:{port}", public_url=f"http://localhost:{port}", **policy
    )
    # Debug logging, SQL included: the privacy check below then covers every log line a server
    # can print, not just the one-line-per-command INFO log.
    server = start_daphne(tmp_path, port=port, env={"LOG_LEVEL": "DEBUG", "DJANGO_DEBUG": "1", "LOG_FORMAT": "plain"})
    directory = MediatorDirectory(scheme="http")
    try:
        yield {
            "server": server,
            "tenant_a": tenant_a,
            "tenant_b": tenant_b,
            "directory": directory,
            "a": MediatorClient(f"http://127.0.0.1:{port}", directory=directory),
            "b": MediatorClient(f"http://localhost:{port}", directory=directory),
        }
    finally:
        directory.close()
        server.stop()


def run_story(ma: MediatorClient, mb: MediatorClient, alice: Identity, bob: Identity) -> list[str]:
    """Alice (on `ma`) and Bob (on `mb`) go through DCTRL-0004 from registration to archive.

    Returns every secret-bearing string seen on the wire, for the log check."""
    secrets: list[str] = []

    # 1. Both register with their own mediator.
    for who, mediator in ((alice, ma), (bob, mb)):
        expires_at = int(time.time()) + DAY
        signed = mediator.register(who, lifetime_s=DAY)
        terms = signed["communication_contract"]
        assert mediator.last_reply[0] == 200
        assert mediator.last_reply[1]["type"] == "SUCCESS"
        assert mediator.last_reply[1]["code"] == "MEDIATOR_REGISTRATION_SUCCESS"
        assert mediator.last_reply[1]["payload"] == {"signed_communication_contract": signed}
        assert set(signed) == {"communication_contract", "requestor_signature", "recipient_signature"}
        assert set(terms) == {
            "requestor_did",
            "recipient_did",
            "requestor_ephemeral_public_key",
            "recipient_ephemeral_public_key",
            "expires_at",
        }
        assert (terms["requestor_did"], terms["recipient_did"]) == (who.did, mediator.did)
        assert terms["expires_at"] in (expires_at, expires_at + 1)
        listed = mediator.contracts(who)
        assert listed == {
            "communication_contracts": [
                {"id": _uuid(listed["communication_contracts"][0]["id"]), "signed_communication_contract": signed}
            ],
            "pagination": _page(1),
        }
        secrets += [signed["requestor_signature"], signed["recipient_signature"]]

    # 2. Alice requests a contract through Bob's mediator, picked from Bob's DID.
    assert ma.mediator_for(bob.did) is mb
    assert mb.mediator_for(alice.did) is ma
    req = mb.request_contract(alice, bob.did)
    assert mb.last_reply == (200, {"type": "SUCCESS", "code": "REQUESTED"})
    secrets += [req.encrypted, req.request["requestor_signature"]]

    # Bob queries it and decrypts it.
    pending = mb.pending_contract_requests(bob)
    item = pending["pending_communication_contract_requests"][0]
    assert pending == {
        "pending_communication_contract_requests": [
            {
                "id": _uuid(item["id"]),
                "sender_did": alice.did,
                "encrypted_contract_request": req.encrypted,
                "requestor_ephemeral_public_key": req.ephemeral_public_b64,
            }
        ],
        "pagination": _page(1),
    }
    assert mb.open_contract_request(bob, item) == req.request
    assert req.request["communication_contract"]["recipient_did"] == bob.did

    # 3. Bob responds to Alice's mediator, saves the contract on his, then acknowledges the request.
    signed = mb.accept_contract_request(bob, item)
    terms = signed["communication_contract"]
    contract_id = wc.contract_hash(terms)
    assert {k: v for k, v in terms.items() if k != "recipient_ephemeral_public_key"} == req.request[
        "communication_contract"
    ]
    assert signed["requestor_signature"] == req.request["requestor_signature"]
    assert ma.last_reply == (200, {"type": "SUCCESS"})  # the response went to Alice's mediator
    assert mb.last_reply == (200, {"type": "SUCCESS"})  # the ack went to Bob's
    assert mb.pending_contract_requests(bob) == {"pending_communication_contract_requests": [], "pagination": _page(0)}
    bobs = mb.contracts(bob, {"did": alice.did})
    assert bobs == {
        "communication_contracts": [
            {"id": _uuid(bobs["communication_contracts"][0]["id"]), "signed_communication_contract": signed}
        ],
        "pagination": _page(1),
    }
    assert mb.contracts(bob)["pagination"] == _page(2)  # registration + this contract
    secrets += [signed["recipient_signature"]]

    # 4. Alice picks the accepted contract up with QUERY_COMMUNICATION_CONTRACTS on her mediator.
    assert alice.contract_with(bob.did) is None
    assert ma.pick_up_contracts(alice, with_did=bob.did) == [signed]
    assert alice.requested == {}
    alices = ma.contracts(alice)
    assert [c["signed_communication_contract"] for c in alices["communication_contracts"]] == [
        alices["communication_contracts"][0]["signed_communication_contract"],
        signed,
    ]
    assert (
        alices["communication_contracts"][0]["signed_communication_contract"]["communication_contract"]["recipient_did"]
        == ma.did
    )
    assert alices["pagination"] == _page(2)
    assert ma.contracts(alice, {"did": bob.did}, page=1, page_size=1) == {
        "communication_contracts": [],
        "pagination": _page(1, 1, 1),
    }

    # 5. Alice sends TWO_WAY_PRIVATE to Bob's mediator.
    blob = ma.seal_private(alice, bob.did, EVENT, timestamp=T_ENVELOPE)
    secrets.append(blob)
    bobs_mediator = ma.mediator_for(bob.did)
    pending_id = _uuid(bobs_mediator.send_sealed(alice, bob.did, blob))
    assert bobs_mediator.last_reply == (200, {"type": "SUCCESS", "pendingEventId": pending_id})

    # 6. Bob queries pending events, decrypts, saves to his archive with encrypted tags and acks.
    expected_pending = {
        "pending_events": [{"id": pending_id, "payload": blob, "sender_did": alice.did}],
        "pagination": _page(1),
    }
    assert mb.pending_events(bob) == expected_pending
    assert mb.pending_events(bob, sender_did=alice.did) == expected_pending
    assert mb.pending_events(bob, sender_did=bob.did) == {"pending_events": [], "pagination": _page(0)}
    opened = mb.decrypt_private(bob, alice.did, blob)
    assert opened == {"contract_id": contract_id, "event": EVENT, "timestamp": T_ENVELOPE}
    bob_item = mb.stored_event(
        bob,
        sender_did=alice.did,
        recipient_did=bob.did,
        event=opened["event"],
        tags=["chat", "chat.c1"],
        timestamp=T_EVENT,
        contract_id=contract_id,
    )
    assert mb.save_events(bob, [bob_item]) == {"type": "SUCCESS"}
    assert mb.ack_events(bob, [pending_id]) == {"type": "SUCCESS"}
    assert mb.pending_events(bob) == {"pending_events": [], "pagination": _page(0)}
    assert mb.ack_events(bob, [pending_id]) == {"type": "SUCCESS"}  # a repeated ACK is a no-op
    secrets += [bob_item["payload"], *bob_item["encrypted_tags"]]

    # 7. Alice saves her own copy on her mediator (self-authored: processed).
    alice_item = ma.stored_event(
        alice,
        sender_did=alice.did,
        recipient_did=bob.did,
        event=EVENT,
        tags=["chat", "chat.c1"],
        timestamp=T_EVENT,
        contract_id=contract_id,
    )
    assert ma.save_events(alice, [alice_item]) == {"type": "SUCCESS"}
    secrets += [alice_item["payload"], *alice_item["encrypted_tags"]]

    # 8. Both query their archives by tag and by participant.
    bob_events = mb.query_events(bob, {"encrypted_tags": [bob.tag("chat.c1")]})
    bob_event_id = _uuid(bob_events["events"][0]["id"]) if bob_events["events"] else ""
    bob_expected = {
        "events": [
            {
                "id": bob_event_id,
                "payload": bob_item["payload"],
                "encrypted_tags": bob_item["encrypted_tags"],
                "timestamp": T_EVENT,
            }
        ],
        "pagination": _page(1),
    }
    assert bob_events == bob_expected
    assert mb.query_events(bob, {"participant_did": alice.did}) == bob_expected
    assert mb.query_events(bob, {"unprocessed_only": True}) == bob_expected  # received: unprocessed
    assert bob.open_from_storage(bob_events["events"][0]["payload"]) == EVENT
    # Tags are signatures under the owner's key: Alice's tag for the same word matches nothing of Bob's.
    assert mb.query_events(bob, {"encrypted_tags": [alice.tag("chat.c1")]}) == {"events": [], "pagination": _page(0)}
    assert mb.query_events(bob, {"participant_did": bob.did, "after_timestamp": T_EVENT}) == {
        "events": [],
        "pagination": _page(0),
    }

    alice_events = ma.query_events(alice, {"encrypted_tags": [alice.tag("chat")]})
    alice_expected = {
        "events": [
            {
                "id": _uuid(alice_events["events"][0]["id"]) if alice_events["events"] else "",
                "payload": alice_item["payload"],
                "encrypted_tags": alice_item["encrypted_tags"],
                "timestamp": T_EVENT,
            }
        ],
        "pagination": _page(1),
    }
    assert alice_events == alice_expected
    assert ma.query_events(alice, {"participant_did": bob.did}) == alice_expected
    assert ma.query_events(alice, {"unprocessed_only": True}) == {"events": [], "pagination": _page(0)}
    assert alice.open_from_storage(alice_events["events"][0]["payload"]) == EVENT

    # 9. UPDATE_EVENT_TAGS replaces Bob's tags and marks the event processed.
    read_tag = bob.tag("chat.c1.read")
    assert mb.update_event_tags(bob, [{"event_id": bob_event_id, "encrypted_tags": [read_tag]}]) == {"type": "SUCCESS"}
    assert mb.query_events(bob, {"encrypted_tags": [bob.tag("chat")]}) == {"events": [], "pagination": _page(0)}
    assert mb.query_events(bob, {"encrypted_tags": [read_tag]}) == {
        "events": [
            {"id": bob_event_id, "payload": bob_item["payload"], "encrypted_tags": [read_tag], "timestamp": T_EVENT}
        ],
        "pagination": _page(1),
    }
    assert mb.query_events(bob, {"unprocessed_only": True}) == {"events": [], "pagination": _page(0)}
    # Alice cannot touch Bob's event: skipped silently, and her own archive is unchanged.
    assert ma.update_event_tags(alice, [{"event_id": bob_event_id, "encrypted_tags": []}]) == {"type": "SUCCESS"}
    assert mb.query_events(bob, {"encrypted_tags": [read_tag]})["pagination"] == _page(1)
    assert ma.query_events(alice, {"encrypted_tags": [alice.tag("chat")]}) == alice_expected
    secrets.append(read_tag)
    return secrets


def assert_log_is_metadata_only(server, secrets: list[str]) -> None:
    """docs/protocol-readings.md §9: no payload, ciphertext, tag or signature reaches the server log."""
    log = server.log()
    assert "type=TWO_WAY_PRIVATE code=SUCCESS status=200" in log
    leaked = [s[:16] for s in secrets if s in log]
    assert leaked == []


def test_alice_and_bob_on_one_mediator_go_from_registration_to_archive(deployment):
    ma = deployment["a"]
    alice = Identity.create("alice", ma.did)
    bob = Identity.create("bob", ma.did)
    assert ma.did == deployment["tenant_a"].did == f"did:web:127.0.0.1%3A{deployment['server'].port}"
    assert ma.did_document() == deployment["tenant_a"].did_document()
    assert ma.health() == (200, {"status": "ok"})
    secrets = run_story(ma, ma, alice, bob)
    assert_log_is_metadata_only(deployment["server"], secrets)


def test_alice_on_tenant_a_and_bob_on_tenant_b_talk_across_mediators(deployment):
    ma, mb = deployment["a"], deployment["b"]
    assert (ma.did, mb.did) == (deployment["tenant_a"].did, deployment["tenant_b"].did)
    assert mb.did == f"did:web:localhost%3A{deployment['server'].port}"
    alice = Identity.create("alice", ma.did)
    bob = Identity.create("bob", mb.did)
    secrets = run_story(ma, mb, alice, bob)
    assert_log_is_metadata_only(deployment["server"], secrets)

    # Each mediator only knows its own registered identities and their data.
    with pytest.raises(MediatorError) as err:
        mb.query_events(alice)
    assert (err.value.status, err.value.body) == (401, {"type": "ERROR", "code": "UNAUTHORIZED_COMMAND"})
    with pytest.raises(MediatorError) as err:
        ma.pending_events(bob)
    assert (err.value.status, err.value.body) == (401, {"type": "ERROR", "code": "UNAUTHORIZED_COMMAND"})
    # Sending to Bob through Alice's own mediator is refused: Bob is not registered there.
    with pytest.raises(MediatorError) as err:
        ma.send_private(alice, bob.did, EVENT)
    assert (err.value.status, err.value.body) == (404, {"type": "ERROR", "code": "RECIPIENT_NOT_REGISTERED"})
    # The other way round: the contract the RESPONSE stored for Alice lets Bob write to her on A.
    reply_event = {"type": "chat.message", "data": {"id": "m-2", "chatId": "c1", "content": "Hi Alice"}}
    reply_blob = mb.seal_private(bob, alice.did, reply_event, timestamp=T_ENVELOPE + 1)
    reply_id = _uuid(mb.mediator_for(alice.did).send_sealed(bob, alice.did, reply_blob))
    assert ma.last_reply == (200, {"type": "SUCCESS", "pendingEventId": reply_id})
    assert ma.pending_events(alice) == {
        "pending_events": [{"id": reply_id, "payload": reply_blob, "sender_did": bob.did}],
        "pagination": _page(1),
    }
    assert ma.decrypt_private(alice, bob.did, reply_blob) == {
        "contract_id": wc.contract_hash(alice.contract_with(bob.did)[0]["communication_contract"]),
        "event": reply_event,
        "timestamp": T_ENVELOPE + 1,
    }
    assert ma.ack_events(alice, [reply_id]) == {"type": "SUCCESS"}
    assert ma.pending_events(alice) == {"pending_events": [], "pagination": _page(0)}
    # The contract Bob saved lives on his mediator only; Alice's copy only on hers.
    assert ma.contracts(alice)["pagination"] == _page(2)
    assert mb.contracts(bob)["pagination"] == _page(2)
    assert mb.pending_events(bob) == {"pending_events": [], "pagination": _page(0)}


def test_the_nonce_store_survives_a_daphne_restart(deployment, tmp_path):
    server, ma = deployment["server"], deployment["a"]
    alice = Identity.create("alice", ma.did)
    ma.register(alice, lifetime_s=DAY)
    item = ma.stored_event(
        alice, sender_did=alice.did, recipient_did=ma.did, event=EVENT, tags=["t"], timestamp=T_EVENT
    )
    captured = canonical_bytes(
        alice.sign_command(recipient_did=ma.did, payload={"type": "SAVE_EVENTS", "events": [item]})
    )
    assert ma.post_raw(captured) == (200, {"type": "SUCCESS"})
    assert ma.post_raw(captured) == (401, {"type": "ERROR", "code": "DUPLICATE_NONCE"})

    # A crash, not a polite shutdown: the nonce was committed before the reply left.
    server.kill9()
    restarted = start_daphne(tmp_path, port=server.port)
    fresh = MediatorClient(restarted.url)
    try:
        assert fresh.post_raw(captured) == (401, {"type": "ERROR", "code": "DUPLICATE_NONCE"})
        # Nothing was stored twice, and the identity is still registered after the restart.
        assert fresh.query_events(alice)["pagination"] == _page(1)
    finally:
        fresh.close()
        restarted.stop()
