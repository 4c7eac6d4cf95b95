"""`messaging.sql.deliver_statement` and `delivered`: `sql.deliver`'s statement (messaging's
pending-event statement after the nonce claim), parameters and row as pure functions."""

from __future__ import annotations

import uuid

import pytest
from django.db import connection

from apps.decentrl import storage
from apps.decentrl.storage import NonceClaim
from apps.messaging import sql as messaging_sql
from apps.messaging.sql import Delivery, Found, delivered
from apps.tenants.models import Tenant
from tests.support.registration import contract_both_ways, register

PUBLIC_ID = uuid.UUID("00000000-0000-4000-8000-000000000007")


def _statement(*, cap: int | None, checks_passed: bool = True) -> tuple[str, list]:
    tenant = Tenant(pk=7, did="did:web:m.example", pending_queue_cap=cap)
    nonce = NonceClaim(tenant_id=7, sender_did="did:s", nonce="n1", expires_at_ms=1_300_000, now_ms=1_000_000)
    event = Delivery(tenant, "did:s", "did:r", "héllo", 1_000, checks_passed)
    return messaging_sql.deliver_statement(storage.CLAIM, nonce, event, PUBLIC_ID)


def test_the_statement_and_its_parameters_in_order():
    sql, params = _statement(cap=50)
    assert sql is messaging_sql.deliver_sql(storage.CLAIM)
    assert sql.count("%s") == len(params) == 33
    assert params == [
        7, "did:s", "n1", 1_300_000, 1_000_000,  # the claim
        True, 7, "did:r", "did:r", "did:web:m.example", 1_000,  # registered
        True, 7, "did:r", 1_000, "did:s", "did:r", "did:r", "did:s",  # has_contract
        True, 50, 50, 7, "did:r",  # queue cap
        PUBLIC_ID, 7, "did:r", "did:s", "héllo", 6,  # the event (payload_bytes: UTF-8)
        1_000, 7, "did:r",  # the recipient's presence
    ]  # fmt: skip


def test_no_cap_and_failed_checks_are_parameters_not_other_text():
    sql, params = _statement(cap=None, checks_passed=False)
    assert sql is messaging_sql.deliver_sql(storage.CLAIM)
    assert [params[5], params[11], params[19], params[20], params[21]] == [False, False, False, 0, 0]


def test_the_row_read():
    assert delivered((True, True, True, False, True, None), PUBLIC_ID) == Found(
        True, True, True, False, "00000000-0000-4000-8000-000000000007"
    )
    # The presence column: NULL (no row: unknown) and True push, False does not.
    assert delivered((True, True, True, False, True, True), PUBLIC_ID).may_have_socket is True
    assert delivered((True, True, True, False, True, False), PUBLIC_ID) == Found(
        True, True, True, False, "00000000-0000-4000-8000-000000000007", may_have_socket=False
    )
    assert delivered((True, True, True, True, False, None), PUBLIC_ID) == Found(True, True, True, True, None)
    assert delivered((False, False, False, False, False, None), PUBLIC_ID) == Found(False)


@pytest.mark.django_db(transaction=True)
def test_deliver_runs_exactly_that_statement(post_a, tenant_a, alice, bob):
    register(post_a, alice, tenant_a)
    register(post_a, bob, tenant_a)
    contract_both_ways(post_a, alice, bob, tenant_a)
    captured = []

    def capture(execute, sql, params, many, context):
        captured.append((sql, list(params)))
        return execute(sql, params, many, context)

    nonce = NonceClaim(tenant_id=tenant_a.pk, sender_did=alice.did, nonce="n-stmt", expires_at_ms=2**40, now_ms=1)
    event = Delivery(tenant_a, alice.did, bob.did, "p", 1)
    with connection.execute_wrapper(capture):
        found = messaging_sql.deliver(storage.CLAIM, nonce, event)
    assert found.nonce_fresh and found.registered and found.has_contract and not found.queue_full
    [(sql, params)] = captured
    public_id = params[24]
    assert found == Found(True, True, True, False, str(public_id))
    assert (sql, params) == messaging_sql.deliver_statement(storage.CLAIM, nonce, event, public_id)
