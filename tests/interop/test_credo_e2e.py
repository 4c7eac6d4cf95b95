"""Credo 0.6.3 agents (npm, no inbound transport: everything comes back on return routes) against a real
mediator (Daphne on the Redis channel layer, a Celery worker): a recipient gets mediation and picks its
messages up with Pickup 2.0 polling; stopped, it misses messages a Credo sender routes through us, and
restarted in live mode (Pickup 2.0 over the DIDComm WebSocket) it gets them and then new ones pushed.

The test pairs a Credo recipient with a Credo sender (ACA-Py 1.7 refuses Credo's DID Exchange
response). The sender is mediated by us too, since Credo cannot receive without a mediator. Credo comes
from scripts/ensure_extra_credo.sh (run by scripts/ensure_services.sh and again here)."""

from __future__ import annotations

import time

import pytest

from apps.didcomm.core.did_key import normalise_verkey
from apps.didcomm.models import Connection, QueuedMessage
from tests.interop import credo

from .recorded import open_recorded
from .v1_server import V1Mediator

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def mediator(transactional_db, tmp_path):
    credo.ensure_installed()
    m = V1Mediator(tmp_path, redis=True)
    yield m
    m.close()


@pytest.fixture
def started(tmp_path):
    """Start Credo agents through `started(label, **kw)`; all are stopped at the end."""
    agents: list[credo.CredoAgent] = []

    def start(label: str, **kw) -> credo.CredoAgent:
        agents.append(credo.start_agent(tmp_path, label, **kw))
        return agents[-1]

    yield start
    for agent in agents:
        agent.stop()


def wait_queued(mediator: V1Mediator, expected: int, timeout: float = 10) -> int:
    """The number of messages queued on the tenant, once it is `expected` or after `timeout` s."""
    deadline = time.monotonic() + timeout
    while (n := QueuedMessage.objects.filter(tenant=mediator.tenant).count()) != expected:
        if time.monotonic() > deadline:
            break
        time.sleep(0.1)
    return n


def test_credo_picks_up_by_polling_then_after_being_offline_and_live(mediator, started):
    recipient = started("recipient", mediator_invitation=mediator.invitation_url, pickup="PickUpV2")
    sender = started("sender", mediator_invitation=mediator.invitation_url, pickup="PickUpV2")
    for agent in (recipient, sender):
        grant = agent.call("mediation")
        assert (grant["state"], grant["endpoint"]) == ("granted", mediator.endpoint)
        # Credo keeps the grant's did:key routing key as a base58 verkey
        assert grant["routingKeys"] == [normalise_verkey(mediator.invitation["services"][0]["recipientKeys"][0])]
    assert Connection.objects.filter(tenant=mediator.tenant, state="completed").count() == 2

    # a connection between them, both sides routed through us
    invitation = recipient.call("create-invitation")
    sender_side = sender.call("receive-invitation", url=invitation["url"])
    recipient.call("wait-connection", outOfBandId=invitation["outOfBandId"])

    # Pickup 2.0 polling
    sender.call("send-message", connectionId=sender_side["connectionId"], content="polled")
    recipient.wait_event({"event": "basic-message", "content": "polled"}, timeout=20)

    # offline: the message waits in our queue
    recipient.stop()
    sender.call("send-message", connectionId=sender_side["connectionId"], content="while offline")
    assert wait_queued(mediator, 1) == 1

    # back in live mode: the queued message first, then a new one pushed on the socket
    recipient = started(
        "recipient",
        mediator_invitation=mediator.invitation_url,
        pickup="PickUpV2LiveMode",
        wallet_key=recipient.wallet_key,
    )
    recipient.wait_event({"event": "basic-message", "content": "while offline"}, timeout=20)
    # then it opens the socket and turns live delivery on (our `status` answer is the first frame)
    recipient.wait_event({"event": "socket", "state": "open"}, timeout=10)
    recipient.wait_event({"event": "socket-frame"}, timeout=10)
    mark = len(recipient.seen)
    sender.call("send-message", connectionId=sender_side["connectionId"], content="live")
    recipient.wait_event({"event": "basic-message", "content": "live"}, timeout=10)
    # it came as a frame on the socket (live mode never polls)
    assert [e["event"] for e in recipient.seen[mark:]] == ["socket-frame", "basic-message"]
    # a pushed message stays queued until Credo's messages-received (it acks over HTTP, just after)
    assert wait_queued(mediator, 0) == 0
    opened = open_recorded(mediator.record("credo_0.6.3.json", agent="Credo 0.6.3"))
    types = {(o.transport, o.type) for o in opened}
    assert {
        ("http", "messagepickup/2.0/status-request"),
        ("http", "messagepickup/2.0/delivery-request"),
        ("http", "messagepickup/2.0/messages-received"),
        ("ws", "messagepickup/2.0/live-delivery-change"),
        ("http", "routing/1.0/forward"),
    } <= types
    assert all(o.sender_verkey is None for o in opened if o.type == "routing/1.0/forward")
    pickups = [o for o in opened if o.type.startswith("messagepickup/2.0/")]
    assert {o.message["~transport"]["return_route"] for o in pickups} == {"all"}


