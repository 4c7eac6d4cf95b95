"""A `/didcomm/ws` socket keeps its groups (the tenant's, and each live client's) past the layer's
group expiry: it re-joins them every quarter of it (apps/realtime/groups.Memberships). The expiry
is 2 s here on the in-memory layer, which drops older members in `group_send` as channels_redis
does; the wall clock the layer reads is moved past it (time-machine) and the test waits for the next
refresh. The Redis layer and /ws: tests/realtime/test_group_expiry.py."""

from __future__ import annotations

import time

import pytest
import time_machine
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from apps.realtime.groups import group_name, tenant_group_name
from apps.realtime.push import TENANT_STATE_TYPE
from tests.support.layers import joins, until

from .test_tenant_state import _closed_with, _live, granted  # noqa: F401 - granted is a fixture

EXPIRY_S = 2
OUTLIVE_S = EXPIRY_S + 1.5


@pytest.fixture(autouse=True)
def short_expiry_layer(settings):
    settings.CHANNEL_LAYERS = {
        "default": {"BACKEND": "channels.layers.InMemoryChannelLayer", "CONFIG": {"group_expiry": EXPIRY_S}}
    }


@pytest.fixture(autouse=True)
def keep_the_test_connection(monkeypatch):
    """As tests/realtime/conftest.py: the consumer's database calls run inside the test transaction."""
    monkeypatch.setattr("channels.db.close_old_connections", lambda: None)


def test_a_live_socket_keeps_its_groups_past_the_group_expiry(tenant_a, didcomm_a, granted):  # noqa: F811
    mediator = didcomm_a.mediator_did

    async def body():
        layer = get_channel_layer()
        joined = joins(layer)
        live = await _live(mediator, granted)
        await until(lambda: len(joined) == 2)  # the tenant's group and the live client's
        clock.shift(OUTLIVE_S)  # past the expiry of both joins; the next refresh re-joins both
        await until(lambda: len(joined) == 4)
        layer._clean_expired()  # what every group_send does first
        members = {
            group: list(layer.groups.get(group, {}))
            for group in (tenant_group_name(tenant_a.pk), group_name(tenant_a.pk, granted.did))
        }
        assert [len(m) for m in members.values()] == [1, 1]
        # The tenant's group still reaches it.
        await layer.group_send(tenant_group_name(tenant_a.pk), {"type": TENANT_STATE_TYPE, "active": False})
        await _closed_with(live, "e.p.me.unavailable", 4503)

    with time_machine.travel(time.time(), tick=True) as clock:
        async_to_sync(body)()
