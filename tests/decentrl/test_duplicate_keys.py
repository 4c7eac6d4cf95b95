"""A key repeated within one JSON object, anywhere in a command, is INVALID_COMMAND (issue 13 item 10).

The mediator verifies the signature over the parsed object, where the last of two equal keys
wins; another reader of the same bytes may take the first. Each case below is a correctly signed
command with one extra, earlier copy of a member that a first-wins reader would believe instead.
It is refused before the nonce is claimed: nothing is stored, and the clean command with the same
nonce still succeeds afterwards.
"""

from __future__ import annotations

import pytest

from apps.usage import metering
from apps.usage.models import CommandMeter
from apps.wire.canonical import canonical_str
from tests.support.commands import envelope, err, row_counts
from tests.support.registration import contract_both_ways

INVALID = (400, err("INVALID_COMMAND"))
EVENT = {"recipient_did": "did:web:r.example", "timestamp": 1, "payload": "kept"}

# (payload, channel, the canonical text the extra member goes right after, the extra member)
CASES = {
    "top-level": ({"type": "QUERY_EVENTS"}, "DIRECT_AUTHENTICATED", "{", '"payload":{"type":"QUERY_PENDING_EVENTS"},'),
    "top-level-two-way": ("sealed-blob", "TWO_WAY_PRIVATE", "{", '"payload":"another-blob",'),
    "header": ({"type": "QUERY_EVENTS"}, "DIRECT_AUTHENTICATED", '"header":{', '"recipient_did":"did:web:x.example",'),
    "header-two-way": ("sealed-blob", "TWO_WAY_PRIVATE", '"header":{', '"recipient_did":"did:web:x.example",'),
    "payload": ({"type": "QUERY_EVENTS"}, "DIRECT_AUTHENTICATED", '"payload":{', '"type":"SAVE_EVENTS",'),
    "filter": (
        {"type": "QUERY_EVENTS", "filter": {"participant_did": "did:web:r.example"}},
        "DIRECT_AUTHENTICATED",
        '"filter":{',
        '"participant_did":"did:web:x.example",',
    ),
    "event-in-an-array": (
        {"type": "SAVE_EVENTS", "events": [EVENT]},
        "DIRECT_AUTHENTICATED",
        '"events":[{',
        '"payload":"swapped",',
    ),
}


def _with_extra_member(env: dict, after: str, extra: str) -> str:
    text = canonical_str(env)
    assert text.count(after) == 1 or after == "{"
    i = text.index(after) + len(after)
    return text[:i] + extra + text[i:]


@pytest.mark.parametrize("where", list(CASES))
def test_a_duplicate_key_anywhere_in_a_signed_command_is_invalid_and_claims_no_nonce(
    post_a, tenant_a, registered, alice, bob, where
):
    contract_both_ways(post_a, alice, bob, tenant_a)
    payload, channel, after, extra = CASES[where]
    if isinstance(payload, dict) and payload["type"] == "SAVE_EVENTS":
        payload = {"type": "SAVE_EVENTS", "events": [{**EVENT, "sender_did": alice.did}]}
    recipient = bob.did if channel == "TWO_WAY_PRIVATE" else tenant_a.did
    env = envelope(alice, payload, recipient_did=recipient, channel=channel)
    before = row_counts()

    assert post_a.raw(_with_extra_member(env, after, extra)) == INVALID
    assert row_counts() == before

    # The nonce was not claimed: the same signed command without the extra member goes through.
    status, _ = post_a.send(env)
    assert status == 200
    assert row_counts()["Nonce"] == before["Nonce"] + 1


def test_a_refused_duplicate_is_metered_as_invalid_command_without_a_sender(post_a, tenant_a, registered, alice):
    metering.flush()
    env = envelope(alice, {"type": "QUERY_EVENTS"}, recipient_did=tenant_a.did)
    assert post_a.raw(_with_extra_member(env, '"header":{', f'"sender_did":"{alice.did}",')) == INVALID
    metering.flush()
    row = (
        CommandMeter.objects.filter(tenant=tenant_a)
        .order_by("-id")
        .values_list("command_type", "code", "http_status", "sender_did")[0]
    )
    assert row == ("", "INVALID_COMMAND", 400, None)
