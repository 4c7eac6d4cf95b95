"""Redis through Sentinel (REDIS_SENTINELS, docs/serving.md) across a real failover: a private
master, its replica and one sentinel (quorum 1) on local ports. The master is SIGKILLed; once the
sentinel has promoted the replica, the same process (no restart, the same channel layer object)
pushes to a socket's channel through the product's push path, /health answers, the rate limits
count on the new master and Celery's broker carries a message. Every wait is on a condition."""

from __future__ import annotations

import time
import uuid

import pytest
import redis
import redis.sentinel
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from kombu import Connection

from apps.ops import limits
from apps.ops.redisconn import RedisSentinel
from apps.realtime import health
from apps.realtime.groups import group_name
from apps.realtime.push import PUSH_TYPE, push_to_sockets
from tests.support.servers import RedisServer, start_redis, start_sentinel

pytestmark = pytest.mark.e2e

MASTER = "mediator"


def until(what: str, check, limit_s: float = 30) -> None:
    deadline = time.monotonic() + limit_s
    while not check():
        assert time.monotonic() < deadline, f"{what}: not within {limit_s:.0f}s"
        time.sleep(0.05)


def _replica_in_sync(sentinel: RedisServer, replica: RedisServer) -> bool:
    """The sentinel knows the replica, and the replica has the master's data."""
    known = redis.Redis(port=sentinel.port, decode_responses=True).sentinel_slaves(MASTER)
    linked = redis.Redis(port=replica.port).info("replication").get("master_link_status") == "up"
    return linked and any(int(r["port"]) == replica.port and "s_down" not in r["flags"] for r in known)


def _master_port(sentinel: RedisServer) -> int:
    """The master's port as the clients discover it (a master the sentinel sees up)."""
    try:
        return int(redis.sentinel.Sentinel([("127.0.0.1", sentinel.port)]).discover_master(MASTER)[1])
    except redis.sentinel.MasterNotFoundError:
        return 0


@pytest.fixture
def cluster(tmp_path):
    master = start_redis(tmp_path)
    replica = start_redis(tmp_path, "--replicaof", "127.0.0.1", str(master.port))
    sentinel = start_sentinel(tmp_path, master, MASTER)
    try:
        until("the sentinel sees the replica in sync", lambda: _replica_in_sync(sentinel, replica))
        yield master, replica, sentinel
    finally:
        for server in (sentinel, replica, master):
            server.stop()


def test_pushes_the_rate_limits_health_and_celery_follow_a_failover_without_a_restart(cluster, settings):
    master, replica, sentinel = cluster
    deployment = RedisSentinel((("127.0.0.1", sentinel.port),), MASTER)
    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [deployment.channel_layer_host(socket_timeout=30)], "prefix": "sentinel-test"},
        }
    }
    settings.MEDIATOR_RATE_LIMIT_REDIS_URL = ""
    settings.MEDIATOR_RATE_LIMIT_REDIS_SENTINEL = deployment
    layer = get_channel_layer()
    did = f"did:test:{uuid.uuid4()}"
    group = group_name(3, did)

    def push_reaches_a_socket(seq: int) -> dict:
        """A socket (a channel) joins the group, as a socket (re)connecting does; the product
        pushes from sync code; the socket's channel receives it."""

        async def join() -> str:
            channel = await layer.new_channel()
            await layer.group_add(group, channel)
            return channel

        async def receive(channel: str) -> dict:
            return await layer.receive(channel)

        channel = async_to_sync(join)()
        push_to_sockets(None, tenant_id=3, did=did, message={"type": "PENDING_EVENTS", "seq": seq})
        return async_to_sync(receive)(channel)

    def expected(seq: int) -> dict:
        return {"type": PUSH_TYPE, "group": group, "text": f'{{"seq":{seq},"type":"PENDING_EVENTS"}}'}

    assert push_reaches_a_socket(1) == expected(1)
    assert health.channel_layer_reachable()

    master.proc.kill()
    master.proc.wait(10)
    until("the sentinel promotes the replica", lambda: _master_port(sentinel) == replica.port)
    until(
        "the promoted replica takes writes",
        lambda: redis.Redis(port=replica.port).info("replication")["role"] == "master",
    )

    assert push_reaches_a_socket(2) == expected(2)
    assert health.channel_layer_reachable()
    key = f"sentinel-test-{uuid.uuid4().hex}"
    assert [limits.hit("test", 1, key, 1).allowed, limits.hit("test", 1, key, 1).allowed] == [True, False]
    broker, options = deployment.celery_broker()
    with Connection(broker, transport_options=options, connect_timeout=5) as conn:
        queue = conn.SimpleQueue(f"sentinel-test-{uuid.uuid4().hex}")
        queue.put({"job": "prune"})
        assert queue.get(timeout=10).payload == {"job": "prune"}
        queue.close()
