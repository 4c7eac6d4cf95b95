"""A suspended tenant answers MEDIATOR_UNAVAILABLE (503) and its /health 503; others are unaffected."""

from __future__ import annotations

from apps.tenants.services import tenant_resume, tenant_suspend
from tests.conftest import HOST_A, HOST_B
from tests.support.registration import register

UNAVAILABLE = (503, {"type": "ERROR", "code": "MEDIATOR_UNAVAILABLE"})


def test_a_suspended_tenant_is_unavailable_until_resumed(client, post_a, tenant_a, tenant_b, alice, actor):
    register(post_a, alice, tenant_a)
    tenant_suspend(tenant=tenant_a, actor=actor)

    assert post_a.command(alice, {"type": "QUERY_PENDING_EVENTS"}, recipient_did=tenant_a.did) == UNAVAILABLE
    resp = client.get("/health", HTTP_HOST=HOST_A)
    assert (resp.status_code, resp.json()) == (503, {"status": "error", "detail": "mediator suspended"})
    resp = client.get("/", HTTP_HOST=HOST_A)
    assert (resp.status_code, resp.json()) == UNAVAILABLE
    # The other tenant is untouched.
    resp = client.get("/health", HTTP_HOST=HOST_B)
    assert (resp.status_code, resp.json()) == (200, {"status": "ok"})

    tenant_resume(tenant=tenant_a, actor=actor)
    status, body = post_a.command(alice, {"type": "QUERY_PENDING_EVENTS"}, recipient_did=tenant_a.did)
    assert (status, body["type"]) == (200, "SUCCESS")  # her registration survived the suspension
    assert client.get("/health", HTTP_HOST=HOST_A).status_code == 200


def test_a_suspended_tenant_refuses_registration_with_mediator_unavailable(post_a, tenant_a, alice, actor):
    tenant_suspend(tenant=tenant_a, actor=actor)
    status, body = post_a.command(
        alice,
        {
            "type": "REQUEST_COMMUNICATION_CONTRACT",
            "encrypted_contract_request": "AAAA",
            "requestor_ephemeral_public_key": "A" * 43,
        },
        recipient_did=tenant_a.did,
    )
    assert (status, body) == UNAVAILABLE
