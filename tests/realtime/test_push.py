"""Pushes (DCTRL-0004 §10.5-§10.6), the backlog after AUTH_SUCCESS (docs/protocol-readings.md §6) and
PING/PONG (§10.4), through WebsocketCommunicator on the in-memory layer."""

from __future__ import annotations

import time

import pytest

from apps.messaging.models import PendingEvent
from apps.messaging.services import pending_events_acknowledge
from apps.realtime.groups import group_name
from apps.wire import contract as wc
from apps.wire.did import parse_decentrl
from tests.conftest import HOST_B
from tests.support.ordering import nothing_before_a_push
from tests.support.registration import contract_both_ways, register, signed_contract

from .conftest import connect_authenticated, run, send


def _queued(*, tenant, sender_did: str, recipient_did: str, payload: str) -> PendingEvent:
    """An event already in the recipient's queue (the backlog a socket reads after AUTH_SUCCESS)."""
    return PendingEvent.objects.create(
        tenant=tenant, sender_did=sender_did, recipient_did=recipient_did, payload=payload,
        payload_bytes=len(payload.encode("utf-8")),
    )  # fmt: skip


@pytest.fixture
def pair(post_a, tenant_a, alice, bob):
    register(post_a, alice, tenant_a)
    register(post_a, bob, tenant_a)
    return alice, bob


def test_two_way_private_pushes_pending_events_to_every_socket_of_the_recipient(post_a, tenant_a, pair, committed):
    alice, bob = pair
    contract_both_ways(post_a, alice, bob, tenant_a)

    async def body():
        bob_phone = await connect_authenticated(bob)
        bob_laptop = await connect_authenticated(bob)
        alice_sock = await connect_authenticated(alice)
        status, reply = await committed(
            lambda: post_a.command(alice, "opaque-blob", recipient_did=bob.did, channel="TWO_WAY_PRIVATE")
        )
        assert status == 200
        expected = {
            "type": "PENDING_EVENTS",
            "events": [{"id": reply["pendingEventId"], "sender_did": alice.did, "payload": "opaque-blob"}],
        }
        assert await bob_phone.receive_json_from() == expected
        assert await bob_laptop.receive_json_from() == expected
        await nothing_before_a_push(alice_sock, tenant_a.pk, alice.did)
        for comm in (bob_phone, bob_laptop, alice_sock):
            await comm.disconnect()

    run(body)


def test_a_refused_two_way_private_pushes_nothing(post_a, tenant_a, pair, committed):
    alice, bob = pair  # no contract between them

    async def body():
        bob_sock = await connect_authenticated(bob)
        status, reply = await committed(
            lambda: post_a.command(alice, "opaque-blob", recipient_did=bob.did, channel="TWO_WAY_PRIVATE")
        )
        assert (status, reply) == (404, {"type": "ERROR", "code": "COMMUNICATION_CONTRACT_NOT_FOUND"})
        await nothing_before_a_push(bob_sock, tenant_a.pk, bob.did)
        await bob_sock.disconnect()

    run(body)


def test_a_forwarded_contract_request_pushes_contracts_updated_to_the_recipient(post_a, tenant_a, pair, committed):
    alice, bob = pair
    req = wc.build_request(
        requestor_did=alice.did,
        recipient_did=bob.did,
        recipient_prekey=parse_decentrl(bob.did).pre_key,
        signing=alice.signing,
        expires_at=int(time.time()) + 86_400,
    )
    payload = {
        "type": "REQUEST_COMMUNICATION_CONTRACT",
        "encrypted_contract_request": req.encrypted,
        "requestor_ephemeral_public_key": req.ephemeral_public_b64,
    }

    async def body():
        bob_sock = await connect_authenticated(bob)
        alice_sock = await connect_authenticated(alice)
        status, reply = await committed(lambda: post_a.command(alice, payload, recipient_did=bob.did))
        assert status == 200, reply
        assert await bob_sock.receive_json_from() == {"type": "CONTRACTS_UPDATED"}
        await nothing_before_a_push(alice_sock, tenant_a.pk, alice.did)
        await bob_sock.disconnect()
        await alice_sock.disconnect()

    run(body)


