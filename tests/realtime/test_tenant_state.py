"""Open `/ws` sockets follow their tenant's state: suspended, they get ERROR MEDIATOR_UNAVAILABLE and
close 4503; deleted, ERROR UNKNOWN_MEDIATOR and 4404 (the answers a new connection gets), through
the tenant's group on the in-memory layer. Another tenant's sockets, and saves that keep the tenant
serving, change nothing."""

from __future__ import annotations

import pytest

from apps.tenants.models import Tenant
from apps.tenants.services import Actor, tenant_resume, tenant_suspend, tenant_update
from tests.conftest import HOST_B
from tests.support.ordering import nothing_before_a_push
from tests.support.registration import register

from .conftest import communicator, connect_authenticated, expect_close, run

CLI = Actor(None, "cli")


@pytest.fixture
def registered(post_a, post_b, tenant_a, tenant_b, alice, bob, carol):
    register(post_a, alice, tenant_a)
    register(post_a, bob, tenant_a)
    register(post_b, carol, tenant_b)
    return alice, bob, carol


def test_it_closes_every_socket_of_a_suspended_tenant_with_mediator_unavailable(
    tenant_a, tenant_b, registered, committed
):
    alice, bob, carol = registered

    async def body():
        alice_sock = await connect_authenticated(alice)
        not_yet = communicator()  # accepted, AUTHENTICATE not sent yet
        assert (await not_yet.connect())[0]
        carol_sock = await connect_authenticated(carol, host=HOST_B)
        await committed(lambda: tenant_suspend(tenant=tenant_a, actor=CLI))
        for comm in (alice_sock, not_yet):
            assert await comm.receive_json_from() == {"type": "ERROR", "code": "MEDIATOR_UNAVAILABLE"}
            await expect_close(comm, 4503)
        # Tenant B's socket is not affected, and tenant A refuses new sockets as before.
        await nothing_before_a_push(carol_sock, tenant_b.pk, carol.did)
        again = communicator()
        assert (await again.connect())[0]
        assert await again.receive_json_from() == {"type": "ERROR", "code": "MEDIATOR_UNAVAILABLE"}
        await expect_close(again, 4503)
        await carol_sock.disconnect()

    run(body)


def test_saves_that_keep_the_tenant_serving_leave_its_sockets_open(tenant_a, registered, committed):
    alice, bob, _ = registered

    async def body():
        sock = await connect_authenticated(alice)
        await committed(lambda: tenant_update(tenant=tenant_a, actor=CLI, name="Renamed"))
        await committed(lambda: tenant_resume(tenant=tenant_a, actor=CLI))  # already active: a no-op save
        await nothing_before_a_push(sock, tenant_a.pk, alice.did)
        await sock.disconnect()

    run(body)


def test_it_closes_every_socket_of_a_deleted_tenant_with_unknown_mediator(tenant_a, tenant_b, registered, committed):
    alice, _, carol = registered

    async def body():
        sock = await connect_authenticated(alice)
        carol_sock = await connect_authenticated(carol, host=HOST_B)
        await committed(lambda: Tenant.objects.filter(pk=tenant_a.pk).delete())
        assert await sock.receive_json_from() == {"type": "ERROR", "code": "UNKNOWN_MEDIATOR"}
        await expect_close(sock, 4404)
        await nothing_before_a_push(carol_sock, tenant_b.pk, carol.did)
        await carol_sock.disconnect()

    run(body)
