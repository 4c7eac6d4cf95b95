"""A client of `POST /didcomm` on one tenant's host (DidcommPoster) and its fixtures: the DIDComm front
door's tests (tests/didcomm/app), the console's DIDComm section and the usage tests take them from here."""

from __future__ import annotations

import json

import pytest

from tests.conftest import HOST_A, HOST_B
from tests.support.didcomm_agent import ENCRYPTED, Agent
from tests.support.entry import Poster, Response


class DidcommPoster:
    """`POST /didcomm` through the production entry, in process (tests/support/entry.py)."""

    def __init__(self, host: str):
        self.http, self.host = Poster(host), host

    def invitation(self) -> dict:
        resp = self.http.get("/didcomm/invitation")
        assert resp.status_code == 200, resp.content
        return json.loads(resp.content)

    @property
    def mediator_did(self) -> str:
        return self.invitation()["from"]

    def post(self, body: bytes, content_type: str = ENCRYPTED, **extra) -> Response:
        return self.http.post("/didcomm", body, content_type, **extra)

    def send(self, agent: Agent, message: dict, **kw):
        """POST an authcrypt message; (status, decrypted answer or None, response)."""
        resp = self.post(agent.pack(message, self.mediator_did, **kw))
        answer = None
        if resp.content and resp["Content-Type"] == ENCRYPTED:
            answer, _ = agent.unpack(resp.content)
        return resp.status_code, answer, resp


@pytest.fixture
def didcomm_a(tenant_a) -> DidcommPoster:
    return DidcommPoster(HOST_A)


@pytest.fixture
def didcomm_b(tenant_b) -> DidcommPoster:
    return DidcommPoster(HOST_B)


@pytest.fixture
def wallet() -> Agent:
    return Agent()
