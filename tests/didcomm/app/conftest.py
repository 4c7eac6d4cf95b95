"""Fixtures for the DIDComm front door: tenants A and B (tests/conftest.py), a poster for
`POST /didcomm`, agents (alice's wallet on tenant A, carol's on tenant B), and for the end-to-end
tests a deployment of real Daphne processes with its HTTP clients and sockets."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

import httpx
import pytest
from websockets.asyncio.client import connect

from tests.conftest import HOST_A, HOST_B
from tests.support.didcomm_agent import CM2, ENCRYPTED, Agent
from tests.support.entry import Poster, Response
from tests.support.servers import free_port, start_daphne

REDIS_DB_URL = "redis://127.0.0.1:6379/11"


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


class Deployment:
    """`processes` Daphne processes of one tenant ("dc", at the first one's address) sharing the Redis
    channel layer, an HTTP client for each, and the mediator DID its invitation names."""

    def __init__(self, tmp_path, processes: int = 1, env: dict | None = None):
        from apps.tenants.services import tenant_create

        self.ports = [free_port() for _ in range(processes)]
        self.host = f"127.0.0.1:{self.ports[0]}"
        self.tenant = tenant_create(slug="dc", domain=self.host)
        env = {"REDIS_URL": REDIS_DB_URL, **(env or {})}
        self.servers = [start_daphne(tmp_path, port=p, env=env, wait_host=self.host) for p in self.ports]
        self.http = [httpx.Client(base_url=f"http://127.0.0.1:{p}", headers={"Host": self.host}) for p in self.ports]
        inv = self.http[0].get("/didcomm/invitation").json()
        self.mediator_did = inv["from"]

    def post(self, body: bytes, i: int = 0) -> httpx.Response:
        return self.http[i].post("/didcomm", content=body, headers={"Content-Type": ENCRYPTED})

    def send(self, agent: Agent, message: dict, i: int = 0) -> dict | None:
        resp = self.post(agent.pack(message, self.mediator_did), i)
        assert resp.status_code in (200, 202), resp.text
        return agent.unpack(resp.content)[0] if resp.content else None

    def grant(self) -> tuple[Agent, Agent]:
        """A wallet granted mediation, and the recipient it added to its keylist."""
        wallet, rcpt = Agent(), Agent()
        self.send(wallet, wallet.message(CM2 + "mediate-request"))
        self.send(
            wallet, wallet.message(CM2 + "keylist-update", {"updates": [{"recipient_did": rcpt.did, "action": "add"}]})
        )
        return wallet, rcpt

    def socket(self, path: str = "/didcomm/ws", *, host: str | None = None, i: int = 0):
        """A WebSocket to process `i` (await it, or `async with` it) with the tenant's Host or `host`;
        no compression, pings or size limit on the client's side, so only the server's rules apply."""
        return connect(
            f"ws://{host or self.host}{path}",
            host="127.0.0.1",
            port=self.ports[i],
            compression=None,
            proxy=None,
            ping_interval=None,
            max_size=None,
        )

    def close(self) -> None:
        for c in self.http:
            c.close()
        for s in self.servers:
            s.stop()


@pytest.fixture
def deployment(transactional_db, tmp_path) -> Iterator[Callable[..., Deployment]]:
    """Starts Deployments (`deployment(processes=1, env=None)`) on the test's committed data, and
    stops them after the test."""
    started: list[Deployment] = []

    def start(processes: int = 1, env: dict | None = None) -> Deployment:
        started.append(Deployment(tmp_path, processes=processes, env=env))
        return started[-1]

    yield start
    for d in started:
        d.close()
