"""Replay protection under real concurrency on PostgreSQL: the same signed command submitted by
several threads at once, each on its own database connection, is accepted exactly once."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection

from apps.decentrl.models import Nonce
from apps.messaging.models import PendingEvent, StoredEvent
from tests.conftest import HOST_A
from tests.support.commands import body_of, envelope, err
from tests.support.entry import Poster
from tests.support.registration import contract_both_ways, register

THREADS = 8


def post_concurrently(body: bytes | list[bytes], n: int = THREADS) -> list[tuple[int, dict]]:
    bodies = body if isinstance(body, list) else [body] * n
    n = len(bodies)
    barrier = threading.Barrier(n)
    poster = Poster(HOST_A, keep_connection=False)  # each thread has its own connection: nothing to keep
    results: list[tuple[int, dict] | BaseException] = [None] * n  # type: ignore[list-item]

    def worker(i: int) -> None:
        try:
            barrier.wait(timeout=30)
            results[i] = poster.raw(bodies[i])
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            results[i] = exc
        finally:
            connection.close()  # each thread had its own connection

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    for r in results:
        if isinstance(r, BaseException):
            raise r
    return results  # type: ignore[return-value]


@pytest.mark.django_db(transaction=True)
def test_the_same_two_way_private_command_sent_by_eight_threads_is_accepted_once(client, tenant_a, alice, bob):
    from tests.support.entry import Poster

    poster = Poster(HOST_A)
    register(poster, bob, tenant_a)
    contract_both_ways(poster, alice, bob, tenant_a)
    env = envelope(alice, "concurrent blob", recipient_did=bob.did, channel="TWO_WAY_PRIVATE")

    results = post_concurrently(body_of(env))

    statuses = sorted(s for s, _ in results)
    assert statuses == [200] + [401] * (THREADS - 1)
    assert [b for s, b in results if s == 401] == [err("DUPLICATE_NONCE")] * (THREADS - 1)
    (winner,) = [b for s, b in results if s == 200]
    assert PendingEvent.objects.count() == 1
    assert winner == {"type": "SUCCESS", "pendingEventId": str(PendingEvent.objects.get().public_id)}
    assert Nonce.objects.filter(nonce=env["header"]["nonce"], sender_did=alice.did).count() == 1


@pytest.mark.django_db(transaction=True)
def test_the_same_save_events_command_sent_twice_at_once_stores_one_copy(client, tenant_a, alice):
    from tests.support.entry import Poster

    poster = Poster(HOST_A)
    register(poster, alice, tenant_a)
    events = [
        {
            "sender_did": alice.did,
            "recipient_did": alice.did,
            "timestamp": 1,
            "payload": "once",
            "encrypted_tags": ["t"],
        }
    ]
    env = envelope(alice, {"type": "SAVE_EVENTS", "events": events}, recipient_did=tenant_a.did)

    results = post_concurrently(body_of(env), n=2)

    assert sorted(results, key=lambda r: r[0]) == [(200, {"type": "SUCCESS"}), (401, err("DUPLICATE_NONCE"))]
    assert StoredEvent.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_a_nonce_stays_committed_when_the_command_rolls_back(client, tenant_a, alice, bob):
    """The handler's transaction rolls back (identity quota refused inside it); the nonce does not."""
    from apps.tenants.models import Tenant
    from apps.wire import contract as wc
    from tests.support.entry import Poster

    poster = Poster(HOST_A)
    register(poster, alice, tenant_a)
    Tenant.objects.filter(pk=tenant_a.pk).update(max_identities=1)

    req = wc.build_request(
        requestor_did=bob.did,
        recipient_did=tenant_a.did,
        recipient_prekey=bytes(tenant_a.prekey_public),
        signing=bob.signing,
        expires_at=int(time.time()) + 3600,
    )
    payload = {
        "type": "REQUEST_COMMUNICATION_CONTRACT",
        "encrypted_contract_request": req.encrypted,
        "requestor_ephemeral_public_key": req.ephemeral_public_b64,
    }
    env = envelope(bob, payload, recipient_did=tenant_a.did)
    assert poster.send(env) == (401, err("UNAUTHORIZED_COMMAND"))
    # Seen from another connection: committed, not merely visible inside our own transaction.
    seen: list[bool] = []

    def look() -> None:
        try:
            seen.append(Nonce.objects.filter(nonce=env["header"]["nonce"], sender_did=bob.did).exists())
        finally:
            connection.close()

    t = threading.Thread(target=look)
    t.start()
    t.join(timeout=30)
    assert seen == [True]
    Tenant.objects.filter(pk=tenant_a.pk).update(max_identities=0)
    assert poster.send(env) == (401, err("DUPLICATE_NONCE"))


@pytest.mark.django_db(transaction=True)
def test_the_same_contract_saved_concurrently_under_different_nonces_is_stored_once(client, tenant_a, alice, bob):
    """Idempotent SAVE under a race: the loser hits the unique constraint and returns the winner's row."""
    from apps.messaging.models import Contract
    from tests.support.entry import Poster
    from tests.support.registration import signed_contract

    poster = Poster(HOST_A)
    register(poster, bob, tenant_a)
    signed, _, _ = signed_contract(alice, bob)
    payload = {"type": "SAVE_COMMUNICATION_CONTRACT", "signed_communication_contract": signed}
    bodies = [body_of(envelope(bob, payload, recipient_did=tenant_a.did)) for _ in range(4)]

    results = post_concurrently(bodies)

    assert results == [(200, {"type": "SUCCESS"})] * 4
    assert Contract.objects.filter(owner_did=bob.did, requestor_did=alice.did).count() == 1
