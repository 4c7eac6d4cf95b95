"""The version-pinned channels_redis adapter (apps/realtime/channels_redis_adapter.py).

- the pin: requirements.txt, the installed package and the adapter name the same version, and any
  other version is refused (by the adapter, and at startup when the deployment uses the layer);
- compatibility on the real RedisChannelLayer and Redis: a real Daphne consumer receives what the
  adapter sends, and the adapter honours the layer's per-channel capacity and group expiry exactly
  as the layer's own `group_send` does (both are run side by side on the same layer).
"""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from pathlib import Path

import channels_redis
import pytest
import redis
from asgiref.sync import async_to_sync
from channels.exceptions import ChannelFull
from channels.layers import get_channel_layer
from django.apps import apps as django_apps
from django.core.exceptions import ImproperlyConfigured

from apps.realtime import channels_redis_adapter as adapter
from apps.realtime.groups import group_name
from apps.realtime.push import PUSH_TYPE, push_to_sockets, pusher
from apps.wire.client import Identity, MediatorClient
from apps.wire.ws import open_authenticated
from tests.support.layers import redis_channel_layers
from tests.support.servers import free_port, start_daphne

ROOT = Path(__file__).resolve().parents[2]
REDIS_URL = "redis://127.0.0.1:6379/12"
# The Daphne test's Redis database (tests/realtime/test_daphne.py); groups are per fresh DID.
DAPHNE_REDIS_URL = "redis://127.0.0.1:6379/11"


def _redis_layer_settings(url: str, **config) -> dict:
    return {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [{"address": url, "socket_timeout": 30}], **config},
        }
    }


@pytest.fixture
def layer(settings):
    prefix = f"t{uuid.uuid4().hex[:12]}"
    settings.CHANNEL_LAYERS = _redis_layer_settings(REDIS_URL, prefix=prefix, capacity=2, group_expiry=50)
    layer = get_channel_layer()
    yield layer
    raw = redis.Redis.from_url(REDIS_URL)
    keys = list(raw.scan_iter(match=f"{prefix}*"))
    if keys:
        raw.delete(*keys)


# --- the pin -------------------------------------------------------------------------------------


def test_requirements_pin_exactly_the_version_the_adapter_copies_and_it_is_installed():
    pins = re.findall(r"^channels-redis==(\S+)\s*$", (ROOT / "requirements.txt").read_text(), flags=re.M)
    assert pins == [adapter.PINNED] == ["4.3.0"]
    assert channels_redis.__version__ == adapter.PINNED


def test_another_version_is_refused():
    adapter.check_version(adapter.PINNED)
    for other in ("4.3.1", "4.2.1", "5.0.0"):
        with pytest.raises(ImproperlyConfigured) as err:
            adapter.check_version(other)
        assert str(err.value) == (
            f"channels_redis {other} is installed, apps/realtime/channels_redis_adapter.py is written for "
            "4.3.0 exactly: install channels-redis==4.3.0 (requirements.txt) or port the adapter"
        )


def test_the_adapter_is_not_built_on_another_version(layer, monkeypatch):
    monkeypatch.setattr(channels_redis, "__version__", "4.4.0")
    with pytest.raises(ImproperlyConfigured):
        adapter.SyncSender(layer)


def test_startup_refuses_another_version_when_the_deployment_uses_the_redis_layer(settings, monkeypatch):
    config = django_apps.get_app_config("realtime")
    monkeypatch.setattr(channels_redis, "__version__", "4.4.0")
    settings.CHANNEL_LAYERS = _redis_layer_settings(REDIS_URL)
    with pytest.raises(ImproperlyConfigured, match="channels_redis 4.4.0 is installed"):
        config.ready()
    # Another layer does not use the adapter: nothing to refuse.
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    config.ready()
    monkeypatch.setattr(channels_redis, "__version__", adapter.PINNED)
    settings.CHANNEL_LAYERS = _redis_layer_settings(REDIS_URL)
    config.ready()


def test_only_the_redis_layer_itself_gets_the_adapter(settings):
    settings.CHANNEL_LAYERS = {
        "default": {"BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer", "CONFIG": {"hosts": [REDIS_URL]}}
    }
    assert adapter.sync_sender(get_channel_layer()) is None
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    assert adapter.sync_sender(get_channel_layer()) is None


# --- the same behaviour as the layer's group_send ------------------------------------------------


def _join(layer, group: str, n: int) -> list[str]:
    async def body():
        channels = [await layer.new_channel() for _ in range(n)]
        for ch in channels:
            await layer.group_add(group, ch)
        return channels

    return async_to_sync(body)()


def _drain(layer, channel: str) -> list[dict]:
    """Every message waiting on `channel`, in order: those received before a marker sent to it now
    (once there is room for it: the oldest are taken first while the channel is at its capacity).
    channels_redis keeps a channel's messages in a sorted set scored by the time they were sent
    and hands out the oldest first, so whatever was sent before the marker comes before it."""
    marker = {"type": "drain.marker", "id": uuid.uuid4().hex}

    async def body():
        got = []
        while True:
            try:
                await layer.send(channel, marker)
                break
            except ChannelFull:
                got.append(await asyncio.wait_for(layer.receive(channel), 10))
        while (message := await asyncio.wait_for(layer.receive(channel), 10)) != marker:
            got.append(message)
        return got

    return async_to_sync(body)()


