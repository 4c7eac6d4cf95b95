"""The publish-rate cap holds under concurrency: the per-(tenant, publisher) advisory lock makes
concurrent publishes of one DID count each other (apps/messaging/public.py)."""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from apps.messaging.models import PublicEvent
from apps.wire.client import Identity
from apps.wire.errors import ProtocolError
from apps.wire.public import sign_public_event

pytestmark = pytest.mark.django_db(transaction=True)


def test_concurrent_publishes_of_one_did_never_exceed_the_cap(transactional_db):
    from apps.messaging.public import public_event_publish
    from apps.tenants.services import tenant_create

    tenant = tenant_create(slug="pub-race", domain="race.mediator.test", public_publish_per_minute=3)
    alice = Identity.create("alice", tenant.did)
    start = threading.Barrier(8)
    outcomes: list[str] = []
    lock = threading.Lock()

    def publish(i: int) -> None:
        ev = sign_public_event(alice.signing, channel_id="c", event=str(i), tags=[], timestamp=1)
        start.wait()
        try:
            public_event_publish(tenant=tenant, publisher_did=alice.did, public_event=ev)
            result = "ok"
        except ProtocolError as err:
            result = err.code.value
        finally:
            connection.close()
        with lock:
            outcomes.append(result)

    threads = [threading.Thread(target=publish, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert sorted(outcomes) == ["RATE_LIMITED"] * 5 + ["ok"] * 3
    assert PublicEvent.objects.filter(tenant=tenant, publisher_did=alice.did).count() == 3
