"""The lean reference server (bench/lean_reference.py) does what the product does for TWO_WAY_PRIVATE,
so that the benchmark comparing them (bench/lean_compare.py) compares the same work.

The reference runs as a real uvicorn process on a free port against the test database; the product
answers through Django's test client on the same database. Both must run the same statement with
the same parameters, give the same status and reply bytes for the same kind of envelope, store the
same row, and share the nonce store (a pair one of them consumed is DUPLICATE_NONCE at the other).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import uuid
from datetime import timedelta
from types import SimpleNamespace

import httpx
import pytest
from django.db import connection

from apps.decentrl.models import Nonce
from apps.didcomm import services
from apps.didcomm.core.agent import CM2, ENCRYPTED, Agent, forward_for, routed_did
from apps.didcomm.models import DidcommPolicy, QueuedMessage
from apps.didcomm.protocols import FORWARD, PROBLEM_REPORT, TRUST_PING, Code
from apps.didcomm.recipients import lookup_form
from apps.messaging.models import PendingEvent, PendingQueueDepth
from apps.tenants.models import Tenant
from apps.wire.canonical import canonical_bytes
from apps.wire.client import Identity
from apps.wire.crypto import sign_json_object
from apps.wire.envelope import parse_command
from bench import lean_reference
from tests.conftest import HOST_A, Poster
from tests.didcomm.app.conftest import DidcommPoster
from tests.support import servers
from tests.support.registration import contract_both_ways, register
from tests.support.servers import ROOT, free_port, server_env

pytestmark = pytest.mark.django_db(transaction=True)

TWO_WAY = "TWO_WAY_PRIVATE"
JSON = "application/json"


def _envelope(who: Identity, payload, *, recipient_did: str, **header) -> dict:
    h = {
        "channel": TWO_WAY,
        "sender_did": who.did,
        "sender_signing_key_id": who.key_id,
        "recipient_did": recipient_did,
        "timestamp": int(time.time() * 1000),
        "nonce": str(uuid.uuid4()),
        **header,
    }
    signable = {"header": h, "payload": payload}
    return {**signable, "signature": sign_json_object(signable, who.signing)}


@pytest.fixture
def lean_http(tmp_path, tenant_a):
    """The reference, one process, resolving the tenant on every request (tests change tenants): an
    HTTP client for it."""
    port = free_port()
    log = tmp_path / "lean.log"
    env = server_env({"DATABASE_URL": servers.test_database_url(), "MEDIATOR_TENANT_CACHE_SECONDS": "0"})
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.lean_reference", "--port", str(port), "--workers", "1", "--pool-size", "2"],
        cwd=ROOT,
        env=env,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 30
    while True:
        assert proc.poll() is None, log.read_text()
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        assert time.time() < deadline, log.read_text()
        time.sleep(0.1)
    with httpx.Client(base_url=url) as http:
        yield http
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture
def lean(lean_http):
    def post(body: bytes, host: str = HOST_A) -> tuple[int, bytes]:
        resp = lean_http.post("/", content=body, headers={"Host": host, "Content-Type": "application/json"})
        assert resp.headers["content-type"] == "application/json"
        return resp.status_code, resp.content

    return post


@pytest.fixture
def product(client):
    def post(body: bytes, host: str = HOST_A) -> tuple[int, bytes]:
        resp = client.post("/", data=body, content_type="application/json", HTTP_HOST=host)
        return resp.status_code, resp.content

    return post


@pytest.fixture
def poster(tenant_a) -> Poster:
    return Poster(HOST_A)


@pytest.fixture
def pair(poster, tenant_a, alice, bob):
    """alice and bob registered on tenant A, bob holding a contract with alice."""
    register(poster, alice, tenant_a)
    register(poster, bob, tenant_a)
    contract_both_ways(poster, alice, bob, tenant_a)
    return alice, bob


def _error(code: str) -> bytes:
    return canonical_bytes({"type": "ERROR", "code": code})


def _the_one_statement(marker: str, run) -> tuple[str, list]:
    """The one statement naming `marker` that the product ran during `run()`, with psycopg's %s
    numbered $1…, and its parameters."""
    captured = []

    def capture(execute, sql, params, many, context):
        if marker in sql:
            captured.append((sql, list(params)))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(capture):
        run()
    assert len(captured) == 1
    sql, params = captured[0]
    numbered = iter(range(1, 100))
    return re.sub("%s", lambda _m: f"${next(numbered)}", sql), params


def _the_products_statement(product, env: dict) -> tuple[str, list]:
    """The one statement the product ran for `env` (its claim's) and its parameters; the command
    must succeed."""

    def run():
        assert product(canonical_bytes(env))[0] == 200

    return _the_one_statement("protocol_nonce", run)


def test_the_reference_runs_the_products_statement_with_the_same_parameters(product, pair, tenant_a):
    alice, bob = pair
    env = _envelope(alice, "hello", recipient_did=bob.did)
    sql, params = _the_products_statement(product, env)
    assert sql == lean_reference.STATEMENT
    tenant = lean_reference.Tenant(tenant_a.pk, tenant_a.did, True, tenant_a.pending_queue_cap, 0)
    ours = lean_reference.statement_params(
        tenant=tenant,
        cmd=parse_command(canonical_bytes(env)),
        checks_passed=True,
        now_ms=params[4],  # the product's clock, read by its claim
        window_ms=300_000,
        public_id=params[24],
    )
    assert ours == params


def test_a_two_way_private_is_stored_and_answered_as_the_product_does(lean, product, pair, tenant_a):
    alice, bob = pair
    by_product = _envelope(alice, "from the product", recipient_did=bob.did)
    by_lean = _envelope(alice, "from the reference ✓", recipient_did=bob.did)
    status_p, reply_p = product(canonical_bytes(by_product))
    status_l, reply_l = lean(canonical_bytes(by_lean))
    assert status_p == status_l == 200
    id_p = httpx.Response(200, content=reply_p).json()["pendingEventId"]
    id_l = httpx.Response(200, content=reply_l).json()["pendingEventId"]
    assert reply_p == canonical_bytes({"type": "SUCCESS", "pendingEventId": id_p})
    assert reply_l == canonical_bytes({"type": "SUCCESS", "pendingEventId": id_l})

    def row(public_id):
        e = PendingEvent.objects.get(public_id=public_id)
        return (e.tenant_id, e.recipient_did, e.sender_did, e.payload, e.payload_bytes)

    assert row(id_p) == (tenant_a.pk, bob.did, alice.did, "from the product", 16)
    assert row(id_l) == (tenant_a.pk, bob.did, alice.did, "from the reference ✓", 22)
    assert PendingQueueDepth.objects.get(tenant_id=tenant_a.pk, recipient_did=bob.did).depth == 2
    window = 300_000
    nonces = {
        n.nonce: n.expires_at
        for n in Nonce.objects.filter(
            sender_did=alice.did, nonce__in=[e["header"]["nonce"] for e in (by_product, by_lean)]
        )
    }
    assert nonces == {e["header"]["nonce"]: e["header"]["timestamp"] + window for e in (by_product, by_lean)}

    # One nonce store: a replay is DUPLICATE_NONCE wherever it is sent, and stores nothing.
    duplicate = (401, _error("DUPLICATE_NONCE"))
    assert lean(canonical_bytes(by_lean)) == duplicate
    assert lean(canonical_bytes(by_product)) == duplicate
    assert product(canonical_bytes(by_lean)) == duplicate
    assert PendingEvent.objects.filter(recipient_did=bob.did).count() == 2


def test_every_error_is_the_products_in_the_same_order(lean, product, poster, pair, tenant_a):
    alice, bob = pair
    stranger = Identity.create("stranger", tenant_a.did)  # not registered
    carl = Identity.create("carl", tenant_a.did)  # registered, no contract with alice
    register(poster, carl, tenant_a)

    def tampered():
        env = _envelope(alice, "x", recipient_did=bob.did)
        env["payload"] = "y"
        return env

    cases = {
        "INVALID_SIGNATURE": tampered,
        "SENDER_SIGNING_KEY_NOT_FOUND": lambda: _envelope(
            alice, "x", recipient_did=bob.did, sender_signing_key_id="#k"
        ),
        "RECIPIENT_NOT_FOUND": lambda: _envelope(alice, "x", recipient_did="did:decentrl:broken"),
        "RECIPIENT_NOT_REGISTERED": lambda: _envelope(alice, "x", recipient_did=stranger.did),
        "COMMUNICATION_CONTRACT_NOT_FOUND": lambda: _envelope(alice, "x", recipient_did=carl.did),
        "TIMESTAMP_OUT_OF_RANGE": lambda: _envelope(alice, "x", recipient_did=bob.did, timestamp=1),
        "INVALID_COMMAND": lambda: {"header": {}, "payload": "x", "signature": "s"},
    }
    status = {"INVALID_SIGNATURE": 401, "TIMESTAMP_OUT_OF_RANGE": 401, "INVALID_COMMAND": 400}
    before = PendingEvent.objects.count()
    for code, make in cases.items():
        for post in (product, lean):
            env = make()
            assert post(canonical_bytes(env)) == (status.get(code, 404), _error(code)), (post, code)
            if code not in ("TIMESTAMP_OUT_OF_RANGE", "INVALID_COMMAND"):
                # Checked after the nonce: the pair is consumed all the same.
                assert post(canonical_bytes(env)) == (401, _error("DUPLICATE_NONCE")), (post, code)

    Tenant.objects.filter(pk=tenant_a.pk).update(pending_queue_cap=1)
    assert product(canonical_bytes(_envelope(alice, "fills the queue", recipient_did=bob.did)))[0] == 200
    for post in (product, lean):
        full = (507, _error("RECIPIENT_QUEUE_FULL"))
        assert post(canonical_bytes(_envelope(alice, "x", recipient_did=bob.did))) == full
        assert post(b"{}", host="unknown.example") == (404, _error("UNKNOWN_MEDIATOR"))
    assert PendingEvent.objects.count() == before + 1


def test_a_failed_statement_is_503_with_the_nonce_consumed(lean, product, pair):
    alice, bob = pair
    table = PendingEvent._meta.db_table
    with connection.cursor() as cur:
        cur.execute(f"ALTER TABLE {table} ADD CONSTRAINT test_lean_refuse CHECK (payload <> 'refused')")
    try:
        for post in (product, lean):
            env = _envelope(alice, "refused", recipient_did=bob.did)
            assert post(canonical_bytes(env)) == (503, _error("MEDIATOR_UNAVAILABLE"))
            assert Nonce.objects.filter(sender_did=alice.did, nonce=env["header"]["nonce"]).exists()
            assert post(canonical_bytes(env)) == (401, _error("DUPLICATE_NONCE"))
    finally:
        with connection.cursor() as cur:
            cur.execute(f"ALTER TABLE {table} DROP CONSTRAINT test_lean_refuse")
    assert not PendingEvent.objects.filter(payload="refused").exists()


# --- QUERY_EVENTS by one tag ----------------------------------------------------------------------


def _query(who: Identity, tenant, tag: str, *, page: int = 0, page_size: int = 10, **header) -> dict:
    payload = {
        "type": "QUERY_EVENTS",
        "filter": {"encrypted_tags": [tag]},
        "pagination": {"page": page, "page_size": page_size},
    }
    return _envelope(who, payload, recipient_did=tenant.did, channel="DIRECT_AUTHENTICATED", **header)


@pytest.fixture
def archive(poster, pair, tenant_a):
    """alice's archive: 12 events tagged "t" (timestamps 1000…1011), 3 tagged "u"; bob's one "t"."""
    alice, bob = pair
    events = [
        {"sender_did": alice.did, "recipient_did": bob.did, "timestamp": 1000 + i, "payload": f"p{i}",
         "encrypted_tags": ["t"] if i < 12 else ["u", "t2"]}
        for i in range(15)
    ]  # fmt: skip
    status, reply = poster.command(alice, {"type": "SAVE_EVENTS", "events": events}, recipient_did=tenant_a.did)
    assert (status, reply) == (200, {"type": "SUCCESS"})
    mine = [
        {"sender_did": bob.did, "recipient_did": alice.did, "timestamp": 5, "payload": "b", "encrypted_tags": ["t"]}
    ]
    status, reply = poster.command(bob, {"type": "SAVE_EVENTS", "events": mine}, recipient_did=tenant_a.did)
    assert (status, reply) == (200, {"type": "SUCCESS"})
    return alice, bob


def test_the_reference_runs_the_products_query_statement_with_the_same_parameters(product, archive, tenant_a):
    alice, _ = archive
    env = _query(alice, tenant_a, "t", page=1, page_size=5)
    sql, params = _the_products_statement(product, env)
    assert sql == lean_reference.QE_STATEMENT
    tenant = lean_reference.Tenant(tenant_a.pk, tenant_a.did, True, tenant_a.pending_queue_cap, 0)
    ours = lean_reference.query_events_params(
        tenant=tenant, cmd=parse_command(canonical_bytes(env)), now_ms=params[4], window_ms=300_000
    )
    assert ours == params
    assert params[12:15] == ["t", 5, 5]  # the tag, the page size, the offset


def test_a_query_is_answered_as_the_product_does(lean, product, archive, tenant_a):
    alice, bob = archive
    cases = {
        "first page": dict(tag="t", page=0, page_size=5),
        "last, partial page": dict(tag="t", page=2, page_size=5),
        "page past the end (its total is a COUNT)": dict(tag="t", page=7, page_size=5),
        "a tag nobody used": dict(tag="nothing", page=0, page_size=10),
        "another tag": dict(tag="u", page=0, page_size=100),
    }
    for name, case in cases.items():
        answers = [
            post(canonical_bytes(_query(alice, tenant_a, case["tag"], page=case["page"], page_size=case["page_size"])))
            for post in (product, lean)
        ]
        assert answers[0] == answers[1], name
    status, reply = answers[0]
    assert status == 200
    assert httpx.Response(200, content=reply).json()["payload"]["pagination"] == {
        "page": 0,
        "page_size": 100,
        "total": 3,
    }
    # The exact items: ids, payloads, tags and timestamps in (timestamp, arrival) order.
    status, reply = lean(canonical_bytes(_query(alice, tenant_a, "t", page=2, page_size=5)))
    body = httpx.Response(200, content=reply).json()
    assert [(e["payload"], e["encrypted_tags"], e["timestamp"]) for e in body["payload"]["events"]] == [
        ("p10", ["t"], 1010),
        ("p11", ["t"], 1011),
    ]
    assert body["payload"]["pagination"] == {"page": 2, "page_size": 5, "total": 12}
    # bob's query sees bob's archive only.
    status, reply = lean(canonical_bytes(_query(bob, tenant_a, "t")))
    assert [e["payload"] for e in httpx.Response(200, content=reply).json()["payload"]["events"]] == ["b"]


def test_every_query_error_is_the_products_in_the_same_order(lean, product, archive, tenant_a, tenant_b):
    alice, bob = archive
    stranger = Identity.create("stranger", tenant_a.did)  # not registered

    def tampered():
        env = _query(alice, tenant_a, "t")
        env["payload"]["pagination"]["page_size"] = 9
        return env

    def to_another_mediator():
        return _envelope(
            alice,
            {"type": "QUERY_EVENTS", "filter": {"encrypted_tags": ["t"]}, "pagination": {"page": 0, "page_size": 1}},
            recipient_did=tenant_b.did,
            channel="DIRECT_AUTHENTICATED",
        )

    cases = {
        "INVALID_SIGNATURE": (401, tampered),
        "UNAUTHORIZED_COMMAND": (401, lambda: _query(stranger, tenant_a, "t")),
        "TIMESTAMP_OUT_OF_RANGE": (401, lambda: _query(alice, tenant_a, "t", timestamp=1)),
    }
    cases["UNAUTHORIZED_COMMAND (another mediator's DID)"] = (401, to_another_mediator)
    for name, (status, make) in cases.items():
        code = name.split(" ")[0]
        for post in (product, lean):
            env = make()
            assert post(canonical_bytes(env)) == (status, _error(code)), (post, name)
            if code != "TIMESTAMP_OUT_OF_RANGE":
                # Checked after the nonce: the pair is consumed all the same.
                assert post(canonical_bytes(env)) == (401, _error("DUPLICATE_NONCE")), (post, name)
    # One nonce store for queries too.
    env = _query(alice, tenant_a, "t")
    assert product(canonical_bytes(env))[0] == 200
    assert lean(canonical_bytes(env)) == (401, _error("DUPLICATE_NONCE"))
    # What the reference does not serve is refused before the nonce: two tags, a time bound.
    for flt in ({"encrypted_tags": ["t", "u"]}, {"encrypted_tags": ["t"], "after_timestamp": 1}):
        payload = {"type": "QUERY_EVENTS", "filter": flt, "pagination": {"page": 0, "page_size": 1}}
        env = _envelope(alice, payload, recipient_did=tenant_a.did, channel="DIRECT_AUTHENTICATED")
        assert lean(canonical_bytes(env)) == (400, _error("INVALID_COMMAND"))
        assert not Nonce.objects.filter(nonce=env["header"]["nonce"]).exists()


# --- DIDComm v2 forwards (issue 15 §7) --------------------------------------------------------------


@pytest.fixture
def mediated(client, tenant_a):
    """Tenant A's mediator DID and a recipient DID granted mediation there, through the product."""
    didcomm = DidcommPoster(client, HOST_A)
    med = didcomm.mediator_did
    wallet = Agent()
    assert didcomm.send(wallet, wallet.message(CM2 + "mediate-request"))[0] == 200
    rcpt = routed_did(med)
    update = {"updates": [{"recipient_did": rcpt.did, "action": "add"}]}
    assert didcomm.send(wallet, wallet.message(CM2 + "keylist-update", update))[1]["body"]["updated"][0]["result"] == (
        "success"
    )
    return SimpleNamespace(didcomm=didcomm, med=med, rcpt=rcpt)


@pytest.fixture
def forward_to(client, lean_http):
    """POST /didcomm to the product (Django's test client) or the reference: (status, content type, body)."""

    def post(server: str, body: bytes, host: str = HOST_A, content_type: str = ENCRYPTED):
        if server == "product":
            resp = client.post("/didcomm", data=body, content_type=content_type, HTTP_HOST=host)
            return resp.status_code, resp.get("Content-Type"), resp.content
        resp = lean_http.post("/didcomm", content=body, headers={"Host": host, "Content-Type": content_type})
        return resp.status_code, resp.headers.get("content-type"), resp.content

    return post


def _mediator(tenant) -> lean_reference.Mediator:
    """The reference's view of the tenant (its own query and unsealing), read through Django's connection."""
    with connection.cursor() as cur:
        cur.execute(lean_reference._MEDIATOR.replace("$1", "%s"), [tenant.pk])
        return lean_reference.Mediator.from_row(cur.fetchone())


def _queued(rcpt_did: str) -> list[tuple]:
    return [
        (q.tenant_id, q.data, q.size, q.expires_at - q.received_at)
        for q in QueuedMessage.objects.filter(recipient__recipient_did=rcpt_did).order_by("id")
    ]


def test_the_reference_stores_a_forward_with_the_products_statement_and_parameters(client, mediated, tenant_a):
    raw = forward_for(mediated.rcpt, mediated.med)

    def run():
        assert mediated.didcomm.post(raw).status_code == 202

    sql, params = _the_one_statement("didcomm_forward_store", run)
    assert sql == lean_reference.FORWARD_STATEMENT
    med = _mediator(tenant_a)
    assert med.kid == mediated.med + "#key-2" and (med.queue_cap, med.reject) == (1000, False)
    message, next_did, data = lean_reference.unpack_forward(med, raw)
    assert (message.type, next_did) == (FORWARD, mediated.rcpt.did)
    ours = lean_reference.forward_params(
        tenant_id=tenant_a.pk, med=med, lookup=lookup_form(next_did), data=data, message_id=params[4], now=params[6]
    )
    assert ours == params


def test_a_forward_is_stored_and_answered_as_the_product_does(forward_to, mediated, tenant_a):
    inner = json.loads(Agent().pack({"id": "m-1", "type": "https://example.org/hello", "body": {}}, mediated.rcpt.did))
    for server in ("product", "lean"):
        assert forward_to(server, forward_for(mediated.rcpt, mediated.med, inner)) == (202, None, b"")
    text = json.dumps({"json": inner}, separators=(",", ":"))
    assert _queued(mediated.rcpt.did) == [(tenant_a.pk, text, len(text), timedelta(hours=72))] * 2


def _problem(reply: tuple) -> tuple:
    status, content_type, body = reply
    report = json.loads(body)
    assert (report["type"], report["typ"], content_type) == (PROBLEM_REPORT, "application/didcomm-plain+json", JSON)
    return status, report["body"], report.get("pthid")


def test_every_forward_error_is_the_products(forward_to, mediated, tenant_a):
    rcpt, med = mediated.rcpt, mediated.med
    stranger = routed_did(med)  # never added: nobody mediates it
    no_next = Agent().pack(
        {"id": "fwd-1", "type": FORWARD, "body": {}, "attachments": [{"data": {"json": {}}}]}, med, anon=True
    )
    bad_data = Agent().pack(
        {"id": "fwd-2", "type": FORWARD, "body": {"next": rcpt.did}, "attachments": [{"data": {"links": []}}]},
        med,
        anon=True,
    )
    ping = Agent().pack({"id": "ping-1", "type": TRUST_PING + "ping", "body": {}}, med, anon=True)
    cases = {
        "unknown recipient": (forward_for(stranger, med), {}, (400, Code.NOT_FOUND)),
        "next not a DID": (forward_for(rcpt, med, next_="nobody"), {}, (400, Code.NOT_FOUND)),
        "for another mediator": (forward_for(rcpt, Agent().did), {}, (400, "e.p.trust.crypto.unknown-key")),
        "not JSON": (b"not json", {}, (400, Code.MALFORMED)),
        "not encrypted": (json.dumps({"id": "p", "type": FORWARD}).encode(), {}, (400, Code.UNAUTHENTICATED)),
        "no body.next": (no_next, {}, (400, Code.BAD_BODY)),
        "attachment neither json nor base64": (bad_data, {}, (400, Code.BAD_BODY)),
        "wrong media type": (forward_for(rcpt, med), {"content_type": "text/plain"}, (415, Code.UNSUPPORTED_MEDIA)),
        "unknown host": (forward_for(rcpt, med), {"host": "nobody.test"}, (404, Code.UNKNOWN_MEDIATOR)),
    }
    for name, (raw, kw, (status, code)) in cases.items():
        product, lean = _problem(forward_to("product", raw, **kw)), _problem(forward_to("lean", raw, **kw))
        assert product == lean, name
        assert (product[0], product[1]["code"]) == (status, code), name
    # A message the product serves and the reference does not is refused by it, never stored.
    assert _problem(forward_to("lean", ping))[:2] == (
        400,
        {"code": Code.UNSUPPORTED_TYPE, "comment": "the lean reference serves forwards only"},
    )
    assert _queued(rcpt.did) == [] and _queued(stranger.did) == []
    assert _problem(forward_to("lean", forward_for(stranger, med)))[2] is not None  # pthid: the forward's id

    # The `reject` overflow policy: both refuse the forward past the cap with 507, and store nothing.
    DidcommPolicy.objects.filter(tenant=tenant_a).update(queue_cap=1, overflow=DidcommPolicy.Overflow.REJECT)
    services.accepting_cache_clear()
    assert forward_to("product", forward_for(rcpt, med))[0] == 202
    for server in ("product", "lean"):
        assert _problem(forward_to(server, forward_for(rcpt, med)))[:2] == (
            507,
            {"code": Code.STORAGE_FULL, "comment": "recipient queue is full"},
        )
    assert len(_queued(rcpt.did)) == 1
