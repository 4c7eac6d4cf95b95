"""Pushes from sync code onto channels_redis with the blocking client (apps/realtime/push.py):
what a Daphne consumer receives must be exactly what the layer's own async group_send gives."""

from __future__ import annotations

import time
import uuid

import pytest
import redis
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from apps.ops.metrics import OPS_REGISTRY
from apps.realtime import push
from apps.realtime.channels_redis_adapter import sync_sender
from apps.realtime.groups import group_name
from apps.realtime.push import PUSH_TYPE, push_to_sockets, pusher

REDIS_URL = "redis://127.0.0.1:6379/12"


@pytest.fixture
def layer(settings):
    prefix = f"t{uuid.uuid4().hex[:12]}"
    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [{"address": REDIS_URL, "socket_timeout": 30}], "prefix": prefix, "capacity": 2},
        }
    }
    layer = get_channel_layer()
    yield layer
    raw = redis.Redis.from_url(REDIS_URL)
    keys = list(raw.scan_iter(match=f"{prefix}*"))
    if keys:
        raw.delete(*keys)


def join(layer, did: str, n: int = 1) -> list[str]:
    """`n` new channels in the group of (tenant 3, did), as n authenticated sockets would be."""

    async def body():
        channels = [await layer.new_channel() for _ in range(n)]
        for ch in channels:
            await layer.group_add(group_name(3, did), ch)
        return channels

    return async_to_sync(body)()


def _keys(layer) -> list[bytes]:
    return sorted(redis.Redis.from_url(REDIS_URL).scan_iter(match=f"{layer.prefix}*"))


def test_every_socket_of_the_group_gets_the_push_the_async_layer_would_give(layer):
    did = f"did:test:{uuid.uuid4()}"

    channels = join(layer, did, 3)
    sync = sync_sender(layer)
    assert sync is not None and len(sync.pools) == 1
    # The blocking connections keep their own short timeouts, not the consumer's 30 s read timeout.
    assert sync.pools[0].connection_kwargs["socket_timeout"] == 2.0
    push_to_sockets(None, tenant_id=3, did=did, message={"type": "PENDING_EVENTS", "events": []})
    pusher(sync).flush()  # sent before the direct send below
    assert sorted(sync.members(group_name(3, did))) == sorted(channels)
    sync.send(group_name(3, did), sync.members(group_name(3, did)), {"type": PUSH_TYPE, "text": "second"})

    async def drain():
        return [[await layer.receive(ch), await layer.receive(ch)] for ch in channels]

    expected = [
        # push_to_sockets names the group (a socket in several groups knows which one).
        {"type": PUSH_TYPE, "group": group_name(3, did), "text": '{"events":[],"type":"PENDING_EVENTS"}'},
        {"type": PUSH_TYPE, "text": "second"},
    ]
    assert async_to_sync(drain)() == [expected] * 3


def test_a_group_without_sockets_writes_nothing(layer):
    push_to_sockets(None, tenant_id=3, did="did:test:nobody", message={"type": "CONTRACTS_UPDATED"})
    pusher(sync_sender(layer)).flush()
    assert sync_sender(layer).members(group_name(3, "did:test:nobody")) == []
    assert _keys(layer) == []


def test_members_older_than_group_expiry_are_not_sent_to_and_are_dropped_by_the_next_send(layer):
    did = f"did:test:{uuid.uuid4()}"
    group_key = layer._group_key(group_name(3, did))
    raw = redis.Redis.from_url(REDIS_URL)
    raw.zadd(group_key, {"specific.stale!abc": int(time.time()) - layer.group_expiry - 5})
    sync = sync_sender(layer)
    assert sync.members(group_name(3, did)) == []
    push_to_sockets(None, tenant_id=3, did=did, message={"type": "CONTRACTS_UPDATED"})
    pusher(sync).flush()
    assert _keys(layer) == [group_key]  # nothing was sent, nothing else written

    (channel,) = join(layer, did)
    push_to_sockets(None, tenant_id=3, did=did, message={"type": "CONTRACTS_UPDATED"})
    pusher(sync).flush()
    assert raw.zrange(group_key, 0, -1) == [channel.encode()]
    assert async_to_sync(layer.receive)(channel) == {
        "type": PUSH_TYPE,
        "group": group_name(3, did),
        "text": '{"type":"CONTRACTS_UPDATED"}',
    }


def test_a_channel_at_capacity_gets_no_more(layer):
    did = f"did:test:{uuid.uuid4()}"

    (channel,) = join(layer, did)
    sync = sync_sender(layer)
    for i in range(4):  # capacity 2
        sync.send(group_name(3, did), [channel], {"type": PUSH_TYPE, "text": str(i)})

    async def drain():
        first = [await layer.receive(channel), await layer.receive(channel)]
        return first, None

    got, _ = async_to_sync(drain)()
    assert got == [{"type": PUSH_TYPE, "text": "0"}, {"type": PUSH_TYPE, "text": "1"}]
    key = layer.prefix + layer.non_local_name(channel)
    assert redis.Redis.from_url(REDIS_URL).zcard(key) == 0


