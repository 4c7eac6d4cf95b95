"""The exact bytes the Identus SDK 7.0.0 sent our mediator in one recorded run, replayed in-process (no Node).

tests/interop/fixtures/identus/identus_7.0.0.json is a copy of what tests/interop/test_identus_e2e.py writes to
test-artifacts/identus/: the test keys of every party (the mediator's, the SDK's two DIDs', the sender's) and
every event in order: the SDK's HTTP requests and the server's answers, its socket frames both ways, the
sender's forwards (didcomm-node), and what the SDK reported. Here the mediator is given the recorded keys and
the whole run is played again: each SDK request must get the same status and an answer of the same type, body
and thread, which the SDK's own key opens.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator

from apps.didcomm.core import jwe
from apps.didcomm.core.resolver import key_agreement_key
from apps.didcomm.identity import service_uris
from apps.didcomm.invitation import invitation_for
from apps.didcomm.models import MediatorIdentity, QueuedMessage
from apps.didcomm.routing import websocket_urlpatterns
from apps.tenants.services import tenant_create
from tests.interop.didcomm_node import Party
from tests.support.entry import Poster
from tests.support.live_marker import is_marker, send_marker

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "identus" / "identus_7.0.0.json"
DATA = json.loads(FIXTURE.read_text())
PARTIES = {name: Party.from_json(p) for name, p in DATA["parties"].items()}
MEDIATOR, HOST, PEER = (PARTIES[n] for n in ("mediator", "host", "peer"))
SENDER, SICPA_SENDER = PARTIES["sender"], PARTIES["sicpa_sender"]  # didcomm-node's, SICPA didcomm's
EVENTS = DATA["events"]
CM2 = "https://didcomm.org/coordinate-mediation/2.0/"
PICKUP = "https://didcomm.org/messagepickup/3.0/"


def opened(body: str | bytes, party: Party) -> tuple[dict, jwe.Decrypted]:
    decrypted = jwe.decrypt(body, private_key_for=party.secrets().get, sender_key_for=key_agreement_key)
    return json.loads(decrypted.plaintext), decrypted


def sdk_requests() -> list[tuple[dict, jwe.Decrypted]]:
    """Every message the SDK sent the mediator (HTTP POST bodies and socket frames), opened with the mediator key."""
    bodies = [
        e["request_body"] if e["transport"] == "http" else e["body"]
        for e in EVENTS
        if e["event"] == "wire" and (e.get("method") == "POST" or e.get("direction") == "out")
    ]
    return [opened(body, MEDIATOR) for body in bodies]


def test_what_the_identus_sdk_sends_is_authcrypt_from_its_host_did_with_these_plaintexts():
    requests = sdk_requests()
    types = [m["type"] for m, _ in requests]
    assert sorted(types) == sorted(
        [CM2 + "mediate-request", CM2 + "keylist-update"]
        + [PICKUP + "delivery-request"] * 2
        + [PICKUP + "messages-received"] * 2
        + [PICKUP + "live-delivery-change"]
    )
    assert types[0] == CM2 + "mediate-request"
    for message, decrypted in requests:
        assert (decrypted.alg, decrypted.enc) == ("ECDH-1PU+A256KW", "A256CBC-HS512")
        assert (decrypted.sender_kid, decrypted.recipient_kid) == (HOST.did + "#key-1", MEDIATOR.did + "#key-2")
        assert set(message) >= {"id", "typ", "type", "body", "from", "to", "created_time", "attachments"}
        assert (message["typ"], message["from"], message["to"], message["attachments"]) == (
            "application/didcomm-plain+json",
            HOST.did,
            [MEDIATOR.did],
            [],
        )
        # return_route "all" on everything but keylist-update (it expects no answer)
        assert message.get("return_route") == (None if message["type"] == CM2 + "keylist-update" else "all")
    bodies = {m["type"]: m["body"] for m, _ in requests}
    assert bodies[CM2 + "mediate-request"] == {}
    assert bodies[CM2 + "keylist-update"] == {"updates": [{"action": "add", "recipient_did": PEER.did}]}
    assert bodies[PICKUP + "delivery-request"] == {"limit": 10}
    assert bodies[PICKUP + "live-delivery-change"] == {"live_delivery": True}


@pytest.fixture
def replay_tenant(db, settings):
    """The recorded tenant at its recorded address, holding the recorded mediator keys."""
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    # The recorded messages carry the recording's created_time: a replay window that reaches back to
    # it (replay protection itself is tests/didcomm/app/test_replay.py; each recorded id is used once).
    settings.MEDIATOR_DIDCOMM_REPLAY_WINDOW_S = 100 * 365 * 86_400
    domain = DATA["public_url"].split("://", 1)[1]
    tenant = tenant_create(slug="identus", domain=domain, public_url=DATA["public_url"])
    http_uri, ws_uri = service_uris(tenant)
    identity = MediatorIdentity(tenant=tenant, did=MEDIATOR.did, http_uri=http_uri, ws_uri=ws_uri)
    identity.seal(authentication=MEDIATOR.authentication, agreement=MEDIATOR.agreement)
    identity.save()
    return tenant, domain


@pytest.fixture(autouse=True)
def keep_the_test_connection(monkeypatch):
    """As tests/realtime/conftest.py: the consumer's database calls run inside the test transaction."""
    monkeypatch.setattr("channels.db.close_old_connections", lambda: None)


