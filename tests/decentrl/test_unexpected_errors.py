"""An unexpected exception inside a handler is a protocol-shaped 503, never a 500, and its message is not logged."""

import logging

from apps.decentrl import handlers
from tests.support.registration import register


def test_an_unexpected_handler_error_answers_mediator_unavailable_and_logs_no_input(
    post_a, tenant_a, alice, monkeypatch, caplog
):
    register(post_a, alice, tenant_a)

    def boom(ctx):
        raise ValueError("secret-input-" + ctx.command.signature)

    monkeypatch.setitem(handlers.DIRECT_HANDLERS, "QUERY_EVENTS", boom)
    env = alice.sign_command(recipient_did=tenant_a.did, payload={"type": "QUERY_EVENTS"})
    with caplog.at_level(logging.DEBUG):
        status, body = post_a.send(env)
    assert (status, body) == (503, {"type": "ERROR", "code": "MEDIATOR_UNAVAILABLE"})
    assert "unexpected error while handling a command: ValueError" in caplog.text
    assert "secret-input" not in caplog.text and env["signature"] not in caplog.text
