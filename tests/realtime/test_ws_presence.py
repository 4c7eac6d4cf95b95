"""A `/ws` socket's presence (apps/messaging/presence.py, apps/decentrl/consumers.py): marked after
AUTHENTICATE joined the group, renewed while open, released on close; a socket that cannot be
marked or renewed in time is closed with MEDIATOR_UNAVAILABLE rather than left to miss pushes."""

from __future__ import annotations

import asyncio
import time

import pytest
from asgiref.sync import sync_to_async
from django.db import DatabaseError

from apps.messaging import presence
from apps.messaging.models import PendingQueueDepth
from tests.support.registration import register

from .conftest import communicator, expect_close, run, send


@pytest.fixture
def bob(post_a, tenant_a, bob):
    register(post_a, bob, tenant_a)
    return bob


@sync_to_async
def _row(tenant, did) -> tuple[int, int] | None:
    found = PendingQueueDepth.objects.filter(tenant=tenant, recipient_did=did).values_list("live", "live_until")
    return next(iter(found), None)


async def _eventually(check, seconds: float = 10.0) -> None:
    """Wait until `await check()` is true: renewals run on timers, which a loaded box delays."""
    deadline = time.monotonic() + seconds
    while not await check():
        assert time.monotonic() < deadline, "not within the deadline"
        await asyncio.sleep(0.1)


async def _authenticated(who):
    comm = communicator()
    assert (await comm.connect())[0]
    await send(comm, who.ws_authenticate())
    assert await comm.receive_json_from() == {"type": "AUTH_SUCCESS"}
    return comm


def test_each_authenticated_socket_counts_until_it_closes(tenant_a, bob):
    async def body():
        assert (await _row(tenant_a, bob.did)) is None
        phone = await _authenticated(bob)
        live, until = await _row(tenant_a, bob.did)
        assert live == 1
        assert int(time.time()) + presence.lease_s() - 2 <= until <= int(time.time()) + presence.lease_s()
        laptop = await _authenticated(bob)
        assert (await _row(tenant_a, bob.did))[0] == 2
        await phone.disconnect()
        assert (await _row(tenant_a, bob.did))[0] == 1
        await laptop.disconnect()
        assert (await _row(tenant_a, bob.did))[0] == 0

    run(body)


def test_a_socket_that_never_authenticated_counts_for_nobody(tenant_a, bob):
    async def body():
        comm = communicator()
        assert (await comm.connect())[0]
        await comm.disconnect()
        assert (await _row(tenant_a, bob.did)) is None

    run(body)


def test_a_socket_that_cannot_be_marked_present_is_refused(monkeypatch, tenant_a, bob):
    def down(**kwargs):
        raise DatabaseError("down")

    monkeypatch.setattr(presence, "socket_entered", down)

    async def body():
        comm = communicator()
        assert (await comm.connect())[0]
        await send(comm, bob.ws_authenticate())
        assert await comm.receive_json_from() == {"type": "AUTH_FAILED", "code": "MEDIATOR_UNAVAILABLE"}
        await expect_close(comm, 4503)
        await comm.disconnect()
        assert (await _row(tenant_a, bob.did)) is None  # nothing to release either

    run(body)


def test_an_open_socket_renews_its_lease(settings, tenant_a, bob):
    settings.MEDIATOR_WS_PRESENCE_LEASE_S = 3  # renewed every second

    async def body():
        comm = await _authenticated(bob)
        first = await _row(tenant_a, bob.did)

        async def renewed():
            return (await _row(tenant_a, bob.did))[1] > first[1]

        await _eventually(renewed)
        assert (await _row(tenant_a, bob.did))[0] == 1
        await comm.disconnect()
        assert (await _row(tenant_a, bob.did))[0] == 0

    run(body)


def test_a_socket_that_cannot_renew_before_its_lease_runs_out_closes(monkeypatch, settings, tenant_a, bob):
    settings.MEDIATOR_WS_PRESENCE_LEASE_S = 3  # renewals due every second; the lease runs out at 3 s
    renewals = []

    def down(**kwargs):
        renewals.append(time.monotonic())
        raise DatabaseError("down")

    monkeypatch.setattr(presence, "socket_renewed", down)

    async def body():
        started = time.monotonic()
        comm = await _authenticated(bob)
        assert await comm.receive_json_from(timeout=10) == {"type": "ERROR", "code": "MEDIATOR_UNAVAILABLE"}
        await expect_close(comm, 4503)
        # One or two renewals failed first (two when the timers ran on time), never the close at once.
        assert 1 <= len(renewals) <= 2 and renewals[0] - started >= 1.0
        await comm.disconnect()
        assert (await _row(tenant_a, bob.did))[0] == 0

    run(body)


def test_one_socket_marks_several_dids_once_each_and_renews_them_together(settings, tenant_a):
    """apps/realtime/presence.Presence as a /didcomm/ws socket live for two clients uses it."""
    from apps.realtime.presence import Presence

    settings.MEDIATOR_WS_PRESENCE_LEASE_S = 3  # renewed every second
    lapsed = []

    async def on_lapse():
        lapsed.append(True)

    async def body():
        marks = Presence(tenant_a.pk, on_lapse=on_lapse)
        await marks.enter("did:example:one")
        await marks.enter("did:example:two")
        await marks.enter("did:example:one")  # again: still one mark
        one, two = await _row(tenant_a, "did:example:one"), await _row(tenant_a, "did:example:two")
        assert one[0] == two[0] == 1

        async def both_renewed():
            now_one, now_two = await _row(tenant_a, "did:example:one"), await _row(tenant_a, "did:example:two")
            return now_one[1] > one[1] and now_two[1] > two[1]

        await _eventually(both_renewed)
        await marks.leave("did:example:two")
        await marks.leave("did:example:nobody")  # never marked: nothing to release
        assert (await _row(tenant_a, "did:example:two"))[0] == 0
        assert await _row(tenant_a, "did:example:nobody") is None
        await marks.close()
        assert (await _row(tenant_a, "did:example:one"))[0] == 0
        await marks.enter("did:example:one")  # closed: marks nothing more
        assert (await _row(tenant_a, "did:example:one"))[0] == 0

    run(body)
    assert lapsed == []
