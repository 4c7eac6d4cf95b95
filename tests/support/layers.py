"""The channel layer a test process shares with the servers it starts; the joins a layer sees."""

from __future__ import annotations

import asyncio

from django.conf import settings


def redis_channel_layers(url: str, **config) -> dict:
    """CHANNEL_LAYERS on the Redis layer at `url`, with the key prefix the test's servers use
    (settings_test: one per test database), so that this process and they see the same groups."""
    return {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {
                "hosts": [{"address": url, "socket_timeout": 30}],
                "prefix": settings.MEDIATOR_CHANNEL_LAYER_PREFIX,
                **config,
            },
        }
    }


def joins(layer) -> list[str]:
    """The groups `layer.group_add` joined from now on, in order (a join, or a refresh's re-join)."""
    joined: list[str] = []
    real_add = layer.group_add

    async def recording_add(group, channel):
        await real_add(group, channel)
        joined.append(group)

    layer.group_add = recording_add
    return joined


async def until(predicate, timeout: float = 10.0) -> None:
    """Wait until `predicate()` holds (the event loop runs meanwhile: the refresh timers fire)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        assert loop.time() < deadline, "condition not met"
        await asyncio.sleep(0.01)
