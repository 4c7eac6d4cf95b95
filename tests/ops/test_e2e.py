"""Two real Daphne processes behind one deployment: their metrics add up through one
PROMETHEUS_MULTIPROC_DIR, and their rate limits are shared through Redis (issue 5 §2, §3).

The scrape after a known workload must show the exact totals whichever process answers it.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from apps.wire.client import Identity, MediatorClient, MediatorError
from apps.wire.ws import MediatorSocket
from tests.conftest import HOST_A, HOST_B
from tests.ops.conftest import REDIS_URL
from tests.support.servers import start_daphne

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def scrape(server) -> dict:
    text = httpx.get(server.url + "/metrics", timeout=5).text
    assert "did:" not in text
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(samples: dict, name: str, **labels) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def commands(samples: dict, command: str, code: str) -> float:
    return value(samples, "mediator_commands_total", transport="http", command=command, code=code)


@pytest.fixture
def two_servers(transactional_db, tmp_path, tenant_a, tenant_b):
    type(tenant_b).objects.filter(pk=tenant_b.pk).update(rate_limit_per_did=3)
    env = {
        "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "prometheus"),
        "MEDIATOR_RATE_LIMIT_REDIS_URL": REDIS_URL,
        "MEDIATOR_RATE_LIMIT_PREFIX": f"test-e2e-{uuid.uuid4().hex}",
        # This test is about limits shared through Redis, not about its deadline: a loaded box
        # that keeps Redis from answering within the default 0.5 s must not make a check fail open.
        "MEDIATOR_RATE_LIMIT_REDIS_TIMEOUT_MS": "10000",
        # Bursts of 3 upgrades and 2 AUTHENTICATEs, then one a minute: the test's next one is refused.
        "MEDIATOR_WS_CONNECT_PER_IP": "1",
        "MEDIATOR_WS_CONNECT_PER_IP_BURST": "3",
        "MEDIATOR_WS_AUTH_PER_IP": "1",
        "MEDIATOR_WS_AUTH_PER_IP_BURST": "2",
    }
    servers = []
    try:
        servers.append(start_daphne(tmp_path, env=env))
        servers.append(start_daphne(tmp_path, env=env))
        yield servers
    finally:
        for s in servers:
            s.stop()


def test_two_daphne_processes_add_up_their_metrics_and_share_their_limits(two_servers, tenant_a, tenant_b):
    s1, s2 = two_servers
    a1, a2 = MediatorClient(s1.url, host=HOST_A), MediatorClient(s2.url, host=HOST_A)
    b1, b2 = MediatorClient(s1.url, host=HOST_B), MediatorClient(s2.url, host=HOST_B)
    alice, bob = Identity.create("alice", tenant_a.did), Identity.create("bob", tenant_a.did)
    dave = Identity.create("dave", tenant_b.did)

    # The workload, spread over both processes.
    a1.register(alice)
    a2.register(bob)
    b1.register(dave)
    req = a1.request_contract(alice, bob.did)  # forwarded to Bob: REQUESTED
    item = a2.pending_contract_requests(bob)["pending_communication_contract_requests"][0]
    a2.accept_contract_request(bob, item, a1)  # RESPONSE + SAVE + ACK of the request
    assert req.encrypted == item["encrypted_contract_request"]
    assert len(a1.pick_up_contracts(alice, with_did=bob.did)) == 1  # QUERY_COMMUNICATION_CONTRACTS
    a1.send_private(alice, bob.did, {"n": 1})
    a1.send_private(alice, bob.did, {"n": 2})
    a2.send_private(alice, bob.did, {"n": 3})
    ids = [e["id"] for e in a2.pending_events(bob)["pending_events"]]
    a1.ack_events(bob, ids[:2])
    assert [s.post_raw(b"not json")[0] for s in (a1, a1, a2)] == [400, 400, 400]
    # Dave's tenant allows 3 commands a minute per DID, counted across both processes in Redis:
    # the registration and two queries pass, the fourth command is refused on either process.
    b2.pending_events(dave)
    b1.pending_events(dave)
    with pytest.raises(MediatorError) as refused:
        b2.pending_events(dave)
    assert (refused.value.status, refused.value.body) == (429, {"type": "ERROR", "code": "RATE_LIMITED"})

    for server in (s1, s2):
        m = scrape(server)
        assert commands(m, "REQUEST_COMMUNICATION_CONTRACT", "SUCCESS") == 4  # 3 registrations + 1 forwarded
        assert commands(m, "QUERY_PENDING_COMMUNICATION_CONTRACT_REQUESTS", "SUCCESS") == 1
        assert commands(m, "COMMUNICATION_CONTRACT_RESPONSE", "SUCCESS") == 1
        assert commands(m, "SAVE_COMMUNICATION_CONTRACT", "SUCCESS") == 1
        assert commands(m, "ACKNOWLEDGE_PENDING_COMMUNICATION_CONTRACT_REQUESTS", "SUCCESS") == 1
        assert commands(m, "QUERY_COMMUNICATION_CONTRACTS", "SUCCESS") == 1
        assert commands(m, "TWO_WAY_PRIVATE", "SUCCESS") == 3
        assert commands(m, "QUERY_PENDING_EVENTS", "SUCCESS") == 3
        assert commands(m, "QUERY_PENDING_EVENTS", "RATE_LIMITED") == 1
        assert commands(m, "ACKNOWLEDGE_PENDING_EVENTS", "SUCCESS") == 1
        assert commands(m, "-", "INVALID_COMMAND") == 3
        assert value(m, "mediator_command_duration_seconds_count", transport="http", command="TWO_WAY_PRIVATE") == 3
        assert value(m, "mediator_pending_events_stored_total") == 3
        assert value(m, "mediator_pending_events_delivered_total") == 2
        assert value(m, "mediator_rate_limited_total", scope="did") == 1
        assert value(m, "mediator_pending_queue_events") == 1
        assert value(m, "mediator_pending_queue_recipients") == 1
        assert value(m, "mediator_pending_queue_max_depth") == 1
        # Each accepted command holds one nonce; the refused one never consumed its nonce.
        assert value(m, "mediator_nonce_store_size") == 16
        assert value(m, "mediator_rate_limiter_errors_total") == 0

    asyncio.run(_websockets(s1, s2, alice, bob))


async def _gauge(server, expected: float) -> None:
    deadline = time.monotonic() + 10
    while True:
        m = await asyncio.to_thread(scrape, server)
        got = value(m, "mediator_websocket_connections")
        if got == expected or time.monotonic() > deadline:
            assert got == expected
            return
        await asyncio.sleep(0.1)


async def _websockets(s1, s2, alice: Identity, bob: Identity) -> None:
    """/ws admission per IP, shared by both processes: 3 connections, then 2 AUTHENTICATE attempts."""

    async def open_on(server) -> MediatorSocket:
        return await MediatorSocket.open(f"ws://{HOST_A}/ws", connect_to=("127.0.0.1", server.port))

    socks = [await open_on(s1), await open_on(s1), await open_on(s2)]
    fourth = await open_on(s2)
    assert await fourth.recv() == {"type": "ERROR", "code": "RATE_LIMITED"}
    assert await fourth.wait_closed() == 4029
    await _gauge(s1, 3)  # two sockets on s1 and one on s2, seen from s1

    assert (await socks[0].authenticate(alice))["type"] == "AUTH_SUCCESS"
    assert (await socks[2].authenticate(bob))["type"] == "AUTH_SUCCESS"
    assert await socks[1].authenticate(alice) == {"type": "AUTH_FAILED", "code": "RATE_LIMITED"}
    assert await socks[1].wait_closed() == 4029
    await _gauge(s2, 2)

    await socks[0].close()
    await _gauge(s1, 1)  # Bob's socket on s2 is still open
    m = await asyncio.to_thread(scrape, s2)
    assert value(m, "mediator_rate_limiter_errors_total") == 0
    assert value(m, "mediator_rate_limited_total", scope="ws_connect") == 1
    assert value(m, "mediator_rate_limited_total", scope="ws_auth") == 1
    assert value(m, "mediator_websocket_events_total", event="authenticated") == 2
    assert value(m, "mediator_websocket_events_total", event="connect") == 3
    assert value(m, "mediator_websocket_events_total", event="disconnect") == 2

    # A process that dies without closing its sockets no longer counts in the live gauge, but
    # its counters still do.
    s2.kill9()
    await _gauge(s1, 0)
    m = await asyncio.to_thread(scrape, s1)
    assert value(m, "mediator_websocket_events_total", event="connect") == 3
    assert value(m, "mediator_pending_events_stored_total") == 3
    socks[2].abort()
