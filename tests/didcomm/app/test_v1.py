"""The DIDComm v1 front door on POST /didcomm (in-process, real PostgreSQL, a real local HTTP server
for outbound POSTs): OOB 1.1, DID Exchange, CM 1.0, routing/1.0 forward, Pickup 2.0/1.0, the
ACA-Py story (no return route: everything POSTed to the agent's endpoint) and every refusal."""

from __future__ import annotations

import base64
import html as html_lib
import json
from datetime import timedelta

import pytest
from django.test import override_settings
from django.utils import timezone

from apps.didcomm import handlers_v1, outbound
from apps.didcomm import metrics as didcomm_metrics
from apps.didcomm import selectors as didcomm_selectors
from apps.didcomm.core.message_v1 import key_to_verkey, verify_attachment
from apps.didcomm.core.resolver import resolve_did
from apps.didcomm.models import Connection, Mediation, Outbound, QueuedMessage, RecipientKey
from apps.usage import records as request_records
from apps.wire.encoding import b64decode, b64url_nopad
from tests.conftest import HOST_A, HOST_B
from tests.support.didcomm_agent_v1 import CM1, DIDX, ENVELOPE, PICKUP1, PICKUP2, AgentV1, Inbox, forward_to
from tests.support.entry import Poster, Response
from tests.tenants.test_operator_hosts import _run_settings
from tests.tenants.test_services import PRODUCTION_ENV

BASE = "https://didcomm.org/"


class V1Door:
    """A v1 agent's `POST /didcomm` through the production entry, in process (tests/support/entry.py)."""

    def __init__(self, host: str):
        self.http, self.host = Poster(host), host
        resp = self.http.get("/didcomm/invitation?version=1")
        assert resp.status_code == 200, resp.content
        self.invitation = json.loads(resp.content)
        self.key = self.invitation["services"][0]["recipientKeys"][0]

    def post(self, body: bytes, content_type: str = ENVELOPE) -> Response:
        return self.http.post("/didcomm", body, content_type)

    def send(self, agent: AgentV1, message: dict, *, anon: bool = False):
        """(status, decrypted inline answer or None, response)."""
        resp = self.post(agent.pack(message, self.key, anon=anon))
        answer = None
        if resp.content and resp["Content-Type"] == ENVELOPE:
            answer, sender = agent.unpack(resp.content)
            assert sender is not None
        return resp.status_code, answer, resp

    def connect(self, agent: AgentV1) -> dict:
        status, response, _ = self.send(agent, agent.didx_request(self.invitation))
        assert status == 200 and response["@type"] == DIDX + "response", response
        return response

    def mediate(self, agent: AgentV1) -> dict:
        self.connect(agent)
        _, grant, _ = self.send(agent, agent.message(CM1 + "mediate-request"))
        return grant


@pytest.fixture
def door(client, tenant_a) -> V1Door:
    return V1Door(HOST_A)


@pytest.fixture
def door_b(client, tenant_b) -> V1Door:
    return V1Door(HOST_B)


@pytest.fixture
def inbox():
    box = Inbox()
    yield box
    box.close()


def _drain() -> list[str]:
    """Run every due outbound row (what the Celery task does); the outcomes."""
    return [outbound.outbound_deliver(outbound_id=i).outcome for i in Outbound.objects.values_list("id", flat=True)]


# --- OOB 1.1 ------------------------------------------------------------------------------------


def test_the_oob_1_1_invitation_is_multi_use_with_an_inline_did_communication_service(client, door):
    inv = door.invitation
    assert inv["@type"] == "https://didcomm.org/out-of-band/1.1/invitation"
    assert inv["handshake_protocols"] == ["https://didcomm.org/didexchange/1.1", "https://didcomm.org/didexchange/1.0"]
    assert inv["label"] == "Tenant A"
    [service] = inv["services"]
    assert service["type"] == "did-communication" and service["id"] == "#inline"
    assert service["serviceEndpoint"] == "http://a.mediator.test/didcomm"
    assert service["recipientKeys"][0].startswith("did:key:z6Mk")
    url = client.get("/didcomm/invitation?version=1&form=url", HTTP_HOST=HOST_A).content.decode()
    assert url.startswith("http://a.mediator.test/didcomm?oob=")
    assert json.loads(b64decode(url.split("?oob=", 1)[1])) == inv
    opened = client.get("/didcomm?oob=" + url.split("?oob=", 1)[1], HTTP_HOST=HOST_A)
    assert json.loads(opened.content) == inv  # the URL itself opens the invitation
    assert V1Door(HOST_A).invitation == inv  # stable


