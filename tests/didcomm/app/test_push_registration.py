"""Device registration for push wake-ups on POST /didcomm (docs/push.md, "Registration"): RFC 0734
(FCM) and RFC 0699 (APNs) over DIDComm v1 connections and inside DIDComm v2 messages on a granted
mediation; set, replace, remove, get, their problem reports, the refusals that store nothing, the
cross-tenant negative and Discover Features. The real client (Credo 0.5 with
@credo-ts/push-notifications 0.7.1) is tests/interop/test_credo_push_e2e.py."""

from __future__ import annotations

import json

import pytest

from apps.didcomm.models import Mediation
from apps.didcomm.recipients import did_hash
from apps.push.models import Device
from apps.push.services import FCM_TOKEN_MAX
from tests.support.didcomm_agent import CM2, Agent
from tests.support.didcomm_agent_v1 import AgentV1

from .test_v1 import BASE, V1Door

FCM = BASE + "push-notifications-fcm/1.0/"
APNS = BASE + "push-notifications-apns/1.0/"
TOKEN = "fcm-token:APA91bH" + "x" * 140
TOKEN_2 = "fcm-token:APA91bH" + "y" * 140
APNS_TOKEN = "AB" * 32

pytestmark = pytest.mark.django_db


@pytest.fixture
def door(client, tenant_a) -> V1Door:
    return V1Door("a.mediator.test")


@pytest.fixture
def door_b(client, tenant_b) -> V1Door:
    return V1Door("b.mediator.test")


def devices(tenant) -> list[tuple[str, str, str, str | None]]:
    return [
        (d.subject, d.service, d.token, d.platform)
        for d in Device.objects.filter(tenant=tenant).order_by("service", "subject")
    ]


def subject_v1(agent) -> str:
    return "didcomm:" + Mediation.objects.get(connection__their_verkey=agent.verkey).client_hash


def mediated_v1(door: V1Door):
    agent = AgentV1()
    door.mediate(agent)
    return agent


# --- DIDComm v1 ---------------------------------------------------------------------------------


def test_v1_fcm_set_get_replace_and_remove(door, tenant_a):
    agent = mediated_v1(door)
    subject = subject_v1(agent)
    status, answer, resp = door.send(
        agent, agent.message(FCM + "set-device-info", device_token=TOKEN, device_platform="android")
    )
    assert (status, answer, resp.content) == (200, None, b"")  # not answered (docs/push.md)
    assert devices(tenant_a) == [(subject, "fcm", TOKEN, "android")]

    get = agent.message(FCM + "get-device-info")
    status, info, _ = door.send(agent, get)
    assert status == 200
    assert {k: v for k, v in info.items() if k != "@id"} == {
        "@type": FCM + "device-info",
        "device_token": TOKEN,
        "device_platform": "android",
        "~thread": {"thid": get["@id"]},
    }

    door.send(agent, agent.message(FCM + "set-device-info", device_token=TOKEN_2, device_platform="ios"))
    assert devices(tenant_a) == [(subject, "fcm", TOKEN_2, "ios")]

    status, answer, _ = door.send(
        agent, agent.message(FCM + "set-device-info", device_token=None, device_platform=None)
    )
    assert (status, answer) == (200, None)
    assert devices(tenant_a) == []
    get = agent.message(FCM + "get-device-info")
    status, report, _ = door.send(agent, get)
    assert status == 404
    assert report["@type"] == FCM + "problem-report"
    assert report["description"]["code"] == "not-registered-for-push-notifications"
    assert report["~thread"] == {"thid": get["@id"]}


def test_v1_apns_has_only_a_token_and_shares_the_subject_with_fcm(door, tenant_a):
    agent = mediated_v1(door)
    subject = subject_v1(agent)
    door.send(agent, agent.message(FCM + "set-device-info", device_token=TOKEN, device_platform="android"))
    door.send(agent, agent.message(APNS + "set-device-info", device_token=APNS_TOKEN))
    assert devices(tenant_a) == [(subject, "apns", APNS_TOKEN.lower(), None), (subject, "fcm", TOKEN, "android")]
    _, info, _ = door.send(agent, agent.message(APNS + "get-device-info"))
    assert (info["@type"], info["device_token"], "device_platform" in info) == (
        APNS + "device-info",
        APNS_TOKEN.lower(),
        False,
    )
    door.send(agent, agent.message(APNS + "set-device-info", device_token=None))
    assert devices(tenant_a) == [(subject, "fcm", TOKEN, "android")]


