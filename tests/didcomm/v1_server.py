"""A real mediator for the DIDComm v1 end-to-end tests: a tenant, a Celery worker on its own queue (the
outbound POSTs ACA-Py needs), and a Daphne process whose DIDComm v1 outbound queue is that worker's."""

from __future__ import annotations

import httpx

from apps.tenants.services import tenant_create
from tests.support.servers import free_port, start_celery_worker, start_daphne

REDIS_DB = 11


class V1Mediator:
    """Tenant `peers` served at http://127.0.0.1:<port>, with its OOB 1.1 invitation URL."""

    def __init__(self, tmp_path, *, redis: bool = False):
        port = free_port()
        self.host = f"127.0.0.1:{port}"
        self.tenant = tenant_create(slug="peers", domain=self.host)
        self.worker = start_celery_worker(tmp_path, redis_db=REDIS_DB)
        env = {
            "CELERY_BROKER_URL": self.worker.broker_url,
            "MEDIATOR_DIDCOMM_OUTBOUND_QUEUE": self.worker.queue,
            "MEDIATOR_DIDCOMM_OUTBOUND_ALLOW_PRIVATE": "1",
        }
        if redis:
            env["REDIS_URL"] = f"redis://127.0.0.1:6379/{REDIS_DB}"
        try:
            self.server = start_daphne(tmp_path, port=port, env=env, wait_host=self.host)
        except BaseException:
            self.worker.stop()
            raise
        self.http = httpx.Client(base_url=self.server.url, headers={"Host": self.host}, timeout=10)
        resp = self.http.get("/didcomm/invitation", params={"version": "1", "form": "url"})
        assert resp.status_code == 200, resp.text
        self.invitation_url = resp.text
        self.invitation = self.http.get("/didcomm/invitation", params={"version": "1"}).json()

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}/didcomm"

    def logs(self) -> str:
        return f"--- daphne ---\n{self.server.log()[-6000:]}\n--- celery ---\n{self.worker.log()[-6000:]}"

    def close(self) -> None:
        self.http.close()
        self.server.stop()
        self.worker.stop()
