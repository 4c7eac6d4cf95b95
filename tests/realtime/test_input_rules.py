"""AUTHENTICATE frames follow the input rules of POST / bodies (issue 13 items 4 and 10).

What POST / refuses with INVALID_COMMAND (U+0000 anywhere, a key repeated within one object)
/ws refuses with AUTH_FAILED INVALID_MESSAGE and close 4002, before any lookup: the nonce stays
unclaimed, and the refusal is metered without a DID.
"""

from __future__ import annotations

import pytest

from apps.decentrl.models import Nonce
from apps.usage import metering
from apps.usage.models import CommandMeter
from apps.wire.canonical import canonical_str
from tests.support.registration import register

from .conftest import auth_frame, communicator, run, send


@pytest.fixture
def registered_alice(post_a, tenant_a, alice):
    register(post_a, alice, tenant_a)
    return alice


def _answer(text: str) -> tuple[dict, int]:
    async def body():
        comm = communicator()
        assert (await comm.connect())[0]
        await send(comm, text)
        reply = await comm.receive_json_from()
        closed = await comm.receive_output(timeout=2)
        await comm.disconnect()
        return reply, closed["code"]

    return run(body)


INVALID_MESSAGE = ({"type": "AUTH_FAILED", "code": "INVALID_MESSAGE"}, 4002)


@pytest.mark.parametrize("field", ["did", "signing_key_id", "signature", "an-unknown-member"])
def test_a_nul_anywhere_in_an_authenticate_frame_is_an_invalid_message(tenant_a, registered_alice, field):
    # Otherwise valid, so that before the fix each got further: DID_NOT_FOUND, SIGNING_KEY_NOT_FOUND,
    # INVALID_SIGNATURE, and AUTH_SUCCESS for the unknown member.
    frame = auth_frame(registered_alice)
    frame[field] = frame.get(field, "") + "\x00"
    text = canonical_str(frame)
    assert "\\u0000" in text
    metering.flush()
    assert _answer(text) == INVALID_MESSAGE
    metering.flush()
    assert list(
        CommandMeter.objects.filter(tenant=tenant_a, transport="ws").values_list(
            "command_type", "code", "http_status", "sender_did"
        )
    ) == [("AUTHENTICATE", "INVALID_MESSAGE", 4002, None)]


def test_the_frame_of_the_issue_a_nul_did_is_refused_before_any_lookup(tenant_a, registered_alice):
    # Issue 13 item 4: this frame used to get DID_NOT_FOUND, and its NUL DID reached the metering
    # writer, whose COPY then failed and took the whole batch with it.
    frame = auth_frame(registered_alice)
    frame["did"] = "\x00"
    assert _answer(canonical_str(frame)) == INVALID_MESSAGE


@pytest.mark.parametrize("key", ["did", "nonce", "type", "signature"])
def test_a_repeated_key_in_an_authenticate_frame_is_an_invalid_message_and_claims_no_nonce(
    tenant_a, registered_alice, bob, key
):
    frame = auth_frame(registered_alice)
    first = {"did": bob.did, "nonce": "11111111-1111-4111-8111-111111111111", "type": "PONG", "signature": "AAAA"}
    text = canonical_str(frame)
    # An earlier copy of the member, which a first-wins reader would believe.
    text = "{" + f'"{key}":"{first[key]}",' + text[1:]
    nonces = Nonce.objects.count()
    assert _answer(text) == INVALID_MESSAGE
    assert Nonce.objects.count() == nonces

    async def body():
        comm = communicator()
        assert (await comm.connect())[0]
        await send(comm, frame)  # the same frame, same nonce, without the extra member
        assert await comm.receive_json_from() == {"type": "AUTH_SUCCESS"}
        await comm.disconnect()

    run(body)
