"""AUTHENTICATE on /ws (DCTRL-0004 §10.1-§10.3, docs/protocol-readings.md §6): every close code."""

from __future__ import annotations

import asyncio
import time

import pytest

from apps.wire.client import Identity
from tests.conftest import HOST_A, HOST_B
from tests.support.ordering import nothing_before_a_push
from tests.support.registration import register

from .conftest import auth_frame, communicator, connect_authenticated, expect_close, run, send


@pytest.fixture
def registered_alice(post_a, tenant_a, alice):
    register(post_a, alice, tenant_a)
    return alice


def _refused(frame, code: str, close: int, host: str = HOST_A, binary: bool = False, after=()) -> None:
    """`frame` on a new socket to `host` gets AUTH_FAILED `code` and `close`; each frame of `after`
    first authenticates a socket of tenant A's (then closed)."""

    async def body():
        for earlier in after:
            first = communicator()
            assert (await first.connect())[0]
            await send(first, earlier)
            assert await first.receive_json_from() == {"type": "AUTH_SUCCESS"}
            await first.disconnect()
        comm = communicator(host)
        assert (await comm.connect())[0]
        if binary:
            await comm.send_to(bytes_data=frame)
        else:
            await send(comm, frame)
        assert await comm.receive_json_from() == {"type": "AUTH_FAILED", "code": code}
        await expect_close(comm, close)
        await comm.disconnect()

    run(body)


def test_a_registered_identity_gets_auth_success_and_nothing_else(registered_alice, tenant_a):
    async def body():
        comm = await connect_authenticated(registered_alice)
        await nothing_before_a_push(comm, tenant_a.pk, registered_alice.did)
        await comm.disconnect()

    run(body)


def test_it_closes_4001_when_no_authenticate_arrives_in_time(settings, registered_alice):
    settings.MEDIATOR_WS_AUTH_TIMEOUT_S = 0.2

    async def body():
        loop = asyncio.get_running_loop()
        started = loop.time()
        comm = communicator()
        assert (await comm.connect())[0]
        # The first frame, and not before the timeout: measured on the socket's loop from before
        # the connect, so a loaded box can only make it longer (asyncio may run a timer up to its
        # clock's resolution early).
        assert await comm.receive_json_from(timeout=2) == {"type": "AUTH_FAILED", "code": "AUTH_TIMEOUT"}
        assert loop.time() - started > 0.2 - 1e-6
        await expect_close(comm, 4001)
        await comm.disconnect()

    run(body)


def test_a_frame_received_in_time_is_not_timed_out(settings, registered_alice):
    settings.MEDIATOR_WS_AUTH_TIMEOUT_S = 0.3
    settings.MEDIATOR_WS_PING_INTERVAL_S = 0.3

    async def body():
        comm = await connect_authenticated(registered_alice)
        # The first PING is due an interval after AUTH_SUCCESS, so after the AUTHENTICATE deadline,
        # and the socket's loop runs its timers in the order they are due: a timeout that still
        # fired would have sent AUTH_FAILED first.
        assert (await comm.receive_json_from(timeout=5))["type"] == "PING"
        await comm.disconnect()

    run(body)


@pytest.mark.parametrize(
    "frame",
    [
        "not json",
        "[]",
        '{"type":"PONG","timestamp":1}',
        '{"type":"AUTHENTICATE"}',
        "NaN",
    ],
    ids=["not-json", "array", "pong-first", "no-fields", "nan"],
)
def test_it_closes_4002_on_a_malformed_frame(registered_alice, frame):
    _refused(frame, "INVALID_MESSAGE", 4002)


@pytest.mark.parametrize(
    "override",
    [
        {"nonce": "not-a-uuid"},
        {"timestamp": 1.5},
        {"timestamp": "1700000000000"},
        {"did": 42},
        {"signing_key_id": ""},
    ],
    ids=["nonce", "fractional-timestamp", "string-timestamp", "did-type", "empty-key-id"],
)
def test_it_closes_4002_on_a_badly_typed_field(registered_alice, override):
    _refused(auth_frame(registered_alice, **override), "INVALID_MESSAGE", 4002)


def test_it_closes_4002_on_a_missing_signature(registered_alice):
    frame = auth_frame(registered_alice)
    del frame["signature"]
    _refused(frame, "INVALID_MESSAGE", 4002)


def test_it_closes_4002_on_a_binary_frame(registered_alice):
    _refused(b'{"type":"AUTHENTICATE"}', "INVALID_MESSAGE", 4002, binary=True)


def test_it_closes_4002_on_an_oversized_frame(registered_alice):
    _refused(auth_frame(registered_alice, did="x" * 20_000), "INVALID_MESSAGE", 4002)


def test_an_integral_float_timestamp_is_accepted(registered_alice):
    async def body():
        comm = communicator()
        assert (await comm.connect())[0]
        await send(comm, auth_frame(registered_alice, timestamp=float(int(time.time() * 1000))))
        assert await comm.receive_json_from() == {"type": "AUTH_SUCCESS"}
        await comm.disconnect()

    run(body)


