"""AUTHENTICATE is metered like a POST / command: metadata only, transport "ws" (issue 6)."""

from __future__ import annotations

import pytest

from apps.usage import metering
from apps.usage.models import CommandMeter
from tests.support.registration import register

from .conftest import auth_frame, communicator, connect_authenticated, expect_close, run, send


@pytest.fixture
def registered_alice(post_a, tenant_a, alice):
    register(post_a, alice, tenant_a)
    return alice


@pytest.mark.django_db(transaction=True)  # the buffered writer commits on a connection of its own
def test_a_successful_and_a_refused_authenticate_are_metered_without_their_signature(
    settings, tenant_a, registered_alice
):
    settings.USAGE_METERING_MODE = "buffered"
    good = registered_alice.ws_authenticate()
    bad = auth_frame(registered_alice)
    bad["signature"] = good["signature"]  # signed over other values: INVALID_SIGNATURE

    async def body():
        comm = await connect_authenticated(registered_alice)
        await comm.disconnect()
        comm = communicator()
        assert (await comm.connect())[0]
        await send(comm, bad)
        assert await comm.receive_json_from() == {"type": "AUTH_FAILED", "code": "INVALID_SIGNATURE"}
        await expect_close(comm, 4006)
        await comm.disconnect()

    run(body)
    metering.flush()
    rows = list(
        CommandMeter.objects.filter(tenant=tenant_a, transport="ws")
        .order_by("id")
        .values("command_type", "code", "http_status", "sender_did", "channel")
    )
    assert rows == [
        {
            "command_type": "AUTHENTICATE",
            "code": "SUCCESS",
            "http_status": 200,
            "sender_did": registered_alice.did,
            "channel": "",
        },
        {
            "command_type": "AUTHENTICATE",
            "code": "INVALID_SIGNATURE",
            "http_status": 4006,
            "sender_did": None,  # a DID whose signature did not verify is not recorded (issue 13 item 9)
            "channel": "",
        },
    ]
    stored = CommandMeter.objects.filter(tenant=tenant_a, transport="ws").values_list(flat=False)
    assert not any(good["signature"] in str(row) for row in stored)


@pytest.mark.django_db(transaction=True)  # the buffered writer commits on a connection of its own
def test_only_a_verified_did_is_metered_on_authenticate(settings, tenant_a, registered_alice, bob):
    settings.USAGE_METERING_MODE = "buffered"
    good = registered_alice.ws_authenticate()
    claims_bob = auth_frame(registered_alice, did=bob.did, signing_key_id=bob.key_id)  # signed by alice
    unregistered = auth_frame(bob)  # bob's own, valid signature; bob is not registered here

    async def answer(frame) -> str:
        comm = communicator()
        assert (await comm.connect())[0]
        await send(comm, frame)
        reply = await comm.receive_json_from()
        await comm.disconnect()
        return reply.get("code", reply["type"])

    async def body():
        return [await answer(f) for f in (good, good, claims_bob, unregistered)]

    assert run(body) == ["AUTH_SUCCESS", "DUPLICATE_NONCE", "INVALID_SIGNATURE", "NOT_REGISTERED"]
    metering.flush()
    assert list(
        CommandMeter.objects.filter(tenant=tenant_a, transport="ws")
        .order_by("id")
        .values_list("code", "http_status", "sender_did")
    ) == [
        ("SUCCESS", 200, registered_alice.did),
        ("DUPLICATE_NONCE", 4008, None),  # a replay verifies, but is anybody's to send
        ("INVALID_SIGNATURE", 4006, None),
        ("NOT_REGISTERED", 4007, bob.did),  # verified, then refused
    ]
