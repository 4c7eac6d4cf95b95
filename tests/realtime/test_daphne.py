"""/ws against real Daphne processes with a real `websockets` client (issue 3).

- several sockets of one DID all receive the push (one process, in-memory layer);
- two Daphne processes sharing Redis and PostgreSQL: a TWO_WAY_PRIVATE handled by one reaches a
  socket held by the other;
- durability: a socket dropped mid-stream gets the backlog again on reconnect, and an event that
  was answered before a kill -9 is still pending after the restart;
- the send budget (hardening issue 13): raw sockets with a tiny receive buffer that stop reading
  are closed once over MEDIATOR_WS_SEND_BUDGET_BYTES, a reading socket of the same DID keeps
  getting every push, and the events stay pending for the next AUTHENTICATE.
"""

from __future__ import annotations

import asyncio
import json
import struct
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from apps.wire.client import Identity, MediatorClient
from apps.wire.ws import MediatorSocket, open_authenticated
from tests.support.layers import redis_channel_layers
from tests.support.registration import signed_contract
from tests.support.servers import Server, free_port, start_daphne
from tests.support.stalled_socket import StalledSocket, close_timeout_passed

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

# Redis database for the cross-process test; the key prefix keeps parallel runs apart anyway
# (groups are named by tenant id and a hash of a freshly generated DID).
REDIS_DB_URL = "redis://127.0.0.1:6379/11"


class Deployment:
    """One tenant at 127.0.0.1:<port>, served by one or more Daphne processes."""

    def __init__(self, tmp_path, *, processes: int = 1, env: dict | None = None):
        from apps.tenants.services import tenant_create

        self.tmp_path = tmp_path
        self.env = {"REDIS_URL": "", **(env or {})}
        self.ports = [free_port() for _ in range(processes)]
        self.host = f"127.0.0.1:{self.ports[0]}"
        self.tenant = tenant_create(slug="rt", domain=self.host, rate_limit_per_did=0, rate_limit_per_ip=0)
        # Started side by side: each takes a few seconds to boot.
        with ThreadPoolExecutor(processes) as pool:
            self.servers: list[Server] = list(pool.map(self._start, self.ports))
        # Every process answers for the tenant's host, as behind a load balancer.
        self.clients = [MediatorClient(f"http://127.0.0.1:{p}", host=self.host) for p in self.ports]

    def _start(self, port: int) -> Server:
        return start_daphne(self.tmp_path, port=port, env=self.env, wait_host=self.host)

    def restart(self, i: int = 0) -> None:
        self.servers[i] = self._start(self.ports[i])

    async def socket(self, who: Identity, i: int = 0) -> MediatorSocket:
        """An authenticated socket on process `i`, with the tenant's Host header."""
        return await open_authenticated(f"ws://{self.host}/ws", who, connect_to=("127.0.0.1", self.ports[i]))

    def pair(self) -> tuple[Identity, Identity]:
        """Alice and Bob registered here, each holding a contract with the other (so either may send)."""
        alice = Identity.create("alice", self.tenant.did)
        bob = Identity.create("bob", self.tenant.did)
        http = self.clients[0]
        http.register(alice)
        http.register(bob)
        for requestor, saver in ((alice, bob), (bob, alice)):
            signed, _, _ = signed_contract(requestor, saver)
            http.command(saver, {"type": "SAVE_COMMUNICATION_CONTRACT", "signed_communication_contract": signed})
        return alice, bob

    def close(self) -> None:
        for client in self.clients:
            client.close()
        for server in self.servers:
            server.stop()


@pytest.fixture
def deploy(transactional_db, tmp_path):
    made: list[Deployment] = []

    def make(**kw) -> Deployment:
        d = Deployment(tmp_path, **kw)
        made.append(d)
        return d

    yield make
    for d in made:
        d.close()


def _expected(event_id: str, sender: Identity, payload: str) -> dict:
    return {"type": "PENDING_EVENTS", "events": [{"id": event_id, "sender_did": sender.did, "payload": payload}]}


