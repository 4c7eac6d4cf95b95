"""Hot paths keep their query counts low (docs/contributing.md §14).

Counted in autocommit, as production runs (transactional_db: no test-wrapping savepoints), with
the tenant cache off as in every test. BEGIN and COMMIT are counted by Django too.

TWO_WAY_PRIVATE (messaging's sql.deliver): tenant lookup, then one statement that
claims the nonce, checks registration, contract and queue cap and inserts = 2.
QUERY_PENDING_EVENTS: tenant lookup, nonce claim with the registration check, page SELECT = 3 (at most 4: a partial page implies its total, so the COUNT only runs when a page is
full or past the end).
QUERY_EVENTS by tag: tenant lookup, then one statement that claims the nonce, checks
the registration and reads the page with its total = 2, for a full page too; an empty page past
the end adds the COUNT.
"""

from __future__ import annotations

import pytest

from tests.conftest import HOST_A
from tests.support.entry import Poster
from tests.support.registration import contract_both_ways, register

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def poster(client, tenant_a):
    from apps.tenants.models import Tenant

    Tenant.objects.filter(pk=tenant_a.pk).update(rate_limit_per_did=0, rate_limit_per_ip=0)
    return Poster(HOST_A)


def test_two_way_private_statement_count(poster, tenant_a, alice, bob, django_assert_max_num_queries):
    statements = 2
    register(poster, bob, tenant_a)
    contract_both_ways(poster, alice, bob, tenant_a)
    for _ in range(3):  # the same count on repeated sends (a prepared statement is still one)
        with django_assert_max_num_queries(statements):
            status, body = poster.command(alice, "blob", recipient_did=bob.did, channel="TWO_WAY_PRIVATE")
        assert status == 200, body


def test_query_pending_events_takes_four_statements(poster, tenant_a, alice, bob, django_assert_max_num_queries):
    register(poster, bob, tenant_a)
    contract_both_ways(poster, alice, bob, tenant_a)
    for i in range(3):
        assert poster.command(alice, f"m{i}", recipient_did=bob.did, channel="TWO_WAY_PRIVATE")[0] == 200
    with django_assert_max_num_queries(4):
        status, body = poster.command(bob, {"type": "QUERY_PENDING_EVENTS"}, recipient_did=tenant_a.did)
    assert status == 200
    assert body["payload"]["pagination"] == {"page": 0, "page_size": 10, "total": 3}
    # A full page needs the COUNT: one more statement, and the total is still exact.
    with django_assert_max_num_queries(5):
        status, body = poster.command(
            bob, {"type": "QUERY_PENDING_EVENTS", "pagination": {"page_size": 2}}, recipient_did=tenant_a.did
        )
    assert body["payload"]["pagination"] == {"page": 0, "page_size": 2, "total": 3}
    status, body = poster.command(
        bob, {"type": "QUERY_PENDING_EVENTS", "pagination": {"page": 1, "page_size": 2}}, recipient_did=tenant_a.did
    )
    assert len(body["payload"]["pending_events"]) == 1
    assert body["payload"]["pagination"] == {"page": 1, "page_size": 2, "total": 3}
    status, body = poster.command(
        bob, {"type": "QUERY_PENDING_EVENTS", "pagination": {"page": 4, "page_size": 2}}, recipient_did=tenant_a.did
    )
    assert body["payload"] == {"pending_events": [], "pagination": {"page": 4, "page_size": 2, "total": 3}}


def test_query_events_takes_four_statements(poster, tenant_a, alice, bob, django_assert_max_num_queries):
    register(poster, alice, tenant_a)
    events = [{"sender_did": bob.did, "recipient_did": alice.did, "timestamp": i, "payload": "p"} for i in range(3)]
    assert poster.command(alice, {"type": "SAVE_EVENTS", "events": events}, recipient_did=tenant_a.did)[0] == 200
    with django_assert_max_num_queries(4):
        status, body = poster.command(
            alice, {"type": "QUERY_EVENTS", "filter": {"participant_did": bob.did}}, recipient_did=tenant_a.did
        )
    assert body["payload"]["pagination"] == {"page": 0, "page_size": 10, "total": 3}


def test_query_events_by_tag_takes_two_statements_even_for_a_full_page(
    poster, tenant_a, alice, bob, django_assert_max_num_queries
):
    """The tag page's statement carries its total (apps/messaging/eventquery.py) and follows the
    claim in one statement (apps/decentrl/storage.py): no COUNT unless the page is empty past the end."""
    register(poster, alice, tenant_a)
    events = [
        {
            "sender_did": bob.did,
            "recipient_did": alice.did,
            "timestamp": i,
            "payload": "p",
            "encrypted_tags": ["t", "u"],
        }
        for i in range(3)
    ]
    assert poster.command(alice, {"type": "SAVE_EVENTS", "events": events}, recipient_did=tenant_a.did)[0] == 200
    query = {"type": "QUERY_EVENTS", "filter": {"encrypted_tags": ["t", "u"]}, "pagination": {"page_size": 2}}
    with django_assert_max_num_queries(2):
        status, body = poster.command(alice, query, recipient_did=tenant_a.did)
    assert body["payload"]["pagination"] == {"page": 0, "page_size": 2, "total": 3}
    past = {**query, "pagination": {"page": 7, "page_size": 2}}
    with django_assert_max_num_queries(3):
        status, body = poster.command(alice, past, recipient_did=tenant_a.did)
    assert body["payload"] == {"events": [], "pagination": {"page": 7, "page_size": 2, "total": 3}}
