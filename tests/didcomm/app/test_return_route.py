"""An answer with no way back: a message without `return_route` is handled and gets 202 and no body
(docs/didcomm.md), as the Identus SDK's keylist-update (recorded in tests/interop/fixtures/identus/)."""

from __future__ import annotations

import pytest

from apps.didcomm.models import RecipientKey
from tests.support.didcomm_agent import CM2, routed_did


@pytest.mark.parametrize("return_route", [None, "none"])
def test_a_keylist_update_without_a_return_route_is_applied_and_answered_202_with_no_body(
    didcomm_a, wallet, tenant_a, return_route
):
    didcomm_a.send(wallet, wallet.message(CM2 + "mediate-request"))
    rcpt = routed_did(didcomm_a.mediator_did)
    update = {"updates": [{"recipient_did": rcpt.did, "action": "add"}]}
    status, answer, resp = didcomm_a.send(
        wallet, wallet.message(CM2 + "keylist-update", update, return_route=return_route)
    )
    assert (status, answer, resp.content, resp.has_header("Content-Type")) == (202, None, b"", False)
    assert RecipientKey.objects.get(tenant=tenant_a, recipient_did=rcpt.did).mediation.client_did == wallet.did
