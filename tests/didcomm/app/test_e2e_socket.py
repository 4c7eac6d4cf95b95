"""`/didcomm/ws` on a real Daphne: the per-socket send budget on live delivery (a socket in live
mode that stops reading is closed with a problem report and 4509, its messages stay queued, and
another socket of the same client keeps working), the per-message cap, and the problem-report
frames a socket answers bad input with (and stays open), and a refused upgrade."""

from __future__ import annotations

import asyncio
import json
import struct
import time

import pytest

from tests.support.didcomm_agent import PICKUP, Agent, forward_for
from tests.support.stalled_socket import StalledSocket, close_timeout_passed

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

BUDGET = 256 * 1024
BUDGET_LOG = "didcomm websocket closed: send budget exceeded tenant=dc"
PROBLEM = "https://didcomm.org/report-problem/2.0/problem-report"


@pytest.fixture
def deploy(deployment):
    return deployment(env={"MEDIATOR_WS_SEND_BUDGET_BYTES": str(BUDGET)})


def _big_forward(rcpt: Agent, mediator_did: str, n: int) -> bytes:
    sender = Agent()
    inner = json.loads(
        sender.pack({"id": f"m{n}", "type": "https://example.org/blob", "body": {"b": "A" * 65536}}, rcpt.did)
    )
    return forward_for(rcpt, mediator_did, inner)


def test_a_live_socket_that_stops_reading_is_closed_over_its_send_budget_and_its_messages_stay_queued(deploy):
    wallet, rcpt = deploy.grant()
    live = wallet.pack(wallet.message(PICKUP + "live-delivery-change", {"live_delivery": True}), deploy.mediator_did)
    addr = ("127.0.0.1", deploy.ports[0])

    async def body() -> list[str]:
        # One socket of the wallet stops reading once live; its other one (the phone) reads everything.
        stalled = await asyncio.to_thread(StalledSocket.open, addr, deploy.host, live.decode(), path="/didcomm/ws")
        status, _ = wallet.unpack(stalled.reply)
        assert status["body"] == {"message_count": 0, "live_delivery": True}

        def read_once_closed() -> list[tuple[int, bytes]]:
            # Start reading once the server says it closed the socket and Daphne's close-handshake
            # timeout has run out for a close queued after that (tests/support/stalled_socket.py):
            # Daphne resets a peer that has not answered its close 1 s after the close was queued,
            # so the server queues the close only once the report before it has left
            # (sendbudget.drained: while the reader takes bytes, or 5 s without one, so a slow read
            # under load still gets it).
            deadline = time.monotonic() + 60
            while BUDGET_LOG not in deploy.servers[0].log() and time.monotonic() < deadline:
                time.sleep(0.01)
            close_timeout_passed(addr, deploy.host)
            return stalled.read_to_close()

        reader = asyncio.create_task(asyncio.to_thread(read_once_closed))
        async with deploy.socket() as phone:
            # Its own message: the stalled socket's, sent again, would be a replay (e.m.msg.replay).
            phone_live = wallet.message(PICKUP + "live-delivery-change", {"live_delivery": True})
            await phone.send(wallet.pack(phone_live, deploy.mediator_did).decode())
            assert wallet.unpack(await asyncio.wait_for(phone.recv(), 10))[0]["body"]["live_delivery"] is True
            sent: list[str] = []
            for n in range(60):  # ~120 KB per push frame; the budget is 256 KiB
                assert (
                    await asyncio.to_thread(deploy.post, _big_forward(rcpt, deploy.mediator_did, n))
                ).status_code == 202
                pushed, _ = wallet.unpack(await asyncio.wait_for(phone.recv(), 10))
                assert pushed["type"] == PICKUP + "delivery" and len(pushed["attachments"]) == 1
                sent.append(pushed["attachments"][0]["id"])
                if BUDGET_LOG in deploy.servers[0].log():
                    break
            assert deploy.servers[0].log().count(BUDGET_LOG) == 1, f"not closed after {len(sent)} messages"

            # Read late: the pushes queued within the budget, then the problem report and 4509.
            frames = await asyncio.wait_for(reader, 15)
            stalled.close()
            (op, report), close = frames[-2:]
            assert (op, json.loads(report)["type"], json.loads(report)["body"]) == (
                1,
                PROBLEM,
                {"code": "e.p.xfer.send-budget-exceeded", "comment": "send budget exceeded: messages stay queued"},
            )
            assert close == (8, struct.pack("!H", 4509))
            late = [wallet.unpack(payload)[0]["attachments"][0]["id"] for _, payload in frames[:-2]]
            assert late == sent[: len(late)] and 0 < len(late) < len(sent)

            # The phone was never over budget and keeps getting pushes.
            assert (
                await asyncio.to_thread(deploy.post, _big_forward(rcpt, deploy.mediator_did, 99))
            ).status_code == 202
            sent.append(wallet.unpack(await asyncio.wait_for(phone.recv(), 10))[0]["attachments"][0]["id"])
        return sent

    sent = asyncio.run(body())
    # A push is never the only copy: everything is still queued, oldest first, until messages-received.
    status = deploy.send(wallet, wallet.message(PICKUP + "status-request"))
    assert status["body"]["message_count"] == len(sent)
    delivery = deploy.send(wallet, wallet.message(PICKUP + "delivery-request", {"limit": 100}))
    assert [a["id"] for a in delivery["attachments"]] == sent
    assert rcpt.unpack(delivery["attachments"][0]["data"]["json"])[0]["id"] == "m0"


