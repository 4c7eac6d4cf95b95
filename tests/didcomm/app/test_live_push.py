"""Live push without the database (issue 15 §7): the after-commit wake carries the stored
attachment (up to 64 KiB), a live socket packs its `delivery` from it with the grant, identity and
key it loaded when live mode started, reads the queue only for a bigger message, and loads its
state again when the client's grant is revoked or the mediator identity rotated (LIVE_REFRESH)."""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest
from channels.layers import get_channel_layer

from apps.didcomm import identity, policy, queue, recipients
from apps.didcomm.mediation import mediation_revoke
from apps.didcomm.models import presence_key
from apps.didcomm.recipients import did_hash
from apps.messaging.models import PendingQueueDepth
from apps.realtime.channels_redis_adapter import sync_sender
from apps.realtime.groups import group_name
from apps.realtime.push import PUSH_TYPE, pusher
from tests.didcomm.app.conftest import REDIS_DB_URL
from tests.support.didcomm_agent import PICKUP, Agent, forward_for
from tests.support.layers import redis_channel_layers
from tests.support.live_marker import is_marker, send_marker

LIVE = {"live_delivery": True}


# The producer's side (the wake carries the stored text up to exactly 64 KiB) is tested with the
# store: tests/didcomm/app/test_forward_storage.py.


# --- the socket (consumer), on a real Daphne with the Redis channel layer ---------------------------


@pytest.fixture
def deploy(deployment, settings):
    # This process (the operator's revoke and rotate, the test's own wakes) and Daphne share one layer.
    settings.CHANNEL_LAYERS = redis_channel_layers(REDIS_DB_URL)
    return deployment()


async def _live(deploy, wallet: Agent, queued: int = 0):
    ws = await deploy.socket()
    await ws.send(wallet.pack(wallet.message(PICKUP + "live-delivery-change", LIVE), deploy.mediator_did).decode())
    status, _ = wallet.unpack(await asyncio.wait_for(ws.recv(), 10))
    body = status["body"] if queued == 0 else {k: status["body"][k] for k in ("message_count", *LIVE)}
    assert body == {"message_count": queued, **LIVE}
    return ws


async def _pushed(ws, wallet: Agent) -> tuple[dict, str]:
    """The next pushed frame: (the decrypted message, the mediator key it was authcrypt from)."""
    message, decrypted = wallet.unpack(await asyncio.wait_for(ws.recv(), 10))
    return message, decrypted.sender_kid


async def _also_live(deploy, ws, client: Agent) -> None:
    """`client` live on `ws` too (a socket carries any number of live clients)."""
    await ws.send(client.pack(client.message(PICKUP + "live-delivery-change", LIVE), deploy.mediator_did).decode())
    status, _ = client.unpack(await asyncio.wait_for(ws.recv(), 10))
    assert status["body"] == {"message_count": 0, **LIVE}


async def _nothing_before_a_marker(deploy, ws, client: Agent) -> None:
    """Nothing was pushed on `ws` by the events this process sent it before: the next frame is the
    marker's, a wake for `client` (live on `ws`) sent after them (tests/support/live_marker.py)."""
    marker = await send_marker(deploy.tenant.pk, client.did)
    delivery, _ = await _pushed(ws, client)
    assert is_marker(delivery, marker), delivery


async def _wake(deploy, did: str, wake: dict, *, with_group: bool = True) -> None:
    """A wake straight onto the channel layer, as apps.realtime.push sends it, after the pushes this
    process queued before it (an operator's revoke or rotate) have been sent."""
    await asyncio.to_thread(pusher(sync_sender(get_channel_layer())).flush)
    group = group_name(deploy.tenant.pk, did)
    event = {"type": PUSH_TYPE, "text": json.dumps(wake)}
    if with_group:
        event["group"] = group
    await get_channel_layer().group_send(group, event)


def _queued(deploy, wallet: Agent) -> list[dict]:
    delivery = deploy.send(wallet, wallet.message(PICKUP + "delivery-request", {"limit": 100}))
    return delivery.get("attachments", []) if delivery["type"] == PICKUP + "delivery" else []


