"""A real push-registration client: Credo 0.5.19 with @credo-ts/push-notifications 0.7.1 (npm; the package
needs @credo-ts/core 0.5.x, beside the 0.6.3 of tests/interop/test_credo_e2e.py) against a real mediator
(Daphne on the Redis channel layer, a Celery worker taking the wake tasks) and FCM's loopback stand-in
(tests/support/push_standins.py: the OAuth JWT verified against the service account's key, the message
against FCM's schema).

The agent gets mediation over DIDComm v1 (DID Exchange, RFC 0211), asks Discover Features for
push-notifications-fcm/1.0 first (as bc-wallet does), sets its FCM device info, reads it back; then it
sleeps (its pickup stopped: no socket, no request) and a forward to it produces exactly one push at the
provider; it removes its device info at the end. What Credo sent is recorded beside the test
(fixtures/credo_0.5.19_push.json, with MEDIATOR_RECORD_FIXTURES=1; replayed by test_recorded_push.py) and
checked here: its set-device-info carries `device_token` and `device_platform` (both null to remove) and
asks `return_route: all`, on which our empty answer is what Credo expects (docs/push.md, "Registration")."""

from __future__ import annotations

import json
import time

import pytest

from apps.didcomm.models import Mediation
from apps.push.models import Device, PushProvider
from tests.interop import credo
from tests.support import push_standins
from tests.support.didcomm_agent_v1 import forward_to

from .recorded import open_recorded
from .v1_server import V1Mediator

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

fcm = push_standins.fcm  # the fixture: FCM's stand-in

FCM = "https://didcomm.org/push-notifications-fcm/1.0"
TOKEN = "credo-e2e:APA91bF" + "k" * 140


@pytest.fixture
def mediator(transactional_db, tmp_path, fcm):
    credo.ensure_installed()
    m = V1Mediator(tmp_path, redis=True, env={"PUSH_FCM_URL": fcm.url, "PUSH_WAKE_INTERVAL_S": "0"})
    provider = PushProvider(tenant=m.tenant, kind=PushProvider.Kind.FCM)
    provider.seal(fcm.account().info)
    provider.save()
    yield m
    m.close()


@pytest.fixture
def agent(mediator, tmp_path):
    a = credo.start_push_agent(tmp_path, "phone", mediator_invitation=mediator.invitation_url)
    yield a
    a.stop()


def wait_for(check, what: str, timeout: float = 20):
    deadline = time.monotonic() + timeout
    while (value := check()) is None or value is False:
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not within {timeout} s")
        time.sleep(0.05)
    return value


def test_credo_registers_its_fcm_token_is_woken_once_while_asleep_and_removes_it(mediator, agent, fcm):
    assert agent.call("mediation")["state"] == "granted"
    assert agent.call("discover", match=FCM)["features"] == [FCM]
    [mediation] = Mediation.objects.filter(tenant=mediator.tenant, state="granted")
    subject = "didcomm:" + mediation.client_hash

    assert agent.call("get-device-info")["code"] == "not-registered-for-push-notifications"
    agent.call("set-device-info", deviceToken=TOKEN, devicePlatform="android")
    device = wait_for(lambda: Device.objects.filter(tenant=mediator.tenant).first(), "the device row")
    assert (device.subject, device.service, device.token, device.platform) == (subject, "fcm", TOKEN, "android")
    info = agent.call("get-device-info")
    assert (info["type"], info["deviceToken"], info["devicePlatform"]) == (FCM + "/device-info", TOKEN, "android")

    # asleep: no pickup, no socket; a key of its keylist gets a forward
    keys = agent.call("create-invitation")
    agent.call("sleep")
    before = len(fcm.messages)
    inner = {"protected": "e30", "iv": "aXY", "ciphertext": "Y3Q", "tag": "dGFn"}  # opaque to us
    resp = mediator.http.post(
        "/didcomm",
        content=forward_to(keys["recipientKeys"][0], keys["routingKeys"][0], inner),
        headers={"Content-Type": "application/didcomm-envelope-enc"},
    )
    assert resp.status_code == 200, resp.text
    wait_for(lambda: len(fcm.messages) > before or None, "a push at FCM", timeout=30)
    push = fcm.messages[before]
    assert push["token"] == TOKEN
    assert TOKEN not in json.dumps(push.get("data", {}))  # the push says nothing of the queue

    agent.call("set-device-info", deviceToken=None, devicePlatform=None)
    wait_for(lambda: not Device.objects.filter(tenant=mediator.tenant).exists(), "the device removed")
    assert len(fcm.messages) - before == 1  # exactly one push for the sleeping agent

    opened = open_recorded(mediator.record("credo_0.5.19_push.json", agent="Credo 0.5.19 + push-notifications 0.7.1"))
    sets = [o.message for o in opened if o.type == "push-notifications-fcm/1.0/set-device-info"]
    assert [(s["device_token"], s["device_platform"]) for s in sets] == [(TOKEN, "android"), (None, None)]
    pushes = [o for o in opened if o.type.startswith("push-notifications-fcm/1.0/")]
    assert [o.type.rsplit("/", 1)[1] for o in pushes] == [
        "get-device-info",
        "set-device-info",
        "get-device-info",
        "set-device-info",
    ]
    assert {o.message["~transport"]["return_route"] for o in pushes} == {"all"}