def test_the_socket_answers_bad_frames_with_problem_reports_and_stays_open(deploy):
    from apps.tenants.models import Tenant

    Tenant.objects.filter(pk=deploy.tenant.pk).update(max_body_bytes=32 * 1024)
    wallet, rcpt = deploy.grant()
    ping = wallet.message("https://didcomm.org/trust-ping/2.0/ping", {"response_requested": True})

    async def body():
        async with deploy.socket() as ws:
            answers = []
            for frame in (
                "x" * (32 * 1024 + 1),  # over the tenant's max_body_bytes: the same cap as POST /didcomm
                b"\xff\xfe not json",  # binary frames are messages too
                json.dumps(ping),  # plaintext: must be encrypted
            ):
                await ws.send(frame)
                answers.append(json.loads(await asyncio.wait_for(ws.recv(), 10)))
            assert [(a["type"], a["body"]["code"]) for a in answers] == [
                (PROBLEM, "e.p.xfer.too-big"),
                (PROBLEM, "e.p.msg"),
                (PROBLEM, "e.p.trust.unauthenticated"),
            ]
            # Still open: a packed ping (a binary frame) is answered, authcrypt from the mediator.
            await ws.send(wallet.pack(ping, deploy.mediator_did))
            pong, decrypted = wallet.unpack(await asyncio.wait_for(ws.recv(), 10))
            assert pong["type"] == "https://didcomm.org/trust-ping/2.0/ping-response" and pong["thid"] == ping["id"]
            assert decrypted.sender_kid == deploy.mediator_did + "#key-2"

    asyncio.run(body())


@pytest.mark.parametrize(
    ("case", "code", "close"),
    [
        ("unknown host", "e.p.xfer.unknown-mediator", 4404),
        ("didcomm off", "e.p.xfer.unknown-mediator", 4404),
        ("suspended", "e.p.me.unavailable", 4503),
    ],
)
def test_a_refused_upgrade_gets_a_problem_report_then_its_close_code(deploy, case, code, close):
    from apps.didcomm.policy import policy_update
    from apps.tenants.services import Actor, tenant_suspend

    host = deploy.host
    if case == "unknown host":
        host = "nobody.mediator.test"
    elif case == "didcomm off":
        policy_update(tenant=deploy.tenant, actor=Actor(None, "cli"), enabled=False)
    else:
        tenant_suspend(tenant=deploy.tenant, actor=Actor(None, "cli"))

    async def body():
        async with deploy.socket(host=host) as ws:
            report = json.loads(await asyncio.wait_for(ws.recv(), 10))
            await ws.wait_closed()
            return report, ws.close_code

    report, close_code = asyncio.run(body())
    assert (report["type"], report["body"]["code"], close_code) == (PROBLEM, code, close)
