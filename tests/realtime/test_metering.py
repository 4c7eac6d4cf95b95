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
            "sender_did": registered_alice.did,
            "channel": "",
        },
    ]
    stored = CommandMeter.objects.filter(tenant=tenant_a, transport="ws").values_list(flat=False)
    assert not any(good["signature"] in str(row) for row in stored)
