"""The async entry probe (bench/async_entry_probe.py) runs the product's TWO_WAY_PRIVATE path: the
product's statement (storage.deliver_statement, not a copy), the same replies in the same error
order, the same stored row and nonce, the same headers; so that lean_compare --probe measures the
product's work on an event loop.

The probe runs as a real Granian process (RSGI, one worker) on the test database; the product
answers through Django's test client."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid

import httpx
import pytest
from django.db import connection

from apps.decentrl import storage
from apps.decentrl.models import Nonce
from apps.messaging.models import PendingEvent
from apps.tenants.models import Tenant
from apps.wire.canonical import canonical_bytes
from apps.wire.client import Identity
from apps.wire.crypto import sign_json_object
from bench import async_entry_probe
from tests.conftest import HOST_A, Poster
from tests.support.registration import contract_both_ways, register
from tests.support.servers import ROOT, free_port, server_env

pytestmark = pytest.mark.django_db(transaction=True)


def _envelope(who: Identity, payload, *, recipient_did: str, **header) -> dict:
    h = {
        "channel": "TWO_WAY_PRIVATE",
        "sender_did": who.did,
        "sender_signing_key_id": who.key_id,
        "recipient_did": recipient_did,
        "timestamp": int(time.time() * 1000),
        "nonce": str(uuid.uuid4()),
        **header,
    }
    signable = {"header": h, "payload": payload}
    return {**signable, "signature": sign_json_object(signable, who.signing)}


def _error(code: str) -> bytes:
    return canonical_bytes({"type": "ERROR", "code": code})


def test_the_probe_imports_the_products_statement_and_row_reader():
    assert async_entry_probe.deliver_statement is storage.deliver_statement
    assert async_entry_probe.delivered is storage.delivered
    assert async_entry_probe.CLAIM is storage.CLAIM


@pytest.fixture
def probe(tmp_path, tenant_a):
    port = free_port()
    log = tmp_path / "probe.log"
    env = server_env({"MEDIATOR_TENANT_CACHE_SECONDS": "0", "MEDIATOR_CORS_ORIGINS": "https://app.example"})
    cmd = [sys.executable, "-m", "bench.async_entry_probe", "--port", str(port), "--workers", "1", "--pool-size", "2"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT)
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

        def post(body: bytes, host: str = HOST_A, **headers) -> tuple[int, bytes]:
            resp = http.post("/", content=body, headers={"Host": host, "Content-Type": "application/json", **headers})
            post.last = resp
            return resp.status_code, resp.content

        yield post
    proc.terminate()
    proc.wait(timeout=10)
    assert "Traceback" not in log.read_text(), log.read_text()


@pytest.fixture
def product(client):
    def post(body: bytes, host: str = HOST_A) -> tuple[int, bytes]:
        resp = client.post("/", data=body, content_type="application/json", HTTP_HOST=host)
        return resp.status_code, resp.content

    return post


@pytest.fixture
def pair(tenant_a, alice, bob):
    poster = Poster(HOST_A)
    register(poster, alice, tenant_a)
    register(poster, bob, tenant_a)
    contract_both_ways(poster, alice, bob, tenant_a)
    return alice, bob


def test_a_two_way_private_is_stored_and_answered_with_the_products_headers(probe, product, pair, tenant_a):
    alice, bob = pair
    env = _envelope(alice, "from the probe ✓", recipient_did=bob.did)
    status, reply = probe(canonical_bytes(env), Origin="https://app.example")
    assert status == 200
    event_id = httpx.Response(200, content=reply).json()["pendingEventId"]
    assert reply == canonical_bytes({"type": "SUCCESS", "pendingEventId": event_id})
    e = PendingEvent.objects.get(public_id=event_id)
    assert (e.tenant_id, e.recipient_did, e.sender_did, e.payload, e.payload_bytes) == (
        tenant_a.pk, bob.did, alice.did, "from the probe ✓", 18,
    )  # fmt: skip
    nonce = Nonce.objects.get(sender_did=alice.did, nonce=env["header"]["nonce"])
    assert nonce.expires_at == env["header"]["timestamp"] + 300_000
    headers = probe.last.headers
    assert headers["access-control-allow-origin"] == "https://app.example"
    assert headers["x-frame-options"] == "DENY"
    assert headers["x-content-type-options"] == "nosniff"
    assert headers["content-length"] == str(len(reply))
    # One nonce store with the product.
    assert probe(canonical_bytes(env)) == product(canonical_bytes(env)) == (401, _error("DUPLICATE_NONCE"))


def test_every_error_is_the_products_in_the_same_order(probe, product, pair, tenant_a):
    alice, bob = pair
    stranger = Identity.create("stranger", tenant_a.did)
    carl = Identity.create("carl", tenant_a.did)
    register(Poster(HOST_A), carl, tenant_a)

    def tampered():
        env = _envelope(alice, "x", recipient_did=bob.did)
        env["payload"] = "y"
        return env

    cases = {
        "INVALID_SIGNATURE": tampered,
        "SENDER_SIGNING_KEY_NOT_FOUND": lambda: _envelope(alice, "x", recipient_did=bob.did, sender_signing_key_id="#k"),
        "RECIPIENT_NOT_FOUND": lambda: _envelope(alice, "x", recipient_did="did:decentrl:broken"),
        "RECIPIENT_NOT_REGISTERED": lambda: _envelope(alice, "x", recipient_did=stranger.did),
        "COMMUNICATION_CONTRACT_NOT_FOUND": lambda: _envelope(alice, "x", recipient_did=carl.did),
        "TIMESTAMP_OUT_OF_RANGE": lambda: _envelope(alice, "x", recipient_did=bob.did, timestamp=1),
        "INVALID_COMMAND": lambda: {"header": {}, "payload": "x", "signature": "s"},
    }  # fmt: skip
    status = {"INVALID_SIGNATURE": 401, "TIMESTAMP_OUT_OF_RANGE": 401, "INVALID_COMMAND": 400}
    before = PendingEvent.objects.count()
    for code, make in cases.items():
        for post in (product, probe):
            env = make()
            assert post(canonical_bytes(env)) == (status.get(code, 404), _error(code)), (post, code)
            if code not in ("TIMESTAMP_OUT_OF_RANGE", "INVALID_COMMAND"):
                assert post(canonical_bytes(env)) == (401, _error("DUPLICATE_NONCE")), (post, code)
    Tenant.objects.filter(pk=tenant_a.pk).update(pending_queue_cap=1)
    assert product(canonical_bytes(_envelope(alice, "fills the queue", recipient_did=bob.did)))[0] == 200
    for post in (product, probe):
        assert post(canonical_bytes(_envelope(alice, "x", recipient_did=bob.did))) == (
            507, _error("RECIPIENT_QUEUE_FULL"),
        )  # fmt: skip
        assert post(b"{}", host="unknown.example") == (404, _error("UNKNOWN_MEDIATOR"))
    assert PendingEvent.objects.count() == before + 1


def test_a_failed_statement_is_503_with_the_nonce_consumed(probe, pair):
    alice, bob = pair
    table = PendingEvent._meta.db_table
    with connection.cursor() as cur:
        cur.execute(f"ALTER TABLE {table} ADD CONSTRAINT test_probe_refuse CHECK (payload <> 'refused')")
    try:
        env = _envelope(alice, "refused", recipient_did=bob.did)
        assert probe(canonical_bytes(env)) == (503, _error("MEDIATOR_UNAVAILABLE"))
        assert Nonce.objects.filter(sender_did=alice.did, nonce=env["header"]["nonce"]).exists()
        assert probe(canonical_bytes(env)) == (401, _error("DUPLICATE_NONCE"))
    finally:
        with connection.cursor() as cur:
            cur.execute(f"ALTER TABLE {table} DROP CONSTRAINT test_probe_refuse")
    assert not PendingEvent.objects.filter(payload="refused").exists()