def test_a_registration_request_pushes_nothing(post_a, tenant_a, pair, committed):
    alice, _ = pair

    async def body():
        alice_sock = await connect_authenticated(alice)
        await committed(lambda: register(post_a, alice, tenant_a))
        await nothing_before_a_push(alice_sock, tenant_a.pk, alice.did)
        await alice_sock.disconnect()

    run(body)


def test_a_contract_response_pushes_contracts_updated_to_the_other_party(post_a, tenant_a, pair, committed):
    alice, bob = pair
    signed, _, _ = signed_contract(alice, bob)
    payload = {"type": "COMMUNICATION_CONTRACT_RESPONSE", "signed_communication_contract": signed}

    async def body():
        alice_sock = await connect_authenticated(alice)
        bob_sock = await connect_authenticated(bob)
        status, reply = await committed(lambda: post_a.command(bob, payload, recipient_did=alice.did))
        assert status == 200, reply
        assert await alice_sock.receive_json_from() == {"type": "CONTRACTS_UPDATED"}
        await nothing_before_a_push(bob_sock, tenant_a.pk, bob.did)
        await alice_sock.disconnect()
        await bob_sock.disconnect()

    run(body)


def test_save_contract_pushes_contracts_updated_to_the_sender(post_a, tenant_a, pair, committed):
    alice, bob = pair
    signed, _, _ = signed_contract(alice, bob)
    payload = {"type": "SAVE_COMMUNICATION_CONTRACT", "signed_communication_contract": signed}

    async def body():
        alice_sock = await connect_authenticated(alice)
        bob_sock = await connect_authenticated(bob)
        status, reply = await committed(lambda: post_a.command(bob, payload, recipient_did=tenant_a.did))
        assert status == 200, reply
        assert await bob_sock.receive_json_from() == {"type": "CONTRACTS_UPDATED"}
        await nothing_before_a_push(alice_sock, tenant_a.pk, alice.did)
        await alice_sock.disconnect()
        await bob_sock.disconnect()

    run(body)


def test_a_push_for_one_tenant_never_reaches_another_tenants_socket(
    post_a, post_b, tenant_a, tenant_b, pair, carol, committed
):
    alice, bob = pair
    contract_both_ways(post_a, alice, bob, tenant_a)
    register(post_b, carol, tenant_b)
    assert group_name(tenant_a.pk, bob.did) != group_name(tenant_b.pk, bob.did)

    async def body():
        carol_sock = await connect_authenticated(carol, host=HOST_B)
        status, _ = await committed(
            lambda: post_a.command(alice, "opaque-blob", recipient_did=bob.did, channel="TWO_WAY_PRIVATE")
        )
        assert status == 200
        await nothing_before_a_push(carol_sock, tenant_b.pk, carol.did)
        await carol_sock.disconnect()

    run(body)


def test_the_backlog_follows_auth_success_in_order_without_acknowledged_events(tenant_a, pair):
    alice, bob = pair
    events = [
        _queued(tenant=tenant_a, sender_did=alice.did, recipient_did=bob.did, payload=f"blob-{i}") for i in range(4)
    ]
    pending_events_acknowledge(tenant=tenant_a, did=bob.did, ids=[str(events[1].public_id)])

    async def body():
        bob_sock = await connect_authenticated(bob)
        assert await bob_sock.receive_json_from() == {
            "type": "PENDING_EVENTS",
            "events": [
                {"id": str(e.public_id), "sender_did": alice.did, "payload": f"blob-{i}"}
                for i, e in enumerate(events)
                if i != 1
            ],
        }
        await nothing_before_a_push(bob_sock, tenant_a.pk, bob.did)
        alice_sock = await connect_authenticated(alice)  # the sender has no backlog
        await nothing_before_a_push(alice_sock, tenant_a.pk, alice.did)
        await bob_sock.disconnect()
        await alice_sock.disconnect()

    run(body)


