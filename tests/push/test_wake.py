"""When a wake leaves and what its answer does (apps/messaging/wake.py, apps/push/sender.py,
docs/push.md): a stored message for a subject with a device and no open socket wakes it once
until its next pickup, never more often than the interval; a dead token is pruned and nothing
else is; a provider's Retry-After is honoured; a provider that is down delays the wake, never the
message. The wake task runs eagerly (Celery's own eager mode) and sends to the strict webhook
stand-in (tests/support/webhook_standin.py) over a real socket.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
import time_machine
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from apps.didcomm import forward as storage
from apps.didcomm import queue
from apps.didcomm.models import Mediation, QueuedMessage, RecipientKey
from apps.didcomm.recipients import did_hash
from apps.messaging import presence, wake
from apps.messaging.models import PendingQueueDepth
from apps.ops import metrics
from apps.push import sender, services
from apps.push.models import Device, PushPolicy, PushProvider
from mediator_project.celery import app as celery_app
from tests.support.registration import contract_both_ways, register
from tests.support.servers import free_port
from tests.support.webhook_standin import WebhookStandin

SECRET = "s" * 40
TOKEN = "fcm-token-1"
RECIPIENT = "did:example:recipient"
T0 = 1_900_000_000


@pytest.fixture(scope="module")
def gateway():
    server = WebhookStandin(SECRET)
    yield server
    server.close()


@pytest.fixture(autouse=True)
def eager(settings, gateway):
    settings.PUSH_WEBHOOK_ALLOW_HTTP = True
    settings.PUSH_WAKE_INTERVAL_S = 60
    gateway.accepted.clear()
    gateway.refused.clear()
    gateway.answers.clear()
    celery_app.conf.task_always_eager = True
    yield
    celery_app.conf.task_always_eager = False


def _webhook(tenant, url: str) -> PushProvider:
    provider = PushProvider(tenant=tenant, kind=PushProvider.Kind.WEBHOOK, settings={"url": url})
    provider.seal({"secret": SECRET})
    provider.save()
    return provider


def _grant(tenant, client="did:example:client") -> RecipientKey:
    mediation = Mediation.objects.create(
        tenant=tenant, client_did=client, client_hash=did_hash(client), state=Mediation.State.GRANTED
    )
    return RecipientKey.objects.create(
        tenant=tenant, mediation=mediation, recipient_did=RECIPIENT, lookup_hash=did_hash(RECIPIENT)
    )


def _subject(rk: RecipientKey) -> str:
    return services.subject_for_mediation(rk.mediation.client_hash)


@pytest.fixture
def client(tenant_a, gateway):
    """A granted DIDComm client of tenant A with an FCM device, woken through the webhook."""
    rk = _grant(tenant_a)
    _webhook(tenant_a, gateway.url)
    services.device_set(tenant=tenant_a, subject=_subject(rk), service="fcm", token=TOKEN, platform="android")
    return rk


def _forward(rk: RecipientKey, capture) -> storage.ForwardStored:
    now = timezone.now()
    req = storage.ForwardRequest(
        tenant_id=rk.tenant_id, lookup_hash=did_hash(RECIPIENT), cap=1000, reject=False, message_id=uuid.uuid4(),
        data='{"json":{"x":1}}', now=now, expires_at=now + timedelta(hours=1), outbound=False,
    )  # fmt: skip
    with capture(execute=True):
        stored = storage.store(req)
    assert stored.outcome == storage.STORED
    return stored


def _row(tenant, subject) -> tuple[int, bool, int]:
    return (
        PendingQueueDepth.objects.filter(tenant=tenant, recipient_did=subject)
        .values_list("devices", "woken", "woken_at")
        .get()
    )


def test_a_hundred_forwards_to_a_sleeping_client_wake_it_once(client, gateway, django_capture_on_commit_callbacks):
    coalesced = metrics.PUSH_COALESCED._value.get()
    with time_machine.travel(T0, tick=False):
        for _ in range(100):
            _forward(client, django_capture_on_commit_callbacks)
    assert [(b["tenant"], b["service"], b["token"], b["platform"], b["visible"]) for b in gateway.accepted] == [
        ("tenant-a", "fcm", TOKEN, "android", False)
    ]
    assert metrics.PUSH_COALESCED._value.get() - coalesced == 99
    assert _row(client.tenant, _subject(client)) == (1, True, T0)
    assert Device.objects.get().last_woken_at is not None
    assert PushProvider.objects.get().state == PushProvider.State.OK


def test_the_wake_says_nothing_identifying(client, gateway, django_capture_on_commit_callbacks):
    _forward(client, django_capture_on_commit_callbacks)
    [body] = gateway.accepted
    assert set(body.values()) == {"wake", "tenant-a", "fcm", TOKEN, "android", False, None}
    assert RECIPIENT not in str(body) and "did:example:client" not in str(body)


def test_no_wake_while_a_socket_is_live_and_one_once_it_closes(client, gateway, django_capture_on_commit_callbacks):
    subject = _subject(client)
    presence.socket_entered(tenant_id=client.tenant_id, did=subject, now_s=int(timezone.now().timestamp()))
    stored = _forward(client, django_capture_on_commit_callbacks)
    assert stored.may_have_socket is True and gateway.accepted == []
    presence.socket_left(tenant_id=client.tenant_id, did=subject)
    stored = _forward(client, django_capture_on_commit_callbacks)
    assert stored.may_have_socket is False and len(gateway.accepted) == 1


def test_a_pickup_lets_the_next_message_wake_again_no_sooner_than_the_interval(
    client, gateway, django_capture_on_commit_callbacks
):
    subject = _subject(client)
    with time_machine.travel(T0, tick=False):
        _forward(client, django_capture_on_commit_callbacks)
    with time_machine.travel(T0 + 10, tick=False):
        _forward(client, django_capture_on_commit_callbacks)  # coalesced: no pickup yet
        assert len(gateway.accepted) == 1
        queue.messages_rows(mediation=client.mediation, recipient=None, limit=10)  # a pickup
        assert _row(client.tenant, subject)[1] is False
        _forward(client, django_capture_on_commit_callbacks)
    # Claimed at once, to leave when the interval since the last wake has passed.
    assert _row(client.tenant, subject) == (1, True, T0 + 60)
    assert wake.claim(tenant_id=client.tenant_id, subject=subject, now_s=T0 + 10, interval_s=60) is None
    services.picked_up(tenant_id=client.tenant_id, subject=subject)
    assert wake.claim(tenant_id=client.tenant_id, subject=subject, now_s=T0 + 70, interval_s=60) == 50


def test_the_tenants_own_wake_interval_is_what_the_claim_honours(
    client, tenant_b, gateway, django_capture_on_commit_callbacks
):
    """A tenant's interval (PushPolicy.wake_interval_s) replaces the deployment's for its clients
    only; saving it takes effect at once (the per-process cache is cleared on save)."""
    subject = _subject(client)
    other = _grant(tenant_b, "did:example:other-client")
    other_subject = _subject(other)
    services.device_set(tenant=tenant_b, subject=other_subject, service="fcm", token=TOKEN, platform=None)
    PushPolicy.objects.create(tenant=client.tenant, wake_interval_s=300)
    for tenant_id, s in ((client.tenant_id, subject), (tenant_b.pk, other_subject)):
        assert wake.claim(tenant_id=tenant_id, subject=s, now_s=T0, interval_s=60) == 0
        services.picked_up(tenant_id=tenant_id, subject=s)
    with time_machine.travel(T0 + 10, tick=False):
        assert sender.wake_claim(tenant_id=client.tenant_id, subject=subject, due=True) == 290
        assert sender.wake_claim(tenant_id=tenant_b.pk, subject=other_subject, due=True) == 50
        services.picked_up(tenant_id=client.tenant_id, subject=subject)
        PushPolicy.objects.filter(tenant=client.tenant).get().save()  # unchanged: still 300
        assert sender.wake_claim(tenant_id=client.tenant_id, subject=subject, due=True) == 590
    # Back to the deployment's default once the tenant clears its choice.
    policy = PushPolicy.objects.get(tenant=client.tenant)
    policy.wake_interval_s = None
    policy.save()
    services.picked_up(tenant_id=client.tenant_id, subject=subject)
    with time_machine.travel(T0 + 1000, tick=False):
        assert sender.wake_claim(tenant_id=client.tenant_id, subject=subject, due=True) == 0
    assert _row(client.tenant, subject) == (1, True, T0 + 1000)


def test_a_visible_alert_is_sent_only_when_the_tenant_chose_it(client, gateway, django_capture_on_commit_callbacks):
    policy = PushPolicy.objects.create(
        tenant=client.tenant, visible=False, title_loc_key="t_key", body_loc_key="b_key", collapse_id="wake"
    )
    _forward(client, django_capture_on_commit_callbacks)
    services.picked_up(tenant_id=client.tenant_id, subject=_subject(client))
    policy.visible = True
    policy.save()
    with time_machine.travel(timezone.now() + timedelta(seconds=61), tick=False):
        _forward(client, django_capture_on_commit_callbacks)
    keys = ("visible", "title_loc_key", "body_loc_key", "collapse_id")
    assert [tuple(b[k] for k in keys) for b in gateway.accepted] == [
        (False, None, None, None),  # the keys alone say nothing: silent until `visible`
        (True, "t_key", "b_key", "wake"),
    ]


def test_messages_received_and_a_socket_opening_are_pickups(client, django_capture_on_commit_callbacks):
    subject = _subject(client)
    _forward(client, django_capture_on_commit_callbacks)
    queue.messages_received(mediation=client.mediation, ids=[])
    assert _row(client.tenant, subject)[1] is False
    PendingQueueDepth.objects.filter(recipient_did=subject).update(woken=True)
    presence.socket_entered(tenant_id=client.tenant_id, did=subject, now_s=T0)
    assert _row(client.tenant, subject)[1] is False


def test_a_dead_token_is_pruned(client, gateway, django_capture_on_commit_callbacks):
    gateway.answer(TOKEN, 410)
    pruned = metrics.PUSH_PRUNED.labels("webhook")._value.get()
    _forward(client, django_capture_on_commit_callbacks)
    assert Device.objects.count() == 0
    assert metrics.PUSH_PRUNED.labels("webhook")._value.get() - pruned == 1
    # No device left: the next forward costs nothing and announces nothing.
    assert _row(client.tenant, _subject(client))[:2] == (0, False)  # no device: nothing to hold
    assert _forward(client, django_capture_on_commit_callbacks).may_have_socket is False


def test_a_refused_request_keeps_the_device_and_gives_the_wake_back(
    client, gateway, django_capture_on_commit_callbacks
):
    gateway.answer(TOKEN, 400)
    _forward(client, django_capture_on_commit_callbacks)
    assert Device.objects.count() == 1
    provider = PushProvider.objects.get()
    assert (provider.state, provider.last_error) == (PushProvider.State.FAILING, "failed: http_400")
    assert _row(client.tenant, _subject(client))[1] is False  # the next message tries again


def test_a_wrong_secret_is_refused_by_the_gateway_and_keeps_the_device(
    client, gateway, django_capture_on_commit_callbacks
):
    provider = PushProvider.objects.get()
    provider.seal({"secret": "x" * 40})
    provider.save()
    _forward(client, django_capture_on_commit_callbacks)
    assert gateway.refused == ["signature"] and Device.objects.count() == 1
    assert PushProvider.objects.get().last_error == "failed: http_401"


def test_retry_after_is_honoured_and_backoff_is_bounded(client, gateway, settings):
    subject = _subject(client)
    assert wake.claim(tenant_id=client.tenant_id, subject=subject, now_s=T0, interval_s=60) == 0
    gateway.answer(TOKEN, 429, {"Retry-After": "120"})
    done = sender.wake_send(tenant_id=client.tenant_id, subject=subject)
    assert [(r.device_id, r.attempt, r.delay_s) for r in done.retries] == [(Device.objects.get().pk, 1, 120.0)]
    gateway.answer(TOKEN, 500)
    done = sender.device_resend(tenant_id=client.tenant_id, device_id=Device.objects.get().pk, attempt=3)
    [retry] = done.retries
    assert retry.attempt == 4 and 20.0 <= retry.delay_s <= 40.0  # base 5 s * 2^3, half to all
    assert sender.backoff_s(30, None) <= settings.PUSH_RETRY_CAP_S
    settings.PUSH_RETRY_MAX_ATTEMPTS = 5
    done = sender.device_resend(tenant_id=client.tenant_id, device_id=Device.objects.get().pk, attempt=4)
    assert done.retries == [] and _row(client.tenant, subject)[1] is False  # gave up: given back
    assert Device.objects.count() == 1


def test_a_resend_after_a_pickup_sends_nothing(client, gateway):
    subject = _subject(client)
    wake.claim(tenant_id=client.tenant_id, subject=subject, now_s=T0, interval_s=60)
    services.picked_up(tenant_id=client.tenant_id, subject=subject)
    done = sender.device_resend(tenant_id=client.tenant_id, device_id=Device.objects.get().pk, attempt=1)
    assert done.summary == "resend: no longer wanted" and gateway.accepted == []


def test_a_delayed_wake_after_a_pickup_sends_nothing(client, gateway):
    subject = _subject(client)
    assert wake.claim(tenant_id=client.tenant_id, subject=subject, now_s=T0, interval_s=60) == 0
    services.picked_up(tenant_id=client.tenant_id, subject=subject)  # awake before the wake left
    done = sender.wake_send(tenant_id=client.tenant_id, subject=subject)
    assert done.summary == "wake: no longer wanted" and gateway.accepted == []


def test_a_provider_that_is_down_delays_the_wake_never_the_message(client, gateway, django_capture_on_commit_callbacks):
    PushProvider.objects.update(settings={"url": f"http://127.0.0.1:{free_port()}/wake"})
    stored = _forward(client, django_capture_on_commit_callbacks)  # eager: every retry runs at once, and fails
    assert stored.outcome == storage.STORED and QueuedMessage.objects.count() == 1
    assert PushProvider.objects.get().last_error == "retry: unreachable"
    assert Device.objects.count() == 1 and _row(client.tenant, _subject(client))[1] is False  # given back
    PushProvider.objects.update(settings={"url": gateway.url})
    _forward(client, django_capture_on_commit_callbacks)
    assert len(gateway.accepted) == 1
    assert len(queue.messages_rows(mediation=client.mediation, recipient=None, limit=10)) == 2


def test_wake_request_wakes_a_client_whose_socket_says_it_is_live(client, gateway, django_capture_on_commit_callbacks):
    subject = _subject(client)
    presence.socket_entered(tenant_id=client.tenant_id, did=subject, now_s=int(timezone.now().timestamp()))
    with django_capture_on_commit_callbacks(execute=True):
        services.wake_request(tenant_id=client.tenant_id, subject=subject)
    assert len(gateway.accepted) == 1


def test_a_device_of_another_tenant_is_never_woken(client, tenant_b, gateway, django_capture_on_commit_callbacks):
    subject = _subject(client)
    _webhook(tenant_b, gateway.url)
    services.device_set(tenant=tenant_b, subject=subject, service="apns", token="ab" * 32, platform=None)
    services.device_remove(tenant=client.tenant, subject=subject, service="fcm")
    _forward(client, django_capture_on_commit_callbacks)
    assert gateway.accepted == []
    assert services.device_get(tenant=client.tenant, subject=subject, service="apns") is None
    assert _row(client.tenant, subject)[0] == 0 and _row(tenant_b, subject)[0] == 1


def test_a_decentrl_recipient_with_a_device_is_woken_by_two_way_private(
    post_a, tenant_a, alice, bob, gateway, django_capture_on_commit_callbacks
):
    register(post_a, alice, tenant_a)
    register(post_a, bob, tenant_a)
    contract_both_ways(post_a, alice, bob, tenant_a)
    _webhook(tenant_a, gateway.url)
    services.device_set(
        tenant=tenant_a, subject=services.subject_for_did(bob.did), service="apns", token="cd" * 32, platform="ios"
    )
    for text in ("one", "two"):
        with django_capture_on_commit_callbacks(execute=True):
            status, body = post_a.command(alice, text, recipient_did=bob.did, channel="TWO_WAY_PRIVATE")
        assert status == 200, body
    assert [(b["service"], b["token"]) for b in gateway.accepted] == [("apns", "cd" * 32)]
    status, body = post_a.command(bob, {"type": "QUERY_PENDING_EVENTS"}, recipient_did=tenant_a.did)
    assert _row(tenant_a, bob.did)[1] is False


def test_the_live_ack_check_reads_only_its_tenants_queue_and_is_no_pickup(
    client, tenant_b, django_capture_on_commit_callbacks
):
    """queue.live_unacked (a socket's check of its unacknowledged live pushes) reads the still-queued
    messages of the tenant's own mediation, and touches no queue-depth row: it is not the client
    reading its queue, so the claimed wake stays coalesced. It once read through an unsaved
    stand-in Mediation, whose pickup UPDATE ran with tenant_id NULL and whose read had no tenant."""
    _forward(client, django_capture_on_commit_callbacks)
    subject = _subject(client)
    ids = [str(QueuedMessage.objects.get(mediation=client.mediation).message_id)]
    args = {"mediation_id": client.mediation_id, "client_did": client.mediation.client_did, "ids": ids}
    with CaptureQueriesContext(connection) as other_tenant:
        assert queue.live_unacked(tenant_id=tenant_b.pk, **args) == []
    with CaptureQueriesContext(connection) as own_tenant:
        assert [mid for mid, _, _ in queue.live_unacked(tenant_id=client.tenant_id, **args)] == ids
    depth_table = PendingQueueDepth._meta.db_table
    assert [q["sql"] for q in [*other_tenant, *own_tenant] if depth_table in q["sql"]] == []
    assert _row(client.tenant, subject)[1] is True
