"""Group memberships outlive the layer's group expiry while the socket is open.

Both channel layers drop a member `group_expiry` after it joined (channels_redis in `group_send` and
the adapter's ZRANGEBYSCORE, the in-memory layer in `group_send`'s `_clean_expired`). A socket joins
its groups when it connects and authenticates, then re-joins them every quarter of the expiry
(apps/realtime/groups.Memberships): here the expiry is 2 s. The layers read the expiry off the wall
clock (`time.time()`), the refreshes run on the event loop's: a test moves the wall clock past the
expiry (time-machine) and waits for the next refresh (`joins`), instead of sleeping past the expiry.
The same behaviour on `/didcomm/ws`: tests/didcomm/app/test_group_expiry.py.
"""

from __future__ import annotations

import ast
import asyncio
import os
import subprocess
import sys
import time
import uuid

import pytest
import redis
import time_machine
from channels.layers import get_channel_layer

from apps.realtime.groups import Memberships, refresh_interval_s, tenant_group_name
from apps.realtime.layerloss import CHANNEL_LAYER
from apps.realtime.push import TENANT_STATE_TYPE, push_to_sockets
from tests.support import servers
from tests.support.layers import joins, until
from tests.support.registration import register

from .conftest import connect_authenticated, expect_close, run

REDIS_URL = "redis://127.0.0.1:6379/12"
EXPIRY_S = 2
# Past the expiry with the layers' whole-second rounding (`int(time.time()) - group_expiry`).
OUTLIVE_S = EXPIRY_S + 1.5


@pytest.fixture
def pair(post_a, tenant_a, alice, bob):
    register(post_a, alice, tenant_a)
    register(post_a, bob, tenant_a)
    return alice, bob


@pytest.fixture
def in_memory(settings):
    settings.CHANNEL_LAYERS = {
        "default": {"BACKEND": "channels.layers.InMemoryChannelLayer", "CONFIG": {"group_expiry": EXPIRY_S}}
    }
    return get_channel_layer()


@pytest.fixture
def on_redis(settings):
    prefix = f"expiry{uuid.uuid4().hex[:8]}"
    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [{"address": REDIS_URL, "socket_timeout": 30}], "prefix": prefix, "group_expiry": 2},
        }
    }
    yield get_channel_layer()
    raw = redis.Redis.from_url(REDIS_URL)
    keys = list(raw.scan_iter(match=f"{prefix}*"))
    if keys:
        raw.delete(*keys)


def test_the_refresh_interval_is_a_quarter_of_the_layers_group_expiry(settings, in_memory, on_redis):
    assert refresh_interval_s(on_redis) == 0.5
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    assert refresh_interval_s(get_channel_layer()) == 21600.0


def test_the_deployment_sets_the_group_expiry_explicitly():
    # The settings module as loaded (this module's fixtures override django.conf.settings).
    from mediator_project import settings_test as deployment

    assert deployment.MEDIATOR_CHANNEL_GROUP_EXPIRY_S == 86400
    assert deployment.CHANNEL_LAYERS["default"]["CONFIG"]["group_expiry"] == 86400


def test_without_a_refresh_the_in_memory_layer_forgets_a_member_after_its_group_expiry(in_memory):
    """The premise: the in-memory layer (`make run`) expires memberships as channels_redis does."""

    async def body():
        channel = await in_memory.new_channel()
        with time_machine.travel(time.time(), tick=True) as clock:
            await in_memory.group_add("g", channel)
            await in_memory.group_send("g", {"type": "x"})
            assert list(in_memory.groups["g"]) == [channel]
            clock.shift(OUTLIVE_S)
            await in_memory.group_send("g", {"type": "x"})
        assert in_memory.groups.get("g", {}) == {}

    run(body)


@pytest.mark.parametrize("layer_name", ["in_memory", "on_redis"])
def test_an_authenticated_socket_still_gets_pushes_after_the_group_expiry(request, pair, tenant_a, layer_name):
    layer = request.getfixturevalue(layer_name)
    alice, _ = pair
    joined = joins(layer)

    async def body():
        sock = await connect_authenticated(alice)
        await until(lambda: len(joined) == 2)  # its DID's group and the tenant's
        # Past the expiry of both joins; the next refresh re-joins both.
        clock.shift(OUTLIVE_S)
        await until(lambda: len(joined) == 4)
        # From blocking code, as a WSGI worker pushes (on Redis, through the sync adapter).
        await asyncio.to_thread(
            push_to_sockets, None, tenant_id=tenant_a.pk, did=alice.did, message={"type": "CONTRACTS_UPDATED"}
        )
        assert await sock.receive_json_from(timeout=5) == {"type": "CONTRACTS_UPDATED"}
        # And the tenant's group (joined at connect) still reaches it.
        await get_channel_layer().group_send(
            tenant_group_name(tenant_a.pk), {"type": TENANT_STATE_TYPE, "active": False}
        )
        assert await sock.receive_json_from(timeout=5) == {"type": "ERROR", "code": "MEDIATOR_UNAVAILABLE"}
        await expect_close(sock, 4503)

    with time_machine.travel(time.time(), tick=True) as clock:
        run(body)