def test_other_layers_keep_the_async_path(settings):
    settings.CHANNEL_LAYERS = {
        "default": {"BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer", "CONFIG": {"hosts": [REDIS_URL]}}
    }
    assert sync_sender(get_channel_layer()) is None


def _own_connection_address(sync) -> str:
    """The address Redis knows this thread's kept SyncSender connection by ("127.0.0.1:port")."""
    (conn,) = sync._local.conns.values()
    host, port = conn._sock.getsockname()[:2]
    return f"{host}:{port}"


def test_a_broken_connection_is_replaced_at_once_and_the_push_is_not_lost(layer):
    did = f"did:test:{uuid.uuid4()}"

    (channel,) = join(layer, did)
    sync = sync_sender(layer)
    assert sync.members(group_name(3, did)) == [channel]
    # Kill this thread's connection from the server side, as a Redis restart would: that one
    # connection only (by its address), never another process's (a parallel test's limiter).
    raw = redis.Redis.from_url(REDIS_URL)
    raw.client_kill(_own_connection_address(sync))
    assert sync.members(group_name(3, did)) == [channel]
    raw.client_kill(_own_connection_address(sync))
    push_to_sockets(None, tenant_id=3, did=did, message={"type": "CONTRACTS_UPDATED"})

    async def receive():
        return await layer.receive(channel)

    assert async_to_sync(receive)() == {
        "type": PUSH_TYPE,
        "group": group_name(3, did),
        "text": '{"type":"CONTRACTS_UPDATED"}',
    }


def test_the_pushes_of_commands_in_flight_share_one_lookup_and_go_out_in_order(layer, monkeypatch):
    """The committing thread only queues; the pusher looks every queued group up in one round
    trip, then sends to the groups that have sockets, oldest push first."""
    monkeypatch.setattr(push, "PUSH_LINGER_S", 5.0)  # the test's flush takes the batch, not the thread
    did = f"did:test:{uuid.uuid4()}"
    (channel,) = join(layer, did)
    sync = sync_sender(layer)
    trips = []
    real = sync._round_trip
    monkeypatch.setattr(
        sync, "_round_trip", lambda index, commands: trips.append([c[0] for c in commands]) or real(index, commands)
    )
    for i in range(3):
        push_to_sockets(None, tenant_id=3, did=f"did:test:nobody-{i}", message={"type": "CONTRACTS_UPDATED"})
        push_to_sockets(None, tenant_id=3, did=did, message={"type": "PENDING_EVENTS", "events": [str(i)]})
    assert trips == []  # nothing sent by the committing thread
    pusher(sync).flush()
    # One lookup of the six groups, then one pipeline per push to the live group.
    assert trips == [["ZRANGEBYSCORE"] * 6] + [["ZREMRANGEBYSCORE", "ZREMRANGEBYSCORE", "EVAL"]] * 3

    async def drain():
        return [await layer.receive(channel) for _ in range(2)]

    # capacity 2: the first two, in order (the third was refused by the layer's capacity script)
    assert [m["text"] for m in async_to_sync(drain)()] == [
        '{"events":["0"],"type":"PENDING_EVENTS"}',
        '{"events":["1"],"type":"PENDING_EVENTS"}',
    ]


def test_past_the_queue_cap_a_push_is_dropped_and_counted(layer, monkeypatch, caplog):
    monkeypatch.setattr(push, "PUSH_LINGER_S", 5.0)
    monkeypatch.setattr(push, "PUSH_QUEUE_MAX", 2)
    did = f"did:test:{uuid.uuid4()}"
    (channel,) = join(layer, did)
    sync = sync_sender(layer)
    queue = pusher(sync)
    before = queue.dropped
    counted = OPS_REGISTRY.get_sample_value("mediator_pushes_dropped_total")
    for i in range(4):
        push_to_sockets(None, tenant_id=3, did=did, message={"type": "PENDING_EVENTS", "events": [str(i)]})
    assert queue.dropped - before == 2
    assert OPS_REGISTRY.get_sample_value("mediator_pushes_dropped_total") - counted == 2
    assert "push queue full" in caplog.text and "PENDING_EVENTS" in caplog.text and did not in caplog.text
    queue.flush()

    async def drain():
        return [await layer.receive(channel) for _ in range(2)]

    assert [m["text"] for m in async_to_sync(drain)()] == [
        '{"events":["0"],"type":"PENDING_EVENTS"}',
        '{"events":["1"],"type":"PENDING_EVENTS"}',
    ]


def test_a_forked_process_gets_its_own_pusher(layer):
    sync = sync_sender(layer)
    first = pusher(sync)
    assert pusher(sync) is first
    first.pid = -1  # as the parent's pusher looks from a child after fork: its thread is not there
    child = pusher(sync)
    assert child is not first and child.pid > 0 and pusher(sync) is child
    did = f"did:test:{uuid.uuid4()}"
    (channel,) = join(layer, did)
    push_to_sockets(None, tenant_id=3, did=did, message={"type": "CONTRACTS_UPDATED"})
    assert async_to_sync(layer.receive)(channel)["text"] == '{"type":"CONTRACTS_UPDATED"}'
