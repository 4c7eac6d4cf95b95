"""What a live socket loads when live mode starts or on LIVE_REFRESH (live.live_start): a
rotation that commits while it loads never makes the socket push the rotation's announcement
from the identity the rotation retired."""

from __future__ import annotations

import pytest

from apps.didcomm import identity, live
from apps.tenants.services import Actor
from tests.support.didcomm_agent import CM2

pytestmark = pytest.mark.django_db


def test_a_rotation_committing_while_live_mode_loads_is_not_pushed_from_the_retired_did(
    didcomm_a, tenant_a, wallet, monkeypatch
):
    old = didcomm_a.mediator_did
    _, answer, _ = didcomm_a.send(wallet, wallet.message(CM2 + "mediate-request"))
    assert answer["type"] == CM2 + "mediate-grant"
    real = identity.identity_current
    rotated = []

    def read_then_another_process_rotates(*, tenant):
        current = real(tenant=tenant)
        if not rotated:
            rotated.append(None)
            rotated[0] = identity.identity_rotate(tenant=tenant, actor=Actor(None, "cli"))
        return current

    monkeypatch.setattr(live, "identity_current", read_then_another_process_rotates)
    target, rows = live.live_start(
        tenant=tenant_a, protocol="v2", client_did=wallet.did, client_kid=wallet.kid, backlog=True
    )
    new = rotated[0].did
    assert new != old
    # The identity was read before the rotation committed, the backlog before that: the
    # announcement is not in it (it goes out with the wake that follows the LIVE_REFRESH).
    assert (target.identity.did, rows) == (old, [])
    monkeypatch.undo()
    # The LIVE_REFRESH's reload: the new identity, and the announcement packed from it.
    target, rows = live.live_start(
        tenant=tenant_a, protocol="v2", client_did=wallet.did, client_kid=wallet.kid, backlog=True
    )
    [(_, data, _)] = rows
    announcement, announced_by = wallet.unpack(data["json"])
    assert (target.identity.did, announced_by.sender_kid, announcement["body"]) == (
        new,
        new + "#key-2",
        {"routing_did": new, "previous_routing_did": old},
    )