def test_a_push_is_packed_from_the_wake_without_reading_the_queue(deploy):
    wallet, rcpt = deploy.grant()

    async def body():
        ws = await _live(deploy, wallet)
        try:
            # A real forward: pushed at once, from the mediator DID, exactly what is stored.
            assert (await asyncio.to_thread(deploy.post, forward_for(rcpt, deploy.mediator_did))).status_code == 202
            delivery, kid = await _pushed(ws, wallet)
            assert (delivery["type"], kid, delivery["to"]) == (
                PICKUP + "delivery",
                deploy.mediator_did + "#key-2",
                [wallet.did],
            )
            [real] = delivery["attachments"]
            # A wake for a message the queue does not hold is pushed as it is: the socket never read the queue.
            ghost = {"id": str(uuid.uuid4()), "data": {"json": {"protected": "x", "ciphertext": "y"}}}
            await _wake(deploy, wallet.did, {"type": queue.WAKE, "ids": [ghost["id"]],
                        "items": [{"id": ghost["id"], "data": json.dumps(ghost["data"])}]})  # fmt: skip
            delivery, kid = await _pushed(ws, wallet)
            assert (delivery["attachments"], kid) == ([ghost], deploy.mediator_did + "#key-2")
            # An event that does not name its group (an older sender) reads the queue: the ghost is not there.
            await _wake(deploy, wallet.did, {"type": queue.WAKE, "ids": [ghost["id"]],
                        "items": [{"id": ghost["id"], "data": json.dumps(ghost["data"])}]}, with_group=False)  # fmt: skip
            await _nothing_before_a_marker(deploy, ws, wallet)
            return real
        finally:
            await ws.close()

    real = asyncio.run(body())
    # A push is never the only copy: the real message is still queued, the same bytes.
    assert _queued(deploy, wallet) == [real]
    assert rcpt.unpack(real["data"]["json"])[0]["body"] == {"n": 1}


def test_over_64_kib_the_socket_reads_the_pushed_message_from_the_queue(deploy):
    wallet, rcpt = deploy.grant()
    inner = json.loads(
        Agent().pack({"id": "big", "type": "https://example.org/blob", "body": {"b": "A" * 70_000}}, rcpt.did)
    )

    async def body():
        ws = await _live(deploy, wallet)
        try:
            assert (
                await asyncio.to_thread(deploy.post, forward_for(rcpt, deploy.mediator_did, inner))
            ).status_code == 202
            delivery, kid = await _pushed(ws, wallet)
            assert kid == deploy.mediator_did + "#key-2"
            # A wake without items for a message that is not queued pushes nothing.
            await _wake(deploy, wallet.did, {"type": queue.WAKE, "ids": [str(uuid.uuid4())]})
            await _nothing_before_a_marker(deploy, ws, wallet)
            return delivery["attachments"]
        finally:
            await ws.close()

    attachments = asyncio.run(body())
    assert len(json.dumps(attachments[0]["data"])) > 64 * 1024
    assert _queued(deploy, wallet) == attachments
    assert rcpt.unpack(attachments[0]["data"]["json"])[0]["id"] == "big"


def test_a_revoked_grant_stops_pushing_at_once(deploy):
    from apps.didcomm.models import Mediation
    from apps.tenants.services import Actor

    wallet, rcpt = deploy.grant()
    other, other_rcpt = deploy.grant()
    marker, _ = deploy.grant()  # live on the wallet's socket too: it carries the marker

    async def body():
        ws, ws_other = await _live(deploy, wallet), await _live(deploy, other)
        try:
            await _also_live(deploy, ws, marker)
            mediation = await asyncio.to_thread(Mediation.objects.get, client_hash=recipients.did_hash(wallet.did))
            await asyncio.to_thread(mediation_revoke, mediation=mediation, actor=Actor(None, "cli"))
            # A wake that was already on its way when the grant went (the socket kept the grant in memory).
            mid = str(uuid.uuid4())
            wake = {"type": queue.WAKE, "ids": [mid], "items": [{"id": mid, "data": '{"json":{"a":1}}'}]}
            await _wake(deploy, wallet.did, wake)
            await _nothing_before_a_marker(deploy, ws, marker)
            # The other client's socket is not affected.
            assert (
                await asyncio.to_thread(deploy.post, forward_for(other_rcpt, deploy.mediator_did))
            ).status_code == 202
            delivery, _ = await _pushed(ws_other, other)
            assert len(delivery["attachments"]) == 1
        finally:
            await ws.close()
            await ws_other.close()

    asyncio.run(body())
    assert "revoked" == Mediation.objects.get(client_hash=recipients.did_hash(wallet.did)).state