def test_credo_with_pickup_1_0_gets_its_messages_in_a_batch(mediator, started):
    """Credo's `PickUpV1` strategy: it polls with `messagepickup/1.0/batch-pickup` and takes what comes back
    in the `batch` (on the HTTP return route); a batch has no acknowledgement, so it leaves our queue."""
    recipient = started("recipient", mediator_invitation=mediator.invitation_url, pickup="PickUpV1")
    sender = started("sender", mediator_invitation=mediator.invitation_url, pickup="PickUpV2")
    assert recipient.call("mediation")["state"] == "granted"
    invitation = recipient.call("create-invitation")
    sender_side = sender.call("receive-invitation", url=invitation["url"])
    recipient.call("wait-connection", outOfBandId=invitation["outOfBandId"])
    sender.call("send-message", connectionId=sender_side["connectionId"], content="in a batch")
    recipient.wait_event({"event": "basic-message", "content": "in a batch"}, timeout=20)
    assert wait_queued(mediator, 0) == 0
    opened = open_recorded(mediator.record("credo_0.6.3_pickup_1.0.json", agent="Credo 0.6.3"))
    batches = [o for o in opened if o.type == "messagepickup/1.0/batch-pickup"]
    assert batches and all(o.transport == "http" for o in batches)
    assert {o.message["~transport"]["return_route"] for o in batches} == {"all"}
    assert all(isinstance(o.message["batch_size"], int) for o in batches)
    assert not [
        o
        for o in opened
        if o.type.startswith("messagepickup/2.0/") and o.sender_verkey in {b.sender_verkey for b in batches}
    ]  # the recipient never used Pickup 2.0


def test_credo_with_implicit_pickup_gets_its_messages_on_the_return_route_socket(mediator, started):
    """Credo's `Implicit` strategy (what agents set up for ACA-Py mediators use): the recipient opens our
    ws service, sends a trust ping with `return_route: "all"` and then only waits, never sending
    live-delivery-change. The DID Exchange request a Credo sender routes through us, its basic messages
    (one while the recipient is offline) arrive as pushes on that socket, and Credo's messages-received
    empties the queue."""
    recipient = started("recipient", mediator_invitation=mediator.invitation_url, pickup="Implicit")
    sender = started("sender", mediator_invitation=mediator.invitation_url, pickup="PickUpV2")
    assert recipient.call("mediation")["state"] == "granted"
    assert {"event": "socket", "state": "open"} in recipient.seen  # opened before its mediation was ready
    invitation = recipient.call("create-invitation")
    sender_side = sender.call("receive-invitation", url=invitation["url"])  # its request reaches the socket
    recipient.call("wait-connection", outOfBandId=invitation["outOfBandId"])
    mark = len(recipient.seen)
    sender.call("send-message", connectionId=sender_side["connectionId"], content="implicit")
    recipient.wait_event({"event": "basic-message", "content": "implicit"}, timeout=20)
    assert "socket-frame" in [e["event"] for e in recipient.seen[mark:]]  # it came on the socket
    assert wait_queued(mediator, 0) == 0

    # offline: the message waits; back, the new socket's first return-route message brings it
    recipient.stop()
    sender.call("send-message", connectionId=sender_side["connectionId"], content="while offline")
    assert wait_queued(mediator, 1) == 1
    recipient = started(
        "recipient", mediator_invitation=mediator.invitation_url, pickup="Implicit", wallet_key=recipient.wallet_key
    )
    recipient.wait_event({"event": "basic-message", "content": "while offline"}, timeout=20)
    assert wait_queued(mediator, 0) == 0
    opened = open_recorded(mediator.record("credo_0.6.3_implicit.json", agent="Credo 0.6.3"))
    on_socket = {o.type for o in opened if o.transport == "ws"}
    assert "trust_ping/1.0/ping" in on_socket
    assert not {t for t in on_socket if t.startswith("messagepickup/2.0/live-delivery-change")}
