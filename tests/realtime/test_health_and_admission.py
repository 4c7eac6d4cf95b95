"""/health and the channel layer; unknown/suspended tenants; socket admission by the real per-IP limits
(apps.ops.limits.per_ip) and the socket metrics."""

from __future__ import annotations

import uuid

import pytest

from apps.ops import limits, metrics
from apps.realtime import health
from apps.realtime.groups import group_name
from apps.wire.errors import ProtocolError
from tests.conftest import HOST_A
from tests.support.registration import register

from .conftest import communicator, connect_authenticated, expect_close, run, send

REDIS_LAYER = "channels_redis.core.RedisChannelLayer"


def _redis_layer(url: str) -> dict:
    return {"default": {"BACKEND": REDIS_LAYER, "CONFIG": {"hosts": [url]}}}


def test_health_is_ok_on_the_in_memory_layer(client, tenant_a):
    resp = client.get("/health", HTTP_HOST=HOST_A)
    assert (resp.status_code, resp.json()) == (200, {"status": "ok"})


def test_health_is_ok_when_the_redis_channel_layer_answers(client, tenant_a, settings):
    settings.CHANNEL_LAYERS = _redis_layer("redis://127.0.0.1:6379/9")
    resp = client.get("/health", HTTP_HOST=HOST_A)
    assert (resp.status_code, resp.json()) == (200, {"status": "ok"})


def test_health_is_503_when_the_redis_channel_layer_is_unreachable(client, tenant_a, settings):
    # Port 1 on loopback refuses at once; the ping's timeout bounds a black-holed host too.
    settings.CHANNEL_LAYERS = _redis_layer("redis://127.0.0.1:1/0")
    resp = client.get("/health", HTTP_HOST=HOST_A)
    assert (resp.status_code, resp.json()) == (503, {"status": "error", "detail": "channel layer unreachable"})


def test_the_health_probe_reads_dict_hosts(settings):
    settings.CHANNEL_LAYERS = {
        "default": {"BACKEND": REDIS_LAYER, "CONFIG": {"hosts": [{"address": "redis://127.0.0.1:1/0"}]}}
    }
    assert health._redis_host() == {"address": "redis://127.0.0.1:1/0"}
    assert health.channel_layer_reachable() is False


def test_the_health_probe_asks_the_sentinels_of_a_sentinel_host(settings):
    # No sentinel answers on port 1: no master to ping, unreachable (the running failover is
    # proved in tests/realtime/test_sentinel.py).
    host = {"sentinels": [["127.0.0.1", 1]], "master_name": "mediator", "db": 0, "socket_timeout": 30}
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": REDIS_LAYER, "CONFIG": {"hosts": [host]}}}
    assert health._redis_host() == host
    assert health.channel_layer_reachable() is False


def test_group_names_are_valid_for_any_did():
    name = group_name(12, "did:decentrl:" + "x" * 4000)
    assert name.startswith("t12.") and len(name) == 44 and name.replace(".", "").isalnum()
    assert group_name(12, "did:a") != group_name(13, "did:a") != group_name(12, "did:b")


def _refused_on_connect(host: str, code: str, close: int, headers=()) -> None:
    async def body():
        comm = communicator(host, headers=headers)
        assert (await comm.connect())[0]
        assert await comm.receive_json_from() == {"type": "ERROR", "code": code}
        await expect_close(comm, close)
        await comm.disconnect()

    run(body)


def test_an_unknown_host_is_refused_4404(settings, tenant_a):
    settings.MEDIATOR_DEFAULT_TENANT = ""
    _refused_on_connect("nobody.test", "UNKNOWN_MEDIATOR", 4404)


def test_a_suspended_tenant_is_refused_4503(tenant_a):
    tenant_a.status = tenant_a.Status.SUSPENDED
    tenant_a.save()
    _refused_on_connect(HOST_A, "MEDIATOR_UNAVAILABLE", 4503)


@pytest.fixture
def one_socket_per_address(settings):
    """Socket admission of one connect and one AUTHENTICATE per address (a rate of one a minute, a
    burst of one), on this test's own limiter keys."""
    settings.MEDIATOR_RATE_LIMIT_REDIS_URL = ""
    settings.MEDIATOR_RATE_LIMIT_PREFIX = f"test-rl-{uuid.uuid4().hex}"
    settings.MEDIATOR_WS_CONNECT_PER_IP = settings.MEDIATOR_WS_CONNECT_PER_IP_BURST = 1
    settings.MEDIATOR_WS_AUTH_PER_IP = settings.MEDIATOR_WS_AUTH_PER_IP_BURST = 1


def _connect_and_leave(host: str = HOST_A, headers=()) -> None:
    async def body():
        comm = communicator(host, headers=headers)
        assert (await comm.connect())[0]
        await comm.disconnect()

    run(body)


def test_a_connect_over_the_per_ip_limit_closes_4029(one_socket_per_address, tenant_a):
    _connect_and_leave()
    _refused_on_connect(HOST_A, "RATE_LIMITED", 4029)
    # The bucket is the tenant's and the address's (the communicator's 127.0.0.9).
    with pytest.raises(ProtocolError):
        limits.per_ip("ws_connect", tenant_a.pk, "127.0.0.9")
    limits.per_ip("ws_connect", tenant_a.pk, "127.0.0.10")


