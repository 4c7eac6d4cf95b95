"""DIDComm v1 end to end on a real Daphne process: the Credo story (return routes, Pickup 2.0 live
mode over /didcomm/ws with binary frames, acks over HTTP) and the ACA-Py story (no return route:
the DID Exchange response, the grant and a forwarded message reach the agent's own HTTP endpoint
through a real Celery worker)."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest
from websockets.asyncio.client import connect

from tests.support.didcomm_agent_v1 import CM1, ENVELOPE, PICKUP2, AgentV1, Inbox, forward_to
from tests.support.servers import free_port, start_celery_worker, start_daphne

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]
BASE = "https://didcomm.org/"
TRUST_PING1 = BASE + "trust_ping/1.0/"


class Server:
    def __init__(self, tmp_path, env: dict | None = None):
        from apps.tenants.services import tenant_create

        self.port = free_port()
        self.host = f"127.0.0.1:{self.port}"
        self.tenant = tenant_create(slug="dc1", domain=self.host)
        self.daphne = start_daphne(tmp_path, port=self.port, env=env or {}, wait_host=self.host)
        self.http = httpx.Client(base_url=f"http://127.0.0.1:{self.port}", headers={"Host": self.host}, timeout=20)
        self.invitation = self.http.get("/didcomm/invitation?version=1").json()
        self.key = self.invitation["services"][0]["recipientKeys"][0]

    def post(self, body: bytes) -> httpx.Response:
        return self.http.post("/didcomm", content=body, headers={"Content-Type": ENVELOPE})

    def send(self, agent: AgentV1, message: dict) -> dict | None:
        resp = self.post(agent.pack(message, self.key))
        assert resp.status_code == 200, resp.text
        return agent.unpack(resp.content)[0] if resp.content else None

    def close(self) -> None:
        self.http.close()
        self.daphne.stop()


def test_credo_story_live_pickup_2_over_binary_frames_with_acks_over_http(transactional_db, tmp_path):
    server = Server(tmp_path)
    try:
        agent, key = AgentV1(), AgentV1()
        assert server.send(agent, agent.didx_request(server.invitation))["@type"].endswith("didexchange/1.1/response")
        assert server.send(agent, agent.message(CM1 + "mediate-request"))["@type"] == CM1 + "mediate-grant"
        update = agent.message(CM1 + "keylist-update", updates=[{"recipient_key": key.did_key, "action": "add"}])
        assert server.send(agent, update)["updated"][0]["result"] == "success"
        inner = json.loads(AgentV1().pack({"@type": BASE + "basicmessage/1.0/message", "@id": "offline"}, key.did_key))
        assert server.post(forward_to(key.did_key, server.key, inner)).status_code == 200

        async def live():
            async with connect(
                f"ws://{server.host}/didcomm/ws", host="127.0.0.1", port=server.port, compression=None, proxy=None
            ) as ws:
                await ws.send(agent.pack(agent.message(PICKUP2 + "status-request"), server.key))
                frame = await asyncio.wait_for(ws.recv(), 10)
                assert isinstance(frame, bytes)  # binary, as Credo sends and expects
                status, _ = agent.unpack(frame)
                assert status["message_count"] == 1 and status["live_delivery"] is False
                change = agent.message(PICKUP2 + "live-delivery-change", live_delivery=True)
                await ws.send(agent.pack(change, server.key))
                status, _ = agent.unpack(await asyncio.wait_for(ws.recv(), 10))
                assert status["@type"] == PICKUP2 + "status" and status["live_delivery"] is True
                assert status["~thread"] == {"thid": change["@id"]}
                backlog, _ = agent.unpack(await asyncio.wait_for(ws.recv(), 10))
                assert backlog["@type"] == PICKUP2 + "delivery" and backlog["~thread"] == {}
                assert [a["data"]["json"] for a in backlog["~attach"]] == [inner]
                fresh = json.loads(
                    AgentV1().pack({"@type": BASE + "basicmessage/1.0/message", "@id": "live"}, key.did_key)
                )
                resp = await asyncio.to_thread(server.post, forward_to(key.did_key, server.key, fresh))
                assert resp.status_code == 200
                pushed, sender = agent.unpack(await asyncio.wait_for(ws.recv(), 10))
                assert pushed == {**pushed, "@type": PICKUP2 + "delivery", "~thread": {}}
                assert [a["data"]["json"] for a in pushed["~attach"]] == [fresh]
                return [a["@id"] for a in backlog["~attach"] + pushed["~attach"]]

        ids = asyncio.run(live())
        # Pushed messages stay queued until Credo acks them over HTTP.
        status = server.send(agent, agent.message(PICKUP2 + "messages-received", message_id_list=ids))
        assert status["@type"] == PICKUP2 + "status" and status["message_count"] == 0
    finally:
        server.close()


def test_aca_py_story_every_answer_and_forward_reaches_the_agents_endpoint_via_celery(transactional_db, tmp_path):
    worker = start_celery_worker(tmp_path)
    server = Server(
        tmp_path, env={"CELERY_BROKER_URL": worker.broker_url, "MEDIATOR_DIDCOMM_OUTBOUND_QUEUE": worker.queue}
    )
    inbox = Inbox()
    try:
        agent, key = AgentV1(endpoint=inbox.url), AgentV1()

        def wait_for(n: int) -> dict:
            deadline = time.time() + 20
            while len(inbox.bodies) < n and time.time() < deadline:
                time.sleep(0.05)
            assert len(inbox.bodies) >= n, worker.log()[-3000:]
            return json.loads(inbox.bodies[n - 1][1])

        assert server.send(agent, agent.didx_request(server.invitation, return_route=None)) is None
        response, _ = agent.unpack(wait_for(1))
        assert response["@type"] == BASE + "didexchange/1.1/response"
        assert server.send(agent, agent.message(CM1 + "mediate-request", return_route=None)) is None
        grant, _ = agent.unpack(wait_for(2))
        assert grant["@type"] == CM1 + "mediate-grant" and grant["routing_keys"] == [server.key]
        update = agent.message(
            CM1 + "keylist-update", return_route=None, updates=[{"recipient_key": key.did_key, "action": "add"}]
        )
        server.send(agent, update)
        assert agent.unpack(wait_for(3))[0]["updated"][0]["result"] == "success"
        inner = json.loads(AgentV1().pack({"@type": BASE + "basicmessage/1.0/message", "@id": "x"}, key.did_key))
        assert server.post(forward_to(key.did_key, grant["routing_keys"][0], inner)).status_code == 200
        assert wait_for(4) == inner  # POSTed unchanged
        assert key.unpack(inner)[0]["@id"] == "x"
    finally:
        inbox.close()
        server.close()
        worker.stop()


def test_a_failed_outbound_post_is_retried_on_the_outbound_queue_by_the_worker(transactional_db, tmp_path):
    """The retry of a failed POST is re-queued on MEDIATOR_DIDCOMM_OUTBOUND_QUEUE (the worker's private
    queue here), not on Celery's default queue, which no worker of this run consumes."""
    worker = start_celery_worker(tmp_path)
    server = Server(
        tmp_path, env={"CELERY_BROKER_URL": worker.broker_url, "MEDIATOR_DIDCOMM_OUTBOUND_QUEUE": worker.queue}
    )
    inbox = Inbox(status=500)
    try:
        from apps.didcomm.models import Outbound

        agent = AgentV1(endpoint=inbox.url)
        assert server.send(agent, agent.didx_request(server.invitation, return_route=None)) is None
        deadline = time.time() + 20
        while not inbox.bodies and time.time() < deadline:
            time.sleep(0.05)
        assert len(inbox.bodies) == 1, worker.log()[-3000:]
        inbox.status = 200  # the agent is back: the retry (2 s backoff) must reach it
        deadline = time.time() + 5
        while not Outbound.objects.filter(attempts=1).exists() and time.time() < deadline:
            time.sleep(0.05)
        assert list(Outbound.objects.values_list("attempts", "last_status")) == [(1, "500")]
        deadline = time.time() + 20
        while len(inbox.bodies) < 2 and time.time() < deadline:
            time.sleep(0.05)
        assert len(inbox.bodies) == 2, worker.log()[-3000:]
        assert inbox.bodies[1] == inbox.bodies[0]  # the same envelope, POSTed again
        assert agent.unpack(inbox.bodies[1][1])[0]["@type"] == BASE + "didexchange/1.1/response"
        deadline = time.time() + 5
        while Outbound.objects.exists() and time.time() < deadline:
            time.sleep(0.05)
        assert not Outbound.objects.exists()
    finally:
        inbox.close()
        server.close()
        worker.stop()


