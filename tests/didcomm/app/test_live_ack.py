"""Live deliveries are acknowledged (docs/didcomm.md): a push still queued MEDIATOR_DIDCOMM_LIVE_ACK_TIMEOUT_S
after it went out is announced (`queue.live_unacknowledged`) and pushed again on the same socket,
at most live.LIVE_RESENDS times; an acknowledged one never is; one whose socket closed is announced,
not pushed, and a later pickup gets it with the same id. On an injected clock (`live.clock`), in
process (WebsocketCommunicator, in-memory layer); a frame nudges the socket's check, so no test waits
for time to pass. The same on a real Daphne with the real clock: test_pickup4_live.py."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator

from apps.didcomm import live, queue
from apps.didcomm.models import QueuedMessage
from apps.didcomm.routing import websocket_urlpatterns
from tests.conftest import HOST_A
from tests.support.didcomm_agent import CM2, PICKUP, Agent, forward_for
from tests.support.didcomm_agent_v1 import CM1, PICKUP2, AgentV1, forward_to
from tests.support.didcomm_client import DidcommPoster

from .test_v1 import V1Door

P4 = "https://didcomm.org/message-pickup/4.0/"
TIMEOUT = 30.0


@pytest.fixture(autouse=True)
def in_memory_layer(settings):
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    settings.MEDIATOR_DIDCOMM_LIVE_ACK_TIMEOUT_S = TIMEOUT


@pytest.fixture(autouse=True)
def keep_the_test_connection(monkeypatch):
    """As tests/realtime/conftest.py: the consumer's database calls run inside the test transaction."""
    monkeypatch.setattr("channels.db.close_old_connections", lambda: None)


