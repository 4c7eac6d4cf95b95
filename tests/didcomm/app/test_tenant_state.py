"""Open `/didcomm/ws` sockets follow their tenant's state (WebsocketCommunicator, in-memory layer): a
suspended tenant's sockets get an `e.p.me.unavailable` problem report and close 4503, a deleted
tenant's or one with DIDComm switched off `e.p.xfer.unknown-mediator` and 4404 (what a new
connection gets), live or not; and a socket that never got the group message refuses its next
frame (nothing executed) and closes. Real Daphne: tests/didcomm/app/test_e2e_socket.py."""

from __future__ import annotations

import json

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator

from apps.didcomm import identity, models, policy
from apps.didcomm.models import Mediation
from apps.didcomm.routing import websocket_urlpatterns
from apps.tenants.models import Tenant
from apps.tenants.services import Actor, tenant_suspend, tenant_update
from tests.conftest import HOST_A, HOST_B
from tests.support.didcomm_agent import CM2, PICKUP, Agent
from tests.support.live_marker import is_marker, send_marker

CLI = Actor(None, "cli")
PROBLEM = "https://didcomm.org/report-problem/2.0/problem-report"
LIVE = {"live_delivery": True}


@pytest.fixture(autouse=True)
def in_memory_layer(settings):
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}


@pytest.fixture(autouse=True)
def keep_the_test_connection(monkeypatch):
    """As tests/realtime/conftest.py: the consumer's database calls run inside the test transaction."""
    monkeypatch.setattr("channels.db.close_old_connections", lambda: None)


async def _open(host: str = HOST_A) -> WebsocketCommunicator:
    comm = WebsocketCommunicator(URLRouter(websocket_urlpatterns), "/didcomm/ws", headers=[(b"host", host.encode())])
    comm.scope["client"] = ("127.0.0.9", 5555)
    assert (await comm.connect())[0]
    return comm


async def _closed_with(comm: WebsocketCommunicator, code: str, close: int) -> None:
    report = json.loads(await comm.receive_from(timeout=2))
    assert (report["type"], report["body"]["code"]) == (PROBLEM, code)
    assert await comm.receive_output(timeout=2) == {"type": "websocket.close", "code": close}


@pytest.fixture
def granted(didcomm_a, wallet):
    status, answer, _ = didcomm_a.send(wallet, wallet.message(CM2 + "mediate-request"))
    assert (status, answer["type"]) == (200, CM2 + "mediate-grant")
    return wallet


async def _next_is_marker(comm: WebsocketCommunicator, wallet: Agent, marker: dict) -> None:
    """The socket's next frame is the marker's delivery (packed for `wallet`), not a problem report."""
    frame = await comm.receive_from(timeout=2)
    assert "ciphertext" in json.loads(frame), frame
    assert is_marker(wallet.unpack(frame)[0], marker)


async def _live(mediator: str, wallet: Agent, host: str = HOST_A) -> WebsocketCommunicator:
    comm = await _open(host)
    await comm.send_to(bytes_data=wallet.pack(wallet.message(PICKUP + "live-delivery-change", LIVE), mediator))
    status, _ = wallet.unpack(await comm.receive_from(timeout=2))
    assert status["body"] == {"message_count": 0, **LIVE}
    return comm


@pytest.mark.parametrize(
    ("change", "code", "close"),
    [
        ("suspend", "e.p.me.unavailable", 4503),
        ("didcomm off", "e.p.xfer.unknown-mediator", 4404),
        ("delete", "e.p.xfer.unknown-mediator", 4404),
    ],
)
def test_it_closes_the_sockets_of_a_tenant_that_stops_serving_didcomm(
    tenant_a, tenant_b, didcomm_a, didcomm_b, granted, committed, change, code, close
):
    carol = Agent()  # live on tenant B's socket: it carries the marker
    status, answer, _ = didcomm_b.send(carol, carol.message(CM2 + "mediate-request"))
    assert (status, answer["type"]) == (200, CM2 + "mediate-grant")

    def apply():
        if change == "suspend":
            tenant_suspend(tenant=tenant_a, actor=CLI)
        elif change == "didcomm off":
            policy.policy_update(tenant=tenant_a, actor=CLI, enabled=False)
        else:
            Tenant.objects.filter(pk=tenant_a.pk).delete()

    mediator, mediator_b = didcomm_a.mediator_did, didcomm_b.mediator_did

    async def body():
        live = await _live(mediator, granted)
        idle = await _open()
        other = await _live(mediator_b, carol, HOST_B)
        await committed(apply)
        for comm in (live, idle):
            await _closed_with(comm, code, close)
        # Tenant B's socket got nothing: the marker, sent after A's change, is its next frame.
        await _next_is_marker(other, carol, await send_marker(tenant_b.pk, carol.did))
        # And a new connection is refused the same way.
        await _closed_with(await _open(), code, close)
        await other.disconnect()

    async_to_sync(body)()


