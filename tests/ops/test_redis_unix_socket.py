"""REDIS_URL on Redis's Unix socket (docs/serving.md): Celery's broker URL is derived from it
(kombu has no unix:// transport), and every Redis client of the product talks over the socket
to the real Redis scripts/ensure_services.sh starts on var/redis/redis.sock."""

from __future__ import annotations

import uuid

import pytest
import redis
from django.core.exceptions import ImproperlyConfigured
from kombu import Connection

from mediator_project.env import celery_broker_url
from tests.support.servers import REDIS_SOCKET, redis_socket_url

SOCKET_DB = 11  # this module's database on the socket's Redis


@pytest.mark.parametrize(
    ("redis_url", "broker"),
    [
        ("unix:///run/redis/redis.sock?db=3", "redis+socket:///run/redis/redis.sock?virtual_host=3"),
        ("unix:///run/redis/redis.sock", "redis+socket:///run/redis/redis.sock"),
        ("unix://:s3cret@/run/redis/redis.sock?db=0", "redis+socket://:s3cret@/run/redis/redis.sock?virtual_host=0"),
        ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
        ("rediss://cache.example.net:6380/2", "rediss://cache.example.net:6380/2"),
    ],
)
def test_celerys_broker_url_follows_redis_url(redis_url, broker):
    assert celery_broker_url(redis_url) == broker


@pytest.mark.parametrize(
    ("redis_url", "message"),
    [
        (
            "unix:///run/redis.sock?db=1&socket_timeout=5",
            "REDIS_URL: a unix:// URL may carry only ?db= for Celery (got socket_timeout); "
            "set CELERY_BROKER_URL (redis+socket://…) yourself",
        ),
        ("unix:///run/redis.sock?db=one", "REDIS_URL: db must be a number, got 'one'"),
    ],
)
def test_a_unix_url_celery_could_not_use_stops_the_settings(redis_url, message):
    with pytest.raises(ImproperlyConfigured) as refused:
        celery_broker_url(redis_url)
    assert str(refused.value) == message


def test_the_derived_broker_url_carries_celery_messages_over_the_socket_to_its_database():
    url = redis_socket_url(SOCKET_DB)
    queue = f"mediator-test-{uuid.uuid4().hex}"
    with Connection(celery_broker_url(url), connect_timeout=5) as conn:
        conn.ensure_connection(max_retries=1)
        simple = conn.SimpleQueue(queue)
        try:
            simple.put({"job": "prune"})
            # The message is in the socket Redis's database SOCKET_DB, where kombu keeps the queue's list.
            client = redis.Redis(unix_socket_path=str(REDIS_SOCKET), db=SOCKET_DB)
            assert client.llen(queue) == 1
            message = simple.get(timeout=5)
            assert message.payload == {"job": "prune"}
            message.ack()
            assert client.llen(queue) == 0
        finally:
            simple.clear()
            simple.close()


def test_the_rate_limits_share_their_window_over_the_socket(settings):
    from apps.ops import limits

    settings.MEDIATOR_RATE_LIMIT_REDIS_URL = redis_socket_url(SOCKET_DB)
    settings.MEDIATOR_RATE_LIMIT_PREFIX = f"mediator-test-{uuid.uuid4().hex}"
    assert isinstance(limits.backend(), limits.RedisBackend)
    decisions = [limits.hit("unix_socket", 1, "203.0.113.9", 2).allowed for _ in range(3)]
    assert decisions == [True, True, False]
    # The window lives in the socket Redis's database, not in this process.
    client = redis.Redis(unix_socket_path=str(REDIS_SOCKET), db=SOCKET_DB)
    keys = client.keys(f"{settings.MEDIATOR_RATE_LIMIT_PREFIX}:*")
    assert len(keys) == 1
    client.delete(*keys)
