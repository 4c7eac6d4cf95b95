"""The HTTP surface of DCTRL-0004 §3: the DID document (§3.2), /health (§3.3) including a real
server whose database is unreachable, and CORS (§3.4)."""

from __future__ import annotations

import json

import httpx
import pytest
from django.core.exceptions import ImproperlyConfigured

from apps.decentrl.middleware import haproxy_cors, nginx_cors_maps
from tests.conftest import HOST_A
from tests.support.commands import envelope, err
from tests.support.servers import start_daphne

B58 = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"


def base58btc(data: bytes) -> str:
    """An independent base58btc encoder, so the document is checked against more than our own code."""
    n = int.from_bytes(data, "big")
    out = ""
    while n:
        n, r = divmod(n, 58)
        out = B58[r] + out
    return "1" * (len(data) - len(data.lstrip(b"\0"))) + out


def expected_document(tenant) -> dict:
    did = tenant.did
    return {
        "@context": ["https://www.w3.org/ns/did/v1", "https://w3id.org/security/suites/jws-2020/v1"],
        "id": did,
        "controller": did,
        "verificationMethod": [
            {
                "id": f"{did}#signing",
                "type": "Ed25519VerificationKey2020",
                "controller": did,
                "publicKeyMultibase": "z" + base58btc(b"\xed\x01" + bytes(tenant.signing_public)),
            }
        ],
        "keyAgreement": [
            {
                "id": f"{did}#prekey",
                "type": "X25519KeyAgreementKey2020",
                "controller": did,
                "publicKeyMultibase": "z" + base58btc(b"\xec\x01" + bytes(tenant.prekey_public)),
            }
        ],
        "authentication": [f"{did}#signing"],
        "service": [
            {"id": "#mediator-service", "type": "DecentrlMediator", "serviceEndpoint": {"uri": tenant.public_url}}
        ],
    }


@pytest.mark.parametrize("path", ["/", "/.well-known/did.json"])
def test_the_did_document_is_exactly_section_3_2(client, tenant_a, path):
    resp = client.get(path, HTTP_HOST=HOST_A)
    assert resp.status_code == 200
    assert resp["Content-Type"] == "application/json"
    assert json.loads(resp.content) == expected_document(tenant_a)
    assert tenant_a.did == "did:web:a.mediator.test"


def test_a_did_web_with_a_port_encodes_it(client, db):
    from apps.tenants.services import tenant_create

    tenant = tenant_create(slug="ported", domain="localhost:8123")
    assert tenant.did == "did:web:localhost%3A8123"
    resp = client.get("/", HTTP_HOST="localhost:8123")
    assert json.loads(resp.content) == expected_document(tenant)


def test_health_is_ok(client, tenant_a):
    resp = client.get("/health", HTTP_HOST=HOST_A)
    assert (resp.status_code, json.loads(resp.content)) == (200, {"status": "ok"})
    assert resp["Content-Type"] == "application/json"


def test_health_answers_for_an_unknown_host_too(client, db, settings):
    settings.MEDIATOR_DEFAULT_TENANT = ""
    resp = client.get("/health", HTTP_HOST="nobody.example")
    assert (resp.status_code, json.loads(resp.content)) == (200, {"status": "ok"})


CORS = {
    "Access-Control-Allow-Origin": "*",
    "Access-Control-Allow-Methods": "GET, POST, OPTIONS",
    "Access-Control-Allow-Headers": "Content-Type",
}


def assert_cors(resp) -> None:
    for name, value in CORS.items():
        assert resp[name] == value, name


@pytest.mark.parametrize("path", ["/", "/.well-known/did.json", "/health"])
def test_cors_preflight(client, tenant_a, path):
    resp = client.options(
        path,
        HTTP_HOST=HOST_A,
        HTTP_ORIGIN="https://app.example",
        HTTP_ACCESS_CONTROL_REQUEST_METHOD="POST",
        HTTP_ACCESS_CONTROL_REQUEST_HEADERS="content-type",
    )
    assert resp.status_code == 204
    assert resp.content == b""
    assert_cors(resp)


def test_cors_headers_on_get_and_post(client, post_a, tenant_a, registered, alice):
    assert_cors(client.get("/", HTTP_HOST=HOST_A, HTTP_ORIGIN="https://app.example"))
    assert_cors(client.get("/health", HTTP_HOST=HOST_A))
    env = envelope(alice, {"type": "QUERY_EVENTS"}, recipient_did=tenant_a.did)
    resp = post_a.post("/", json.dumps(env), HTTP_ORIGIN="https://x.example")
    assert resp.status_code == 200
    assert_cors(resp)
    # error replies carry them too, so that a browser can read the code
    resp = post_a.post("/", b"{", HTTP_ORIGIN="https://x.example")
    assert (resp.status_code, resp.json()) == (400, err("INVALID_COMMAND"))
    assert_cors(resp)