async def _live_socket(server: Server, agent: AgentV1):
    """A /didcomm/ws socket in Pickup 2.0 live mode for `agent`'s connection: (socket, queued backlog ids)."""
    ws = await connect(
        f"ws://{server.host}/didcomm/ws", host="127.0.0.1", port=server.port, compression=None, proxy=None
    )
    change = agent.message(PICKUP2 + "live-delivery-change", live_delivery=True)
    await ws.send(agent.pack(change, server.key))
    status, _ = agent.unpack(await asyncio.wait_for(ws.recv(), 10))
    assert status["@type"] == PICKUP2 + "status" and status["live_delivery"] is True
    backlog = []
    if status["message_count"]:
        pushed, _ = agent.unpack(await asyncio.wait_for(ws.recv(), 10))
        backlog = [a["@id"] for a in pushed["~attach"]]
    return ws, backlog


async def _pushed(ws, agent: AgentV1) -> list[tuple[str, dict]]:
    delivery, _ = agent.unpack(await asyncio.wait_for(ws.recv(), 10))
    assert delivery["@type"] == PICKUP2 + "delivery" and delivery["~thread"] == {}
    return [(a["@id"], a["data"]["json"]) for a in delivery["~attach"]]


def _mediated(server: Server) -> tuple[AgentV1, AgentV1]:
    agent, key = AgentV1(), AgentV1()
    assert server.send(agent, agent.didx_request(server.invitation))["@type"].endswith("didexchange/1.1/response")
    assert server.send(agent, agent.message(CM1 + "mediate-request"))["@type"] == CM1 + "mediate-grant"
    update = agent.message(CM1 + "keylist-update", updates=[{"recipient_key": key.did_key, "action": "add"}])
    assert server.send(agent, update)["updated"][0]["result"] == "success"
    return agent, key


