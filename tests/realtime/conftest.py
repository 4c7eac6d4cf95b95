"""Fixtures for /ws: WebsocketCommunicator sockets on the in-memory channel layer.

Unit tests are plain (sync) pytest functions that run an async body with `run()`. asgiref then
executes the consumer's `database_sync_to_async` calls on the test's own thread, so they see the
test transaction (the `db` fixture) without flushing tables.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable

import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator

from apps.wire.canonical import canonical_str
from apps.wire.client import Identity
from apps.wire.crypto import sign_json_object
from tests.conftest import HOST_A


@pytest.fixture(autouse=True)
def in_memory_layer(settings):
    """One process, the embedded default: whatever REDIS_URL the environment has."""
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    yield


@pytest.fixture(autouse=True)
def keep_the_test_connection(monkeypatch):
    """`database_sync_to_async` closes "old" connections around each call, as a server should
    between requests. Inside the test transaction that would close the test's own connection (its
    autocommit is off), so unit tests keep it; the Daphne tests exercise the real behaviour."""
    monkeypatch.setattr("channels.db.close_old_connections", lambda: None)


def run(body: Callable[[], Awaitable[object]]) -> object:
    """Run an async test body; see the module docstring."""
    return async_to_sync(body)()


def communicator(
    host: str = HOST_A, client: tuple[str, int] = ("127.0.0.9", 5555), headers: list[tuple[bytes, bytes]] = ()
) -> WebsocketCommunicator:
    from apps.decentrl.routing import websocket_application

    comm = WebsocketCommunicator(websocket_application, "/ws", headers=[(b"host", host.encode()), *headers])
    comm.scope["client"] = client
    return comm


def auth_frame(who: Identity, **overrides) -> dict:
    """An AUTHENTICATE frame whose signed fields may be overridden (then signed as given)."""
    signable = {
        "did": who.did,
        "signing_key_id": who.key_id,
        "timestamp": int(time.time() * 1000),
        "nonce": str(uuid.uuid4()),
    }
    signable.update(overrides)
    return {"type": "AUTHENTICATE", **signable, "signature": sign_json_object(signable, who.signing)}


async def send(comm: WebsocketCommunicator, frame: dict | str) -> None:
    await comm.send_to(text_data=frame if isinstance(frame, str) else canonical_str(frame))


async def connect_authenticated(who: Identity, host: str = HOST_A) -> WebsocketCommunicator:
    comm = communicator(host)
    connected, _ = await comm.connect()
    assert connected
    await send(comm, who.ws_authenticate())
    assert await comm.receive_json_from() == {"type": "AUTH_SUCCESS"}
    return comm


async def expect_close(comm: WebsocketCommunicator, code: int) -> None:
    assert await comm.receive_output(timeout=2) == {"type": "websocket.close", "code": code}