# --- the Credo story: return routes -------------------------------------------------------------


def test_did_exchange_answers_inline_with_our_did_signed_by_the_invitation_key(door):
    agent = AgentV1()
    request = agent.didx_request(door.invitation)
    status, response, resp = door.send(agent, request)
    assert status == 200 and resp["Content-Type"] == ENVELOPE
    assert response["~thread"] == {"thid": request["@id"], "pthid": door.invitation["@id"]}
    attach = response["did_rotate~attach"]
    assert attach["mime-type"] == "text/string"
    content, signer = verify_attachment(attach)
    assert content.decode() == response["did"]
    assert "did:key:" + signer.multibase == door.key
    assert attach["data"]["jws"]["header"] == {"kid": door.key}
    assert base64.b64decode(attach["data"]["base64"]) == response["did"].encode()
    doc = resolve_did(response["did"])
    assert [e.uri for e in doc.didcomm_endpoints()] == [
        "http://a.mediator.test/didcomm",
        "ws://a.mediator.test/didcomm/ws",
    ]
    conn = Connection.objects.get()
    assert (conn.their_did, conn.their_verkey, conn.state, conn.endpoint) == (agent.did, agent.verkey, "response", "")
    # the same request again (a retry) gets the same connection
    assert door.send(agent, request)[0] == 200 and Connection.objects.count() == 1
    complete = agent.message(DIDX + "complete", return_route="none", **{"~thread": {"thid": request["@id"]}})
    status, answer, resp = door.send(agent, complete)
    assert (status, answer, resp.content) == (200, None, b"")
    assert Connection.objects.get().state == "completed"


def test_cm1_grant_keylist_forward_and_pickup_2(door):
    agent = AgentV1()
    door.connect(agent)
    request = agent.message(CM1 + "mediate-request", **{"~l10n": {"locale": "en"}})
    _, grant, _ = door.send(agent, request)
    assert grant["@type"] == CM1 + "mediate-grant"
    assert grant["endpoint"] == "http://a.mediator.test/didcomm"
    assert grant["routing_keys"] == [door.key]
    assert grant["~thread"] == {"thid": request["@id"]}

    conn_key = AgentV1()  # the key the agent hands to others
    raw_key = AgentV1()
    update = agent.message(
        CM1 + "keylist-update",
        updates=[
            {"recipient_key": conn_key.did_key, "action": "add"},
            {"recipient_key": raw_key.verkey, "action": "add"},
            {"recipient_key": conn_key.did_key + "#" + conn_key.did_key[8:], "action": "add"},
            {"recipient_key": "not-a-key", "action": "add"},
            {"recipient_key": raw_key.did_key, "action": "explode"},
        ],
    )
    _, answer, _ = door.send(agent, update)
    assert answer["@type"] == CM1 + "keylist-update-response"
    assert answer["~thread"] == {"thid": update["@id"]}
    assert answer["updated"] == [
        {"recipient_key": conn_key.did_key, "action": "add", "result": "success"},
        {"recipient_key": raw_key.verkey, "action": "add", "result": "success"},
        {"recipient_key": conn_key.did_key + "#" + conn_key.did_key[8:], "action": "add", "result": "no_change"},
        {"recipient_key": "not-a-key", "action": "add", "result": "client_error"},
        {"recipient_key": raw_key.did_key, "action": "explode", "result": "client_error"},
    ]
    assert sorted(RecipientKey.objects.values_list("recipient_did", flat=True)) == sorted(
        [conn_key.did_key, raw_key.did_key]
    )  # stored normalised

    _, keylist, _ = door.send(agent, agent.message(CM1 + "keylist-query", paginate={"limit": 1, "offset": 1}))
    assert keylist["@type"] == CM1 + "keylist"
    assert keylist["keys"] == [{"recipient_key": raw_key.did_key}]
    assert "pagination" not in keylist  # ACA-Py 1.7 rejects RFC 0211's {count, offset, remaining}
    _, everything, _ = door.send(agent, agent.message(CM1 + "keylist-query", paginate={}))
    assert everything["keys"] == [{"recipient_key": conn_key.did_key}, {"recipient_key": raw_key.did_key}]

    inner = json.loads(AgentV1().pack({"@type": BASE + "basicmessage/1.0/message", "@id": "m1"}, conn_key.did_key))
    resp = door.post(forward_to(conn_key.did_key, door.key, inner))
    assert (resp.status_code, resp.content) == (200, b"")
    resp = door.post(forward_to(raw_key.did_key, door.key, inner, to=raw_key.did_key))  # `to` as did:key
    assert resp.status_code == 200

    status_req = agent.message(PICKUP2 + "status-request")
    _, status, _ = door.send(agent, status_req)
    assert status["@type"] == PICKUP2 + "status"
    assert status["message_count"] == 2 and status["~thread"] == {"thid": status_req["@id"]}
    assert status["~transport"] == {"return_route": "all"}
    assert sorted(status) == sorted(
        [
            "@type",
            "@id",
            "message_count",
            "newest_received_time",
            "oldest_received_time",
            "total_bytes",
            "~thread",
            "~transport",
        ]
    )

    delivery_req = agent.message(PICKUP2 + "delivery-request", limit=1)
    _, delivery, _ = door.send(agent, delivery_req)
    assert delivery["@type"] == PICKUP2 + "delivery" and delivery["~thread"] == {"thid": delivery_req["@id"]}
    [attachment] = delivery["~attach"]
    assert attachment["data"] == {"json": inner}
    assert attachment["lastmod_time"].endswith("Z")
    assert conn_key.unpack(attachment["data"]["json"])[0]["@id"] == "m1"

    received = agent.message(PICKUP2 + "messages-received", message_id_list=[attachment["@id"]])
    _, status, _ = door.send(agent, received)
    assert status["@type"] == PICKUP2 + "status" and status["message_count"] == 1
    assert QueuedMessage.objects.count() == 1

    # Pickup 1.0: the batch removes what it carries
    pickup = agent.message(PICKUP1 + "batch-pickup", batch_size=10)
    _, batch, _ = door.send(agent, pickup)
    assert batch["@type"] == PICKUP1 + "batch" and batch["~thread"] == {"thid": pickup["@id"]}
    [entry] = batch["messages~attach"]
    assert entry == {"@id": entry["@id"], "id": entry["@id"], "message": inner}  # RFC 0212's @id, Credo's id
    _, empty, _ = door.send(agent, agent.message(PICKUP2 + "delivery-request", limit=5))
    assert empty["@type"] == PICKUP2 + "status" and empty["message_count"] == 0
    assert "newest_received_time" not in empty


