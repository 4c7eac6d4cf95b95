"""A client of `POST /didcomm` on one tenant's host (DidcommPoster) and its fixtures: the DIDComm front
door's tests (tests/didcomm/app), the console's DIDComm section and the usage tests take them from here."""

from __future__ import annotations

import json

import pytest

from tests.conftest import HOST_A, HOST_B
from tests.support.didcomm_agent import ENCRYPTED, Agent


class DidcommPoster:
    def __init__(self, client, host: str):
        self.client, self.host = client, host

    def invitation(self) -> dict:
        resp = self.client.get("/didcomm/invitation", HTTP_HOST=self.host)
        assert resp.status_code == 200, resp.content
        return json.loads(resp.content)

    @property
    def mediator_did(self) -> str:
        return self.invitation()["from"]

    def post(self, body: bytes, content_type: str = ENCRYPTED, **extra):
        return self.client.post("/didcomm", data=body, content_type=content_type, HTTP_HOST=self.host, **extra)

    def send(self, agent: Agent, message: dict, **kw):
        """POST an authcrypt message; (status, decrypted answer or None, response)."""
        resp = self.post(agent.pack(message, self.mediator_did, **kw))
        answer = None
        if resp.content and resp["Content-Type"] == ENCRYPTED:
            answer, _ = agent.unpack(resp.content)
        return resp.status_code, answer, resp


@pytest.fixture
def didcomm_a(client, tenant_a) -> DidcommPoster:
    return DidcommPoster(client, HOST_A)


@pytest.fixture
def didcomm_b(client, tenant_b) -> DidcommPoster:
    return DidcommPoster(client, HOST_B)


@pytest.fixture
def wallet() -> Agent:
    return Agent()
