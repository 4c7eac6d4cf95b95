"""REDIS_SENTINELS and REDIS_SENTINEL_MASTER (docs/serving.md, "Redis through Sentinel"): how they
are read, what the channel layer, Celery's broker and the rate limits get from them, and the
settings refused. The failover itself runs in tests/realtime/test_sentinel.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from django.core.exceptions import ImproperlyConfigured

from apps.ops.redisconn import RedisSentinel, redis_sentinel
from tests.support import servers


def test_no_sentinels_is_no_sentinel_deployment():
    assert redis_sentinel("", "mediator") is None
    assert redis_sentinel(None, None) is None


def test_sentinels_are_host_port_pairs_with_the_default_port_and_bracketed_ipv6():
    got = redis_sentinel(" 10.0.0.1:26380 , sentinel-b ,[fd00::3]:26381,", " mediator ", "2", "pw", "spw")
    assert got == RedisSentinel(
        (("10.0.0.1", 26380), ("sentinel-b", 26379), ("fd00::3", 26381)), "mediator", 2, "pw", "spw"
    )


@pytest.mark.parametrize(
    ("sentinels", "master", "db", "message"),
    [
        ("h:26379", "", None, "REDIS_SENTINEL_MASTER: the master's name the sentinels monitor is required"),
        ("h:port", "m", None, "REDIS_SENTINELS: bad port in 'h:port'"),
        ("redis://h:26379", "m", None, "REDIS_SENTINELS: 'redis://h:26379' is not host:port"),
        ("u:p@h:26379", "m", None, "REDIS_SENTINELS: 'u:p@h:26379' is not host:port"),
        (" , ", "m", None, "REDIS_SENTINELS: no sentinel address"),
        ("h", "m", "zero", "REDIS_DB must be a number, got 'zero'"),
    ],
)
def test_settings_that_name_no_usable_sentinel_deployment_are_refused(sentinels, master, db, message):
    with pytest.raises(ImproperlyConfigured) as refused:
        redis_sentinel(sentinels, master, db)
    assert str(refused.value) == message


def test_the_channel_layer_gets_channels_redis_sentinel_form_with_its_options():
    sentinel = RedisSentinel((("a", 26379), ("b", 26380)), "mediator", 3, "pw", "spw")
    host = sentinel.channel_layer_host(socket_timeout=30)
    # A sentinel that is down is skipped at once: no retries of it.
    retry = host["sentinel_kwargs"].pop("retry")
    assert (type(retry).__module__, retry.get_retries()) == ("redis.asyncio.retry", 0)
    assert host == {
        "sentinels": [["a", 26379], ["b", 26380]],
        "master_name": "mediator",
        "sentinel_kwargs": {"socket_timeout": 2, "socket_connect_timeout": 2, "password": "spw"},
        "db": 3,
        "password": "pw",
        "socket_timeout": 30,
    }
    # /health reads the layer's setting back.
    assert RedisSentinel.from_channel_layer_host(host) == sentinel
    assert "pw" not in repr(sentinel)


def test_celerys_broker_is_kombus_sentinel_transport_naming_the_master():
    assert RedisSentinel((("a", 26379), ("fd00::3", 26380)), "mediator", 1, "p@ss").celery_broker() == (
        "sentinel://:p%40ss@a:26379/1;sentinel://:p%40ss@[fd00::3]:26380/1",
        {"master_name": "mediator"},
    )
    assert RedisSentinel((("a", 26379),), "m", sentinel_password="spw").celery_broker() == (
        "sentinel://a:26379/0",
        {"master_name": "m", "sentinel_kwargs": {"password": "spw"}},
    )


PRINT = """
from django.conf import settings
import json
print(json.dumps({
    "hosts": settings.CHANNEL_LAYERS["default"]["CONFIG"]["hosts"],
    "broker": settings.CELERY_BROKER_URL,
    "options": settings.CELERY_BROKER_TRANSPORT_OPTIONS,
    "rate_limit_url": settings.MEDIATOR_RATE_LIMIT_REDIS_URL,
    "rate_limit_sentinel": repr(settings.MEDIATOR_RATE_LIMIT_REDIS_SENTINEL),
}, default=repr))
"""


def _settings(env_extra: dict) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEDIATOR_", "DJANGO_", "REDIS_", "CELERY_"))}
    env.update({"PYTHONPATH": str(servers.ROOT), "DJANGO_SETTINGS_MODULE": "mediator_project.settings"}, **env_extra)
    return subprocess.run(
        [sys.executable, "-c", "import django; django.setup()\n" + PRINT],
        cwd=servers.ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_settings_send_every_redis_user_through_the_sentinels(tmp_path):
    out = _settings(
        {"MEDIATOR_VAR_DIR": str(tmp_path), "REDIS_SENTINELS": "10.0.0.1,10.0.0.2", "REDIS_SENTINEL_MASTER": "m"}
    )
    got = json.loads(out.stdout)
    assert [h["master_name"] for h in got["hosts"]] == ["m"], out.stderr
    assert got["hosts"][0]["sentinels"] == [["10.0.0.1", 26379], ["10.0.0.2", 26379]]
    assert (got["broker"], got["options"]) == (
        "sentinel://10.0.0.1:26379/0;sentinel://10.0.0.2:26379/0",
        {"master_name": "m"},
    )
    assert got["rate_limit_url"] == ""
    assert got["rate_limit_sentinel"] == repr(RedisSentinel((("10.0.0.1", 26379), ("10.0.0.2", 26379)), "m"))


def test_redis_url_and_sentinels_together_are_refused(tmp_path):
    out = _settings(
        {
            "MEDIATOR_VAR_DIR": str(tmp_path),
            "REDIS_URL": "redis://127.0.0.1:6379/0",
            "REDIS_SENTINELS": "10.0.0.1",
            "REDIS_SENTINEL_MASTER": "m",
        }
    )
    assert out.returncode != 0
    assert "set REDIS_URL or REDIS_SENTINELS, not both" in out.stderr