@pytest.mark.parametrize(
    ("fields", "code"),
    [
        ({"device_token": TOKEN, "device_platform": None}, "missing-value"),
        ({"device_token": None, "device_platform": "android"}, "missing-value"),
        ({"device_token": TOKEN}, "missing-value"),  # absent is null
        ({"device_token": "x" * (FCM_TOKEN_MAX + 1), "device_platform": "android"}, "e.p.msg.invalid-body"),
        ({"device_token": "has a space", "device_platform": "android"}, "e.p.msg.invalid-body"),
        ({"device_token": 12, "device_platform": "android"}, "e.p.msg.invalid-body"),
        ({"device_token": TOKEN, "device_platform": "Not A Platform!"}, "e.p.msg.invalid-body"),
    ],
)
def test_v1_a_bad_set_device_info_is_a_problem_report_and_changes_nothing(door, tenant_a, fields, code):
    agent = mediated_v1(door)
    door.send(agent, agent.message(FCM + "set-device-info", device_token=TOKEN_2, device_platform="ios"))
    before = devices(tenant_a)
    status, report, _ = door.send(agent, agent.message(FCM + "set-device-info", **fields))
    assert (status, report["@type"], report["description"]["code"]) == (400, FCM + "problem-report", code)
    assert TOKEN not in report["description"]["en"]  # never the token
    assert devices(tenant_a) == before


def test_v1_apns_token_must_be_hex(door, tenant_a):
    agent = mediated_v1(door)
    status, report, _ = door.send(agent, agent.message(APNS + "set-device-info", device_token="zz" * 32))
    assert (status, report["@type"], report["description"]["code"]) == (
        400,
        APNS + "problem-report",
        "e.p.msg.invalid-body",
    )
    assert devices(tenant_a) == []


def test_v1_registration_needs_an_authenticated_connection_with_a_granted_mediation(door, tenant_a):
    stranger = AgentV1()
    set_info = stranger.message(FCM + "set-device-info", device_token=TOKEN, device_platform="android")
    resp = door.post(stranger.pack(set_info, door.key, anon=True))  # anoncrypt: nobody
    assert resp.status_code == 401 and json.loads(resp.content)["description"]["code"] == "e.p.trust.unauthenticated"
    status, report, _ = door.send(stranger, set_info)  # authcrypt, but no connection
    assert (status, report["description"]["code"]) == (403, "e.p.req.not-connected")
    connected = AgentV1()
    door.connect(connected)  # a connection without a mediation
    status, report, _ = door.send(
        connected, connected.message(FCM + "set-device-info", device_token=TOKEN, device_platform="android")
    )
    assert (status, report["description"]["code"]) == (403, "e.p.req.not-granted")
    status, report, _ = door.send(connected, connected.message(FCM + "get-device-info"))
    assert (status, report["description"]["code"]) == (403, "e.p.req.not-granted")
    assert devices(tenant_a) == []


def test_v1_a_connection_of_tenant_a_cannot_register_or_read_on_tenant_b(door, door_b, tenant_a, tenant_b):
    agent = mediated_v1(door)
    door.send(agent, agent.message(FCM + "set-device-info", device_token=TOKEN, device_platform="android"))
    # the same agent, to tenant B's key: B has no connection for it
    status, report, _ = door_b.send(
        agent, agent.message(FCM + "set-device-info", device_token=TOKEN_2, device_platform="ios")
    )
    assert (status, report["description"]["code"]) == (403, "e.p.req.not-connected")
    status, report, _ = door_b.send(agent, agent.message(FCM + "get-device-info"))
    assert (status, report["description"]["code"]) == (403, "e.p.req.not-connected")
    # B's own client sees nothing of A's device
    other = mediated_v1(door_b)
    status, report, _ = door_b.send(other, other.message(FCM + "get-device-info"))
    assert (status, report["description"]["code"]) == (404, "not-registered-for-push-notifications")
    assert devices(tenant_b) == []
    assert [d[2] for d in devices(tenant_a)] == [TOKEN]


def test_v1_discover_features_discloses_both_push_protocols(door):
    agent = mediated_v1(door)
    _, disclose, _ = door.send(agent, agent.message(BASE + "discover-features/1.0/query", query=FCM.rstrip("/")))
    assert disclose["protocols"] == [{"pid": FCM.rstrip("/"), "roles": ["notification-sender"]}]
    _, disclose, _ = door.send(
        agent, agent.message(BASE + "discover-features/1.0/query", query=BASE + "push-notifications-*")
    )
    assert disclose["protocols"] == [
        {"pid": FCM.rstrip("/"), "roles": ["notification-sender"]},
        {"pid": APNS.rstrip("/"), "roles": ["notification-sender"]},
    ]


# --- DIDComm v2 ---------------------------------------------------------------------------------


def granted_v2(didcomm, wallet: Agent) -> str:
    didcomm.send(wallet, wallet.message(CM2 + "mediate-request"))
    assert Mediation.objects.filter(client_hash=did_hash(wallet.did), state="granted").exists()
    return "didcomm:" + did_hash(wallet.did)


