"""The per-recipient queue depth kept by PostgreSQL triggers (models.PendingQueueDepth, migration
0005) stays equal to the number of unacknowledged pending events whatever writes them, and the
queue cap is enforced from it."""

from __future__ import annotations

import importlib
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from apps.messaging.maintenance import purge_expired_pending_events
from apps.messaging.models import PendingEvent, PendingQueueDepth
from apps.tenants.models import Tenant
from tests.support.commands import err
from tests.support.registration import contract_both_ways, register


def actual() -> dict:
    with connection.cursor() as cur:
        cur.execute(
            "SELECT tenant_id, recipient_did, count(*) FROM messaging_pendingevent"
            " WHERE acknowledged_at IS NULL GROUP BY 1, 2"
        )
        return {(t, d): n for t, d, n in cur.fetchall()}


def counters() -> dict:
    return {(r.tenant_id, r.recipient_did): r.depth for r in PendingQueueDepth.objects.all() if r.depth != 0}


def send(post, sender, recipient, n: int, payload: str = "blob") -> list[str]:
    ids = []
    for i in range(n):
        status, body = post.command(sender, f"{payload}{i}", recipient_did=recipient.did, channel="TWO_WAY_PRIVATE")
        assert status == 200, body
        ids.append(body["pendingEventId"])
    return ids


@pytest.fixture
def pairs(post_a, tenant_a, alice, bob, registered):
    contract_both_ways(post_a, alice, bob, tenant_a)  # alice may send to bob
    contract_both_ways(post_a, bob, alice, tenant_a)  # and bob to alice
    return alice, bob


def test_every_write_path_keeps_the_counter_exact(post_a, tenant_a, pairs, settings):
    alice, bob = pairs
    to_bob = send(post_a, alice, bob, 5)
    send(post_a, bob, alice, 3)
    key_bob, key_alice = (tenant_a.pk, bob.did), (tenant_a.pk, alice.did)
    assert counters() == actual() == {key_bob: 5, key_alice: 3}
    # ACKNOWLEDGE of some ids, one twice and one unknown: only fresh acknowledgements count.
    ack = {"type": "ACKNOWLEDGE_PENDING_EVENTS", "event_ids": [to_bob[0], to_bob[1], to_bob[1]]}
    assert post_a.command(bob, ack, recipient_did=tenant_a.did)[0] == 200
    assert post_a.command(bob, ack, recipient_did=tenant_a.did)[0] == 200
    assert counters() == actual() == {key_bob: 3, key_alice: 3}
    # The TTL job deletes acknowledged and unacknowledged rows alike.
    PendingEvent.objects.filter(public_id=to_bob[2]).update(created_at=timezone.now() - timedelta(days=400))
    assert purge_expired_pending_events(tenant=tenant_a) == 1
    assert counters() == actual() == {key_bob: 2, key_alice: 3}
    # Raw SQL, bulk ORM writes and a delete of acknowledged rows (which must not count).
    with connection.cursor() as cur:
        cur.execute("UPDATE messaging_pendingevent SET acknowledged_at = now() WHERE recipient_did = %s", [alice.did])
        cur.execute("DELETE FROM messaging_pendingevent WHERE acknowledged_at IS NOT NULL")
    PendingEvent.objects.bulk_create(
        [PendingEvent(tenant=tenant_a, recipient_did=alice.did, sender_did=bob.did, payload="x") for _ in range(4)]
        + [
            PendingEvent(
                tenant=tenant_a, recipient_did=alice.did, sender_did=bob.did, payload="", acknowledged_at=timezone.now()
            )
        ]
    )
    assert counters() == actual() == {key_bob: 2, key_alice: 4}


def test_counters_are_per_tenant_and_go_with_their_tenant(post_a, post_b, tenant_a, tenant_b, pairs, carol):
    alice, bob = pairs
    register(post_b, carol, tenant_b)
    PendingEvent.objects.bulk_create(
        [PendingEvent(tenant=tenant_b, recipient_did=bob.did, sender_did=carol.did, payload="x") for _ in range(2)]
    )
    send(post_a, alice, bob, 1)
    assert counters() == actual() == {(tenant_a.pk, bob.did): 1, (tenant_b.pk, bob.did): 2}
    Tenant.objects.filter(pk=tenant_b.pk).delete()
    assert counters() == actual() == {(tenant_a.pk, bob.did): 1}
    assert not PendingQueueDepth.objects.filter(tenant_id=tenant_b.pk).exists()


