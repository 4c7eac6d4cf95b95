"""Pushes from sync code onto channels_redis with the blocking client (apps/realtime/push.py):
what a Daphne consumer receives must be exactly what the layer's own async group_send gives."""

from __future__ import annotations

import time
import uuid

import pytest
import redis
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from apps.realtime.channels_redis_adapter import sync_sender
from apps.realtime.groups import group_name
from apps.realtime.push import PUSH_TYPE, push_to_sockets

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
    assert _keys(layer) == [group_key]  # nothing was sent, nothing else written

    (channel,) = join(layer, did)
    push_to_sockets(None, tenant_id=3, did=did, message={"type": "CONTRACTS_UPDATED"})
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


def test_a_broken_connection_is_replaced_on_the_next_push(layer):
    did = f"did:test:{uuid.uuid4()}"

    (channel,) = join(layer, did)
    sync = sync_sender(layer)
    assert sync.members(group_name(3, did)) == [channel]
    # Kill this thread's connection from the server side, as a Redis restart would.
    raw = redis.Redis.from_url(REDIS_URL)
    for client in raw.client_list():
        if client["cmd"] in ("zrangebyscore", "zremrangebyscore", "eval"):
            raw.client_kill_filter(_id=client["id"])
    with pytest.raises(redis.ConnectionError):
        sync.members(group_name(3, did))
    push_to_sockets(None, tenant_id=3, did=did, message={"type": "CONTRACTS_UPDATED"})

    async def receive():
        return await layer.receive(channel)

    assert async_to_sync(receive)() == {
        "type": PUSH_TYPE,
        "group": group_name(3, did),
        "text": '{"type":"CONTRACTS_UPDATED"}',
    }
