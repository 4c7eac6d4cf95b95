"""TWO_WAY_PRIVATE through the storage seam (apps/decentrl/storage.py): one statement.

Every case checks the status, body and stored effects: error precedence of
docs/protocol-readings.md §3 / DCTRL-0004 §7.2, and a nonce that stays consumed after every later
failure, including a database error inside the statement.
"""

from __future__ import annotations

import uuid

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from apps.decentrl.models import Nonce
from apps.messaging.models import PendingEvent
from apps.tenants.models import Tenant
from apps.wire.client import Identity
from tests.support.commands import data_counts, envelope, err
from tests.support.registration import contract_both_ways

pytestmark = pytest.mark.django_db(transaction=True)


def _nonce_consumed(alice, nonce: str) -> bool:
    return Nonce.objects.filter(sender_did=alice.did, nonce=nonce).exists()


def test_a_bad_signature_is_answered_after_the_nonce_and_consumes_it(post_a, tenant_a, registered, alice, bob):
    contract_both_ways(post_a, alice, bob, tenant_a)
    nonce = str(uuid.uuid4())
    bad = envelope(alice, "blob", recipient_did=bob.did, channel="TWO_WAY_PRIVATE", nonce=nonce)
    bad["payload"] = "tampered"
    before = data_counts()
    assert post_a.send(bad) == (401, err("INVALID_SIGNATURE"))
    assert data_counts() == before
    assert _nonce_consumed(alice, nonce)
    # A replay of the same pair is DUPLICATE_NONCE, before the signature is even looked at.
    assert post_a.send(bad) == (401, err("DUPLICATE_NONCE"))
    good = envelope(alice, "blob", recipient_did=bob.did, channel="TWO_WAY_PRIVATE", nonce=nonce)
    assert post_a.send(good) == (401, err("DUPLICATE_NONCE"))
    assert data_counts() == before


def test_an_unknown_sender_and_recipient_come_after_the_nonce(post_a, tenant_a, registered, alice, bob):
    nonce = str(uuid.uuid4())
    env = envelope(alice, "blob", recipient_did="did:decentrl:broken", channel="TWO_WAY_PRIVATE", nonce=nonce)
    assert post_a.send(env) == (404, err("RECIPIENT_NOT_FOUND"))
    assert _nonce_consumed(alice, nonce)
    assert post_a.send(env) == (401, err("DUPLICATE_NONCE"))
    env = envelope(alice, "blob", recipient_did=bob.did, channel="TWO_WAY_PRIVATE", sender_signing_key_id="#other")
    assert post_a.send(env) == (404, err("SENDER_SIGNING_KEY_NOT_FOUND"))


def test_registration_then_contract_then_queue_cap_each_consume_the_nonce(post_a, tenant_a, registered, alice):
    stranger = Identity.create("stranger", tenant_a.did)  # not registered here
    env = envelope(alice, "blob", recipient_did=stranger.did, channel="TWO_WAY_PRIVATE")
    assert post_a.send(env) == (404, err("RECIPIENT_NOT_REGISTERED"))
    assert post_a.send(env) == (401, err("DUPLICATE_NONCE"))
    bob = Identity.create("bob2", tenant_a.did)
    from tests.support.registration import register

    register(post_a, bob, tenant_a)
    env = envelope(alice, "blob", recipient_did=bob.did, channel="TWO_WAY_PRIVATE")
    assert post_a.send(env) == (404, err("COMMUNICATION_CONTRACT_NOT_FOUND"))
    assert post_a.send(env) == (401, err("DUPLICATE_NONCE"))
    contract_both_ways(post_a, alice, bob, tenant_a)
    Tenant.objects.filter(pk=tenant_a.pk).update(pending_queue_cap=1)
    status, body = post_a.command(alice, "first", recipient_did=bob.did, channel="TWO_WAY_PRIVATE")
    assert status == 200 and body == {"type": "SUCCESS", "pendingEventId": body["pendingEventId"]}
    env = envelope(alice, "second", recipient_did=bob.did, channel="TWO_WAY_PRIVATE")
    assert post_a.send(env) == (507, err("RECIPIENT_QUEUE_FULL"))
    assert post_a.send(env) == (401, err("DUPLICATE_NONCE"))
    stored = PendingEvent.objects.get(public_id=body["pendingEventId"])
    assert (stored.tenant_id, stored.sender_did, stored.recipient_did, stored.payload, stored.payload_bytes) == (
        tenant_a.pk,
        alice.did,
        bob.did,
        "first",
        5,
    )
    assert PendingEvent.objects.filter(recipient_did=bob.did).count() == 1


def test_a_database_error_in_the_statement_is_503_and_leaves_the_nonce_consumed(
    post_a, tenant_a, registered, alice, bob
):
    contract_both_ways(post_a, alice, bob, tenant_a)
    table = PendingEvent._meta.db_table
    with connection.cursor() as cur:
        cur.execute(f"ALTER TABLE {table} ADD CONSTRAINT test_two_way_private_refuse CHECK (payload <> 'refused')")
    try:
        nonce = str(uuid.uuid4())
        env = envelope(alice, "refused", recipient_did=bob.did, channel="TWO_WAY_PRIVATE", nonce=nonce)
        before = data_counts()
        assert post_a.send(env) == (503, err("MEDIATOR_UNAVAILABLE"))
        assert data_counts() == before
        assert _nonce_consumed(alice, nonce)
        assert post_a.send(env) == (401, err("DUPLICATE_NONCE"))
    finally:
        with connection.cursor() as cur:
            cur.execute(f"ALTER TABLE {table} DROP CONSTRAINT test_two_way_private_refuse")


def test_the_one_statement_path_is_one_statement(post_a, tenant_a, registered, alice, bob):
    contract_both_ways(post_a, alice, bob, tenant_a)
    env = envelope(alice, "blob", recipient_did=bob.did, channel="TWO_WAY_PRIVATE")
    with CaptureQueriesContext(connection) as ctx:
        status, _ = post_a.send(env)
    assert status == 200
    touching = [q["sql"] for q in ctx.captured_queries if "protocol_nonce" in q["sql"] or "messaging_" in q["sql"]]
    assert len(touching) == 1
    assert touching[0].startswith("WITH claim AS (INSERT INTO protocol_nonce")