def test_a_key_of_one_connection_cannot_be_registered_by_another(door):
    alice, mallory, key = AgentV1(), AgentV1(), AgentV1()
    door.mediate(alice)
    door.mediate(mallory)
    add = [{"recipient_key": key.did_key, "action": "add"}]
    assert door.send(alice, alice.message(CM1 + "keylist-update", updates=add))[1]["updated"][0]["result"] == "success"
    raw = [{"recipient_key": key.verkey, "action": "add"}]
    assert _problem(door.send(mallory, mallory.message(CM1 + "keylist-update", updates=raw))[2], mallory) == (
        409,
        {
            "code": "e.p.req.recipient-conflict",
            "en": "updates[0]: this DID is registered to another client of this mediator",
        },
    )
    remove = [{"recipient_key": key.did_key, "action": "remove"}]
    answer = door.send(mallory, mallory.message(CM1 + "keylist-update", updates=remove))[1]
    assert answer["updated"][0]["result"] == "no_change"
    assert RecipientKey.objects.get().mediation.connection.their_verkey == alice.verkey


def test_trust_ping_discover_features_and_a_problem_report(door):
    agent = AgentV1()
    door.connect(agent)
    ping = agent.message(BASE + "trust_ping/1.0/ping", response_requested=True)
    _, pong, _ = door.send(agent, ping)
    assert pong["@type"] == BASE + "trust_ping/1.0/ping_response" and pong["~thread"] == {"thid": ping["@id"]}
    _, disclose, _ = door.send(
        agent, agent.message(BASE + "discover-features/1.0/query", query=BASE + "coordinate-mediation/*")
    )
    assert disclose["@type"] == BASE + "discover-features/1.0/disclose"
    assert disclose["protocols"] == [{"pid": BASE + "coordinate-mediation/1.0", "roles": ["mediator"]}]
    report = agent.message(BASE + "report-problem/1.0/problem-report", description={"code": "x", "en": "y"})
    assert door.send(agent, report)[:2] == (200, None)