class Clock:
    """The ack timeout's clock, moved by the test."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(live, "clock", fake)
    return fake


@pytest.fixture
def announced():
    """What `queue.live_unacknowledged` said, in order: (mediation id, client DID, message ids)."""
    calls: list[tuple[int, str, list[str]]] = []
    changed = threading.Condition()

    def receiver(sender, tenant_id, mediation_id, client_did, message_ids, **kw):
        with changed:
            calls.append((mediation_id, client_did, list(message_ids)))
            changed.notify_all()

    queue.live_unacknowledged.connect(receiver, weak=False)

    async def until(n: int) -> list:
        """The calls once there are `n` (the socket's check runs on the event loop: no blocking here)."""
        deadline = time.monotonic() + 10
        while len(calls) < n and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        with changed:
            assert len(calls) == n, calls
            return list(calls)

    yield until
    queue.live_unacknowledged.disconnect(receiver)


class V2:
    """A v2 wallet granted on tenant A, its recipient, and its Pickup (3.0 or 4.0) frames."""

    def __init__(self, didcomm, pickup: str):
        self.didcomm, self.pickup = didcomm, pickup
        self.wallet, self.rcpt = Agent(), Agent()
        self.mediator = didcomm.mediator_did
        didcomm.send(self.wallet, self.wallet.message(CM2 + "mediate-request"))
        update = {"updates": [{"recipient_did": self.rcpt.did, "action": "add"}]}
        didcomm.send(self.wallet, self.wallet.message(CM2 + "keylist-update", update))
        self.did = self.wallet.did

    def frame(self, kind: str, pickup: str | None = None, **body) -> bytes:
        return self.wallet.pack(self.wallet.message((pickup or self.pickup) + kind, body), self.mediator)

    def open(self, frame) -> dict:
        return self.wallet.unpack(frame)[0]

    def type(self, message: dict) -> str:
        return message["type"]

    def ids(self, delivery: dict) -> list[str]:
        return [a["id"] for a in delivery["attachments"]]

    def forward(self) -> None:
        assert self.didcomm.post(forward_for(self.rcpt, self.mediator)).status_code == 202

    def ack(self, ids: list[str]) -> None:
        self.didcomm.send(self.wallet, self.wallet.message(P4 + "messages-received", {"message_id_list": ids}))

    def picked_up(self) -> list[str]:
        _, delivery, _ = self.didcomm.send(
            self.wallet, self.wallet.message(P4 + "delivery-request", {"message_count_limit": 100})
        )
        return self.ids(delivery)


class V1:
    """A v1 connection granted on tenant A, its key, and Pickup 4.0's v1 frames."""

    def __init__(self, client, pickup: str):
        self.door, self.pickup = V1Door(HOST_A), pickup
        self.agent, self.key = AgentV1(), AgentV1()
        assert self.door.mediate(self.agent)["@type"] == CM1 + "mediate-grant"
        update = [{"recipient_key": self.key.did_key, "action": "add"}]
        self.door.send(self.agent, self.agent.message(CM1 + "keylist-update", updates=update))
        self.did = self.agent.did

    def frame(self, kind: str, pickup: str | None = None, **fields) -> bytes:
        return self.agent.pack(self.agent.message((pickup or self.pickup) + kind, **fields), self.door.key)

    def open(self, frame) -> dict:
        return self.agent.unpack(frame)[0]

    def type(self, message: dict) -> str:
        return message["@type"]

    def ids(self, delivery: dict) -> list[str]:
        return [a["@id"] for a in delivery["~attach"]]

    def forward(self) -> None:
        inner = json.loads(AgentV1().pack({"@type": "https://didcomm.org/basicmessage/1.0/message", "@id": "m"},
                                          self.key.did_key))  # fmt: skip
        assert self.door.post(forward_to(self.key.did_key, self.door.key, inner)).status_code == 200

    def ack(self, ids: list[str]) -> None:
        self.door.send(self.agent, self.agent.message(P4 + "messages-received", message_id_list=ids))

    def picked_up(self) -> list[str]:
        _, delivery, _ = self.door.send(
            self.agent, self.agent.message(P4 + "delivery-request", message_count_limit=100)
        )
        return self.ids(delivery)


CLIENTS = {"v2 pickup 4.0": (V2, P4), "v2 pickup 3.0": (V2, PICKUP), "v1 pickup 4.0": (V1, P4),
           "v1 pickup 2.0": (V1, PICKUP2)}  # fmt: skip


@pytest.fixture(params=list(CLIENTS))
def subject(request, client, tenant_a):
    kind, pickup = CLIENTS[request.param]
    if kind is V2:
        return V2(DidcommPoster(HOST_A), pickup)
    return V1(client, pickup)


async def _live(subject) -> WebsocketCommunicator:
    comm = WebsocketCommunicator(URLRouter(websocket_urlpatterns), "/didcomm/ws", headers=[(b"host", HOST_A.encode())])
    comm.scope["client"] = ("127.0.0.9", 5555)
    assert (await comm.connect())[0]
    await comm.send_to(bytes_data=subject.frame("live-delivery-change", live_delivery=True))
    status = subject.open(await comm.receive_from(timeout=5))
    assert (
        subject.type(status),
        status["live_delivery"] if "live_delivery" in status else status["body"]["live_delivery"],
    ) == (
        subject.pickup + "status",
        True,
    )
    return comm


async def _frames(comm, subject, n: int) -> dict[str, list[dict]]:
    """The next `n` frames, by message type."""
    out: dict[str, list[dict]] = {}
    for _ in range(n):
        message = subject.open(await comm.receive_from(timeout=5))
        out.setdefault(subject.type(message), []).append(message)
    return out


def test_an_unacknowledged_push_is_announced_and_pushed_again_an_acknowledged_one_never(
    subject, clock, announced, committed
):
    delivery = subject.pickup + "delivery"
    status = subject.pickup + "status"

    async def body():
        comm = await _live(subject)
        await committed(subject.forward)
        [first] = subject.ids((await _frames(comm, subject, 1))[delivery][0])
        await committed(subject.forward)
        [second] = subject.ids((await _frames(comm, subject, 1))[delivery][0])
        await sync_to_async(subject.ack)([first])  # acknowledged over HTTP, before its deadline
        # Just before the deadline a frame (which checks what is due) gets only its answer.
        clock.now += TIMEOUT - 0.001
        await comm.send_to(bytes_data=subject.frame("status-request"))
        assert list(await _frames(comm, subject, 1)) == [status]
        # Past it: the unacknowledged push goes out again (the acknowledged one does not), announced once.
        clock.now += 0.002
        await comm.send_to(bytes_data=subject.frame("status-request"))
        frames = await _frames(comm, subject, 2)
        assert sorted(frames) == sorted([status, delivery]) and subject.ids(frames[delivery][0]) == [second]
        assert [ids for _, _, ids in await announced(1)] == [[second]]
        # Again after another timeout (LIVE_RESENDS = 2), then announced but no longer pushed.
        clock.now += TIMEOUT
        await comm.send_to(bytes_data=subject.frame("status-request"))
        frames = await _frames(comm, subject, 2)
        assert subject.ids(frames[delivery][0]) == [second]
        clock.now += TIMEOUT
        await comm.send_to(bytes_data=subject.frame("status-request"))
        assert list(await _frames(comm, subject, 1)) == [status]
        calls = await announced(3)
        assert [ids for _, _, ids in calls] == [[second]] * 3 and {did for _, did, _ in calls} == {subject.did}
        # Still queued all along: acknowledged on the socket (4.0's ack: no answer), it leaves.
        await comm.send_to(bytes_data=subject.frame("messages-received", P4, message_id_list=[second]))
        await comm.send_to(bytes_data=subject.frame("status-request"))
        [answer] = (await _frames(comm, subject, 1))[status]
        assert (answer.get("body") or answer)["message_count"] == 0
        await comm.disconnect()

    async_to_sync(body)()
    assert QueuedMessage.objects.count() == 0
    assert live.LIVE_RESENDS == 2


def test_a_push_whose_socket_closed_is_announced_at_its_deadline_and_picked_up_later(
    subject, clock, announced, committed
):
    async def body():
        comm = await _live(subject)
        await committed(subject.forward)
        [pushed] = subject.ids((await _frames(comm, subject, 1))[subject.pickup + "delivery"][0])
        clock.now += TIMEOUT
        await comm.disconnect()  # before any ack (the phone went to sleep), past the deadline
        # The closed socket's watch still checks it: announced (a wake-up may follow), not pushed.
        [call] = await announced(1)
        assert call[1:] == (subject.did, [pushed])
        return pushed

    pushed = async_to_sync(body)()
    # Never lost, never deleted early: the next pickup gets it with the same id.
    assert subject.picked_up() == [pushed]


def test_the_ack_bookkeeping_on_its_own():
    """live.Awaiting: deadlines, resends, the bound, what a failed check postpones."""
    waiting = live.Awaiting()
    waiting.pushed(["a", "b"], now=0.0, timeout=10.0)
    assert (waiting.due(9.999), waiting.due(10.0), waiting.next_deadline()) == ([], ["a", "b"], 10.0)
    row = ("b", {"json": {}}, None)
    assert waiting.settle(["a", "b"], [row], resend=True) == [row]  # a acknowledged: forgotten; b again
    assert list(waiting.entries) == ["b"]
    waiting.postpone(["b"], until=25.0)
    assert waiting.entries == {"b": (25.0, 1)}
    for n in range(2, 4):
        waiting.pushed(["b"], now=20.0, timeout=10.0)
        assert waiting.entries == {"b": (30.0, n)}
    assert waiting.settle(["b"], [row], resend=True) == []  # pushed 1 + LIVE_RESENDS times: no more here
    assert waiting.entries == {}
    waiting.pushed(["c"], now=0.0, timeout=1.0)
    assert waiting.settle(["c"], [("c", {}, None)], resend=False) == [] and waiting.entries == {}  # closed
    waiting.pushed([str(i) for i in range(live.AWAITING_MAX + 5)], now=0.0, timeout=1.0)
    assert len(waiting.entries) == live.AWAITING_MAX and "0" not in waiting.entries
