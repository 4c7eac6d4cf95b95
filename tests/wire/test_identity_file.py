"""Identity.to_json/from_json and the CLI's identity files (no network)."""

from __future__ import annotations

import json
import stat

import pytest

from apps.wire import cli
from apps.wire import contract as wc
from apps.wire.client import Identity
from apps.wire.encoding import b64encode

from .test_contract import _request

MEDIATOR = "did:web:localhost%3A8000"


@pytest.fixture
def ident() -> Identity:
    alice, bob = Identity.create("alice", MEDIATOR), Identity.create("bob", MEDIATOR)
    req = _request(alice, bob)
    signed, _ = wc.accept_request(req.request, bob.signing)
    alice.remember_contract(signed, req.ephemeral.private)
    alice.requested["cGVuZGluZw=="] = b"\x07" * 32
    return alice


def test_an_identity_survives_a_json_round_trip(ident):
    data = json.loads(json.dumps(ident.to_json()))
    back = Identity.from_json(data)
    assert back.did == ident.did
    assert (back.signing, back.prekey, back.storage_key) == (ident.signing, ident.prekey, ident.storage_key)
    assert back.contracts == ident.contracts
    assert back.requested == ident.requested
    assert back.to_json() == data


def test_from_json_ignores_members_it_does_not_know(ident):
    assert Identity.from_json({**ident.to_json(), "mediator_url": "http://x"}).did == ident.did


def _broken(ident: Identity, **changes):
    data = ident.to_json()
    data.update(changes)
    return data


@pytest.mark.parametrize(
    "changes",
    [
        {"version": 2},
        {"signing_seed": b64encode(b"x" * 31)},
        {"prekey_private": "not base64!"},
        {"storage_key": None},
        {"alias": 5},
        {"did": "did:decentrl:someone:else"},  # keys and DID disagree
        {"contracts": [{"signed_communication_contract": "x", "ephemeral_private": b64encode(bytes(32))}]},
        {"contracts": [{"ephemeral_private": b64encode(bytes(32))}]},
        {"requested": [{"ephemeral_public": "k", "ephemeral_private": "short"}]},
    ],
)
def test_from_json_refuses_malformed_identities(ident, changes):
    with pytest.raises(ValueError):
        Identity.from_json(_broken(ident, **changes))


@pytest.mark.parametrize("data", [None, [], "x", {}])
def test_from_json_refuses_what_is_not_an_identity(data):
    with pytest.raises(ValueError):
        Identity.from_json(data)


def test_identity_files_are_private_and_never_overwritten_by_new_identity(ident, tmp_path):
    path = tmp_path / "alice.json"
    cli.save_identity(path, ident, "http://localhost:8000", exclusive=True)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    loaded, data = cli.load_identity(path)
    assert loaded.did == ident.did and data["mediator_url"] == "http://localhost:8000"
    with pytest.raises(cli.CliError):
        cli.save_identity(path, Identity.create("eve", MEDIATOR), "http://x", exclusive=True)
    assert cli.load_identity(path)[0].did == ident.did
    path.chmod(0o644)
    cli.save_identity(path, ident, "http://localhost:8000")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["alice.json"]  # no temporary file left behind


def test_text_from_others_is_printed_with_control_characters_escaped():
    assert cli.safe("hi\x1b[31m\nthere\u202e!") == "hi\\u001b[31m\\u000athere\\u202e!"
    assert cli.safe("héllo 👋") == "héllo 👋"


def test_who_shows_the_alias_of_a_decentrl_did_and_the_did_web_as_is(ident):
    assert cli.who(ident.did) == f"alice ({ident.did})"
    assert cli.who(MEDIATOR) == MEDIATOR
    assert cli.who("did:decentrl:broken\n") == "did:decentrl:broken\\u000a"


def test_chat_messages_show_their_content_and_other_events_their_json():
    assert cli.message_text({"type": "chat.message", "data": {"content": "hello"}}) == "hello"
    assert cli.message_text({"type": "other", "n": 1}) == '{"type":"other","n":1}'
    assert (
        cli.message_text({"type": "chat.message", "data": {"content": 5}})
        == '{"type":"chat.message","data":{"content":5}}'
    )
