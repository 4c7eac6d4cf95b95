"""A real mediator for the DIDComm v1 end-to-end tests: a tenant, a Celery worker on its own queue (the
outbound POSTs ACA-Py needs), and a Daphne process whose DIDComm v1 outbound queue is that worker's.
Agents reach Daphne through a WireTap (a plain TCP pipe that keeps what they send), so a run can record
fixtures: with MEDIATOR_RECORD_FIXTURES=1, `record` writes them to tests/interop/fixtures/."""

from __future__ import annotations

import json
import os
from pathlib import Path

import httpx

from apps.didcomm.identity import identity_current
from apps.tenants.services import tenant_create
from tests.interop.wiretap import WireTap
from tests.support.servers import free_port, start_celery_worker, start_daphne

REDIS_DB = 11
FIXTURES = Path(__file__).resolve().parent / "fixtures"


class V1Mediator:
    """Tenant `peers` served at http://127.0.0.1:<port>, with its OOB 1.1 invitation URL."""

    def __init__(self, tmp_path, *, redis: bool = False, env: dict | None = None):
        """`env`: settings for both processes (the push providers' stand-in URLs); the worker takes the
        wake tasks too (PUSH_QUEUE)."""
        port = free_port()
        self.tap = WireTap(upstream_port=port)
        self.host = f"127.0.0.1:{self.tap.port}"
        self.tenant = tenant_create(slug="peers", domain=self.host)
        self.worker = start_celery_worker(tmp_path, redis_db=REDIS_DB, env=env)
        env = {
            **(env or {}),
            "CELERY_BROKER_URL": self.worker.broker_url,
            "MEDIATOR_DIDCOMM_OUTBOUND_QUEUE": self.worker.queue,
            "MEDIATOR_DIDCOMM_OUTBOUND_ALLOW_PRIVATE": "1",
            "PUSH_QUEUE": self.worker.queue,
        }
        if redis:
            env["REDIS_URL"] = f"redis://127.0.0.1:6379/{REDIS_DB}"
        try:
            self.server = start_daphne(tmp_path, port=port, env=env, wait_host=self.host)
        except BaseException:
            self.worker.stop()
            raise
        self.http = httpx.Client(base_url=f"http://{self.host}", timeout=10)
        resp = self.http.get("/didcomm/invitation", params={"version": "1", "form": "url"})
        assert resp.status_code == 200, resp.text
        self.invitation_url = resp.text
        self.invitation = self.http.get("/didcomm/invitation", params={"version": "1"}).json()

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}/didcomm"

    def record(self, name: str, *, agent: str) -> dict:
        """What the agents sent to /didcomm (HTTP bodies and socket frames, in order) and the mediator's keys
        that open them; written to tests/interop/fixtures/<name> when MEDIATOR_RECORD_FIXTURES=1."""
        identity = identity_current(tenant=self.tenant)
        sent = [s for s in self.tap.sent() if s.target.startswith("/didcomm") and s.method in ("POST", "WS") and s.body]
        fixture = {
            "agent": agent,
            "host": self.host,
            "identity": {
                "did": identity.did,
                "http_uri": identity.http_uri,
                "ws_uri": identity.ws_uri,
                "authentication_secret": identity.authentication_key.secret.hex(),
                "agreement_secret": identity.agreement_key.secret.hex(),
            },
            "invitation": self.invitation,
            "messages": [
                {
                    "transport": "ws" if s.method == "WS" else "http",
                    "content_type": s.content_type,
                    "envelope": json.loads(s.body),
                }
                for s in sent
            ],
        }
        if os.environ.get("MEDIATOR_RECORD_FIXTURES") == "1":
            FIXTURES.joinpath(name).write_text(json.dumps(fixture, indent=1) + "\n")
        return fixture

    def logs(self) -> str:
        return f"--- daphne ---\n{self.server.log()[-6000:]}\n--- celery ---\n{self.worker.log()[-6000:]}"

    def close(self) -> None:
        self.http.close()
        self.server.stop()
        self.worker.stop()
        self.tap.close()