def test_an_exception_no_handler_answers_is_a_503_about_the_message_metered_under_its_type(door, monkeypatch):
    agent = AgentV1()
    door.connect(agent)

    def broken(ctx, msg):
        raise RuntimeError("a defect")

    monkeypatch.setitem(handlers_v1.HANDLERS, BASE + "trust_ping/1.0/ping", broken)
    records = []
    monkeypatch.setattr(request_records, "OBSERVERS", [*request_records.OBSERVERS, records.append])
    ping = agent.message(BASE + "trust_ping/1.0/ping", response_requested=True)
    status, _, resp = door.send(agent, ping)
    report = json.loads(resp.content)
    assert (status, report["@type"], report["description"]["code"], report["~thread"]) == (
        503,
        BASE + "report-problem/1.0/problem-report",
        "e.p.me.unavailable",
        {"thid": ping["@id"]},
    )
    connection = Connection.objects.get(their_verkey=agent.verkey)
    assert [(r.command_type, r.code, r.http_status, r.sender_did) for r in records] == [
        ("trust_ping/1.0/ping", "e.p.me.unavailable", 503, connection.their_did)
    ]


# --- the ACA-Py story: no return route, outbound POSTs ------------------------------------------


def test_without_a_return_route_every_answer_and_forward_is_posted_to_the_agents_endpoint(door, inbox):
    agent = AgentV1(endpoint=inbox.url)
    request = agent.didx_request(door.invitation, return_route=None)
    resp = door.post(agent.pack(request, door.key))
    assert (resp.status_code, resp.content) == (200, b"")
    assert _drain() == ["delivered"]
    [(ctype, body)] = inbox.bodies
    assert ctype == ENVELOPE
    response, sender = agent.unpack(body)
    assert response["@type"] == DIDX + "response" and sender == key_to_verkey(door.key)
    # mediate-request arrives before complete: accepted once the response is sent
    assert door.post(agent.pack(agent.message(CM1 + "mediate-request", return_route=None), door.key)).status_code == 200
    assert _drain() == ["delivered"]
    grant, _ = agent.unpack(inbox.bodies[-1][1])
    assert grant["@type"] == CM1 + "mediate-grant" and grant["routing_keys"] == [door.key]
    key = AgentV1()
    update = agent.message(
        CM1 + "keylist-update", return_route=None, updates=[{"recipient_key": key.did_key, "action": "add"}]
    )
    door.post(agent.pack(update, door.key))
    assert _drain() == ["delivered"]
    assert agent.unpack(inbox.bodies[-1][1])[0]["updated"][0]["result"] == "success"
    # a forward to the registered key (raw base58 `to`): stored, then POSTed unchanged
    inner = json.loads(AgentV1().pack({"@type": BASE + "basicmessage/1.0/message", "@id": "hello"}, key.did_key))
    assert door.post(forward_to(key.did_key, door.key, inner)).status_code == 200
    assert QueuedMessage.objects.count() == 1
    assert _drain() == ["delivered"]
    assert json.loads(inbox.bodies[-1][1]) == inner
    assert QueuedMessage.objects.count() == 0 and Outbound.objects.count() == 0


def test_a_failed_post_is_kept_and_retried_with_backoff_then_delivered(door, inbox):
    agent = AgentV1(endpoint=inbox.url)
    inbox.status = 500
    door.post(agent.pack(agent.didx_request(door.invitation, return_route=None), door.key))
    row = Outbound.objects.get()
    attempt = outbound.outbound_deliver(outbound_id=row.pk)
    assert attempt == outbound.Attempt("retry", 2)
    row.refresh_from_db()
    assert (row.attempts, row.last_status) == (1, "500")
    assert outbound.outbound_deliver(outbound_id=row.pk).outcome == "busy"  # not due yet
    inbox.status = 202
    later = timezone.now() + timedelta(seconds=3)
    assert outbound.outbound_deliver(outbound_id=row.pk, now=later).outcome == "delivered"
    assert len(inbox.bodies) == 2 and Outbound.objects.count() == 0


def test_a_post_that_keeps_failing_expires_with_the_ttl(door, inbox):
    agent = AgentV1(endpoint=inbox.url)
    inbox.status = 503
    door.post(agent.pack(agent.didx_request(door.invitation, return_route=None), door.key))
    row = Outbound.objects.get()
    Outbound.objects.filter(pk=row.pk).update(expires_at=timezone.now() + timedelta(seconds=1))
    assert outbound.outbound_deliver(outbound_id=row.pk).outcome == "expired"
    assert Outbound.objects.count() == 0