def test_a_rotated_identity_pushes_from_the_new_did_at_once(deploy):
    from apps.tenants.services import Actor

    wallet, rcpt = deploy.grant()
    old = deploy.mediator_did

    async def body():
        ws = await _live(deploy, wallet)
        try:
            new = (
                await asyncio.to_thread(identity.identity_rotate, tenant=deploy.tenant, actor=Actor(None, "cli"))
            ).did
            assert new != old
            # The announcement (queued for the client) is pushed, authcrypt from the new DID.
            grant, kid = await _pushed(ws, wallet)
            [att] = grant["attachments"]
            announcement, announced_by = wallet.unpack(att["data"]["json"])
            assert (announced_by.sender_kid, announcement["body"]) == (
                new + "#key-2",
                {"routing_did": new, "previous_routing_did": old},
            )
            assert (kid, grant["from"]) == (new + "#key-2", new)
            # A forward to the old DID (still accepted for the grace period) is pushed from the new one.
            assert (await asyncio.to_thread(deploy.post, forward_for(rcpt, old))).status_code == 202
            delivery, kid = await _pushed(ws, wallet)
            assert (kid, delivery["from"], len(delivery["attachments"])) == (new + "#key-2", new, 1)
        finally:
            await ws.close()

    asyncio.run(body())


def test_a_message_in_the_backlog_and_in_a_wake_is_pushed_once(deploy):
    """A message stored while live mode starts is in the backlog the socket pushes and in the wake
    that follows: it goes out once (Live.unsent); the next message still goes out."""
    wallet, rcpt = deploy.grant()
    assert deploy.post(forward_for(rcpt, deploy.mediator_did)).status_code == 202

    async def body():
        ws = await _live(deploy, wallet, queued=1)
        try:
            backlog, _ = await _pushed(ws, wallet)
            [first] = backlog["attachments"]
            item = {"id": first["id"], "data": json.dumps(first["data"])}
            await _wake(deploy, wallet.did, {"type": queue.WAKE, "ids": [first["id"]], "items": [item]})
            await _nothing_before_a_marker(deploy, ws, wallet)
            assert (await asyncio.to_thread(deploy.post, forward_for(rcpt, deploy.mediator_did))).status_code == 202
            delivery, _ = await _pushed(ws, wallet)
            [second] = delivery["attachments"]
            return first, second
        finally:
            await ws.close()

    first, second = asyncio.run(body())
    assert first["id"] != second["id"]
    assert [a["id"] for a in _queued(deploy, wallet)] == [first["id"], second["id"]]


@pytest.mark.parametrize(
    ("change", "code", "close"),
    [("suspend", "e.p.me.unavailable", 4503), ("didcomm off", "e.p.xfer.unknown-mediator", 4404)],
)
def test_a_tenant_that_stops_serving_didcomm_closes_its_live_sockets_at_once(deploy, change, code, close):
    """The operator's action in this process reaches the socket on Daphne through the Redis layer."""
    from apps.tenants.services import Actor, tenant_suspend

    wallet, rcpt = deploy.grant()

    def apply():
        if change == "suspend":
            tenant_suspend(tenant=deploy.tenant, actor=Actor(None, "cli"))
        else:
            policy.policy_update(tenant=deploy.tenant, actor=Actor(None, "cli"), enabled=False)

    async def body():
        ws = await _live(deploy, wallet)
        try:
            await asyncio.to_thread(apply)
            report = json.loads(await asyncio.wait_for(ws.recv(), 10))
            await asyncio.wait_for(ws.wait_closed(), 10)
            return report, ws.close_code
        finally:
            await ws.close()

    report, close_code = asyncio.run(body())
    assert (report["type"], report["body"]["code"], close_code) == (
        "https://didcomm.org/report-problem/2.0/problem-report",
        code,
        close,
    )


