"""The tenant's page cap bounds page_size for every list command (docs/protocol-readings.md §5)."""

from tests.support.registration import register


def test_a_page_size_over_the_tenant_cap_is_invalid_and_the_cap_itself_is_accepted(post_a, tenant_a, alice):
    register(post_a, alice, tenant_a)
    tenant_a.max_page_size = 20
    tenant_a.save(update_fields=["max_page_size"])
    ok = post_a.command(
        alice, {"type": "QUERY_EVENTS", "pagination": {"page": 0, "page_size": 20}}, recipient_did=tenant_a.did
    )
    too_big = post_a.command(
        alice, {"type": "QUERY_EVENTS", "pagination": {"page": 0, "page_size": 21}}, recipient_did=tenant_a.did
    )
    assert ok == (
        200,
        {"type": "SUCCESS", "payload": {"events": [], "pagination": {"page": 0, "page_size": 20, "total": 0}}},
    )
    assert too_big == (400, {"type": "ERROR", "code": "INVALID_COMMAND"})