def test_a_save_that_keeps_didcomm_on_leaves_the_sockets_open(tenant_a, didcomm_a, granted, committed):
    mediator = didcomm_a.mediator_did

    async def body():
        live = await _live(mediator, granted)
        await committed(lambda: tenant_update(tenant=tenant_a, actor=CLI, name="Renamed"))
        await committed(lambda: policy.policy_update(tenant=tenant_a, actor=CLI, queue_cap=10))
        # Open and live: the marker sent after both saves is its next frame, not a close.
        await _next_is_marker(live, granted, await send_marker(tenant_a.pk, granted.did))
        await live.disconnect()

    async_to_sync(body)()


@pytest.mark.parametrize(
    ("change", "code", "close"),
    [("suspend", "e.p.me.unavailable", 4503), ("didcomm off", "e.p.xfer.unknown-mediator", 4404)],
)
def test_a_socket_that_missed_the_change_refuses_its_next_frame_and_closes(
    tenant_a, didcomm_a, granted, change, code, close
):
    """The channel layer is best-effort: a frame meets the tenant's state as POST /didcomm does."""
    mediator = didcomm_a.mediator_did
    rcpt = Agent()
    update = granted.message(CM2 + "keylist-update", {"updates": [{"recipient_did": rcpt.did, "action": "add"}]})

    async def body():
        comm = await _open()

        def change_without_signals():  # no save signal: no group message
            if change == "suspend":
                Tenant.objects.filter(pk=tenant_a.pk).update(status=Tenant.Status.SUSPENDED)
            else:
                models.DidcommPolicy.objects.filter(tenant=tenant_a).update(enabled=False)
            identity.ACCEPTING.clear()

        await sync_to_async(change_without_signals)()
        await comm.send_to(bytes_data=granted.pack(update, mediator))
        await _closed_with(comm, code, close)

    async_to_sync(body)()
    # Nothing was executed: the recipient was not added.
    assert not models.RecipientKey.objects.filter(mediation=Mediation.objects.get(tenant=tenant_a)).exists()


@pytest.mark.parametrize("announced", [True, False])
def test_a_live_didcomm_v1_socket_closes_when_its_tenant_is_suspended(client, tenant_a, committed, announced):
    """Pickup 2.0 live mode (Credo's way): the group message closes it; without it, its next v1 frame
    is refused and the socket closes."""
    from tests.support.didcomm_agent_v1 import PICKUP2, AgentV1

    from .test_v1 import V1Door

    door = V1Door(HOST_A)
    agent = AgentV1()
    assert door.mediate(agent)["@type"].endswith("mediate-grant")

    async def body():
        comm = await _open()
        change = agent.message(PICKUP2 + "live-delivery-change", live_delivery=True)
        await comm.send_to(bytes_data=agent.pack(change, door.key))
        status, _ = agent.unpack(await comm.receive_from(timeout=2))
        assert (status["@type"], status["live_delivery"]) == (PICKUP2 + "status", True)
        if announced:
            await committed(lambda: tenant_suspend(tenant=tenant_a, actor=CLI))
            await _closed_with(comm, "e.p.me.unavailable", 4503)
            return
        await sync_to_async(Tenant.objects.filter(pk=tenant_a.pk).update)(status=Tenant.Status.SUSPENDED)
        await comm.send_to(bytes_data=agent.pack(agent.message(PICKUP2 + "status-request"), door.key))
        # The v1 path's own refusal (a Report Problem 1.0, binary as v1 frames are), then the close.
        report = json.loads(await comm.receive_from(timeout=2))
        assert (report["@type"], report["description"]["code"]) == (
            "https://didcomm.org/report-problem/1.0/problem-report",
            "e.p.me.unavailable",
        )
        assert await comm.receive_output(timeout=2) == {"type": "websocket.close", "code": 4503}

    async_to_sync(body)()