# --- presence (apps/messaging/presence.py): a forward wakes only a client that may be live ---------


def _live_count(deploy, did: str) -> int | None:
    key = presence_key(did_hash(did))
    rows = PendingQueueDepth.objects.filter(tenant=deploy.tenant, recipient_did=key).values_list("live", flat=True)
    return next(iter(rows), None)


async def _live_becomes(deploy, did: str, expected: int, seconds: float = 10.0) -> None:
    """The socket's presence write lands after its reply (disconnect: after the close): poll briefly."""
    deadline = asyncio.get_running_loop().time() + seconds
    while (found := await asyncio.to_thread(_live_count, deploy, did)) != expected:
        assert asyncio.get_running_loop().time() < deadline, (found, expected)
        await asyncio.sleep(0.05)


def test_live_mode_marks_its_client_present_until_it_ends(deploy):
    wallet, rcpt = deploy.grant()
    marker, marker_rcpt = deploy.grant()

    async def body():
        layer = get_channel_layer()
        assert await asyncio.to_thread(_live_count, deploy, wallet.did) is None
        ws = await _live(deploy, wallet)
        await _live_becomes(deploy, wallet.did, 1)
        # The same client asking for live mode again on the same socket counts once.
        await ws.send(wallet.pack(wallet.message(PICKUP + "live-delivery-change", LIVE), deploy.mediator_did).decode())
        wallet.unpack(await asyncio.wait_for(ws.recv(), 10))
        second = await _live(deploy, wallet)
        await _live_becomes(deploy, wallet.did, 2)
        # A forward while live is pushed; live mode switched off on one socket, one is left.
        assert (await asyncio.to_thread(deploy.post, forward_for(rcpt, deploy.mediator_did))).status_code == 202
        assert (await _pushed(ws, wallet))[0]["type"] == PICKUP + "delivery"
        assert (await _pushed(second, wallet))[0]["type"] == PICKUP + "delivery"
        off = wallet.message(PICKUP + "live-delivery-change", {"live_delivery": False})
        await second.send(wallet.pack(off, deploy.mediator_did).decode())
        wallet.unpack(await asyncio.wait_for(second.recv(), 10))
        await _live_becomes(deploy, wallet.did, 1)
        await ws.close()
        await _live_becomes(deploy, wallet.did, 0)
        # Nobody live: the forward is stored and no wake leaves; the socket that is not live hears
        # nothing. A channel of this process in the client's group would get such a wake. The
        # marker: a forward to a client live on `second`, which must wake it. Daphne's pusher sends
        # its wakes in the order the forwards committed (one thread, oldest first), so a wake for
        # the first forward would reach the spy before the marker's.
        spy = await layer.new_channel()
        await layer.group_add(group_name(deploy.tenant.pk, wallet.did), spy)
        await layer.group_add(group_name(deploy.tenant.pk, marker.did), spy)
        await _also_live(deploy, second, marker)
        await _live_becomes(deploy, marker.did, 1)
        assert (await asyncio.to_thread(deploy.post, forward_for(rcpt, deploy.mediator_did))).status_code == 202
        assert (await asyncio.to_thread(deploy.post, forward_for(marker_rcpt, deploy.mediator_did))).status_code == 202
        woken = await asyncio.wait_for(layer.receive(spy), 10)
        assert (woken["type"], woken["group"]) == (PUSH_TYPE, group_name(deploy.tenant.pk, marker.did))
        delivery, _ = await _pushed(second, marker)
        [att] = delivery["attachments"]
        assert marker_rcpt.unpack(att["data"]["json"])[0]["body"] == {"n": 1}
        await second.close()

    asyncio.run(body())
    assert len(_queued(deploy, wallet)) == 2
