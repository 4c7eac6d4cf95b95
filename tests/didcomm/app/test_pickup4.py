"""Message Pickup 4.0 over `POST /didcomm` (in-process, real PostgreSQL), both formats: DIDComm v2
plaintexts and the spec's DIDComm v1 form over a v1 connection. Every message and every refusal,
`recipient_did` scoping, the spec's own examples and Credo's 4.0 test messages (recorded fixtures,
tests/interop/fixtures/pickup4/), cross-tenant. The live socket: test_pickup4_live.py (real Daphne)
and test_live_ack.py (the ack timeout on an injected clock)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
import time_machine

from apps.didcomm.models import QueuedMessage
from tests.conftest import HOST_A, HOST_B
from tests.support.didcomm_agent import CM2, Agent, forward_for, routed_did
from tests.support.didcomm_agent_v1 import CM1, PICKUP2, AgentV1, forward_to

from .test_v1 import V1Door

P4 = "https://didcomm.org/message-pickup/4.0/"
P4_PROBLEM = P4 + "problem-report"
FIXTURES = Path(__file__).resolve().parents[2] / "interop" / "fixtures" / "pickup4"
SPEC = json.loads((FIXTURES / "spec_examples.json").read_text())["examples"]
CREDO = json.loads((FIXTURES / "credo_v4_messages.json").read_text())
T1 = datetime(2026, 11, 20, 12, 0, 0, 123_000, tzinfo=UTC)
T2 = datetime(2026, 11, 20, 12, 0, 5, 456_000, tzinfo=UTC)
T1_MS, T2_MS = 1_795_176_000_123, 1_795_176_005_456


@pytest.fixture
def door(client, tenant_a) -> V1Door:
    return V1Door(HOST_A)


def _grant(didcomm, wallet: Agent, n: int = 1, dids: list[str] | None = None) -> list[Agent]:
    mediator = didcomm.mediator_did
    assert didcomm.send(wallet, wallet.message(CM2 + "mediate-request"))[1]["type"] == CM2 + "mediate-grant"
    rcpts = [routed_did(mediator) for _ in range(n)]
    updates = [{"recipient_did": d, "action": "add"} for d in [r.did for r in rcpts] + (dids or [])]
    _, answer, _ = didcomm.send(wallet, wallet.message(CM2 + "keylist-update", {"updates": updates}))
    assert {u["result"] for u in answer["body"]["updated"]} == {"success"}
    return rcpts


def _forward(didcomm, rcpt: Agent, at: datetime) -> str:
    """A forward stored at `at`; the stored text of its attachment data."""
    with time_machine.travel(at, tick=False):
        assert didcomm.post(forward_for(rcpt, didcomm.mediator_did)).status_code == 202
    return QueuedMessage.objects.order_by("-id").values_list("data", flat=True)[0]


def _sizes() -> int:
    return sum(QueuedMessage.objects.values_list("size", flat=True))


def _problem(resp, agent) -> tuple[int, dict]:
    report, _ = agent.unpack(resp.content)
    return resp.status_code, report


# --- DIDComm v2 -----------------------------------------------------------------------------------


def test_v2_status_delivery_and_the_fire_and_forget_ack(didcomm_a, wallet):
    [r1, r2] = _grant(didcomm_a, wallet, 2)
    # Nothing waits: the count, no times, 0 bytes, live off (HTTP), on the request's thread.
    ask = wallet.message(P4 + "status-request")
    status, answer, _ = didcomm_a.send(wallet, ask)
    assert (status, answer["type"], answer["thid"]) == (200, P4 + "status", ask["id"])
    assert answer["body"] == {"message_count": 0, "total_bytes": 0, "live_delivery": False}
    # An empty queue: an empty delivery, at once.
    ask = wallet.message(P4 + "delivery-request", {"message_count_limit": 10})
    _, empty, _ = didcomm_a.send(wallet, ask)
    assert (empty["type"], empty["thid"], empty["body"], empty["attachments"]) == (P4 + "delivery", ask["id"], {}, [])

    first, second = _forward(didcomm_a, r1, T1), _forward(didcomm_a, r2, T2)
    _, answer, _ = didcomm_a.send(wallet, wallet.message(P4 + "status-request"))
    assert answer["body"] == {
        "message_count": 2,
        "newest_received_time": T2_MS,
        "oldest_received_time": T1_MS,
        "total_bytes": len(first) + len(second),
        "live_delivery": False,
    }
    # Scoped to one recipient (any form of its DID is accepted; the answer echoes what was asked).
    ask = wallet.message(P4 + "status-request", {"recipient_did": r2.did})
    _, answer, _ = didcomm_a.send(wallet, ask)
    assert answer["body"] == {
        "recipient_did": r2.did,
        "message_count": 1,
        "newest_received_time": T2_MS,
        "oldest_received_time": T2_MS,
        "total_bytes": len(second),
        "live_delivery": False,
    }
    # message_count_limit is honoured, oldest first; the attachment is the stored forward, unchanged.
    _, one, _ = didcomm_a.send(wallet, wallet.message(P4 + "delivery-request", {"message_count_limit": 1}))
    [att] = one["attachments"]
    assert att["data"] == json.loads(first) and one["body"] == {}
    ask = wallet.message(P4 + "delivery-request", {"message_count_limit": 5, "recipient_did": r2.did})
    _, scoped, _ = didcomm_a.send(wallet, ask)
    assert scoped["body"] == {"recipient_did": r2.did}
    assert [a["data"] for a in scoped["attachments"]] == [json.loads(second)]
    # Delivered messages stay queued until acknowledged; the ack answers nothing (202, no body),
    # even when it asks for a return route.
    assert QueuedMessage.objects.count() == 2
    for ids, route in (([att["id"]], None), ([scoped["attachments"][0]["id"], "not-an-id"], "all")):
        resp = didcomm_a.post(
            wallet.pack(
                wallet.message(P4 + "messages-received", {"message_id_list": ids}, return_route=route),
                didcomm_a.mediator_did,
            )  # fmt: skip
        )
        assert (resp.status_code, resp.content) == (202, b"")
    assert QueuedMessage.objects.count() == 0


def test_v2_live_delivery_change_over_http_is_live_mode_not_supported(didcomm_a, wallet):
    _grant(didcomm_a, wallet)
    for value in (True, False):
        ask = wallet.message(P4 + "live-delivery-change", {"live_delivery": value})
        status, report, _ = didcomm_a.send(wallet, ask)
        assert (status, report["type"], report["pthid"]) == (400, P4_PROBLEM, ask["id"])
        assert report["body"]["code"] == "e.m.live-mode-not-supported"


@pytest.mark.parametrize(
    ("kind", "body", "route", "code", "http"),
    [
        ("status-request", {}, None, "e.p.msg.return-route-required", 400),
        ("delivery-request", {"message_count_limit": 1}, "none", "e.p.msg.return-route-required", 400),
        ("live-delivery-change", {"live_delivery": True}, None, "e.p.msg.return-route-required", 400),
        ("delivery-request", {}, "all", "e.p.msg.invalid-body", 400),
        ("delivery-request", {"limit": 10}, "all", "e.p.msg.invalid-body", 400),  # 3.0's name
        ("delivery-request", {"message_count_limit": 0}, "all", "e.p.msg.invalid-body", 400),
        ("delivery-request", {"message_count_limit": "10"}, "all", "e.p.msg.invalid-body", 400),
        ("delivery-request", {"message_count_limit": True}, "all", "e.p.msg.invalid-body", 400),
        ("status-request", {"recipient_did": 7}, "all", "e.p.msg.invalid-body", 400),
        ("status-request", {"recipient_did": "did:example:nobody"}, "all", "e.p.me.res.not-found", 400),
        ("delivery-request", {"message_count_limit": 1, "recipient_did": "x"}, "all", "e.p.me.res.not-found", 400),
        ("messages-received", {"message_id_list": "abc"}, None, "e.p.msg.invalid-body", 400),
        ("messages-received", {"message_id_list": [1]}, None, "e.p.msg.invalid-body", 400),
        ("messages-received", {}, None, "e.p.msg.invalid-body", 400),
        ("live-delivery-change", {"live_delivery": "true"}, "all", "e.p.msg.invalid-body", 400),
    ],
)
def test_v2_refusals_are_pickup_4_problem_reports(didcomm_a, wallet, kind, body, route, code, http):
    _grant(didcomm_a, wallet)
    ask = wallet.message(P4 + kind, body, return_route=route)
    status, report, _ = didcomm_a.send(wallet, ask)
    assert (status, report["type"], report["body"]["code"], report["pthid"]) == (http, P4_PROBLEM, code, ask["id"])


def test_v2_without_a_grant_and_across_tenants(didcomm_a, didcomm_b, wallet):
    [rcpt] = _grant(didcomm_a, wallet)
    _forward(didcomm_a, rcpt, T1)
    other = Agent()
    _grant(didcomm_a, other)
    # Another client of the same tenant: not its recipient, not its messages.
    status, report, _ = didcomm_a.send(other, other.message(P4 + "status-request", {"recipient_did": rcpt.did}))
    assert (status, report["body"]["code"]) == (400, "e.p.me.res.not-found")
    _, empty, _ = didcomm_a.send(other, other.message(P4 + "delivery-request", {"message_count_limit": 10}))
    assert empty["attachments"] == []
    queued = str(QueuedMessage.objects.get().message_id)
    assert didcomm_a.send(other, other.message(P4 + "messages-received", {"message_id_list": [queued]}))[0] == 202
    assert QueuedMessage.objects.count() == 1  # another client's ack removes nothing
    # The same client on tenant B has no grant there.
    for kind, body in (("status-request", {}), ("delivery-request", {"message_count_limit": 1})):
        status, report, _ = didcomm_b.send(wallet, wallet.message(P4 + kind, body))
        assert (status, report["type"], report["body"]["code"]) == (403, P4_PROBLEM, "e.p.req.not-granted")
    status, _, _ = didcomm_b.send(wallet, wallet.message(P4 + "messages-received", {"message_id_list": [queued]}))
    assert status == 403 and QueuedMessage.objects.count() == 1


def test_discover_features_discloses_4_0_beside_3_0_and_2_0(didcomm_a, door, wallet):
    ask = wallet.message(
        "https://didcomm.org/discover-features/2.0/queries",
        {"queries": [{"feature-type": "protocol", "match": "https://didcomm.org/message*"}]},
    )
    _, disclose, _ = didcomm_a.send(wallet, ask)
    assert [d["id"] for d in disclose["body"]["disclosures"]] == [
        "https://didcomm.org/messagepickup/3.0",
        "https://didcomm.org/message-pickup/4.0",
    ]
    agent = AgentV1()
    door.connect(agent)
    _, answer, _ = door.send(agent, agent.message("https://didcomm.org/discover-features/1.0/query",
                                                  query="https://didcomm.org/message*"))  # fmt: skip
    assert answer["protocols"] == [
        {"pid": "https://didcomm.org/messagepickup/2.0", "roles": ["mediator"]},
        {"pid": "https://didcomm.org/message-pickup/4.0", "roles": ["mediator"]},
        {"pid": "https://didcomm.org/messagepickup/1.0", "roles": ["mediator"]},
    ]


# --- DIDComm v1 (the spec's v1 form over a v1 connection) ---------------------------------------


def _v1_granted(door: V1Door, n: int = 1) -> tuple[AgentV1, list[AgentV1]]:
    agent = AgentV1()
    assert door.mediate(agent)["@type"] == CM1 + "mediate-grant"
    keys = [AgentV1() for _ in range(n)]
    updates = [{"recipient_key": k.did_key, "action": "add"} for k in keys]
    _, answer, _ = door.send(agent, agent.message(CM1 + "keylist-update", updates=updates))
    assert {u["result"] for u in answer["updated"]} == {"success"}
    return agent, keys


def _v1_forward(door: V1Door, key: AgentV1, at: datetime, n: str) -> dict:
    inner = json.loads(AgentV1().pack({"@type": "https://didcomm.org/basicmessage/1.0/message", "@id": n}, key.did_key))
    with time_machine.travel(at, tick=False):
        assert door.post(forward_to(key.did_key, door.key, inner)).status_code == 200
    return inner


def test_v1_status_delivery_and_the_fire_and_forget_ack(door):
    agent, [k1, k2] = _v1_granted(door, 2)
    ask = agent.message(P4 + "status-request")
    _, status, _ = door.send(agent, ask)
    assert status == {
        "@type": P4 + "status",
        "@id": status["@id"],
        "message_count": 0,
        "total_bytes": 0,
        "live_delivery": False,
        "~thread": {"thid": ask["@id"]},
    }
    ask = agent.message(P4 + "delivery-request", message_count_limit=3)
    _, empty, _ = door.send(agent, ask)
    assert empty == {"@type": P4 + "delivery", "@id": empty["@id"], "~attach": [], "~thread": {"thid": ask["@id"]}}

    first, second = _v1_forward(door, k1, T1, "m1"), _v1_forward(door, k2, T2, "m2")
    sizes = _sizes()
    # recipient_did must be a did:key over v1; with a fragment it names the same key.
    for did in (k2.did_key, k2.did_key + "#" + k2.did_key[8:]):
        ask = agent.message(P4 + "status-request", recipient_did=did)
        _, status, _ = door.send(agent, ask)
        assert {k: v for k, v in status.items() if k not in ("@id", "total_bytes")} == {
            "@type": P4 + "status",
            "recipient_did": did,
            "message_count": 1,
            "newest_received_time": T2_MS,
            "oldest_received_time": T2_MS,
            "live_delivery": False,
            "~thread": {"thid": ask["@id"]},
        }
    _, status, _ = door.send(agent, agent.message(P4 + "status-request"))
    assert (status["message_count"], status["oldest_received_time"], status["total_bytes"]) == (2, T1_MS, sizes)
    ask = agent.message(P4 + "delivery-request", message_count_limit=5, recipient_did=k1.did_key)
    _, delivery, _ = door.send(agent, ask)
    assert (delivery["recipient_did"], delivery["~thread"]) == (k1.did_key, {"thid": ask["@id"]})
    [att] = delivery["~attach"]
    assert att["data"] == {"json": first} and att["lastmod_time"] == "2026-11-20T12:00:00.123Z"
    assert k1.unpack(att["data"]["json"])[0]["@id"] == "m1"
    _, both, _ = door.send(agent, agent.message(P4 + "delivery-request", message_count_limit=1))
    assert [a["data"] for a in both["~attach"]] == [{"json": first}]  # the limit, oldest first
    # The ack answers nothing: 200, no body; the listed message leaves, the other stays.
    resp = door.post(agent.pack(agent.message(P4 + "messages-received", return_route=None,
                                              message_id_list=[att["@id"]]), door.key))  # fmt: skip
    assert (resp.status_code, resp.content) == (200, b"")
    assert [json.loads(d) for d in QueuedMessage.objects.values_list("data", flat=True)] == [{"json": second}]


@pytest.mark.parametrize(
    ("kind", "fields", "route", "code"),
    [
        ("status-request", {}, None, "e.p.msg.return-route-required"),
        ("delivery-request", {"message_count_limit": 1}, "none", "e.p.msg.return-route-required"),
        ("live-delivery-change", {"live_delivery": True}, None, "e.p.msg.return-route-required"),
        ("live-delivery-change", {"live_delivery": True}, "all", "e.m.live-mode-not-supported"),
        ("delivery-request", {}, "all", "e.p.msg.invalid-body"),
        ("delivery-request", {"message_count_limit": -1}, "all", "e.p.msg.invalid-body"),
        ("status-request", {"recipient_did": "RAW58"}, "all", "e.p.msg.invalid-body"),  # a verkey, not a did:key
        (
            "status-request",
            {"recipient_did": "did:peer:2.Ez6LSbysY2xFMRpGMhb7tFTLMpeuPRaqaWM1yECx2AtzE3KCc"},
            "all",
            "e.p.msg.invalid-body",
        ),  # fmt: skip
        ("status-request", {"recipient_did": "did:key:zNotAKey"}, "all", "e.p.msg.invalid-body"),
        ("status-request", {"recipient_did": "OTHER"}, "all", "e.p.me.res.not-found"),  # another's did:key
        ("messages-received", {"message_id_list": None}, None, "e.p.msg.invalid-body"),
    ],
)
def test_v1_refusals_are_pickup_4_problem_reports(door, kind, fields, route, code):
    agent, [key] = _v1_granted(door)
    values = {"RAW58": key.verkey, "OTHER": AgentV1().did_key}
    fields = {k: values.get(v, v) if isinstance(v, str) else v for k, v in fields.items()}
    ask = agent.message(P4 + kind, return_route=route, **fields)
    status, report, _ = door.send(agent, ask)
    assert (status, report["@type"], report["description"]["code"]) == (400, P4_PROBLEM, code)
    assert report["~thread"] == {"pthid": ask["@id"]}  # the spec's v1 problem report


def test_v1_needs_a_connection_and_a_grant_and_stays_on_its_tenant(client, door, tenant_b):
    agent, [key] = _v1_granted(door)
    _v1_forward(door, key, T1, "m1")
    stranger = AgentV1()
    door.connect(stranger)  # connected, not granted
    status, report, _ = door.send(stranger, stranger.message(P4 + "status-request"))
    assert (status, report["description"]["code"]) == (403, "e.p.req.not-granted")
    status, report, _ = door.send(stranger, stranger.message(P4 + "status-request", recipient_did=key.did_key))
    assert (status, report["description"]["code"]) == (403, "e.p.req.not-granted")
    door_b = V1Door(HOST_B)
    status, report, _ = door_b.send(agent, agent.message(P4 + "delivery-request", message_count_limit=5))
    assert (status, report["@type"], report["description"]["code"]) == (403, P4_PROBLEM, "e.p.req.not-connected")
    assert QueuedMessage.objects.count() == 1


def test_pickup_2_0_and_4_0_share_one_queue(door):
    agent, [key] = _v1_granted(door)
    _v1_forward(door, key, T1, "m1")
    _, delivery, _ = door.send(agent, agent.message(P4 + "delivery-request", message_count_limit=5))
    [att] = delivery["~attach"]
    # A Pickup 2.0 ack of a 4.0 delivery (one queue, one id space).
    _, status, _ = door.send(agent, agent.message(PICKUP2 + "messages-received", message_id_list=[att["@id"]]))
    assert status["message_count"] == 0


# --- the spec's examples and Credo's messages (recorded fixtures) -------------------------------


def test_the_spec_examples_v2_get_answers_shaped_as_the_spec_shows(didcomm_a, wallet):
    [rcpt] = _grant(didcomm_a, wallet)
    _forward(didcomm_a, rcpt, T1)
    fill = {"<did for messages>": rcpt.did}

    def send(name: str):
        example = json.loads(json.dumps(SPEC[name]["v2"]))
        example["body"] = {k: fill.get(v, v) if isinstance(v, str) else v for k, v in example["body"].items()}
        msg = {**wallet.message(example["type"], example["body"], return_route=example.get("return_route"))}
        return msg, didcomm_a.send(wallet, msg)

    ask, (_, status, _) = send("status-request")
    assert (status["type"], status["thid"]) == (SPEC["status"]["v2"]["type"], ask["id"])
    assert sorted(status["body"]) == sorted(SPEC["status"]["v2"]["body"])  # every field the spec shows
    ask, (_, delivery, _) = send("delivery-request")
    assert (delivery["type"], delivery["thid"], sorted(delivery["body"])) == (
        SPEC["delivery"]["v2"]["type"],
        ask["id"],
        sorted(SPEC["delivery"]["v2"]["body"]),
    )
    [att] = delivery["attachments"]
    assert sorted(att) == sorted(SPEC["delivery"]["v2"]["attachments"][0])  # id, data
    _, (status_code, _, resp) = send("messages-received")  # the spec's ids "123", "456": not ours
    assert (status_code, resp.content) == (202, b"") and QueuedMessage.objects.count() == 1
    ask, (status_code, report, _) = send("live-delivery-change")  # no return_route in the example
    assert (status_code, report["type"], report["body"]["code"]) == (400, P4_PROBLEM, "e.p.msg.return-route-required")
    spec_report = SPEC["problem-report"]["v2"]
    ask = wallet.message(P4 + "live-delivery-change", {"live_delivery": True})
    status_code, report, _ = didcomm_a.send(wallet, ask)
    assert (report["type"], sorted(report["body"]), report["body"]["code"], report["pthid"]) == (
        spec_report["type"],
        sorted(spec_report["body"]),
        spec_report["body"]["code"],
        ask["id"],
    )


def test_the_spec_examples_v1_get_answers_shaped_as_the_spec_shows(door):
    agent, [key] = _v1_granted(door)
    _v1_forward(door, key, T1, "m1")
    fill = {"<did:key for messages>": key.did_key}

    def send(name: str):
        example = {k: fill.get(v, v) if isinstance(v, str) else v for k, v in SPEC[name]["v1"].items()}
        example["@id"] = agent.message("x")["@id"]
        return example, door.send(agent, example)

    ask, (_, status, _) = send("status-request")
    assert sorted(status) == sorted(SPEC["status"]["v1"])
    assert (status["@type"], status["~thread"], status["recipient_did"]) == (
        SPEC["status"]["v1"]["@type"],
        {"thid": ask["@id"]},
        key.did_key,
    )
    ask, (_, delivery, _) = send("delivery-request")
    assert sorted(delivery) == sorted(SPEC["delivery"]["v1"])
    [att] = delivery["~attach"]
    assert set(SPEC["delivery"]["v1"]["~attach"][0]) <= set(att)  # @id, data (and lastmod_time)
    _, (status_code, _, resp) = send("messages-received")
    assert (status_code, resp.content) == (200, b"")
    spec_report = SPEC["problem-report"]["v1"]
    ask = agent.message(P4 + "live-delivery-change", live_delivery=True)
    _, report, _ = door.send(agent, ask)
    assert sorted(report) == sorted(spec_report) and sorted(report["description"]) == sorted(spec_report["description"])
    assert (report["@type"], report["description"]["code"], report["~thread"]) == (
        spec_report["@type"],
        spec_report["description"]["code"],
        {"pthid": ask["@id"]},
    )


def test_credos_4_0_messages_verbatim(didcomm_a, wallet):
    """Credo's recipient DID registered as it is; its messages sent as its classes serialise them."""
    [rcpt] = _grant(didcomm_a, wallet, dids=[CREDO["recipient_did"]])
    _forward(didcomm_a, rcpt, T1)
    msgs = CREDO["messages"]

    def send(name: str):
        msg = {**msgs[name], "from": wallet.did}
        return didcomm_a.send(wallet, msg)

    _, status, _ = send("status-request")
    assert (status["type"], status["thid"], status["body"]["message_count"]) == (
        P4 + "status",
        "credo-status-request",
        1,
    )
    assert all(
        isinstance(status["body"][k], int) for k in ("newest_received_time", "oldest_received_time", "total_bytes")
    )
    _, scoped, _ = send("status-request-recipient")
    assert scoped["body"] == {
        "recipient_did": CREDO["recipient_did"],
        "message_count": 0,
        "total_bytes": 0,
        "live_delivery": False,
    }
    _, delivery, _ = send("delivery-request")
    [att] = delivery["attachments"]
    assert (delivery["thid"], sorted(att), sorted(att["data"])) == ("credo-delivery-request", ["data", "id"], ["json"])
    _, empty, _ = send("delivery-request-recipient")
    assert (empty["body"], empty["attachments"]) == ({"recipient_did": CREDO["recipient_did"]}, [])
    status_code, _, resp = send("messages-received")
    assert (status_code, resp.content) == (202, b"")
    expected = CREDO["expects"]["live-mode-not-supported"]
    status_code, report, _ = send("live-delivery-change-on")
    assert (status_code, report["type"], report["body"]["code"], report["pthid"]) == (
        400,
        expected["type"],
        expected["body"]["code"],
        "credo-live-on",
    )
