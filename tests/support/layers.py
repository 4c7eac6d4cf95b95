"""The channel layer a test process shares with the servers it starts."""

from __future__ import annotations

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