def comparable(answer: dict, ids: dict[str, str]) -> dict:
    """What must agree between the recorded answer and the replayed one (ids, times and stored ids aside)."""
    attachments = [{"id": ids.get(a["id"], a["id"]), "data": a["data"]} for a in answer.get("attachments", [])]
    return {k: answer.get(k) for k in ("type", "body", "from", "to")} | {"attachments": attachments}


def test_the_recorded_identus_run_replays_against_the_mediator_with_the_same_answers(
    replay_tenant, django_capture_on_commit_callbacks
):
    tenant, domain = replay_tenant
    poster = Poster(domain)  # POST /didcomm: the production entry, in process
    ids: dict[str, str] = {}  # stored message id in this replay -> the one in the recording

    def adopt_recorded_ids(recorded: dict, replayed: dict) -> None:
        """The SDK acks the ids the recording's mediator gave; give the replayed queue rows those ids."""
        for old, new in zip(recorded["attachments"], replayed["attachments"], strict=True):
            assert old["data"] == new["data"]
            QueuedMessage.objects.filter(message_id=new["id"]).update(message_id=old["id"])
            ids[new["id"]] = old["id"]

    def check(recorded_body: str, replayed_body: bytes, request: dict) -> None:
        recorded, _ = opened(recorded_body, HOST)
        replayed, decrypted = opened(replayed_body, HOST)
        assert decrypted.sender_kid == MEDIATOR.did + "#key-2"
        assert replayed.get("thid") == recorded.get("thid") == (request["id"] if "thid" in recorded else None)
        if replayed["type"] == PICKUP + "delivery":
            adopt_recorded_ids(recorded, replayed)
        assert comparable(replayed, ids) == comparable(recorded, {})

    def post(body: str, content_type: str):
        with django_capture_on_commit_callbacks(execute=True):
            return poster.post("/didcomm", body, content_type)

    async def replay():
        socket = None
        for event in EVENTS:
            kind = event["event"]
            if kind == "sender-forward":
                resp = await sync_to_async(post)(event["body"], event["content_type"])
                assert (resp.status_code, resp.content) == (202, b"")
            elif kind == "wire" and event["transport"] == "http" and event["method"] == "GET":
                assert event["url"].endswith("/didcomm/invitation?form=url")
                _, url = await sync_to_async(invitation_for)(tenant=tenant)
                assert event["response_body"] == url  # the SDK parsed this `?_oob=` URL
            elif kind == "wire" and event["transport"] == "http":
                headers = event["request_headers"]
                resp = await sync_to_async(post)(event["request_body"], headers["content-type"])
                assert resp.status_code == event["status"], resp.content
                if event["response_body"]:
                    request, _ = opened(event["request_body"], MEDIATOR)
                    await sync_to_async(check)(event["response_body"], resp.content, request)
                else:
                    assert resp.content == b""
            elif kind == "wire" and event["direction"] == "out":
                if socket is None:
                    socket = WebsocketCommunicator(
                        URLRouter(websocket_urlpatterns), "/didcomm/ws", headers=[(b"host", domain.encode())]
                    )
                    assert (await socket.connect())[0]
                await socket.send_to(text_data=event["body"])
                last_sent, _ = opened(event["body"], MEDIATOR)
            elif kind == "wire" and event["direction"] == "in":
                frame = await socket.receive_from(timeout=5)
                await sync_to_async(check)(event["body"], frame, last_sent)
        # Nothing more than the recording on the socket: the marker, sent to the SDK's live DID after
        # the replay, is its next frame (tests/support/live_marker.py).
        marker = await send_marker(tenant.pk, HOST.did)
        assert is_marker(opened(await socket.receive_from(timeout=5), HOST)[0], marker)
        await socket.disconnect()

    async_to_sync(replay)()
    assert QueuedMessage.objects.filter(tenant=tenant).count() == 0
    received = [e["body"]["content"] for e in EVENTS if e["event"] == "message"]
    assert received == ["offline 1", "offline 2", "offline 3", "live 4"]


def test_the_sdk_opened_what_the_mediator_delivered_byte_for_byte():
    """Each recorded delivery attachment is the sender's inner JWE, which the SDK's peer key opens."""
    delivered = []
    for e in EVENTS:
        if e["event"] != "wire" or not (e.get("method") == "POST" and e["response_body"] or e.get("direction") == "in"):
            continue
        answer, _ = opened(e.get("response_body") or e["body"], HOST)
        if answer["type"] == PICKUP + "delivery":
            delivered += [a["data"]["json"] for a in answer["attachments"]]
    opened_by_peer = [opened(json.dumps(inner), PEER) for inner in delivered]
    assert [(m["body"]["content"], d.sender_kid) for m, d in opened_by_peer] == [
        ("offline 1", SENDER.did + "#key-1"),
        ("offline 2", SICPA_SENDER.did + "#key-1"),
        ("offline 3", SENDER.did + "#key-1"),
        ("live 4", SENDER.did + "#key-1"),
    ]
    reported = [(e["id"], e["from"], e["body"]) for e in EVENTS if e["event"] == "message"]
    assert reported == [(m["id"], m["from"], m["body"]) for m, _ in opened_by_peer]


def test_the_recorded_invitation_url_is_the_oob_2_invitation_of_the_mediator():
    [get] = [e for e in EVENTS if e["event"] == "wire" and e.get("method") == "GET"]
    encoded = get["response_body"].split("?_oob=", 1)[1]
    invitation = json.loads(base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)))
    assert (invitation["type"], invitation["from"]) == ("https://didcomm.org/out-of-band/2.0/invitation", MEDIATOR.did)
