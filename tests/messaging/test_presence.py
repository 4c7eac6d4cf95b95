"""The push rule of a stored TWO_WAY_PRIVATE (apps/messaging/presence.py): pushed unless the
recipient's queue-depth row, read under its lock in the storing transaction, says no socket is
open; on both storage backends, and exact against a socket that joins while the event is stored."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connections, transaction

from apps.decentrl import storage
from apps.decentrl.storage import NonceClaim
from apps.messaging import presence
from apps.messaging import sql as messaging_sql
from apps.messaging.models import PendingEvent, PendingQueueDepth
from apps.messaging.notify import push_requested
from apps.messaging.services import pending_events_unacked
from apps.messaging.sql import Delivery
from tests.support.pglocks import another_session_waits_for_a_lock
from tests.support.registration import contract_both_ways

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def pushes():
    """The (tenant_id, did, type) of every push requested while the test runs."""
    seen: list[tuple] = []

    def record(sender, *, tenant_id, did, message, **kwargs):
        seen.append((tenant_id, did, message["type"]))

    push_requested.connect(record, dispatch_uid="test_presence.record")
    yield seen
    push_requested.disconnect(dispatch_uid="test_presence.record")


@pytest.fixture
def contracted(post_a, tenant_a, alice, bob, registered):
    contract_both_ways(post_a, alice, bob, tenant_a)
    return alice, bob


def _send(post_a, alice, bob, text: str = "blob") -> str:
    status, body = post_a.command(alice, text, recipient_did=bob.did, channel="TWO_WAY_PRIVATE")
    assert status == 200, body
    return body["pendingEventId"]


def _row(tenant, did) -> tuple[int, int, int]:
    return (
        PendingQueueDepth.objects.filter(tenant=tenant, recipient_did=did)
        .values_list("depth", "live", "live_until")
        .get()
    )


def _now() -> int:
    return int(time.time())


def test_a_did_that_never_had_a_socket(post_a, tenant_a, contracted, pushes):
    """No row before the event. The one statement reads the row before its queue trigger creates it
    (the trigger runs at the statement's end): nothing known, pushed."""
    alice, bob = contracted
    assert not PendingQueueDepth.objects.filter(tenant=tenant_a, recipient_did=bob.did).exists()
    _send(post_a, alice, bob)
    assert pushes == [(tenant_a.pk, bob.did, "PENDING_EVENTS")]
    assert _row(tenant_a, bob.did)[1] == 0
    _send(post_a, alice, bob)  # the row exists now: nobody live
    assert len(pushes) == 1


def test_an_open_socket_gets_the_push_and_after_it_closed_nothing_is_pushed(post_a, tenant_a, contracted, pushes):
    alice, bob = contracted
    presence.socket_entered(tenant_id=tenant_a.pk, did=bob.did, now_s=_now())
    _send(post_a, alice, bob, "one")
    assert pushes == [(tenant_a.pk, bob.did, "PENDING_EVENTS")]
    presence.socket_left(tenant_id=tenant_a.pk, did=bob.did)
    _send(post_a, alice, bob, "two")
    assert pushes == [(tenant_a.pk, bob.did, "PENDING_EVENTS")]
    # Both events are stored whatever was pushed.
    assert [r["payload"] for r in pending_events_unacked(tenant=tenant_a, did=bob.did)] == ["one", "two"]


def test_a_lapsed_lease_stops_vouching_for_a_count_left_too_high(post_a, tenant_a, contracted, pushes):
    """A socket tier that died leaves `live` at 1; once its lease has passed, nothing is pushed."""
    alice, bob = contracted
    presence.socket_entered(tenant_id=tenant_a.pk, did=bob.did, now_s=_now() - presence.lease_s() - 1)
    assert _row(tenant_a, bob.did)[1] == 1
    _send(post_a, alice, bob)
    assert pushes == []
    presence.socket_renewed(tenant_id=tenant_a.pk, did=bob.did, now_s=_now())
    _send(post_a, alice, bob)
    assert pushes == [(tenant_a.pk, bob.did, "PENDING_EVENTS")]


def test_presence_is_per_tenant_and_per_did(post_a, tenant_a, tenant_b, contracted, pushes):
    alice, bob = contracted
    presence.socket_entered(tenant_id=tenant_a.pk, did=alice.did, now_s=_now())
    presence.socket_entered(tenant_id=tenant_b.pk, did=bob.did, now_s=_now())
    presence.socket_left(tenant_id=tenant_a.pk, did=bob.did)  # no row: nothing to release
    presence.socket_entered(tenant_id=tenant_a.pk, did=bob.did, now_s=_now())
    presence.socket_left(tenant_id=tenant_a.pk, did=bob.did)
    _send(post_a, alice, bob)
    assert pushes == []


def test_the_counts_and_the_lease(tenant_a, tenant_b):
    did = "did:example:presence"
    presence.socket_entered(tenant_id=tenant_a.pk, did=did, now_s=1_000)
    presence.socket_entered(tenant_id=tenant_a.pk, did=did, now_s=900)  # an earlier clock never shortens it
    lease = presence.lease_s()
    assert _row(tenant_a, did) == (0, 2, 1_000 + lease)
    presence.socket_renewed(tenant_id=tenant_a.pk, did=did, now_s=2_000)
    assert _row(tenant_a, did) == (0, 2, 2_000 + lease)
    for _ in range(3):
        presence.socket_left(tenant_id=tenant_a.pk, did=did)
    assert _row(tenant_a, did) == (0, 0, 2_000 + lease)  # never below zero
    # A renewal counts its own socket when the count was lost (or the row purged).
    presence.socket_renewed(tenant_id=tenant_a.pk, did=did, now_s=3_000)
    assert _row(tenant_a, did) == (0, 1, 3_000 + lease)
    PendingQueueDepth.objects.filter(tenant=tenant_a, recipient_did=did).delete()
    presence.socket_renewed(tenant_id=tenant_a.pk, did=did, now_s=4_000)
    assert _row(tenant_a, did) == (0, 1, 4_000 + lease)
    assert not PendingQueueDepth.objects.filter(tenant=tenant_b).exists()


def test_the_queue_counters_keep_the_presence(post_a, tenant_a, contracted):
    """The queue triggers update `depth` only: a stored event and its ACK leave the socket count."""
    alice, bob = contracted
    presence.socket_entered(tenant_id=tenant_a.pk, did=bob.did, now_s=1_000)
    _send(post_a, alice, bob)
    row = _row(tenant_a, bob.did)
    assert row[1:] == (1, 1_000 + presence.lease_s())
    PendingEvent.objects.filter(tenant=tenant_a, recipient_did=bob.did).delete()
    assert _row(tenant_a, bob.did)[1:] == (1, 1_000 + presence.lease_s())


# -- exactness against a socket joining while the event is stored (PostgreSQL's row lock) --------


def _in_thread(fn):
    """Run `fn` on its own thread (its own database connection); returns (thread, result box)."""
    box: dict = {}

    def target():
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - re-raised by the test
            box["error"] = exc
        finally:
            connections.close_all()

    thread = threading.Thread(target=target)
    thread.start()
    return thread, box


def _deliver(tenant, alice, bob, nonce: str):
    claim = NonceClaim(tenant_id=tenant.pk, sender_did=alice.did, nonce=nonce, expires_at_ms=2**40, now_ms=1)
    return messaging_sql.deliver(storage.CLAIM, claim, Delivery(tenant, alice.did, bob.did, "racing", _now()))


def test_a_socket_that_joined_during_the_statement_is_seen(post_a, tenant_a, contracted, pushes):
    """The socket's write is uncommitted when the statement starts (its snapshot says nobody is
    live); the statement waits for the row, then reads the committed count and pushes."""
    alice, bob = contracted
    presence.socket_entered(tenant_id=tenant_a.pk, did=bob.did, now_s=_now())
    presence.socket_left(tenant_id=tenant_a.pk, did=bob.did)  # the row exists, nobody live
    with transaction.atomic():
        presence.socket_entered(tenant_id=tenant_a.pk, did=bob.did, now_s=_now())
        thread, box = _in_thread(lambda: _deliver(tenant_a, alice, bob, "n-race-1"))
        assert another_session_waits_for_a_lock(), "the statement did not wait for the presence row"
    thread.join(10)
    assert "error" not in box, box
    assert box["value"].event_id is not None and box["value"].may_have_socket is True
    assert pushes == [(tenant_a.pk, bob.did, "PENDING_EVENTS")]


def test_a_socket_joining_while_an_event_is_stored_finds_it_in_its_backlog(post_a, tenant_a, contracted, pushes):
    """The storing transaction holds the row: the socket's presence write waits for its commit,
    so the backlog read that follows it sees the event (which, nobody being live, was not pushed)."""
    alice, bob = contracted
    presence.socket_entered(tenant_id=tenant_a.pk, did=bob.did, now_s=_now())
    presence.socket_left(tenant_id=tenant_a.pk, did=bob.did)
    with transaction.atomic():
        found = _deliver(tenant_a, alice, bob, "n-race-2")
        assert found.may_have_socket is False

        def socket_enters_then_reads_its_backlog():
            presence.socket_entered(tenant_id=tenant_a.pk, did=bob.did, now_s=_now())
            return [r["id"] for r in pending_events_unacked(tenant=tenant_a, did=bob.did)]

        thread, box = _in_thread(socket_enters_then_reads_its_backlog)
        assert another_session_waits_for_a_lock(), (
            "the socket's presence write did not wait for the storing transaction"
        )
        assert thread.is_alive()
    thread.join(10)
    assert "error" not in box, box
    assert box["value"] == [found.event_id]
    assert pushes == []