def test_the_cap_is_read_from_the_counter_at_n_and_n_plus_one(post_a, tenant_a, pairs):
    alice, bob = pairs
    Tenant.objects.filter(pk=tenant_a.pk).update(pending_queue_cap=3)
    # Two events already queued by other means: the counter knows them.
    PendingEvent.objects.bulk_create(
        [PendingEvent(tenant=tenant_a, recipient_did=bob.did, sender_did=alice.did, payload="x") for _ in range(2)]
    )
    (third,) = send(post_a, alice, bob, 1)
    status, body = post_a.command(alice, "fourth", recipient_did=bob.did, channel="TWO_WAY_PRIVATE")
    assert (status, body) == (507, err("RECIPIENT_QUEUE_FULL"))
    assert actual() == counters() == {(tenant_a.pk, bob.did): 3}
    ack = {"type": "ACKNOWLEDGE_PENDING_EVENTS", "event_ids": [third]}
    assert post_a.command(bob, ack, recipient_did=tenant_a.did)[0] == 200
    send(post_a, alice, bob, 1)
    assert actual() == counters() == {(tenant_a.pk, bob.did): 3}


def test_query_pending_events_totals_come_from_the_counter(post_a, tenant_a, pairs):
    alice, bob = pairs
    send(post_a, alice, bob, 5)
    q = {"type": "QUERY_PENDING_EVENTS", "pagination": {"page": 0, "page_size": 2}}
    status, body = post_a.command(bob, q, recipient_did=tenant_a.did)
    assert (status, body["payload"]["pagination"]) == (200, {"page": 0, "page_size": 2, "total": 5})
    q["pagination"]["page"] = 7
    status, body = post_a.command(bob, q, recipient_did=tenant_a.did)
    assert body["payload"] == {"pending_events": [], "pagination": {"page": 7, "page_size": 2, "total": 5}}


def test_the_migration_backfills_existing_queues(tenant_a, pairs):
    alice, bob = pairs
    PendingEvent.objects.bulk_create(
        [PendingEvent(tenant=tenant_a, recipient_did=bob.did, sender_did=alice.did, payload="x") for _ in range(3)]
    )
    PendingQueueDepth.objects.all().delete()  # as before the migration
    migration = importlib.import_module("apps.messaging.migrations.0005_pending_queue_depth")  # (backfill only)
    with connection.cursor() as cur:
        cur.execute(migration.BACKFILL)
    assert counters() == actual() == {(tenant_a.pk, bob.did): 3}


@pytest.mark.django_db(transaction=True)
def test_truncate_empties_the_counters(tenant_a, alice, bob):
    PendingEvent.objects.bulk_create(
        [PendingEvent(tenant=tenant_a, recipient_did=bob.did, sender_did=alice.did, payload="x") for _ in range(3)]
    )
    assert counters() == {(tenant_a.pk, bob.did): 3}
    with connection.cursor() as cur:
        cur.execute("TRUNCATE messaging_pendingevent")
    assert counters() == actual() == {}


def test_a_tenant_goes_whatever_order_its_counters_and_events_are_deleted_in(post_a, tenant_a, tenant_b, pairs, carol):
    alice, bob = pairs
    PendingEvent.objects.bulk_create(
        [PendingEvent(tenant=tenant_b, recipient_did=bob.did, sender_did=carol.did, payload="x") for _ in range(2)]
    )
    send(post_a, alice, bob, 1)
    # Counter rows first, then the events (the order Django's collector may pick): no row comes back.
    PendingQueueDepth.objects.filter(tenant=tenant_b).delete()
    PendingEvent.objects.filter(tenant=tenant_b).delete()
    assert not PendingQueueDepth.objects.filter(tenant=tenant_b).exists()
    Tenant.objects.filter(pk=tenant_b.pk).delete()
    with connection.cursor() as cur:
        cur.execute("SET CONSTRAINTS ALL IMMEDIATE")  # the deferred FK checks run now, not at commit
    assert counters() == actual() == {(tenant_a.pk, bob.did): 1}
    assert not PendingQueueDepth.objects.filter(depth__lt=0).exists()