def _inner(key: AgentV1, msg_id: str) -> dict:
    return json.loads(AgentV1().pack({"@type": BASE + "basicmessage/1.0/message", "@id": msg_id}, key.did_key))


def test_two_live_sockets_of_one_connection_both_get_every_push_and_one_ack_removes_it(transactional_db, tmp_path):
    """Several devices (or a socket being replaced) on one v1 connection: every live socket gets every
    push (the same attachment ids); the message stays queued until one messages-received; a closed
    socket leaves the other live."""
    from apps.didcomm.models import QueuedMessage

    server = Server(tmp_path)
    try:
        agent, key = _mediated(server)

        async def run():
            first, backlog_1 = await _live_socket(server, agent)
            second, backlog_2 = await _live_socket(server, agent)
            assert backlog_1 == backlog_2 == []
            one = _inner(key, "one")
            resp = await asyncio.to_thread(server.post, forward_to(key.did_key, server.key, one))
            assert resp.status_code == 200
            got_1, got_2 = await _pushed(first, agent), await _pushed(second, agent)
            assert got_1 == got_2 and [m for _, m in got_1] == [one]
            assert await asyncio.to_thread(QueuedMessage.objects.count) == 1  # pushed, not yet acked
            ack = agent.message(PICKUP2 + "messages-received", message_id_list=[got_1[0][0]])
            status = await asyncio.to_thread(server.send, agent, ack)
            assert status["message_count"] == 0
            await first.close()
            two = _inner(key, "two")
            resp = await asyncio.to_thread(server.post, forward_to(key.did_key, server.key, two))
            assert resp.status_code == 200
            assert [m for _, m in await _pushed(second, agent)] == [two]
            await second.close()

        asyncio.run(run())
    finally:
        server.close()


def test_a_socket_that_drops_before_the_ack_loses_nothing(transactional_db, tmp_path):
    """A live socket is cut (TCP abort, no close frame) after a push reached it but before the agent
    acked it, and another message arrives while no socket is open: both stay queued, a status over
    HTTP counts them, and the next live socket gets them both, with the ids of the first push."""
    from apps.didcomm.models import QueuedMessage

    server = Server(tmp_path)
    try:
        agent, key = _mediated(server)

        async def run():
            ws, _ = await _live_socket(server, agent)
            lost = _inner(key, "pushed-then-dropped")
            assert (await asyncio.to_thread(server.post, forward_to(key.did_key, server.key, lost))).status_code == 200
            [(pushed_id, pushed)] = await _pushed(ws, agent)
            assert pushed == lost
            ws.transport.abort()  # the phone goes into a tunnel: no close frame, no ack
            later = _inner(key, "while-dropped")
            assert (await asyncio.to_thread(server.post, forward_to(key.did_key, server.key, later))).status_code == 200
            assert await asyncio.to_thread(QueuedMessage.objects.count) == 2
            status = await asyncio.to_thread(server.send, agent, agent.message(PICKUP2 + "status-request"))
            assert status["message_count"] == 2
            again, backlog = await _live_socket(server, agent)
            assert backlog[0] == pushed_id and len(backlog) == 2
            ack = agent.message(PICKUP2 + "messages-received", message_id_list=backlog)
            assert (await asyncio.to_thread(server.send, agent, ack))["message_count"] == 0
            await again.close()

        asyncio.run(run())
        assert QueuedMessage.objects.count() == 0
    finally:
        server.close()