def _queued_with_outbound(door, inbox) -> QueuedMessage:
    """An ACA-Py-style connection with a granted key, and a forward to it whose POST keeps failing:
    one queued message and its Outbound row."""
    agent = AgentV1(endpoint=inbox.url)
    door.post(agent.pack(agent.didx_request(door.invitation, return_route=None), door.key))
    door.post(agent.pack(agent.message(CM1 + "mediate-request", return_route=None), door.key))
    key = AgentV1()
    update = agent.message(
        CM1 + "keylist-update", return_route=None, updates=[{"recipient_key": key.did_key, "action": "add"}]
    )
    door.post(agent.pack(update, door.key))
    assert _drain() == ["delivered"] * 3
    inbox.status = 503
    inner = json.loads(AgentV1().pack({"@type": BASE + "basicmessage/1.0/message", "@id": "hi"}, key.did_key))
    assert door.post(forward_to(key.did_key, door.key, inner)).status_code == 200
    assert (QueuedMessage.objects.count(), Outbound.objects.filter(queued__isnull=False).count()) == (1, 1)
    return QueuedMessage.objects.get()


def test_messages_received_counts_the_messages_not_their_outbound_rows(door, inbox):
    from apps.didcomm import queue

    queued = _queued_with_outbound(door, inbox)
    assert queue.messages_received(mediation=queued.mediation, ids=[str(queued.message_id)]) == 1
    assert (QueuedMessage.objects.count(), Outbound.objects.count()) == (0, 0)


def test_the_ttl_purge_counts_the_messages_not_their_outbound_rows(door, inbox):
    from apps.didcomm import queue

    _queued_with_outbound(door, inbox)
    later = timezone.now() + timedelta(days=30)
    assert queue.messages_purge_expired(tenant=None, now=later, dry_run=True) == 1
    assert queue.messages_purge_expired(tenant=None, now=later, dry_run=False) == 1
    assert (QueuedMessage.objects.count(), Outbound.objects.count()) == (0, 0)


@override_settings(MEDIATOR_DIDCOMM_OUTBOUND_ALLOW_PRIVATE=False)
@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:9/x",
        "http://10.1.2.3/x",
        "http://169.254.169.254/latest",
        "http://[::1]/x",
        "ftp://example.org/",
        # IPv4 inside IPv6: NAT64 (10.0.0.1, 169.254.169.254), 6to4, IPv4-compatible and -mapped,
        # Teredo (client 10.0.0.1, obfuscated), local-use NAT64 at its /96 and /48 places
        "http://[64:ff9b::a00:1]/x",
        "http://[64:ff9b::a9fe:a9fe]/x",
        "http://[2002:a00:1::]/x",
        "http://[::127.0.0.1]:8843/agent",
        "http://[::ffff:10.0.0.1]/x",
        "http://[2001:0:4136:e378:8000:63bf:f5ff:fffe]/x",
        "http://[64:ff9b:1::a00:1]/x",
        "http://[64:ff9b:1:a00:0:100::]/x",
    ],
)
def test_outbound_refuses_private_loopback_and_link_local_targets(url):
    with pytest.raises(outbound.TargetRefused):
        outbound.check_target(url)


@override_settings(MEDIATOR_DIDCOMM_OUTBOUND_ALLOW_PRIVATE=False)
@pytest.mark.parametrize("url", ["http://[64:ff9b::808:808]/x", "http://[2002:808:808::]/x", "http://8.8.8.8/x"])
def test_outbound_lets_ipv6_forms_of_a_public_ipv4_address_through(url):
    outbound.check_target(url)


@override_settings(MEDIATOR_DIDCOMM_OUTBOUND_ALLOW_PRIVATE=False, MEDIATOR_DIDCOMM_OUTBOUND_ALLOW_LOOPBACK=True)
def test_outbound_allows_loopback_but_not_private_targets_when_loopback_is_allowed():
    for url in ("http://127.0.0.1:9/x", "http://[::1]/x", "http://[::ffff:127.0.0.1]/x"):
        outbound.check_target(url)
    for url in ("http://10.1.2.3/x", "http://169.254.169.254/latest", "http://[64:ff9b::a00:1]/x"):
        with pytest.raises(outbound.TargetRefused):
            outbound.check_target(url)


@pytest.mark.parametrize(("env", "allowed"), [({}, "True"), (PRODUCTION_ENV, "False")])
def test_loopback_targets_are_allowed_by_default_in_development_only(tmp_path, env, allowed):
    code = "import django; django.setup(); from django.conf import settings; print(settings.MEDIATOR_DIDCOMM_OUTBOUND_ALLOW_LOOPBACK)"
    result = _run_settings(code, {**env, "MEDIATOR_VAR_DIR": str(tmp_path)})
    assert result.stdout.strip() == allowed, result.stderr


@override_settings(MEDIATOR_DIDCOMM_OUTBOUND_ALLOW_PRIVATE=False)
def test_a_refused_target_is_dropped_without_a_request(door, inbox):
    agent = AgentV1(endpoint=inbox.url)
    door.post(agent.pack(agent.didx_request(door.invitation, return_route=None), door.key))
    assert _drain() == ["refused"]
    assert inbox.bodies == [] and Outbound.objects.count() == 0


