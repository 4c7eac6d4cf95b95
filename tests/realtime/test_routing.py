"""The project's WebSocket routing (mediator_project/asgi.py): an upgrade to a path no route serves
is refused like a host no mediator serves (accepted, one frame saying why, close 4404), never
URLRouter's "No route found" (a traceback in Daphne's log and a 500). Behind nginx such paths
arrive raw: nginx normalises `//ws` or `/x/../ws` to pick its location, then passes the URI as
sent. /ws and /didcomm/ws themselves still reach their consumers."""

from __future__ import annotations

import json

import pytest
from channels.testing import WebsocketCommunicator

from mediator_project.asgi import application
from tests.conftest import HOST_A

from .conftest import expect_close, run

DECENTRL_PATHS = ["/", "/ws/", "/nonexistent", "//ws", "/./ws", "/x/../ws", "/ws/x", "/wss", "/didcommx/ws"]
DIDCOMM_PATHS = [
    "/didcomm",
    "/didcomm/",
    "/didcomm//ws",
    "/didcomm/./ws",
    "/didcomm/../ws",
    "/didcomm/ws/",
    "/didcomm/x/../ws",
]


def _socket(path: str) -> WebsocketCommunicator:
    comm = WebsocketCommunicator(application, path, headers=[(b"host", HOST_A.encode())])
    comm.scope["client"] = ("127.0.0.9", 5555)
    return comm


@pytest.mark.parametrize("path", DECENTRL_PATHS)
def test_an_upgrade_to_an_unrouted_path_is_refused_with_unknown_mediator_and_4404(path):
    async def body():
        comm = _socket(path)
        assert await comm.connect() == (True, None)
        assert await comm.receive_from() == '{"type":"ERROR","code":"UNKNOWN_MEDIATOR"}'
        await expect_close(comm, 4404)
        await comm.wait()  # the application has returned, without an exception

    run(body)


@pytest.mark.parametrize("path", DIDCOMM_PATHS)
def test_an_unrouted_path_under_didcomm_is_refused_with_a_problem_report_and_4404(path):
    async def body():
        comm = _socket(path)
        assert await comm.connect() == (True, None)
        report = json.loads(await comm.receive_from())
        assert set(report) == {"id", "typ", "type", "body"}
        assert (report["typ"], report["type"], report["body"]) == (
            "application/didcomm-plain+json",
            "https://didcomm.org/report-problem/2.0/problem-report",
            {"code": "e.p.xfer.unknown-mediator", "comment": "no WebSocket endpoint at this path"},
        )
        await expect_close(comm, 4404)
        await comm.wait()

    run(body)


def test_a_client_gone_before_the_handshake_ends_the_catch_all_quietly():
    async def body():
        comm = _socket("/nonexistent")
        await comm.send_input({"type": "websocket.disconnect", "code": 1006})
        await comm.wait()
        # The application has returned: nothing more can be sent.
        assert comm.output_queue.empty()

    run(body)


def test_ws_and_didcomm_ws_still_reach_their_consumers(tenant_a):
    """A served host: /ws waits for AUTHENTICATE (nothing sent, no close), /didcomm/ws for a
    message; the catch-all would have refused both at once. Each consumer's answer to a first frame
    that is not a message is the first frame it sends: a refusal at connect would have come before."""

    async def body():
        for path in ("/ws", "/didcomm/ws"):
            comm = _socket(path)
            assert await comm.connect() == (True, None)
            await comm.send_to(text_data="not a message")
            answer = json.loads(await comm.receive_from(timeout=10))
            if path == "/ws":
                assert answer == {"type": "AUTH_FAILED", "code": "INVALID_MESSAGE"}
                await expect_close(comm, 4002)
            else:
                assert (answer["type"], answer["body"]) == (
                    "https://didcomm.org/report-problem/2.0/problem-report",
                    {"code": "e.p.msg", "comment": "envelope is not JSON"},
                )
            await comm.disconnect()

    run(body)