def test_a_left_group_is_not_joined_again_and_a_closed_socket_stops_refreshing(in_memory):
    joined = joins(in_memory)

    async def body():
        channel = await in_memory.new_channel()
        memberships = Memberships(in_memory, channel)
        await memberships.add("keep")
        await memberships.add("leave")
        await memberships.discard("leave")
        clock.shift(OUTLIVE_S)
        await until(lambda: len(joined) == 3)  # the first refresh: "keep" only
        in_memory._clean_expired()
        assert (list(in_memory.groups.get("keep", {})), "leave" in in_memory.groups) == ([channel], False)
        await memberships.close()
        closed_at = len(joined)
        assert joined[:2] == ["keep", "leave"] and set(joined[2:]) == {"keep"}
        assert in_memory.groups.get("keep", {}) == {}
        # A marker instead of a wait: memberships made after the close refresh one interval later,
        # and asyncio runs timers in their order, so a refresh left over from the closed socket
        # would have joined "keep" before the marker's refresh.
        marker = Memberships(in_memory, await in_memory.new_channel())
        await marker.add("marker")
        await until(lambda: len(joined) == closed_at + 2)
        await marker.close()
        assert joined[closed_at:] == ["marker", "marker"]
        assert in_memory.groups.get("keep", {}) == {}

    with time_machine.travel(time.time(), tick=True) as clock:
        run(body)


def test_a_refresh_that_fails_is_retried_at_the_next_interval(in_memory, caplog):
    CHANNEL_LAYER.recovered()  # an outage an earlier test in this process left open
    caplog.clear()
    calls = []
    real_add = in_memory.group_add

    async def flaky_add(group, channel):
        calls.append(group)
        if len(calls) == 2:  # the first refresh
            raise ConnectionError("redis away")
        await real_add(group, channel)

    in_memory.group_add = flaky_add

    async def body():
        channel = await in_memory.new_channel()
        memberships = Memberships(in_memory, channel)
        await memberships.add("g")
        await until(lambda: len(calls) == 3)  # the refreshes at 0.5 s (fails) and 1.0 s
        await until(lambda: not CHANNEL_LAYER.down)  # the second refresh's join returned
        await memberships.close()

    run(body)
    assert calls == ["g", "g", "g"]
    # Logged once as an outage, and its end when the next refresh got through (apps/ops/outage.py).
    logged = [r.getMessage() for r in caplog.records if r.name == "mediator.outage"]
    assert logged[0] == (
        "channel layer unavailable while renewing a group membership (ConnectionError: redis away);"
        " further failures are counted until it answers again"
    )
    assert len(logged) == 2 and logged[1].startswith("channel layer available again after 1 failures in ")


# --- the settings ------------------------------------------------------------------------------

PRINT_LAYER = (
    "import django; django.setup(); from django.conf import settings; "
    "print(settings.CHANNEL_LAYERS['default']['CONFIG'])"
)


def _run_settings(env_extra: dict, module: str = "mediator_project.settings") -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEDIATOR_", "DJANGO_", "REDIS_URL"))}
    env.update({"PYTHONPATH": str(servers.ROOT), "DJANGO_SETTINGS_MODULE": module}, **env_extra)
    return subprocess.run(
        [sys.executable, "-c", PRINT_LAYER], cwd=servers.ROOT, env=env, capture_output=True, text=True, timeout=60
    )


def test_the_redis_layer_takes_the_prefix_and_group_expiry_settings(tmp_path):
    out = _run_settings(
        {
            "MEDIATOR_VAR_DIR": str(tmp_path),
            "REDIS_URL": "redis://127.0.0.1:6379/0",
            "MEDIATOR_CHANNEL_LAYER_PREFIX": "staging",
            "MEDIATOR_CHANNEL_GROUP_EXPIRY_S": "3600",
        }
    )
    config = ast.literal_eval(out.stdout.strip())
    assert (config["prefix"], config["group_expiry"]) == ("staging", 3600), out.stderr


def test_the_defaults_are_a_mediator_prefix_and_a_day_on_either_layer(tmp_path):
    on_redis = _run_settings({"MEDIATOR_VAR_DIR": str(tmp_path), "REDIS_URL": "redis://127.0.0.1:6379/0"})
    in_memory = _run_settings({"MEDIATOR_VAR_DIR": str(tmp_path)})
    config = ast.literal_eval(on_redis.stdout.strip())
    assert (config["prefix"], config["group_expiry"]) == ("mediator", 86400), on_redis.stderr
    assert ast.literal_eval(in_memory.stdout.strip()) == {"group_expiry": 86400}, in_memory.stderr


def test_test_runs_get_a_prefix_per_test_database(tmp_path):
    out = _run_settings(
        {"MEDIATOR_VAR_DIR": str(tmp_path), "REDIS_URL": "redis://127.0.0.1:6379/0", "MEDIATOR_TEST_DB_NAME": "test_x"},
        module="mediator_project.settings_test",
    )
    assert ast.literal_eval(out.stdout.strip())["prefix"] == "mediator.test_x", out.stderr


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("MEDIATOR_CHANNEL_LAYER_PREFIX", "two words", "MEDIATOR_CHANNEL_LAYER_PREFIX: 1-64 of A-Z a-z 0-9 _ . : -"),
        ("MEDIATOR_CHANNEL_LAYER_PREFIX", "", "MEDIATOR_CHANNEL_LAYER_PREFIX: 1-64 of A-Z a-z 0-9 _ . : -"),
        ("MEDIATOR_CHANNEL_GROUP_EXPIRY_S", "3", "MEDIATOR_CHANNEL_GROUP_EXPIRY_S must be 4 or more"),
    ],
)
def test_a_bad_channel_layer_setting_fails_at_startup(tmp_path, name, value, message):
    result = _run_settings({"MEDIATOR_VAR_DIR": str(tmp_path), name: value})
    assert result.returncode != 0
    assert f"ImproperlyConfigured: {message}" in result.stderr