def _failures(reason: str) -> float:
    return didcomm_metrics.OUTBOUND_FAILURES.labels(reason)._value.get()


def _console(admin_client, tenant) -> tuple[str, str]:
    """The tenant page's delivery line and the failing-connections list, as an operator sees them."""
    page = admin_client.get(f"/admin/tenants/tenant/{tenant.pk}/change/")
    listing = admin_client.get("/admin/didcomm/connection/", {"tenant__id__exact": tenant.pk, "delivery": "failing"})
    assert (page.status_code, listing.status_code) == (200, 200)
    return html_lib.unescape(page.content.decode()), html_lib.unescape(listing.content.decode())


@override_settings(MEDIATOR_DIDCOMM_OUTBOUND_ALLOW_PRIVATE=False)
def test_a_refused_delivery_is_counted_and_shown_on_its_connection_and_its_tenant(door, inbox, admin_client, tenant_a):
    before = _failures("refused")
    agent = AgentV1(endpoint=inbox.url)
    door.post(agent.pack(agent.didx_request(door.invitation, return_route=None), door.key))
    assert _drain() == ["refused"]
    assert _failures("refused") == before + 1
    conn = Connection.objects.get()
    assert conn.last_delivery_error == "refused: host resolves to a non-public address"
    assert conn.last_delivery_error_at is not None and conn.delivery_failures == 1 and conn.last_delivered_at is None
    assert didcomm_selectors.delivery_summary(tenant=tenant_a) == {"failing": 1, "waiting": 0}
    page, listing = _console(admin_client, tenant_a)
    assert 'data-figure="delivery-failing">1</span> connection(s) failing' in page
    assert f"/admin/didcomm/connection/{conn.pk}/change/" in listing
    assert "failing: refused: host resolves to a non-public address at " in listing
    detail = html_lib.unescape(admin_client.get(f"/admin/didcomm/connection/{conn.pk}/change/").content.decode())
    assert "refused: host resolves to a non-public address" in detail


def test_a_failing_endpoint_is_counted_shown_with_its_waiting_messages_and_cleared_by_a_delivery(
    door, inbox, admin_client, tenant_a
):
    before = _failures("http_status")
    inbox.status = 503
    agent = AgentV1(endpoint=inbox.url)
    door.post(agent.pack(agent.didx_request(door.invitation, return_route=None), door.key))
    assert _drain() == ["retry"]
    assert _failures("http_status") == before + 1
    conn = didcomm_selectors.connections_with_delivery(Connection.objects.all()).get()
    assert (conn.last_delivery_error, conn.delivery_failures, conn.n_waiting) == ("HTTP 503", 1, 1)
    assert didcomm_selectors.delivery_summary(tenant=tenant_a) == {"failing": 1, "waiting": 1}
    page, listing = _console(admin_client, tenant_a)
    assert 'data-figure="delivery-waiting">1</span> message(s) waiting to be POSTed' in page
    assert "failing: HTTP 503 at " in listing
    # The agent comes back: the retry delivers, the connection is no longer failing (its last error is kept).
    inbox.status = 200
    Outbound.objects.update(next_attempt_at=timezone.now())
    assert _drain() == ["delivered"]
    conn.refresh_from_db()
    assert conn.last_delivered_at >= conn.last_delivery_error_at and conn.last_delivery_error == "HTTP 503"
    assert didcomm_selectors.delivery_summary(tenant=tenant_a) == {"failing": 0, "waiting": 0}
    assert f"/admin/didcomm/connection/{conn.pk}/change/" not in _console(admin_client, tenant_a)[1]


def test_an_unreachable_endpoint_is_counted_as_a_network_failure(door, tenant_a):
    before = _failures("network")
    agent = AgentV1(endpoint="http://127.0.0.1:9/agent")  # nothing listens on the discard port
    door.post(agent.pack(agent.didx_request(door.invitation, return_route=None), door.key))
    assert _drain() == ["retry"]
    assert _failures("network") == before + 1
    assert Connection.objects.get().last_delivery_error == "ConnectError"


def test_the_delivery_failure_metric_has_no_did_label():
    assert didcomm_metrics.OUTBOUND_FAILURES._labelnames == ("reason",)


# --- refusals -----------------------------------------------------------------------------------


def _problem(resp, agent: AgentV1 | None = None) -> tuple[int, dict]:
    body = agent.unpack(resp.content)[0] if agent and resp["Content-Type"] == ENVELOPE else json.loads(resp.content)
    assert body["@type"] == BASE + "report-problem/1.0/problem-report"
    return resp.status_code, body["description"]