def test_capacity_is_the_layers_as_with_group_send(layer):
    """Capacity 2 here: of four pushes the third and fourth are dropped, through either path. (The
    channels of one layer process share one Redis key, so the paths run one after the other.)"""
    got = {}
    for path in ("adapter", "group_send"):
        group = f"g.{uuid.uuid4().hex}"
        (channel,) = _join(layer, group, 1)
        sync = adapter.sync_sender(layer)
        for i in range(4):
            message = {"type": PUSH_TYPE, "text": f"{path} {i}"}
            if path == "adapter":
                sync.send(group, sync.members(group), message)
            else:
                async_to_sync(layer.group_send)(group, message)
        got[path] = [m["text"] for m in _drain(layer, channel)]
    assert got == {"adapter": ["adapter 0", "adapter 1"], "group_send": ["group_send 0", "group_send 1"]}


def test_group_expiry_is_the_layers_as_with_group_send(layer):
    """group_expiry is 50 s here (not the default 86,400): a member that joined 40 s ago still
    gets the push, one that joined 60 s ago does not, through either path."""
    raw = redis.Redis.from_url(REDIS_URL)
    got = {}
    for path in ("adapter", "group_send"):
        group = f"g.{uuid.uuid4().hex}"
        live, stale = _join(layer, group, 2)
        now = int(time.time())
        raw.zadd(layer._group_key(group), {live: now - 40, stale: now - 60})
        message = {"type": PUSH_TYPE, "text": path}
        if path == "adapter":
            sync = adapter.sync_sender(layer)
            assert sync.members(group) == [live]
            sync.send(group, sync.members(group), message)
        else:
            async_to_sync(layer.group_send)(group, message)
        # Both deliver to the live member only and drop the stale one from the group.
        got[path] = (
            _drain(layer, live),
            _drain(layer, stale),
            raw.zrange(layer._group_key(group), 0, -1) == [live.encode()],
        )
    assert got == {
        "adapter": ([{"type": PUSH_TYPE, "text": "adapter"}], [], True),
        "group_send": ([{"type": PUSH_TYPE, "text": "group_send"}], [], True),
    }


def test_the_adapter_writes_under_the_layers_key_prefix(layer):
    """The layer here has its own prefix (as each deployment and each test database has): a push
    through the adapter reaches a channel the layer added, and every key either wrote carries it."""
    raw = redis.Redis.from_url(REDIS_URL)
    did = f"did:test:{uuid.uuid4()}"
    (channel,) = _join(layer, group_name(7, did), 1)
    push_to_sockets(None, tenant_id=7, did=did, message={"type": "CONTRACTS_UPDATED"})
    pusher(adapter.sync_sender(layer)).flush()  # the pusher thread's send has been made
    keys = sorted(k.decode() for k in raw.scan_iter(match=f"*{group_name(7, did)}*")) + sorted(
        k.decode() for k in raw.scan_iter(match=f"*{layer.non_local_name(channel)}*")
    )
    assert keys == [
        f"{layer.prefix}:group:{group_name(7, did)}",
        f"{layer.prefix}{layer.non_local_name(channel)}",
    ]
    assert _drain(layer, channel) == [
        {"type": PUSH_TYPE, "group": group_name(7, did), "text": '{"type":"CONTRACTS_UPDATED"}'}
    ]


def test_the_deployments_layer_takes_the_prefix_setting(settings):
    settings.MEDIATOR_CHANNEL_LAYER_PREFIX = "other-deployment"
    settings.CHANNEL_LAYERS = redis_channel_layers(REDIS_URL)
    layer = get_channel_layer()
    assert (layer.prefix, layer._group_key("t1")) == ("other-deployment", b"other-deployment:group:t1")


# --- a real Daphne consumer -----------------------------------------------------------------------


@pytest.mark.e2e
@pytest.mark.django_db(transaction=True)
def test_a_real_daphne_consumer_receives_what_the_adapter_sends(tmp_path, settings):
    from apps.tenants.services import tenant_create

    port = free_port()
    host = f"127.0.0.1:{port}"
    tenant = tenant_create(slug="rta", domain=host, rate_limit_per_did=0, rate_limit_per_ip=0)
    # Daphne runs the deployment's layer (REDIS_URL set: RedisChannelLayer, the run's prefix); this
    # process pushes to the same Redis with the same configuration, as a gunicorn worker does.
    server = start_daphne(tmp_path, port=port, env={"REDIS_URL": DAPHNE_REDIS_URL}, wait_host=host)
    settings.CHANNEL_LAYERS = redis_channel_layers(DAPHNE_REDIS_URL, capacity=1000, expiry=30)
    http = MediatorClient(f"http://{host}", host=host)
    try:
        bob = Identity.create("bob", tenant.did)
        http.register(bob)
        assert adapter.sync_sender(get_channel_layer()) is not None

        async def body():
            sockets = [
                await open_authenticated(f"ws://{host}/ws", bob, connect_to=("127.0.0.1", port)) for _ in range(2)
            ]
            await asyncio.to_thread(
                push_to_sockets, None, tenant_id=tenant.pk, did=bob.did, message={"type": "CONTRACTS_UPDATED"}
            )
            frames = [await sock.next_of("CONTRACTS_UPDATED", 5) for sock in sockets]
            for sock in sockets:
                await sock.close()
            return frames

        assert asyncio.run(body()) == [{"type": "CONTRACTS_UPDATED"}] * 2
    finally:
        http.close()
        server.stop()
