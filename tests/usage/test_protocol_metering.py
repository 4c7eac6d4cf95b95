"""Every protocol is metered as itself through its real request path: a Decentrl command on `POST /`
as `decentrl`, a DIDComm v2 message on `POST /didcomm` as `didcomm-v2`, a DIDComm v1 (RFC 0019)
message on the same endpoint as `didcomm-v1`."""

from __future__ import annotations

import pytest

from apps.usage import metering
from apps.usage.models import CommandMeter
from tests.conftest import HOST_A
from tests.didcomm.app.test_v1 import V1Door
from tests.support.didcomm_agent import CM2, Agent
from tests.support.didcomm_agent_v1 import CM1, AgentV1
from tests.support.didcomm_client import DidcommPoster

pytestmark = pytest.mark.django_db(transaction=True)


def test_each_protocol_is_metered_as_itself(client, tenant_a, post_a, alice):
    metering.flush()
    CommandMeter.objects.all().delete()

    status, _ = post_a.command(alice, {"type": "QUERY_EVENTS"}, recipient_did=tenant_a.did)
    assert status >= 400  # alice is not registered: refused, and metered all the same

    v2 = DidcommPoster(HOST_A)
    wallet = Agent()
    assert v2.send(wallet, wallet.message(CM2 + "mediate-request"))[0] == 200

    v1 = V1Door(HOST_A)
    agent = AgentV1()
    v1.connect(agent)
    status, grant, _ = v1.send(agent, agent.message(CM1 + "mediate-request"))
    assert status == 200 and grant["@type"] == CM1 + "mediate-grant", grant
    metering.flush()

    rows = CommandMeter.objects.filter(tenant=tenant_a).order_by("id")
    got = {(r.channel, r.protocol, r.command_type) for r in rows}
    by_protocol = {}
    for r in rows:
        by_protocol.setdefault(r.protocol, set()).add(r.command_type)
    assert set(by_protocol) == {"decentrl", "didcomm-v2", "didcomm-v1"}, got
    assert by_protocol["decentrl"] == {"QUERY_EVENTS"}
    assert "coordinate-mediation/2.0/mediate-request" in by_protocol["didcomm-v2"]
    assert any("coordinate-mediation/1.0/mediate-request" in t for t in by_protocol["didcomm-v1"]), by_protocol
    # The protocol follows the channel, one to one.
    assert {(r.channel, r.protocol) for r in rows if r.protocol != "decentrl"} == {
        ("didcomm-v2", "didcomm-v2"),
        ("didcomm-v1", "didcomm-v1"),
    }