async def _nothing_before_events(sock: MediatorSocket, to: Identity, sender: Identity, clients) -> list[str]:
    """Instead of waiting for no frame: `sender` sends `to` one marker event through each of
    `clients` (each process whose earlier commands must not have pushed to `sock`), and the next
    frames on `sock` (a socket of `to`) are exactly those events, in either order. A command's
    push leaves its process in order (on the in-memory layer before its reply, over Redis through
    that process's pusher, oldest first) and a socket takes its channel's messages in order, so a
    frame an earlier command of the same process had pushed to `sock` would come before its marker.
    Returns the markers' event ids (pending for `to` until acknowledged)."""
    sent = []
    for http in clients:
        blob = f"marker-{uuid.uuid4()}"
        sent.append(_expected(await asyncio.to_thread(http.send_sealed, sender, to.did, blob), sender, blob))
    got = [await sock.recv(10) for _ in sent]
    assert sorted(got, key=json.dumps) == sorted(sent, key=json.dumps)
    return [frame["events"][0]["id"] for frame in sent]


def test_every_socket_of_a_did_receives_the_push_and_a_refusal_carries_its_close_code(deploy):
    d = deploy()
    alice, bob = d.pair()
    http = d.clients[0]

    async def body():
        bob_sockets = [await d.socket(bob) for _ in range(3)]
        alice_socket = await d.socket(alice)
        blob = http.seal_private(alice, bob.did, {"type": "chat.message", "text": "hi"})
        event_id = await asyncio.to_thread(http.send_sealed, alice, bob.did, blob)
        for sock in bob_sockets:
            frame = await sock.next_of("PENDING_EVENTS", 5)
            assert frame == _expected(event_id, alice, blob)
            assert http.decrypt_private(bob, alice.did, frame["events"][0]["payload"])["event"] == {
                "type": "chat.message",
                "text": "hi",
            }
        await _nothing_before_events(alice_socket, alice, bob, [http])
        for sock in [*bob_sockets, alice_socket]:
            await sock.close()

        # A refusal reaches a real client as AUTH_FAILED and then the close code.
        sock = await MediatorSocket.open(f"ws://{d.host}/ws")
        frame = alice.ws_authenticate()
        frame["nonce"] = str(uuid.uuid4())  # no longer what was signed
        await sock.send_json(frame)
        assert await sock.recv() == {"type": "AUTH_FAILED", "code": "INVALID_SIGNATURE"}
        assert await sock.wait_closed() == 4006

    asyncio.run(body())


def test_a_push_crosses_daphne_processes_over_redis(deploy):
    d = deploy(processes=2, env={"REDIS_URL": REDIS_DB_URL})
    alice, bob = d.pair()
    for client in d.clients:
        assert client.health() == (200, {"status": "ok"})

    async def body():
        bob_on_2 = await d.socket(bob, 1)
        bob_on_1 = await d.socket(bob, 0)
        alice_on_2 = await d.socket(alice, 1)
        # Handled by process 1 (the HTTP client of port 0) ...
        blob = d.clients[0].seal_private(alice, bob.did, {"n": 1})
        event_id = await asyncio.to_thread(d.clients[0].send_sealed, alice, bob.did, blob)
        # ... reaches the socket held by process 2, and the one on process 1.
        assert await bob_on_2.next_of("PENDING_EVENTS", 5) == _expected(event_id, alice, blob)
        assert await bob_on_1.next_of("PENDING_EVENTS", 5) == _expected(event_id, alice, blob)
        # The other way round: bob saves a contract through process 2; CONTRACTS_UPDATED goes to
        # him (the sender, §10.6) on both processes and to nobody else.
        signed, _, _ = signed_contract(bob, alice)
        await asyncio.to_thread(
            d.clients[1].command, bob, {"type": "SAVE_COMMUNICATION_CONTRACT", "signed_communication_contract": signed}
        )
        assert await bob_on_1.next_of("CONTRACTS_UPDATED", 5) == {"type": "CONTRACTS_UPDATED"}
        assert await bob_on_2.next_of("CONTRACTS_UPDATED", 5) == {"type": "CONTRACTS_UPDATED"}
        await _nothing_before_events(alice_on_2, alice, bob, d.clients)
        for sock in (bob_on_1, bob_on_2, alice_on_2):
            await sock.close()

    asyncio.run(body())


