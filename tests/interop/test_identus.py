"""The Identus SDK 7.0.0 (npm) offline: it parses a tenant's OOB 2.0 invitation (both forms) and
resolves the mediator DID to our services in the order it uses them (first http for requests, first
ws for live mode). The run against a server is test_identus_e2e.py."""

from __future__ import annotations

import pytest

from apps.didcomm.invitation import invitation_for
from tests.interop import identus


@pytest.fixture(scope="module", autouse=True)
def _installed():
    assert identus.installed_version() == identus.VERSION, "run scripts/ensure_extra_identus.sh"


@pytest.mark.parametrize("form", ["json", "url"])
def test_the_sdk_reads_our_invitation_and_finds_http_first_then_ws(tenant_a, form):
    message, url = invitation_for(tenant=tenant_a)
    out = identus.selftest(message if form == "json" else url)
    assert (out["mediator_did"], out["invitation_id"]) == (message["from"], message["id"])
    assert out["mediator_services"] == [
        {"type": ["DIDCommMessaging"], "uri": "http://a.mediator.test/didcomm"},
        {"type": ["DIDCommMessaging"], "uri": "ws://a.mediator.test/didcomm/ws"},
    ]
    assert out["peer_did"].startswith("did:peer:2.Ez6LS") and out["peer_did"].endswith(".SW10")