def test_a_long_backlog_arrives_in_batches(tenant_a, pair):
    alice, bob = pair
    ids = [
        str(_queued(tenant=tenant_a, sender_did=alice.did, recipient_did=bob.did, payload=f"b{i}").public_id)
        for i in range(120)
    ]

    async def body():
        bob_sock = await connect_authenticated(bob)
        sizes, seen = [], []
        for _ in range(3):
            frame = await bob_sock.receive_json_from()
            assert frame["type"] == "PENDING_EVENTS"
            sizes.append(len(frame["events"]))
            seen.extend(e["id"] for e in frame["events"])
        assert sizes == [50, 50, 20]
        assert seen == ids
        await nothing_before_a_push(bob_sock, tenant_a.pk, bob.did)
        await bob_sock.disconnect()

    run(body)


def test_backlog_frames_stay_under_a_mebibyte_unless_one_event_is_bigger(tenant_a, pair):
    alice, bob = pair
    big = "A" * 600_000
    for _ in range(3):
        _queued(tenant=tenant_a, sender_did=alice.did, recipient_did=bob.did, payload=big)
    _queued(tenant=tenant_a, sender_did=alice.did, recipient_did=bob.did, payload="small")

    async def body():
        bob_sock = await connect_authenticated(bob)
        counts = [len((await bob_sock.receive_json_from())["events"]) for _ in range(3)]
        assert counts == [1, 1, 2]
        await nothing_before_a_push(bob_sock, tenant_a.pk, bob.did)
        await bob_sock.disconnect()

    run(body)


def test_it_pings_at_the_configured_interval_and_accepts_pong(settings, pair):
    settings.MEDIATOR_WS_PING_INTERVAL_S = 0.2
    alice, _ = pair

    async def body():
        comm = await connect_authenticated(alice)
        before = int(time.time() * 1000)
        ping = await comm.receive_json_from(timeout=2)
        assert set(ping) == {"type", "timestamp"} and ping["type"] == "PING"
        assert before <= ping["timestamp"] <= int(time.time() * 1000)
        await send(comm, {"type": "PONG", "timestamp": ping["timestamp"]})
        second = await comm.receive_json_from(timeout=2)
        assert second["type"] == "PING" and second["timestamp"] >= ping["timestamp"]
        await comm.disconnect()

    run(body)


def test_no_ping_before_authentication(settings, pair):
    settings.MEDIATOR_WS_PING_INTERVAL_S = 0.05
    settings.MEDIATOR_WS_AUTH_TIMEOUT_S = 0.2
    from .conftest import communicator

    async def body():
        comm = communicator()
        assert (await comm.connect())[0]
        # A PING timer started at the connect would have been due well before the AUTHENTICATE
        # deadline, and the socket's loop runs its timers in the order they are due.
        assert await comm.receive_json_from(timeout=5) == {"type": "AUTH_FAILED", "code": "AUTH_TIMEOUT"}
        await comm.disconnect()

    run(body)


def _tenant_pk(who) -> int:
    from apps.tenants.models import Tenant

    return Tenant.objects.get(did=who.mediator_did).pk


def test_a_push_to_a_socket_the_server_already_closed_is_dropped_quietly():
    from apps.decentrl.consumers import AUTHENTICATED, CLOSED, SocketConsumer
    from apps.realtime.sendbudget import SendBudget

    consumer = SocketConsumer()
    consumer.state = AUTHENTICATED
    consumer.budget = SendBudget(1024, transport=None)  # set by connect(); nothing to read here

    async def refuse(**kwargs):
        raise RuntimeError("Attempt to send on a closed protocol")

    consumer.send = refuse

    async def body():
        await consumer.realtime_push({"type": "realtime.push", "text": '{"type":"CONTRACTS_UPDATED"}'})

    run(body)
    assert consumer.state == CLOSED
