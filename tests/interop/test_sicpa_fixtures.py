"""The exact bytes a stock SICPA client (`didcomm` 0.3.2 + `peerdid` 0.5.2) sent our mediator in one recorded run,
replayed in-process (no SICPA venv).

tests/interop/fixtures/sicpa/ is a copy of what tests/interop/test_sicpa_e2e.py writes to test-artifacts/sicpa/:
the test keys of every party (the mediator's, the client's host and peer DIDs', the sender's) and each
command's HTTP exchanges in order. Here the mediator is given the recorded keys and the run is played again:
each request must get the same status and an answer of the same type, body and thread, from the DID and key
the client named, to the key it named, which its own key opens.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.test import Client

from apps.didcomm.core import jwe
from apps.didcomm.core.did_peer import mediator_peer_did
from apps.didcomm.core.resolver import key_agreement_key
from apps.didcomm.identity import service_uris
from apps.didcomm.invitation import invitation_for
from apps.didcomm.models import MediatorIdentity, QueuedMessage
from apps.tenants.services import tenant_create
from tests.interop.didcomm_node import Party
from tests.support.entry import Poster

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "sicpa" / "sicpa_0.3.2_peerdid_0.5.2.json"
DATA = json.loads(FIXTURE.read_text())
PARTIES = {name: Party.from_json(p) for name, p in DATA["parties"].items()}
MEDIATOR, HOST, PEER, SENDER = (PARTIES[n] for n in ("mediator", "host", "peer", "sender"))  # MEDIATOR: its legacy DID
EXCHANGES = [(e["event"], w) for e in DATA["events"] for w in e["wire"]]
CM2 = "https://didcomm.org/coordinate-mediation/2.0/"
PICKUP = "https://didcomm.org/messagepickup/3.0/"
ROUTING2 = "https://didcomm.org/routing/2.0/forward"


def short_kid(party: Party, key) -> str:
    """peerdid 0.5's name of a key: `#` + the first 8 characters of its fingerprint, `z` left out."""
    return f"{party.did}#{key.public.multibase[1:9]}"


def opened(body: str | bytes, party: Party) -> tuple[dict, jwe.Decrypted]:
    """Decrypt with `party`'s agreement key under whatever kid names it (any id form our resolver reads)."""
    mine = lambda kid: party.agreement if key_agreement_key(kid) == party.agreement.public else None  # noqa: E731
    decrypted = jwe.decrypt(body, private_key_for=mine, sender_key_for=key_agreement_key)
    return json.loads(decrypted.plaintext), decrypted


def test_what_the_stock_client_sends_names_every_key_by_peerdids_short_id():
    posts = [(op, w) for op, w in EXCHANGES if w["method"] == "POST"]
    assert [op for op, _ in posts] == ["mediate", "register", "register", "send", "pickup", "pickup", "pickup"]
    requests = [opened(w["request_body"], MEDIATOR) for op, w in posts if op != "send"]
    assert [m["type"] for m, _ in requests] == [
        CM2 + "mediate-request",
        CM2 + "keylist-update",
        CM2 + "keylist-query",
        PICKUP + "status-request",
        PICKUP + "delivery-request",
        PICKUP + "messages-received",
    ]
    for message, decrypted in requests:
        assert (decrypted.alg, decrypted.enc) == ("ECDH-1PU+A256KW", "A256CBC-HS512")
        assert decrypted.sender_kid == short_kid(HOST, HOST.agreement)
        assert decrypted.recipient_kid == short_kid(MEDIATOR, MEDIATOR.agreement)
        assert (message["from"], message["to"], message["return_route"]) == (HOST.did, [MEDIATOR.did], "all")
    # The sender's forward: anoncrypt (XC20P, SICPA's default) to the routing key the peer DID names, `next` the peer.
    [(_, send)] = [(op, w) for op, w in posts if op == "send"]
    forward, decrypted = opened(send["request_body"], MEDIATOR)
    assert (decrypted.alg, decrypted.enc, decrypted.sender_kid) == ("ECDH-ES+A256KW", "XC20P", None)
    assert decrypted.recipient_kid == short_kid(MEDIATOR, MEDIATOR.agreement)
    assert (forward["type"], forward["body"]) == (ROUTING2, {"next": PEER.did})
    inner, decrypted = opened(json.dumps(forward["attachments"][0]["data"]["json"]), PEER)
    assert (inner["body"], decrypted.sender_kid) == (
        {"content": "from a stock SICPA sender"},
        short_kid(SENDER, SENDER.agreement),
    )


