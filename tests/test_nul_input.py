"""U+0000 anywhere in a command is INVALID_COMMAND, not a database error (PostgreSQL text cannot hold it)."""

import pytest

from apps.decentrl.models import Nonce
from apps.messaging.models import PendingEvent
from tests.support.registration import contract_both_ways, register


@pytest.mark.parametrize("where", ["sender_did", "payload"])
def test_it_rejects_a_nul_character_with_invalid_command_and_stores_nothing(post_a, tenant_a, alice, bob, where):
    register(post_a, alice, tenant_a)
    register(post_a, bob, tenant_a)
    contract_both_ways(post_a, alice, bob, tenant_a)
    env = alice.sign_command(recipient_did=bob.did, payload="blob\x00x", channel="TWO_WAY_PRIVATE")
    if where == "sender_did":
        env = alice.sign_command(recipient_did=bob.did, payload="blob", channel="TWO_WAY_PRIVATE")
        env["header"]["sender_did"] = alice.did + "\x00"
    nonces, events = Nonce.objects.count(), PendingEvent.objects.count()
    status, body = post_a.send(env)
    assert (status, body) == (400, {"type": "ERROR", "code": "INVALID_COMMAND"})
    assert (Nonce.objects.count(), PendingEvent.objects.count()) == (nonces, events)
