"""The wake as deployed: a real `celery worker` process consuming the Redis broker (not eager), a real
Daphne sending it the wake tasks, and FCM's strict stand-in (tests/support/push_standins.py: the OAuth
JWT checked against the service account's key, the message against FCM's schema). A DIDComm v2 wallet
registers its FCM token over HTTP and sleeps (no socket); a forward to it over a real socket makes
exactly one request at the stand-in, with its token; a second forward before any pickup makes none
(the worker has run everything it was given: `CeleryWorker.barrier`)."""

from __future__ import annotations

import time

import httpx
import pytest

from apps.didcomm.models import QueuedMessage
from apps.didcomm.recipients import did_hash
from apps.messaging.models import PendingQueueDepth
from apps.push import services
from apps.push.models import Device, PushProvider
from apps.tenants.services import tenant_create
from tests.support import push_standins
from tests.support.didcomm_agent import CM2, ENCRYPTED, Agent, forward_for
from tests.support.servers import free_port, start_celery_worker, start_daphne

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

fcm = push_standins.fcm  # the fixture: FCM's stand-in

PUSH_FCM = "https://didcomm.org/push-notifications-fcm/1.0/"
TOKEN = "wake-worker:APA91bF" + "w" * 140


@pytest.fixture
def deployed(transactional_db, tmp_path, fcm):
    """(tenant, HTTP client with its Host, worker) of a Daphne whose wakes the worker sends to `fcm`."""
    port = free_port()
    host = f"127.0.0.1:{port}"
    tenant = tenant_create(slug="wake", domain=host)
    provider = PushProvider(tenant=tenant, kind=PushProvider.Kind.FCM)
    provider.seal(fcm.account().info)
    provider.save()
    worker = start_celery_worker(tmp_path, env={"PUSH_FCM_URL": fcm.url})
    try:
        server = start_daphne(
            tmp_path,
            port=port,
            wait_host=host,
            env={"PUSH_FCM_URL": fcm.url, "CELERY_BROKER_URL": worker.broker_url, "PUSH_QUEUE": worker.queue},
        )
    except BaseException:
        worker.stop()
        raise
    http = httpx.Client(base_url=f"http://{host}", timeout=30)
    yield tenant, http, worker
    http.close()
    server.stop()
    worker.stop()


def _send(http: httpx.Client, mediator_did: str, wallet: Agent, type_: str, body: dict) -> httpx.Response:
    return http.post(
        "/didcomm", content=wallet.pack(wallet.message(type_, body), mediator_did), headers={"Content-Type": ENCRYPTED}
    )


def _until(check, what: str, timeout: float = 30):
    deadline = time.monotonic() + timeout
    while not (value := check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout} s")
        time.sleep(0.05)
    return value


def test_a_forward_to_a_sleeping_wallet_reaches_fcm_once_through_the_worker(deployed, fcm):
    tenant, http, worker = deployed
    mediator_did = http.get("/didcomm/invitation").json()["from"]
    wallet, rcpt = Agent(), Agent()
    assert _send(http, mediator_did, wallet, CM2 + "mediate-request", {}).status_code == 200
    update = {"updates": [{"recipient_did": rcpt.did, "action": "add"}]}
    assert _send(http, mediator_did, wallet, CM2 + "keylist-update", update).status_code == 200
    device = {"device_token": TOKEN, "device_platform": "android"}
    assert _send(http, mediator_did, wallet, PUSH_FCM + "set-device-info", device).status_code == 202
    subject = services.subject_for_mediation(did_hash(wallet.did))
    [registered] = Device.objects.filter(tenant=tenant)
    assert (registered.subject, registered.service, registered.token) == (subject, "fcm", TOKEN)

    resp = http.post("/didcomm", content=forward_for(rcpt, mediator_did), headers={"Content-Type": ENCRYPTED})
    assert resp.status_code == 202, resp.text
    _until(lambda: fcm.messages, "a request at the FCM stand-in")
    worker.barrier()
    assert [(m["token"], m["data"]) for m in fcm.messages] == [(TOKEN, {"type": "wake"})]
    assert len(fcm.exchanges) == 1  # the worker's OAuth exchange, verified by the stand-in
    row = PendingQueueDepth.objects.get(tenant=tenant, recipient_did=subject)
    assert (row.devices, row.woken, QueuedMessage.objects.filter(tenant=tenant).count()) == (1, True, 1)
    assert Device.objects.get(pk=registered.pk).last_woken_at is not None

    # Still asleep, not picked up: the next forward is coalesced, nothing more reaches FCM.
    resp = http.post("/didcomm", content=forward_for(rcpt, mediator_did), headers={"Content-Type": ENCRYPTED})
    assert resp.status_code == 202, resp.text
    worker.barrier()
    assert len(fcm.messages) == 1
    assert QueuedMessage.objects.filter(tenant=tenant).count() == 2