def test_cors_can_be_restricted_to_configured_origins(client, tenant_a, settings):
    settings.MEDIATOR_CORS_ORIGINS = ["https://app.example"]
    resp = client.get("/", HTTP_HOST=HOST_A, HTTP_ORIGIN="https://app.example")
    assert resp["Access-Control-Allow-Origin"] == "https://app.example"
    resp = client.get("/", HTTP_HOST=HOST_A, HTTP_ORIGIN="https://evil.example")
    assert "Access-Control-Allow-Origin" not in resp


def test_the_admin_gets_no_cors_headers(client, db):
    resp = client.get("/admin/login/", HTTP_HOST=HOST_A, HTTP_ORIGIN="https://app.example")
    assert "Access-Control-Allow-Origin" not in resp


@pytest.mark.e2e
def test_a_real_server_with_an_unreachable_database_answers_503_never_500(tmp_path, db):
    """Daphne pointed at a closed port: /health 503 with its shape, POST / MEDIATOR_UNAVAILABLE."""
    server = start_daphne(tmp_path, env={"TEST_DATABASE_URL": "postgresql://postgres@127.0.0.1:1/x"})
    try:
        with httpx.Client(timeout=10, headers={"Host": HOST_A}) as http:
            resp = http.get(server.url + "/health")
            assert resp.status_code == 503
            body = resp.json()
            assert set(body) == {"status", "detail"}
            assert body["status"] == "error"
            assert isinstance(body["detail"], str) and body["detail"]
            assert resp.headers["content-type"] == "application/json"

            resp = http.post(
                server.url + "/",
                content=b'{"header":{},"payload":{},"signature":""}',
                headers={"Content-Type": "application/json"},
            )
            assert (resp.status_code, resp.json()) == (503, err("MEDIATOR_UNAVAILABLE"))
            resp = http.get(server.url + "/")
            assert (resp.status_code, resp.json()) == (503, err("MEDIATOR_UNAVAILABLE"))
            resp = http.options(server.url + "/")
            assert resp.status_code == 204
        assert "Traceback" not in server.log()
    finally:
        server.stop()


@pytest.mark.e2e
def test_a_real_server_refuses_oversized_bodies_with_413(tmp_path, transactional_db):
    """Over a real socket: a declared length over 6 MiB and a chunked body over it are both 413."""
    from apps.tenants.services import tenant_create

    tenant_create(slug="big", domain="big.mediator.test")
    server = start_daphne(tmp_path)
    big = b"x" * (6 * 1024 * 1024 + 1)

    def chunks():
        for i in range(0, len(big), 256 * 1024):
            yield big[i : i + 256 * 1024]

    try:
        with httpx.Client(timeout=30, headers={"Host": "big.mediator.test"}) as http:
            resp = http.post(server.url + "/", content=big, headers={"Content-Type": "application/json"})
            assert (resp.status_code, resp.json()) == (413, err("PAYLOAD_TOO_LARGE"))
            resp = http.post(server.url + "/", content=chunks(), headers={"Content-Type": "application/json"})
            assert "content-length" not in {k.lower() for k in resp.request.headers}
            assert (resp.status_code, resp.json()) == (413, err("PAYLOAD_TOO_LARGE"))
            resp = http.post(server.url + "/", content=b"{}", headers={"Content-Type": "application/json"})
            assert (resp.status_code, resp.json()) == (400, err("INVALID_COMMAND"))
        assert "Traceback" not in server.log()
    finally:
        server.stop()


def test_an_origin_that_would_break_a_proxys_configuration_is_refused_at_render():
    """MEDIATOR_CORS_ORIGINS is written into nginx's configuration (nginx_cors_maps) and the
    cluster balancer's (haproxy_cors): anything but scheme://host[:port] (a quote, a space, a
    semicolon, a `#` that starts an HAProxy comment) stops the render with a clear error."""
    with pytest.raises(ImproperlyConfigured, match="is not an origin"):
        nginx_cors_maps(['https://a.example"; return 200 "x'])
    with pytest.raises(ImproperlyConfigured, match="is not an origin"):
        haproxy_cors(["https://a.example #", "https://b.example"])
    assert haproxy_cors(["https://a.example"])[0][0] == "acl cors_allowed req.fhdr(origin) -m str https://a.example"
    assert nginx_cors_maps(["https://a.example"]).startswith(
        'map $http_origin $cors_origin { default ""; "https://a.example" $http_origin; }'
    )