def test_a_socket_dropped_mid_stream_gets_the_backlog_again_on_reconnect(deploy):
    d = deploy()
    alice, bob = d.pair()
    http = d.clients[0]

    async def send(n: int) -> tuple[str, str]:
        blob = http.seal_private(alice, bob.did, {"n": n})
        return await asyncio.to_thread(http.send_sealed, alice, bob.did, blob), blob

    async def body():
        sock = await d.socket(bob)
        sent = [await send(0), await send(1), await send(2)]
        first = await sock.next_of("PENDING_EVENTS", 5)
        assert first == _expected(sent[0][0], alice, sent[0][1])
        sock.abort()  # the device loses its network: no close handshake, nothing acknowledged
        sent += [await send(3), await send(4)]

        again = await d.socket(bob)
        frame = await again.next_of("PENDING_EVENTS", 5)
        assert frame == {
            "type": "PENDING_EVENTS",
            "events": [{"id": i, "sender_did": alice.did, "payload": b} for i, b in sent],
        }
        markers = await _nothing_before_events(again, bob, alice, [http])
        await asyncio.to_thread(http.ack_events, bob, [i for i, _ in sent] + markers)
        await again.close()

        # Acknowledged events are gone from the backlog: the socket sends it before it takes the
        # marker's push, and a marker stored before the backlog was read is all of it.
        last = await d.socket(bob)
        await _nothing_before_events(last, bob, alice, [http])
        await last.close()

    asyncio.run(body())


def test_an_answered_event_survives_kill_9_and_arrives_as_backlog(deploy):
    d = deploy()
    alice, bob = d.pair()
    http = d.clients[0]
    blob = http.seal_private(alice, bob.did, {"n": "before the crash"})
    event_id = http.send_sealed(alice, bob.did, blob)
    assert http.last_reply[0] == 200

    d.servers[0].kill9()
    assert d.servers[0].proc.returncode == -9
    d.restart()

    assert http.pending_events(bob)["pending_events"] == [{"id": event_id, "payload": blob, "sender_did": alice.did}]

    async def body():
        sock = await d.socket(bob)
        assert await sock.next_of("PENDING_EVENTS", 5) == _expected(event_id, alice, blob)
        await sock.close()

    asyncio.run(body())


BUDGET_LOG = "websocket closed: send budget exceeded tenant=rt "


