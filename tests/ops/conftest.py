"""Fixtures for the limits, jobs and metrics tests."""

from __future__ import annotations

import uuid

import pytest

REDIS_URL = "redis://127.0.0.1:6379/15"


@pytest.fixture(params=["in-process", "redis"])
def limiter_clock(request, monkeypatch, settings):
    """A frozen limiter clock over each backend; `clock["now"]` is the limiter's time in ms.

    Each test gets its own Redis key prefix, so windows never leak between tests or runs."""
    from apps.ops import limits

    clock = {"now": 1_900_000_000_000}
    monkeypatch.setattr(limits, "_now_ms", lambda: clock["now"])
    settings.MEDIATOR_RATE_LIMIT_REDIS_URL = REDIS_URL if request.param == "redis" else ""
    settings.MEDIATOR_RATE_LIMIT_PREFIX = f"test-rl-{uuid.uuid4().hex}"
    backend = limits.backend()
    if isinstance(backend, limits.LocalBackend):
        backend.reset()
    return clock
