"""The lean reference server (bench/lean_reference.py) does what the product does for TWO_WAY_PRIVATE,
so that the benchmark comparing them (bench/lean_compare.py) compares the same work.

The reference runs as a real uvicorn process on a free port against the test database; the product
answers through Django's test client on the same database. Both must run the same statement with
the same parameters, give the same status and reply bytes for the same kind of envelope, store the
same row, and share the nonce store (a pair one of them consumed is DUPLICATE_NONCE at the other).
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
import uuid

import httpx
import pytest
from django.db import connection

from apps.decentrl.models import Nonce
from apps.messaging.models import PendingEvent, PendingQueueDepth
from apps.tenants.models import Tenant
from apps.wire.canonical import canonical_bytes
from apps.wire.client import Identity
from apps.wire.crypto import sign_json_object
from apps.wire.envelope import parse_command
from bench import lean_reference
from tests.conftest import HOST_A, Poster
from tests.support import servers
from tests.support.registration import contract_both_ways, register
from tests.support.servers import ROOT, free_port, server_env

pytestmark = pytest.mark.django_db(transaction=True)

TWO_WAY = "TWO_WAY_PRIVATE"


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
def lean(tmp_path, tenant_a):
    """The reference, one process, resolving the tenant on every request (tests change tenants)."""
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

        def post(body: bytes, host: str = HOST_A) -> tuple[int, bytes]:
            resp = http.post("/", content=body, headers={"Host": host, "Content-Type": "application/json"})
            assert resp.headers["content-type"] == "application/json"
            return resp.status_code, resp.content

        yield post
    proc.terminate()
    proc.wait(timeout=10)


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


def _the_products_statement(product, env: dict) -> tuple[str, list]:
    """The one statement the product ran for `env` (its claim's), with psycopg's %s numbered $1…,
    and its parameters; the command must succeed."""
    captured = []

    def capture(execute, sql, params, many, context):
        if "protocol_nonce" in sql:
            captured.append((sql, list(params)))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(capture):
        status, _ = product(canonical_bytes(env))
    assert status == 200
    assert len(captured) == 1
    sql, params = captured[0]
    numbered = iter(range(1, 100))
    return re.sub("%s", lambda _m: f"${next(numbered)}", sql), params


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
