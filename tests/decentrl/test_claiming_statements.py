"""DIRECT_AUTHENTICATED claims the nonce and checks the registration with one storage call (one
statement, apps/decentrl/storage.py), answering in DCTRL-0004 §5.4/§6.2 order; the nonce is
consumed after every outcome."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from apps.wire import contract as wc
from apps.wire.client import Identity
from apps.wire.did import parse_decentrl
from tests.support.commands import envelope, err

QPE = {"type": "QUERY_PENDING_EVENTS"}


def test_a_registered_sender_is_served(post_a, tenant_a, registered, bob):
    status, body = post_a.send(envelope(bob, QPE, recipient_did=tenant_a.did))
    assert (status, body["payload"]["pagination"]) == (200, {"page": 0, "page_size": 10, "total": 0})


def test_a_replay_is_refused_before_anything_else(post_a, tenant_a, registered, bob):
    env = envelope(bob, QPE, recipient_did=tenant_a.did)
    assert post_a.send(env)[0] == 200
    assert post_a.send(env) == (401, err("DUPLICATE_NONCE"))
    bad = {**env, "payload": {"type": "QUERY_PENDING_EVENTS", "pagination": {"page": 1}}}  # signature no longer matches
    assert post_a.send(bad) == (401, err("DUPLICATE_NONCE"))


def test_a_bad_signature_is_answered_after_the_nonce_and_consumes_it(post_a, tenant_a, registered, bob):
    env = envelope(bob, QPE, recipient_did=tenant_a.did)
    bad = {**env, "payload": {"type": "QUERY_PENDING_EVENTS", "pagination": {"page": 1}}}
    assert post_a.send(bad) == (401, err("INVALID_SIGNATURE"))
    assert post_a.send(env) == (401, err("DUPLICATE_NONCE"))


def test_an_unregistered_sender_is_unauthorized_and_its_nonce_consumed(post_a, tenant_a):
    stranger = Identity.create("stranger", tenant_a.did)
    env = envelope(stranger, QPE, recipient_did=tenant_a.did)
    assert post_a.send(env) == (401, err("UNAUTHORIZED_COMMAND"))
    assert post_a.send(env) == (401, err("DUPLICATE_NONCE"))


def test_a_command_not_addressed_to_the_mediator_is_unauthorized(post_a, tenant_a, registered, alice, bob):
    env = envelope(bob, QPE, recipient_did=alice.did)
    assert post_a.send(env) == (401, err("UNAUTHORIZED_COMMAND"))
    assert post_a.send(env) == (401, err("DUPLICATE_NONCE"))


def test_a_forwarded_request_needs_a_registered_recipient(post_a, tenant_a, registered, alice):
    stranger = Identity.create("stranger", tenant_a.did)
    req = wc.build_request(
        requestor_did=alice.did,
        recipient_did=stranger.did,
        recipient_prekey=parse_decentrl(stranger.did).pre_key,
        signing=alice.signing,
        expires_at=1_900_000_000,
    )
    payload = {
        "type": "REQUEST_COMMUNICATION_CONTRACT",
        "encrypted_contract_request": req.encrypted,
        "requestor_ephemeral_public_key": req.ephemeral_public_b64,
    }
    env = envelope(alice, payload, recipient_did=stranger.did)
    assert post_a.send(env) == (404, err("RECIPIENT_NOT_REGISTERED"))
    assert post_a.send(env) == (401, err("DUPLICATE_NONCE"))


def test_one_statement_claims_the_nonce_and_checks_the_registration(post_a, tenant_a, registered, bob):
    with CaptureQueriesContext(connection) as ctx:
        assert post_a.send(envelope(bob, QPE, recipient_did=tenant_a.did))[0] == 200
    claims = [q["sql"] for q in ctx.captured_queries if "protocol_nonce" in q["sql"]]
    assert len(claims) == 1 and "messaging_contract" in claims[0]


@pytest.mark.django_db(transaction=True)  # a failed statement aborts an enclosing test transaction
def test_a_failed_statement_still_leaves_the_nonce_consumed(post_a, tenant_a, registered, bob, monkeypatch):
    from apps.decentrl import storage

    # The same statement, failing when it runs (division by zero): it commits nothing, its claim
    # included, so the backend claims the nonce on its own before the 503.
    broken = storage._CLAIM_CHECKING_REGISTRATION.replace(" SELECT EXISTS(", " SELECT 1 / 0 = 1 OR EXISTS(", 1)
    assert broken != storage._CLAIM_CHECKING_REGISTRATION
    monkeypatch.setattr(storage, "_CLAIM_CHECKING_REGISTRATION", broken)
    env = envelope(bob, QPE, recipient_did=tenant_a.did)
    assert post_a.send(env) == (503, err("MEDIATOR_UNAVAILABLE"))
    monkeypatch.undo()
    assert post_a.send(env) == (401, err("DUPLICATE_NONCE"))


# QUERY_EVENTS: the storage call reads the page after its claim (handlers.READS), in the same
# statement on PostgreSQL when eventquery's statements serve the filter.

QEV = {"type": "QUERY_EVENTS", "filter": {"encrypted_tags": ["t"]}, "pagination": {"page_size": 2}}


def _events(post_a, tenant_a, who, n: int) -> None:
    events = [
        {
            "sender_did": who.did,
            "recipient_did": tenant_a.did,
            "timestamp": i,
            "payload": f"p{i}",
            "encrypted_tags": ["t"],
        }
        for i in range(n)
    ]
    assert post_a.send(envelope(who, {"type": "SAVE_EVENTS", "events": events}, recipient_did=tenant_a.did))[0] == 200


def test_a_query_by_tag_is_served_after_the_claim_and_its_nonce_consumed(post_a, tenant_a, registered, bob):
    _events(post_a, tenant_a, bob, 3)
    env = envelope(bob, QEV, recipient_did=tenant_a.did)
    status, body = post_a.send(env)
    assert (status, [e["payload"] for e in body["payload"]["events"]]) == (200, ["p0", "p1"])
    assert body["payload"]["pagination"] == {"page": 0, "page_size": 2, "total": 3}
    assert post_a.send(env) == (401, err("DUPLICATE_NONCE"))


def test_an_unregistered_query_reads_nothing_and_its_nonce_is_consumed(post_a, tenant_a):
    stranger = Identity.create("stranger", tenant_a.did)
    env = envelope(stranger, QEV, recipient_did=tenant_a.did)
    assert post_a.send(env) == (401, err("UNAUTHORIZED_COMMAND"))
    assert post_a.send(env) == (401, err("DUPLICATE_NONCE"))


def test_a_page_over_the_tenants_cap_is_refused_after_the_registration(post_a, tenant_a, registered, bob):
    from apps.tenants.models import Tenant

    Tenant.objects.filter(pk=tenant_a.pk).update(max_page_size=1)
    stranger = Identity.create("stranger", tenant_a.did)
    # DCTRL-0004 §6.2 step 4 before the payload's own checks: the stranger is unauthorized.
    assert post_a.send(envelope(stranger, QEV, recipient_did=tenant_a.did)) == (401, err("UNAUTHORIZED_COMMAND"))
    env = envelope(bob, QEV, recipient_did=tenant_a.did)
    status, body = post_a.send(env)
    assert (status, body["code"]) == (400, "INVALID_COMMAND")
    assert post_a.send(env) == (401, err("DUPLICATE_NONCE"))


def test_one_statement_claims_the_nonce_checks_the_registration_and_reads_the_page(post_a, tenant_a, registered, bob):
    _events(post_a, tenant_a, bob, 3)
    with CaptureQueriesContext(connection) as ctx:
        status, body = post_a.send(envelope(bob, QEV, recipient_did=tenant_a.did))
    assert (status, body["payload"]["pagination"]["total"]) == (200, 3)
    touching = [q["sql"] for q in ctx.captured_queries if "protocol_" in q["sql"] or "messaging_" in q["sql"]]
    assert len(touching) == 1
    assert all(table in touching[0] for table in ("protocol_nonce", "messaging_contract", "messaging_eventtag"))


@pytest.mark.django_db(transaction=True)
def test_a_failed_query_statement_still_leaves_the_nonce_consumed(post_a, tenant_a, registered, bob, monkeypatch):
    from apps.decentrl import storage

    broken = storage._CLAIM_CHECKING_REGISTRATION_AND_READING.replace(
        " SELECT chk.fresh,", " SELECT 1 / 0 = 1 OR chk.fresh,", 1
    )
    assert broken != storage._CLAIM_CHECKING_REGISTRATION_AND_READING
    # The text is built once per page shape (storage._claim_and_read_sql): break the builder.
    monkeypatch.setattr(storage, "_claim_and_read_sql", lambda page_sql: broken.format(page=page_sql))
    env = envelope(bob, QEV, recipient_did=tenant_a.did)
    assert post_a.send(env) == (503, err("MEDIATOR_UNAVAILABLE"))
    monkeypatch.undo()
    assert post_a.send(env) == (401, err("DUPLICATE_NONCE"))


@pytest.mark.django_db(transaction=True)  # a failed statement aborts an enclosing test transaction
def test_a_failed_two_way_private_statement_still_leaves_the_nonce_consumed(
    post_a, tenant_a, registered, alice, bob, monkeypatch
):
    from apps.messaging import sql

    # messaging's pending-event statement, failing when it runs: it commits nothing, the claim in
    # front of it included, so the dispatcher claims the nonce on its own before the 503.
    real = sql.deliver_sql
    monkeypatch.setattr(
        sql, "deliver_sql", lambda claim: real(claim).replace("SELECT chk.fresh,", "SELECT 1 / 0 = 1,", 1)
    )
    env = envelope(alice, "blob", recipient_did=bob.did, channel="TWO_WAY_PRIVATE")
    assert post_a.send(env) == (503, err("MEDIATOR_UNAVAILABLE"))
    monkeypatch.undo()
    assert post_a.send(env) == (401, err("DUPLICATE_NONCE"))
