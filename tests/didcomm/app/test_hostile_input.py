"""Hostile DIDComm input, through the production entry (in process) and the socket: every refusal is a Report Problem 2.0 message with its own code and a
4xx, never a 500 or the 503 of an unanswered exception, nothing is stored, and no costly work is
done before the envelope shows it is for one of our keys."""

from __future__ import annotations

import json
import logging

import pytest
from asgiref.sync import async_to_sync
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from nacl import bindings

from apps.didcomm import handlers, v2
from apps.didcomm.core import did_key, did_peer, envelope_v1, jwe, jws, keys
from apps.didcomm.core.keys import ED25519, PrivateKey
from apps.didcomm.core.resolver import resolve_did
from apps.didcomm.identity import verkey_of
from apps.didcomm.models import MediatorIdentity, QueuedMessage
from apps.didcomm.routing import websocket_urlpatterns
from apps.usage import records as request_records
from apps.wire.encoding import b58decode, b64decode, b64url_nopad
from tests.conftest import HOST_A
from tests.support.didcomm_agent import CM2, ENCRYPTED, Agent

pytestmark = pytest.mark.django_db

DEEP = b"[" * 100_000
V1_MEDIA = "application/didcomm-envelope-enc"


def _header(envelope: dict) -> dict:
    return json.loads(b64decode(envelope["protected"]))


def _with_header(envelope: dict, header: dict) -> dict:
    return {**envelope, "protected": b64url_nopad(json.dumps(header).encode())}


def _to_mediator(mediator_did: str, plaintext: bytes) -> bytes:
    vm = resolve_did(mediator_did).key_agreement[0]
    return json.dumps(jwe.encrypt(plaintext, to=[(vm.id, vm.key)])).encode()


def _hostile_bodies(mediator_did: str) -> dict[str, tuple[bytes, str]]:
    """name → (body, the problem code it must get)."""
    sender = Agent()
    plain = {"id": "1", "type": "https://didcomm.org/trust-ping/2.0/ping", "body": {}}
    anon = json.loads(sender.pack(plain, mediator_did, anon=True))
    auth = json.loads(sender.pack(plain, mediator_did))
    surrogate_kid = {**anon, "recipients": [{"header": {"kid": "\ud800"}, "encrypted_key": "AAAA"}]}
    odd_peer4 = did_peer.peer4_create({"alsoKnownAs": 5}) + "#k"
    odd_skid = {**_header(auth), "skid": odd_peer4, "apu": b64url_nopad(odd_peer4.encode())}
    signer = PrivateKey.generate(ED25519)
    signed = jws.sign(b"{}", kid=did_key.did_key_from_key(signer.public) + "#" + signer.public.multibase, key=signer)
    return {
        "deep JSON body": (DEEP, "e.p.msg"),
        "RFC 0019 shape, deep protected header": (
            json.dumps({"protected": b64url_nopad(DEEP), "ciphertext": "x"}).encode(),
            "e.p.msg",
        ),
        "enc is a list": (json.dumps(_with_header(anon, {**_header(anon), "enc": ["A256GCM"]})).encode(), "e.p.trust.crypto.unsupported"),
        "a recipient kid with a lone surrogate": (json.dumps(surrogate_kid).encode(), "e.p.msg"),
        "skid: a did:peer:4 whose alsoKnownAs is a number": (json.dumps(_with_header(auth, odd_skid)).encode(), "e.p.trust.crypto.unknown-key"),
        "anoncrypt of deep JSON": (_to_mediator(mediator_did, DEEP), "e.p.msg"),
        "anoncrypt of a JWS with a non-ASCII payload": (
            _to_mediator(mediator_did, json.dumps({**signed, "payload": "\u00e9"}).encode()),
            "e.p.msg",
        ),
    }  # fmt: skip


def test_hostile_envelopes_get_their_problem_code(tenant_a, didcomm_a):
    answers = {}
    for name, (body, _) in _hostile_bodies(didcomm_a.mediator_did).items():
        resp = didcomm_a.post(body)
        answers[name] = (resp.status_code, json.loads(resp.content)["body"]["code"])
    expected = {name: (400, code) for name, (_, code) in _hostile_bodies(didcomm_a.mediator_did).items()}
    assert answers == expected
    assert QueuedMessage.objects.count() == 0


def test_keylist_update_with_a_did_whose_document_does_not_parse_is_refused_per_update(didcomm_a, wallet):
    didcomm_a.send(wallet, wallet.message(CM2 + "mediate-request"))
    odd = did_peer.peer4_create({"verificationMethod": 5})
    update = wallet.message(CM2 + "keylist-update", {"updates": [{"recipient_did": odd, "action": "add"}]})
    status, answer, _ = didcomm_a.send(wallet, update)
    assert status == 200
    assert answer["body"]["updated"] == [{"recipient_did": odd, "action": "add", "result": "client_error"}]


def test_a_sender_did_is_not_resolved_for_a_message_to_no_key_of_ours(didcomm_a, wallet, monkeypatch):
    """An authcrypt envelope whose recipients are not ours is refused before its `skid` is resolved
    (resolving can be the costly part: a did:peer:4 carries its whole document)."""
    resolved = []
    monkeypatch.setattr(v2, "key_agreement_key", lambda kid: resolved.append(kid))
    stranger = Agent()
    body = wallet.pack(wallet.message(CM2 + "keylist-query"), stranger.did)
    response = didcomm_a.post(body)
    assert (response.status_code, json.loads(response.content)["body"]["code"]) == (400, "e.p.trust.crypto.unknown-key")
    assert resolved == []