def test_a_socket_that_stops_reading_is_closed_over_its_send_budget_and_its_events_stay_pending(deploy):
    budget = 512 * 1024
    d = deploy(env={"MEDIATOR_WS_SEND_BUDGET_BYTES": str(budget)})
    alice, bob = d.pair()
    http = d.clients[0]
    addr = ("127.0.0.1", d.ports[0])

    async def body():
        # Two of bob's devices stop reading right after AUTH_SUCCESS; his phone reads everything.
        # `never` has a larger kernel receive buffer, so `late` goes over budget first: the first
        # budget close in the log is `late`'s. Daphne resets a peer that has not answered its close
        # 1 s after the close was queued, so the server queues the close only once what it queued
        # before (the ERROR frame last) has left (sendbudget.drained: while the reader takes bytes,
        # or 5 s without one); before, this client got a reset and no ERROR frame, and with a fixed
        # 5 s, now and then under load, when reading its queue through a 4 KiB window outlasted them.
        # `late` starts reading only once that reset has happened to a control socket whose close
        # the server queued after `late` went over budget (a refused AUTHENTICATE, never answered):
        # a close queued at the budget's decision would have reset `late` first. No fixed wait.
        never = await asyncio.to_thread(StalledSocket.open, addr, d.host, bob.ws_authenticate(), rcvbuf=1 << 20)
        late = await asyncio.to_thread(StalledSocket.open, addr, d.host, bob.ws_authenticate())
        assert never.reply == late.reply == {"type": "AUTH_SUCCESS"}
        phone = await d.socket(bob)

        def read_late_once_closed() -> list[tuple[int, bytes]]:
            deadline = time.monotonic() + 60
            while BUDGET_LOG not in d.servers[0].log() and time.monotonic() < deadline:
                time.sleep(0.01)
            close_timeout_passed(addr, d.host)
            return late.read_to_close()

        reader = asyncio.create_task(asyncio.to_thread(read_late_once_closed))

        sent: list[str] = []
        blob = "A" * (128 * 1024)
        for _ in range(80):  # 10 MiB at most; the budget is 0.5 MiB
            sent.append(await asyncio.to_thread(http.send_sealed, alice, bob.did, blob))
            got = (await phone.next_of("PENDING_EVENTS", 10))["events"]
            assert got == [{"id": sent[-1], "sender_did": alice.did, "payload": blob}]
            if d.servers[0].log().count(BUDGET_LOG) == 2:
                break
        assert d.servers[0].log().count(BUDGET_LOG) == 2, f"not closed after {len(sent)} events"

        # The one that started reading at its close found what was queued (no more than the budget
        # plus the kernel's buffers), then the ERROR frame and close 4509.
        frames = await asyncio.wait_for(reader, 15)
        assert frames[-2:] == [(1, b'{"code":"SEND_BUDGET_EXCEEDED","type":"ERROR"}'), (8, struct.pack("!H", 4509))]
        pushed = [json.loads(payload)["events"][0]["id"] for _, payload in frames[:-2]]
        assert pushed == sent[: len(pushed)] and len(pushed) < len(sent)
        # The one that never reads is cut off (the drain's 5 s, then Daphne's 1 s close handshake
        # timeout and a reset).
        deadline = time.monotonic() + 10
        while not never.closed_by_server() and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        assert never.closed_by_server()
        never.close()
        late.close()

        # The phone was never over budget and keeps working.
        sent.append(await asyncio.to_thread(http.send_sealed, alice, bob.did, blob))
        assert (await phone.next_of("PENDING_EVENTS", 10))["events"][0]["id"] == sent[-1]
        await phone.close()

        # Nothing was acknowledged: a new AUTHENTICATE gets every event as backlog, paced to the
        # budget (frames of up to 1 MiB, each sent once the one before has left).
        again = await d.socket(bob)
        backlog: list[str] = []
        while len(backlog) < len(sent):
            backlog += [e["id"] for e in (await again.next_of("PENDING_EVENTS", 10))["events"]]
        assert backlog == sent
        await _nothing_before_events(again, bob, alice, [http])
        await again.close()

    asyncio.run(body())
    assert d.servers[0].log().count(BUDGET_LOG) == 2
    metrics = httpx.get(d.servers[0].url + "/metrics", timeout=5).text
    events = {
        s.labels["event"]: s.value
        for family in text_string_to_metric_families(metrics)
        for s in family.samples
        if s.name == "mediator_websocket_events_total"
    }
    assert events["send_budget_exceeded"] == 2


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