def test_the_mediators_legacy_did_is_one_string_form_service_that_peerdid_0_5_reads():
    identity = MediatorIdentity(
        http_uri=DATA["public_url"] + "/didcomm",
        authentication_public=MEDIATOR.authentication.public.raw,
        agreement_public=MEDIATOR.agreement.public.raw,
    )
    assert identity.legacy_did == MEDIATOR.did
    assert MEDIATOR.did.count(".S") == 1
    [get] = [w for _, w in EXCHANGES if w["method"] == "GET"]
    assert json.loads(get["response_body"])["from"] == MEDIATOR.did


@pytest.fixture
def replay_tenant(db, settings):
    """The recorded tenant at its recorded address, holding the recorded mediator keys."""
    # The recorded messages carry the recording's created_time: a replay window that reaches back to it.
    settings.MEDIATOR_DIDCOMM_REPLAY_WINDOW_S = 100 * 365 * 86_400
    domain = DATA["public_url"].split("://", 1)[1]
    tenant = tenant_create(slug="sicpa", domain=domain, public_url=DATA["public_url"])
    http_uri, ws_uri = service_uris(tenant)
    did = mediator_peer_did(
        authentication=MEDIATOR.authentication.public,
        agreement=MEDIATOR.agreement.public,
        http_uri=http_uri,
        ws_uri=ws_uri,
    )
    identity = MediatorIdentity(tenant=tenant, did=did, http_uri=http_uri, ws_uri=ws_uri)
    identity.seal(authentication=MEDIATOR.authentication, agreement=MEDIATOR.agreement)
    identity.save()
    return tenant, domain


def comparable(answer: dict, ids: dict[str, str]) -> dict:
    """What must agree between the recorded answer and the replayed one (ids and times aside)."""
    attachments = [{"id": ids.get(a["id"], a["id"]), "data": a["data"]} for a in answer.get("attachments", [])]
    body = {k: v for k, v in answer.get("body", {}).items() if not k.endswith("_received_time")}
    return {k: answer.get(k) for k in ("type", "from", "to")} | {"body": body, "attachments": attachments}


def test_the_recorded_sicpa_run_replays_against_the_mediator_with_the_same_answers(
    replay_tenant, django_capture_on_commit_callbacks
):
    tenant, domain = replay_tenant
    client = Client(HTTP_HOST=domain)
    poster = Poster(domain)  # POST /didcomm: the production entry, in process
    ids: dict[str, str] = {}  # stored message id in this replay -> the one in the recording
    for _, wire in EXCHANGES:
        if wire["method"] == "GET":
            assert wire["url"].endswith("/didcomm/invitation?did=legacy")
            assert (
                json.loads(client.get("/didcomm/invitation?did=legacy").content)
                == invitation_for(tenant=tenant, legacy=True)[0]
                == json.loads(wire["response_body"])
            )
            continue
        with django_capture_on_commit_callbacks(execute=True):
            resp = poster.post("/didcomm", wire["request_body"], wire["request_content_type"])
        assert resp.status_code == wire["status"], resp.content
        if not wire["response_body"]:
            assert resp.content == b""
            continue
        request, _ = opened(wire["request_body"], MEDIATOR)
        recorded, _ = opened(wire["response_body"], HOST)
        replayed, decrypted = opened(resp.content, HOST)
        # From the DID and key the client addressed, to the key it named: what peerdid 0.5 resolves.
        assert decrypted.sender_kid == short_kid(MEDIATOR, MEDIATOR.agreement)
        assert decrypted.recipient_kids == (short_kid(HOST, HOST.agreement),)
        assert replayed["thid"] == recorded["thid"] == request["id"]
        if replayed["type"] == PICKUP + "delivery":
            for old, new in zip(recorded["attachments"], replayed["attachments"], strict=True):
                QueuedMessage.objects.filter(message_id=new["id"]).update(message_id=old["id"])
                ids[new["id"]] = old["id"]
        assert comparable(replayed, ids) == comparable(recorded, {})
    assert QueuedMessage.objects.filter(tenant=tenant).count() == 0
    [pickup] = [e for e in DATA["events"] if e["event"] == "pickup"]
    assert [m["body"]["content"] for m in pickup["messages"]] == ["from a stock SICPA sender"]