async def _open(server: Server):
    return await connect(
        f"ws://{server.host}/didcomm/ws", host="127.0.0.1", port=server.port, compression=None, proxy=None
    )


def _ping(agent: AgentV1) -> dict:
    """What Credo's `Implicit` strategy sends on the socket, and then only waits (RFC 0092)."""
    return agent.message(TRUST_PING1 + "ping", response_requested=False)


def test_implicit_pickup_a_return_route_all_socket_gets_the_backlog_and_new_messages_until_acked(
    transactional_db, tmp_path
):
    """Implicit pickup: a v1 socket on which a granted connection's message asks `return_route: "all"`
    gets what is queued and every new message as Pickup 2.0 `delivery` pushes, without any
    live-delivery-change; they stay queued until messages-received (here on the same socket)."""
    from apps.didcomm.models import QueuedMessage

    server = Server(tmp_path)
    try:
        agent, key = _mediated(server)
        queued = _inner(key, "queued")
        assert server.post(forward_to(key.did_key, server.key, queued)).status_code == 200

        async def run():
            ws = await _open(server)
            await ws.send(agent.pack(_ping(agent), server.key))
            backlog = await _pushed(ws, agent)  # no answer to the ping (none requested): the push is next
            assert [m for _, m in backlog] == [queued]
            fresh = _inner(key, "fresh")
            assert (await asyncio.to_thread(server.post, forward_to(key.did_key, server.key, fresh))).status_code == 200
            pushed = await _pushed(ws, agent)
            assert [m for _, m in pushed] == [fresh]
            assert await asyncio.to_thread(QueuedMessage.objects.count) == 2  # pushed, not yet acked
            ack = agent.message(PICKUP2 + "messages-received", message_id_list=[i for i, _ in backlog + pushed])
            await ws.send(agent.pack(ack, server.key))
            status, _ = agent.unpack(await asyncio.wait_for(ws.recv(), 10))
            assert status["@type"] == PICKUP2 + "status" and status["message_count"] == 0
            assert status["live_delivery"] is True
            await ws.close()

        asyncio.run(run())
        assert QueuedMessage.objects.count() == 0
    finally:
        server.close()


def test_implicit_pickup_needs_a_grant_and_a_return_route_and_yields_to_live_delivery_change(
    transactional_db, tmp_path
):
    """No pushes for a connection without a grant, nor after a message without `return_route: "all"`
    or a pickup message (a client speaking Pickup chooses live mode itself); `live_delivery: false`
    ends it for good on that socket. A socket handles its frames in order, so the `status` answer to
    a status-request says whether the frames before it made the socket live."""
    server = Server(tmp_path)
    try:
        agent, key = _mediated(server)
        stranger = AgentV1()
        server.send(stranger, stranger.didx_request(server.invitation))  # connected, never granted

        async def live(ws) -> bool:
            await ws.send(agent.pack(agent.message(PICKUP2 + "status-request"), server.key))
            status, _ = agent.unpack(await asyncio.wait_for(ws.recv(), 10))
            assert status["@type"] == PICKUP2 + "status"
            return status["live_delivery"]

        async def run():
            ws = await _open(server)
            await ws.send(stranger.pack(_ping(stranger), server.key))
            no_route = agent.message(TRUST_PING1 + "ping", response_requested=False, return_route=None)
            await ws.send(agent.pack(no_route, server.key))
            assert await live(ws) is False  # neither, and not the status-request either
            one = _inner(key, "one")
            assert (await asyncio.to_thread(server.post, forward_to(key.did_key, server.key, one))).status_code == 200
            await ws.send(agent.pack(_ping(agent), server.key))
            assert [m for _, m in await _pushed(ws, agent)] == [one]
            assert await live(ws) is True
            off = agent.message(PICKUP2 + "live-delivery-change", live_delivery=False)
            await ws.send(agent.pack(off, server.key))
            status, _ = agent.unpack(await asyncio.wait_for(ws.recv(), 10))
            assert status["live_delivery"] is False
            await ws.send(agent.pack(_ping(agent), server.key))
            assert await live(ws) is False  # turned off explicitly: a return route does not turn it on
            await ws.close()

        asyncio.run(run())
    finally:
        server.close()