@pytest.mark.parametrize(
    "where",
    ["apu", "v1 sealed sender"],
)
def test_a_huge_base58_key_is_refused_without_decoding_it(tenant_a, didcomm_a, where, monkeypatch):
    """Base58 decoding is quadratic in its length (300k characters: 20-30 s of CPU): text longer
    than any key is refused before it is decoded."""
    decoded = []

    def recording(text, **kwargs):
        out = b58decode(text, **kwargs)
        decoded.append(len(text))
        return out

    for module in (did_key, envelope_v1, keys):
        monkeypatch.setattr(module, "b58decode", recording)
    mediator_did = didcomm_a.mediator_did
    huge = "2" * 300_000
    if where == "apu":
        anon = json.loads(Agent().pack({"id": "1", "type": "t", "body": {}}, mediator_did))
        skid = f"did:key:z{huge}#x"
        header = {**_header(anon), "apu": b64url_nopad(skid.encode())}
        header.pop("skid", None)
        body, media, code = json.dumps(_with_header(anon, header)).encode(), ENCRYPTED, "e.p.trust.crypto.unknown-key"
    else:
        verkey = verkey_of(MediatorIdentity.objects.filter(tenant=tenant_a).latest("pk"))
        envelope = envelope_v1.pack(b"{}", to_verkeys=[verkey], sender=PrivateKey.generate(ED25519))
        header = _header(envelope)
        mediator_x25519 = bindings.crypto_sign_ed25519_pk_to_curve25519(b58decode(verkey))
        header["recipients"][0]["header"]["sender"] = b64url_nopad(
            bindings.crypto_box_seal(huge.encode(), mediator_x25519)
        )
        body, media, code = json.dumps(_with_header(envelope, header)).encode(), V1_MEDIA, None
    response = didcomm_a.post(body, content_type=media)
    assert decoded and max(decoded) <= 128
    assert response.status_code == 400
    if code:
        assert json.loads(response.content)["body"]["code"] == code


def test_an_exception_no_handler_answers_is_a_503_problem_report_logged_without_its_message(
    didcomm_a, wallet, monkeypatch, caplog
):
    def broken(ctx, message):
        raise RuntimeError("secret-payload-bytes")

    monkeypatch.setitem(handlers.HANDLERS, "https://didcomm.org/trust-ping/2.0/ping", broken)
    records = []
    monkeypatch.setattr(request_records, "OBSERVERS", [*request_records.OBSERVERS, records.append])
    ping = wallet.message("https://didcomm.org/trust-ping/2.0/ping", {"response_requested": True})
    with caplog.at_level(logging.INFO, logger="mediator"):
        resp = didcomm_a.post(wallet.pack(ping, didcomm_a.mediator_did))
    problem = json.loads(resp.content)
    assert (resp.status_code, problem["type"], problem["body"]["code"], problem["pthid"]) == (
        503,
        "https://didcomm.org/report-problem/2.0/problem-report",
        "e.p.me.unavailable",
        ping["id"],
    )
    # Metered under the message's type and its authenticated sender, as any other answer.
    assert [(r.command_type, r.code, r.http_status, r.sender_did) for r in records] == [
        ("trust-ping/2.0/ping", "e.p.me.unavailable", 503, wallet.did)
    ]
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR and r.name == "mediator.didcomm"]
    assert len(errors) == 1 and all(m.startswith("didcomm: unexpected error tenant=") for m in errors)
    assert all("RuntimeError at " in m and "broken" in m for m in errors)
    assert "secret-payload-bytes" not in caplog.text


def test_a_hostile_frame_gets_its_problem_report_and_the_socket_stays_open(settings, monkeypatch, didcomm_a, wallet):
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    monkeypatch.setattr("channels.db.close_old_connections", lambda: None)  # the test's transaction
    mediator = didcomm_a.mediator_did
    hostile = _hostile_bodies(mediator)
    ping = wallet.message("https://didcomm.org/trust-ping/2.0/ping", {"response_requested": True})

    async def body():
        comm = WebsocketCommunicator(
            URLRouter(websocket_urlpatterns), "/didcomm/ws", headers=[(b"host", HOST_A.encode())]
        )
        comm.scope["client"] = ("127.0.0.9", 5555)
        assert (await comm.connect())[0]
        for name, (frame, code) in hostile.items():
            await comm.send_to(text_data=frame.decode("utf-8", "surrogatepass"))
            report = json.loads(await comm.receive_from(timeout=5))
            assert (report["type"], report["body"]["code"]) == (
                "https://didcomm.org/report-problem/2.0/problem-report",
                code,
            ), name
        await comm.send_to(text_data=wallet.pack(ping, mediator).decode())
        pong, _ = wallet.unpack(await comm.receive_from(timeout=5))
        assert pong["type"] == "https://didcomm.org/trust-ping/2.0/ping-response"
        await comm.disconnect()

    async_to_sync(body)()
