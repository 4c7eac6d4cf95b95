"""What Credo 0.5.19 with @credo-ts/push-notifications 0.7.1 sent to the mediator in
tests/interop/test_credo_push_e2e.py (recorded with MEDIATOR_RECORD_FIXTURES=1), replayed byte for byte
through POST /didcomm without starting the agent: the RFC 0734 messages open with the recorded key and
have the RFC's fields, and the conversation reaches the live run's state (a granted connection whose
FCM device was set, read back and removed; the forward to the sleeping agent still queued)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from apps.didcomm.models import Connection, Mediation, QueuedMessage
from apps.push.models import Device

from .recorded import open_recorded
from .test_recorded_peers import replay

FIXTURE = json.loads((Path(__file__).resolve().parent / "fixtures" / "credo_0.5.19_push.json").read_text())
FCM = "push-notifications-fcm/1.0/"


def test_credos_push_messages_have_the_rfc_fields():
    opened = [o for o in open_recorded(FIXTURE) if o.type.startswith(FCM)]
    sets = [o.message for o in opened if o.type == FCM + "set-device-info"]
    assert [set(s) - {"@type", "@id", "~transport"} for s in sets] == [{"device_token", "device_platform"}] * 2
    assert sets[-1]["device_token"] is None and sets[-1]["device_platform"] is None
    assert all(o.sender_verkey for o in opened)  # authcrypt, from the connection's key


@pytest.mark.django_db
def test_the_recorded_conversation_replays_to_the_live_runs_state(client):
    types = [o.type for o in open_recorded(FIXTURE)]
    statuses = replay(FIXTURE)
    assert len(statuses) == len(types) and set(statuses) <= {200, 404}
    # the first get-device-info (before any set) is the RFC's not-registered problem, a 404
    assert [s for s, t in zip(statuses, types, strict=True) if t == FCM + "get-device-info"] == [404, 200]
    [conn] = Connection.objects.all()
    assert Mediation.objects.get(connection=conn).state == "granted"
    assert not Device.objects.exists()  # set, then removed with both fields null
    assert QueuedMessage.objects.count() == 1