def test_v2_fcm_set_get_replace_and_remove(didcomm_a, wallet, tenant_a):
    subject = granted_v2(didcomm_a, wallet)
    set_info = wallet.message(FCM + "set-device-info", {"device_token": TOKEN, "device_platform": "android"})
    status, answer, resp = didcomm_a.send(wallet, set_info)
    assert (status, answer, resp.content) == (202, None, b"")
    assert devices(tenant_a) == [(subject, "fcm", TOKEN, "android")]
    get = wallet.message(FCM + "get-device-info")
    status, info, _ = didcomm_a.send(wallet, get)
    assert status == 200
    assert (info["type"], info["thid"], info["body"]) == (
        FCM + "device-info",
        get["id"],
        {"device_token": TOKEN, "device_platform": "android"},
    )
    didcomm_a.send(wallet, wallet.message(FCM + "set-device-info", {"device_token": TOKEN_2, "device_platform": "ios"}))
    assert devices(tenant_a) == [(subject, "fcm", TOKEN_2, "ios")]
    didcomm_a.send(wallet, wallet.message(FCM + "set-device-info", {"device_token": None, "device_platform": None}))
    assert devices(tenant_a) == []
    get = wallet.message(FCM + "get-device-info")
    status, report, _ = didcomm_a.send(wallet, get)
    assert (status, report["body"]["code"], report["pthid"]) == (
        404,
        "not-registered-for-push-notifications",
        get["id"],
    )


def test_v2_apns_and_missing_value(didcomm_a, wallet, tenant_a):
    subject = granted_v2(didcomm_a, wallet)
    didcomm_a.send(wallet, wallet.message(APNS + "set-device-info", {"device_token": APNS_TOKEN}))
    _, info, _ = didcomm_a.send(wallet, wallet.message(APNS + "get-device-info"))
    assert info["body"] == {"device_token": APNS_TOKEN.lower()}
    status, report, _ = didcomm_a.send(
        wallet, wallet.message(FCM + "set-device-info", {"device_token": TOKEN, "device_platform": None})
    )
    assert (status, report["body"]["code"]) == (400, "missing-value")
    status, report, _ = didcomm_a.send(
        wallet, wallet.message(APNS + "set-device-info", {"device_token": "ab" * 101})
    )  # over 200 hex digits
    assert (status, report["body"]["code"]) == (400, "e.p.msg.invalid-body")
    assert devices(tenant_a) == [(subject, "apns", APNS_TOKEN.lower(), None)]


def test_v2_registration_needs_authcrypt_and_a_granted_mediation(didcomm_a, wallet, tenant_a):
    set_info = wallet.message(FCM + "set-device-info", {"device_token": TOKEN, "device_platform": "android"})
    resp = didcomm_a.post(wallet.pack(set_info, didcomm_a.mediator_did, anon=True))
    assert resp.status_code == 401 and json.loads(resp.content)["body"]["code"] == "e.p.trust.unauthenticated"
    status, report, _ = didcomm_a.send(wallet, wallet.message(FCM + "set-device-info", set_info["body"]))
    assert (status, report["body"]["code"]) == (403, "e.p.req.not-granted")
    status, report, _ = didcomm_a.send(wallet, wallet.message(FCM + "get-device-info"))
    assert (status, report["body"]["code"]) == (403, "e.p.req.not-granted")
    assert devices(tenant_a) == []


def test_v2_a_client_of_tenant_a_cannot_register_on_tenant_b(didcomm_a, didcomm_b, wallet, tenant_a, tenant_b):
    granted_v2(didcomm_a, wallet)
    didcomm_a.send(wallet, wallet.message(FCM + "set-device-info", {"device_token": TOKEN, "device_platform": "ios"}))
    status, report, _ = didcomm_b.send(
        wallet, wallet.message(FCM + "set-device-info", {"device_token": TOKEN_2, "device_platform": "ios"})
    )
    assert (status, report["body"]["code"]) == (403, "e.p.req.not-granted")
    status, report, _ = didcomm_b.send(wallet, wallet.message(FCM + "get-device-info"))
    assert (status, report["body"]["code"]) == (403, "e.p.req.not-granted")
    assert devices(tenant_b) == [] and [d[2] for d in devices(tenant_a)] == [TOKEN]


def test_v2_discover_features_discloses_both_push_protocols(didcomm_a, wallet):
    q = wallet.message(
        BASE + "discover-features/2.0/queries",
        {"queries": [{"feature-type": "protocol", "match": BASE + "push-notifications-*"}]},
    )
    _, disclose, _ = didcomm_a.send(wallet, q)
    assert disclose["body"] == {
        "disclosures": [
            {"feature-type": "protocol", "id": FCM.rstrip("/"), "roles": ["notification-sender"]},
            {"feature-type": "protocol", "id": APNS.rstrip("/"), "roles": ["notification-sender"]},
        ]
    }


def test_cm1_and_v2_clients_each_get_their_own_subject(door, didcomm_a, wallet, tenant_a):
    """A v1 connection's mediation and a v2 mediation on one tenant are two subjects: neither reads the other's."""
    agent = mediated_v1(door)
    door.send(agent, agent.message(FCM + "set-device-info", device_token=TOKEN, device_platform="android"))
    granted_v2(didcomm_a, wallet)
    status, report, _ = didcomm_a.send(wallet, wallet.message(FCM + "get-device-info"))
    assert (status, report["body"]["code"]) == (404, "not-registered-for-push-notifications")