def test_a_forward_to_an_unknown_key_is_400_not_found(door):
    resp = door.post(forward_to(AgentV1().did_key, door.key, {"protected": "x"}))
    assert _problem(resp) == (
        400,
        {"code": "e.p.me.res.not-found", "en": "Recipient not registered with this mediator"},
    )


def test_mediation_messages_need_a_connection_and_a_grant(door):
    stranger = AgentV1()
    resp = door.post(stranger.pack(stranger.message(CM1 + "mediate-request"), door.key))
    assert _problem(resp, stranger)[0] == 403
    assert _problem(resp, stranger)[1]["code"] == "e.p.req.not-connected"
    agent = AgentV1()
    door.connect(agent)
    resp = door.post(agent.pack(agent.message(CM1 + "keylist-query"), door.key))
    assert _problem(resp, agent) == (
        403,
        {"code": "e.p.req.not-granted", "en": "no mediation granted to this connection"},
    )
    resp = door.post(agent.pack(agent.message(CM1 + "mediate-request"), door.key, anon=True))
    assert _problem(resp)[1]["code"] == "e.p.trust.unauthenticated"


def test_did_exchange_refusals(door):
    agent = AgentV1()
    bad_pthid = agent.didx_request({"@id": "someone-else"})
    assert _problem(door.post(agent.pack(bad_pthid, door.key)), agent)[1]["code"] == "e.p.msg.invalid-body"
    other = AgentV1()
    stolen = agent.didx_request(door.invitation)
    stolen["did"] = other.did  # a DID whose keys are not the sender's
    assert _problem(door.post(agent.pack(stolen, door.key)), agent)[1]["code"] == "e.p.trust.sender-mismatch"
    legacy = agent.message(DIDX + "request", **{"did_doc~attach": {}, "~thread": {"pthid": door.invitation["@id"]}})
    assert _problem(door.post(agent.pack(legacy, door.key)), agent)[1]["code"] == "e.p.msg.invalid-body"  # no did
    door.connect(agent)
    again = agent.didx_request(door.invitation)
    assert _problem(door.post(agent.pack(again, door.key)), agent) == (
        400,
        {"code": "e.p.req.connection-exists", "en": "this key already has a connection on another thread"},
    )


def test_unsupported_types_bad_bodies_and_live_mode_over_http(door):
    agent = AgentV1()
    door.mediate(agent)
    assert (
        _problem(door.post(agent.pack(agent.message(BASE + "nope/1.0/x"), door.key)), agent)[1]["code"]
        == "e.p.msg.unsupported-type"
    )
    for msg in (
        agent.message(CM1 + "keylist-update", updates="x"),
        agent.message(CM1 + "keylist-query", paginate={"limit": -1}),
        agent.message(PICKUP2 + "delivery-request", limit=0),
        agent.message(PICKUP2 + "messages-received", message_id_list="x"),
        agent.message(PICKUP1 + "batch-pickup", batch_size="x"),
    ):
        assert _problem(door.post(agent.pack(msg, door.key)), agent)[1]["code"] == "e.p.msg.invalid-body"
    live = agent.message(PICKUP2 + "live-delivery-change", live_delivery=True)
    assert _problem(door.post(agent.pack(live, door.key)), agent)[1]["code"] == "e.m.live-mode-not-supported"


def test_undecryptable_and_foreign_envelopes(door, door_b):
    agent = AgentV1()
    resp = door_b.post(agent.pack(agent.didx_request(door.invitation), door.key))  # tenant A's key on tenant B
    assert _problem(resp) == (
        400,
        {"code": "e.p.trust.crypto.unknown-key", "en": "no recipient key of this envelope is ours"},
    )
    env = json.loads(agent.pack(agent.message(CM1 + "mediate-request"), door.key))
    env["tag"] = env["tag"][:-2] + ("AA" if not env["tag"].endswith("AA") else "BA")
    assert _problem(door.post(json.dumps(env).encode()))[1]["code"] == "e.p.trust.crypto"
    resp = door.post(agent.pack(agent.message(CM1 + "mediate-request"), door.key), content_type="text/plain")
    assert resp.status_code == 415