def test_what_a_closed_socket_still_had_queued_is_freed_when_it_closes(deploy):
    # No budget, so the queue can grow; glibc maps every allocation of 64 KiB or more on its own,
    # so a freed frame leaves the RSS at once (with its default, freed heap memory may stay mapped).
    d = deploy(env={"MEDIATOR_WS_SEND_BUDGET_BYTES": str(1 << 40), "MALLOC_MMAP_THRESHOLD_": "65536"})
    alice, bob = d.pair()
    http = d.clients[0]
    pid = d.servers[0].proc.pid
    stalled = StalledSocket.open(("127.0.0.1", d.ports[0]), d.host, bob.ws_authenticate())
    assert stalled.reply == {"type": "AUTH_SUCCESS"}
    blob = "A" * (256 * 1024)
    http.send_sealed(alice, bob.did, blob)  # warm up: the first push's code paths and caches
    before = _rss_kib(pid)
    for _ in range(80):
        http.send_sealed(alice, bob.did, blob)
    grown = _rss_kib(pid) - before
    assert grown > 15 * 1024  # 20 MiB queued for a socket that does not read

    # Closing with unread data resets the connection. The queue goes at once, not at the next
    # full garbage collection (what else the process allocated meanwhile stays, a few MiB).
    stalled.close()
    deadline = time.monotonic() + 10
    while _rss_kib(pid) - before > grown / 3 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _rss_kib(pid) - before <= grown / 3, f"grew {grown} KiB, still {_rss_kib(pid) - before} KiB"


def test_a_nul_did_on_authenticate_costs_no_metering_of_fifty_concurrent_authentications(deploy):
    """Issue 13 item 4, as reported: one AUTHENTICATE whose `did` is U+0000 amid 50 legitimate
    concurrent ones. It used to get DID_NOT_FOUND, and its DID then failed the metering COPY,
    killing the writer thread with the whole batch in flight (0 of 50 metered)."""
    from apps.usage.models import CommandMeter

    # A long flush interval keeps all 51 records in one batch, as under load.
    d = deploy(env={"USAGE_METERING_FLUSH_MS": "1500"})
    alice, _ = d.pair()
    url = f"ws://{d.host}/ws"

    async def legitimate() -> None:
        sock = await open_authenticated(url, alice, connect_to=("127.0.0.1", d.ports[0]))
        await sock.close()

    async def nul_did() -> tuple[dict, int | None]:
        sock = await MediatorSocket.open(url, connect_to=("127.0.0.1", d.ports[0]))
        frame = alice.ws_authenticate()
        frame["did"] = "\x00"
        await sock.send_json(frame)
        return await sock.recv(), await sock.wait_closed()

    async def body():
        results = await asyncio.gather(
            *[legitimate() for _ in range(25)], nul_did(), *[legitimate() for _ in range(25)]
        )
        return results[25]

    refused = asyncio.run(body())

    def metered() -> list[tuple]:
        return list(
            CommandMeter.objects.filter(tenant=d.tenant, transport="ws")
            .values_list("code", "http_status", "sender_did")
            .order_by("code")
        )

    deadline = time.time() + 20
    while time.time() < deadline and len(metered()) < 51:
        time.sleep(0.2)
    successes = [row for row in metered() if row[0] == "SUCCESS"]
    assert (len(successes), "Exception in thread" in d.servers[0].log()) == (50, False)
    assert sorted(metered()) == [("INVALID_MESSAGE", 4002, None)] + [("SUCCESS", 200, alice.did)] * 50
    # The same refusal as POST / gives a NUL (INVALID_COMMAND there), before any DID lookup.
    assert refused == ({"type": "AUTH_FAILED", "code": "INVALID_MESSAGE"}, 4002)


def test_a_suspended_tenants_sockets_close_on_every_process(deploy, settings):
    """The operator's suspension in this process reaches the sockets held by two Daphne processes
    through the Redis layer: ERROR MEDIATOR_UNAVAILABLE, then close 4503 (docs/realtime.md)."""
    from apps.tenants.services import Actor, tenant_suspend

    settings.CHANNEL_LAYERS = redis_channel_layers(REDIS_DB_URL)
    d = deploy(processes=2, env={"REDIS_URL": REDIS_DB_URL})
    alice, bob = d.pair()

    async def body():
        sockets = [await d.socket(alice, 0), await d.socket(bob, 1)]
        await asyncio.to_thread(tenant_suspend, tenant=d.tenant, actor=Actor(None, "cli"))
        for sock in sockets:
            assert await sock.next_of("ERROR", 10) == {"type": "ERROR", "code": "MEDIATOR_UNAVAILABLE"}
            assert await sock.wait_closed() == 4503

    asyncio.run(body())