def test_an_authenticate_over_the_per_ip_limit_sends_auth_failed_and_closes_4029(
    one_socket_per_address, settings, post_a, tenant_a, alice
):
    register(post_a, alice, tenant_a)
    settings.MEDIATOR_WS_CONNECT_PER_IP = 0  # only AUTHENTICATE is limited here
    limits.per_ip("ws_auth", tenant_a.pk, "127.0.0.9")  # this address's one attempt, used

    async def body():
        comm = communicator()
        assert (await comm.connect())[0]
        await send(comm, alice.ws_authenticate())
        assert await comm.receive_json_from() == {"type": "AUTH_FAILED", "code": "RATE_LIMITED"}
        await expect_close(comm, 4029)
        await comm.disconnect()

    run(body)


def _ws_events() -> dict[str, float]:
    return {e: metrics.WS_EVENTS.labels(e)._value.get() for e in ("connect", "authenticated", "disconnect")}


def test_the_socket_metrics_count_connect_authenticated_and_disconnect(post_a, tenant_a, alice):
    register(post_a, alice, tenant_a)
    before, open_before = _ws_events(), metrics.WS_CONNECTIONS._value.get()

    async def body():
        comm = await connect_authenticated(alice)
        await comm.disconnect()
        refused = communicator()
        assert (await refused.connect())[0]
        await send(refused, "nope")
        assert await refused.receive_json_from() == {"type": "AUTH_FAILED", "code": "INVALID_MESSAGE"}
        await expect_close(refused, 4002)
        await refused.disconnect()

    run(body)
    after = _ws_events()
    assert {e: after[e] - before[e] for e in after} == {"connect": 2, "authenticated": 1, "disconnect": 2}
    assert metrics.WS_CONNECTIONS._value.get() == open_before


def test_a_push_with_the_channel_layer_down_never_fails_the_command(
    settings, post_a, tenant_a, alice, bob, django_capture_on_commit_callbacks
):
    from tests.support.registration import contract_both_ways

    register(post_a, alice, tenant_a)
    register(post_a, bob, tenant_a)
    contract_both_ways(post_a, alice, bob, tenant_a)
    settings.CHANNEL_LAYERS = _redis_layer("redis://127.0.0.1:1/0")
    with django_capture_on_commit_callbacks(execute=True):
        status, body = post_a.command(alice, "opaque-blob", recipient_did=bob.did, channel="TWO_WAY_PRIVATE")
    assert status == 200 and body["type"] == "SUCCESS"


def test_a_push_from_plain_sync_code_reaches_a_redis_group(settings):
    """The HTTP tier's (Granian's threads) and Celery's path: no event loop in the thread, Redis layer, one background loop."""
    import uuid

    from asgiref.sync import async_to_sync, sync_to_async
    from channels.layers import get_channel_layer

    from apps.realtime.push import PUSH_TYPE, push_to_sockets

    settings.CHANNEL_LAYERS = _redis_layer("redis://127.0.0.1:6379/11")
    did = f"did:test:{uuid.uuid4()}"

    async def body():
        layer = get_channel_layer()
        channel = await layer.new_channel()
        await layer.group_add(group_name(7, did), channel)
        # A worker thread with no event loop of its own, like a WSGI worker.
        for _ in range(2):
            await sync_to_async(push_to_sockets, thread_sensitive=False)(
                None, tenant_id=7, did=did, message={"type": "CONTRACTS_UPDATED"}
            )
        for _ in range(2):
            assert await layer.receive(channel) == {
                "type": PUSH_TYPE,
                "group": group_name(7, did),
                "text": '{"type":"CONTRACTS_UPDATED"}',
            }
        await layer.group_discard(group_name(7, did), channel)

    async_to_sync(body)()


@pytest.mark.parametrize(
    ("trusted", "forwarded_for", "seen_ip"),
    [
        (["127.0.0.0/8"], b"203.0.113.7", "203.0.113.7"),  # behind the layout's nginx
        (["127.0.0.0/8"], b"198.51.100.1, 203.0.113.7, 127.0.0.5", "203.0.113.7"),  # right-most untrusted
        ([], b"203.0.113.7", "127.0.0.9"),  # no trusted proxies: the header is ignored
        (["10.0.0.0/8"], b"203.0.113.7", "127.0.0.9"),  # the peer is not a trusted proxy
    ],
)
def test_websocket_admission_sees_the_forwarded_client_behind_trusted_proxies(
    one_socket_per_address, settings, tenant_a, trusted, forwarded_for, seen_ip
):
    """Per-IP WebSocket limits count the client, not the layout's nginx (which is 127.0.0.1 for
    every socket), with the same trust rule as POST / (views.forwarded_client)."""
    settings.MEDIATOR_TRUSTED_PROXIES = trusted
    headers = [(b"x-forwarded-for", forwarded_for)]
    _connect_and_leave(headers=headers)
    _refused_on_connect(HOST_A, "RATE_LIMITED", 4029, headers=headers)
    # The address that paid is the one the rule names, not its neighbour.
    with pytest.raises(ProtocolError):
        limits.per_ip("ws_connect", tenant_a.pk, seen_ip)
    other = "127.0.0.9" if seen_ip != "127.0.0.9" else "203.0.113.7"
    limits.per_ip("ws_connect", tenant_a.pk, other)