def _broken_envelopes() -> dict[str, tuple[object, str]]:
    """name -> (what replaces a good envelope, the `en` of the v1 problem report it must get)."""
    agent = AgentV1()
    good = json.loads(agent.pack(agent.message(CM1 + "mediate-request"), AgentV1().verkey))
    header = json.loads(b64decode(good["protected"]))
    with_header = lambda h: {**good, "protected": b64url_nopad(json.dumps(h).encode())}  # noqa: E731
    return {
        "not JSON": (b"{not json", "the body is not JSON: an RFC 0019 envelope is a JSON object"),
        "a JSON array": (b"[1, 2]", "the body is not a JSON object: an RFC 0019 envelope is a JSON object"),
        "no protected": (
            {k: v for k, v in good.items() if k != "protected"},
            "an RFC 0019 envelope needs protected (a base64url string)",
        ),
        "protected not a string": (
            {**good, "protected": 5},
            "an RFC 0019 envelope needs protected (a base64url string)",
        ),
        "no ciphertext": (
            {k: v for k, v in good.items() if k != "ciphertext"},
            "an RFC 0019 envelope needs ciphertext (a base64url string)",
        ),
        "no iv": ({k: v for k, v in good.items() if k != "iv"}, "an RFC 0019 envelope needs iv (a base64url string)"),
        "no tag": (
            {k: v for k, v in good.items() if k != "tag"},
            "an RFC 0019 envelope needs tag (a base64url string)",
        ),
        "protected not base64url": ({**good, "protected": "!!!"}, "protected is not base64url of a JSON object"),
        "protected not JSON": (
            {**good, "protected": b64url_nopad(b"not json")},
            "protected is not base64url of a JSON object",
        ),
        "protected a JSON list": (
            {**good, "protected": b64url_nopad(b"[]")},
            "protected is not base64url of a JSON object",
        ),
        "another enc": (with_header({**header, "enc": "A256GCM"}), "protected.enc must be xchacha20poly1305_ietf"),
        "a DIDComm v2 JWE": (
            {**good, "recipients": [{"header": {"kid": "x"}, "encrypted_key": "AA"}]},
            "top-level recipients: a DIDComm v2 JWE, not an RFC 0019 envelope "
            "(send it as application/didcomm-encrypted+json)",
        ),
        "no recipients in protected": (
            with_header({k: v for k, v in header.items() if k != "recipients"}),
            "recipients are required",
        ),
    }


@pytest.mark.parametrize("media", [ENVELOPE, "application/ssi-agent-wire; charset=utf-8"])
@pytest.mark.parametrize("shape", list(_broken_envelopes()))
def test_a_broken_envelope_sent_as_v1_is_a_400_v1_problem_report_saying_what_is_wrong(door, shape, media):
    body, explanation = _broken_envelopes()[shape]
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    resp = door.post(raw, content_type=media)
    assert resp["Content-Type"] == "application/json"
    assert _problem(resp) == (400, {"code": "e.p.msg", "en": explanation})
    assert not QueuedMessage.objects.exists() and not Connection.objects.exists()


def test_a_broken_envelope_sent_as_v2_still_gets_the_v2_answer(door):
    resp = door.post(b"{not json", content_type="application/didcomm-encrypted+json")
    assert resp.status_code == 400
    assert json.loads(resp.content)["type"] == "https://didcomm.org/report-problem/2.0/problem-report"


def test_cross_tenant_a_key_registered_on_tenant_a_is_unknown_on_tenant_b(door, door_b):
    agent, key = AgentV1(), AgentV1()
    door.mediate(agent)
    door.send(agent, agent.message(CM1 + "keylist-update", updates=[{"recipient_key": key.did_key, "action": "add"}]))
    resp = door_b.post(forward_to(key.did_key, door_b.key, {"protected": "x"}))
    assert _problem(resp)[1]["code"] == "e.p.me.res.not-found"


def test_policy_closed_denies_and_removing_a_connection_removes_its_mediation(door, tenant_a):
    from apps.didcomm.mediation import connection_remove
    from apps.didcomm.models import DidcommPolicy
    from apps.tenants.services import Actor

    DidcommPolicy.objects.update_or_create(tenant=tenant_a, defaults={"mediation": "closed"})
    agent = AgentV1()
    assert door.mediate(agent)["@type"] == CM1 + "mediate-deny"
    DidcommPolicy.objects.filter(tenant=tenant_a).update(mediation="open")
    other = AgentV1()
    door.mediate(other)
    conn = Connection.objects.get(their_verkey=other.verkey)
    connection_remove(connection=conn, actor=Actor(user=None, via="test"))
    assert not Mediation.objects.filter(client_did=other.did).exists()
    resp = door.post(other.pack(other.message(CM1 + "keylist-query"), door.key))
    assert _problem(resp, other)[1]["code"] == "e.p.req.not-connected"