@pytest.mark.parametrize("drift_ms", [301_000, -300_000, 3_600_000])
def test_it_closes_4003_when_the_timestamp_drifts_five_minutes_or_more(registered_alice, drift_ms):
    _refused(auth_frame(registered_alice, timestamp=int(time.time() * 1000) + drift_ms), "TIMESTAMP_OUT_OF_RANGE", 4003)


def test_it_closes_4004_when_the_did_does_not_resolve(registered_alice):
    bad = registered_alice.did.replace("did:decentrl:", "did:decentrl:%%")
    _refused(auth_frame(registered_alice, did=bad, signing_key_id=bad + "#signing"), "DID_NOT_FOUND", 4004)


def test_it_closes_4004_for_a_foreign_did_web(registered_alice):
    _refused(
        auth_frame(
            registered_alice, did="did:web:elsewhere.example", signing_key_id="did:web:elsewhere.example#signing"
        ),
        "DID_NOT_FOUND",
        4004,
    )


def test_it_closes_4005_when_the_key_id_is_not_in_the_document(registered_alice):
    _refused(
        auth_frame(registered_alice, signing_key_id=registered_alice.did + "#prekey"), "SIGNING_KEY_NOT_FOUND", 4005
    )


def test_it_accepts_the_relative_key_id(registered_alice):
    async def body():
        comm = communicator()
        assert (await comm.connect())[0]
        await send(comm, auth_frame(registered_alice, signing_key_id="#signing"))
        assert await comm.receive_json_from() == {"type": "AUTH_SUCCESS"}
        await comm.disconnect()

    run(body)


def test_it_closes_4006_on_a_signature_by_another_key(registered_alice, tenant_a):
    mallory = Identity.create("mallory", tenant_a.did)
    frame = auth_frame(mallory, did=registered_alice.did, signing_key_id=registered_alice.key_id)
    _refused(frame, "INVALID_SIGNATURE", 4006)


def test_it_closes_4006_when_a_signed_field_was_changed(registered_alice):
    frame = auth_frame(registered_alice)
    frame["nonce"] = "00000000-0000-4000-8000-000000000000"
    _refused(frame, "INVALID_SIGNATURE", 4006)


def test_it_closes_4006_on_a_signature_that_is_not_base64(registered_alice):
    frame = auth_frame(registered_alice)
    frame["signature"] = "!!!"
    _refused(frame, "INVALID_SIGNATURE", 4006)


def test_it_closes_4007_for_an_identity_that_is_not_registered(tenant_a, bob):
    _refused(bob.ws_authenticate(), "NOT_REGISTERED", 4007)


def test_it_closes_4007_for_an_identity_registered_with_another_tenant(registered_alice, tenant_b):
    # Cross-tenant: alice's registration with tenant A means nothing on tenant B's host.
    _refused(registered_alice.ws_authenticate(), "NOT_REGISTERED", 4007, host=HOST_B)


def test_it_closes_4008_on_a_replayed_authenticate(registered_alice):
    frame = registered_alice.ws_authenticate()

    async def body():
        first = communicator()
        assert (await first.connect())[0]
        await send(first, frame)
        assert await first.receive_json_from() == {"type": "AUTH_SUCCESS"}
        second = communicator()
        assert (await second.connect())[0]
        await send(second, frame)
        assert await second.receive_json_from() == {"type": "AUTH_FAILED", "code": "DUPLICATE_NONCE"}
        await expect_close(second, 4008)
        await first.disconnect()
        await second.disconnect()

    run(body)


def test_an_authenticate_frame_accepted_by_one_tenant_is_refused_by_another(post_b, registered_alice, tenant_b):
    """The frame names no mediator: one nonce store for the deployment (docs/protocol-notes.md, "Nonces")."""
    register(post_b, registered_alice, tenant_b)
    frame = registered_alice.ws_authenticate()
    _refused(frame, "DUPLICATE_NONCE", 4008, host=HOST_B, after=[frame])


def test_an_authenticate_nonce_already_used_by_a_command_is_a_replay(post_a, registered_alice, tenant_a):
    # docs/protocol-readings.md §6: one nonce store for commands and sockets.
    frame = registered_alice.ws_authenticate()
    status, _ = post_a.command(
        registered_alice, {"type": "QUERY_COMMUNICATION_CONTRACTS"}, recipient_did=tenant_a.did, nonce=frame["nonce"]
    )
    assert status == 200
    _refused(frame, "DUPLICATE_NONCE", 4008)


def test_a_second_authenticate_after_success_is_ignored(registered_alice, tenant_a):
    async def body():
        comm = await connect_authenticated(registered_alice)
        for frame in (registered_alice.ws_authenticate(), "garbage"):
            await send(comm, frame)
            await nothing_before_a_push(comm, tenant_a.pk, registered_alice.did)
        await comm.disconnect()

    run(body)
