"""Abuse limits at their edges (issue 5 §2, docs/protocol-readings.md §7): N accepted, N+1 refused.

Rate limits run on both backends (in-process and Redis) with a frozen limiter clock; the
cross-process sharing through Redis is exercised against two Daphne processes in test_e2e.py.
"""

from __future__ import annotations

import pytest

from apps.ops import limits, metrics
from apps.wire.canonical import canonical_bytes
from apps.wire.errors import ErrorCode, ProtocolError
from tests.conftest import HOST_A, HOST_B
from tests.support.entry import Poster
from tests.support.registration import contract_both_ways, register
from tests.tenants.test_operator_hosts import _run_settings

pytestmark = pytest.mark.django_db

RATE_LIMITED = {"type": "ERROR", "code": "RATE_LIMITED"}
IP_1 = "198.51.100.7"
IP_2 = "198.51.100.8"


def _post(host: str, body: bytes, ip: str = IP_1):
    resp = Poster(host).post("/", body, REMOTE_ADDR=ip)
    return resp.status_code, resp.json(), resp.headers.get("Retry-After")


def _query(who, tenant, host: str = HOST_A, ip: str = IP_1):
    env = who.sign_command(recipient_did=tenant.did, payload={"type": "QUERY_PENDING_EVENTS"})
    return _post(host, canonical_bytes(env), ip)


def _refused(scope: str) -> float:
    return metrics.RATE_LIMITED.labels(scope)._value.get()


# --- per DID ---------------------------------------------------------------------------------


def test_the_per_did_limit_accepts_n_commands_a_minute_and_refuses_the_next(
    limiter_clock, settings, post_a, tenant_a, alice, bob
):
    register(post_a, alice, tenant_a)
    register(post_a, bob, tenant_a)
    settings.MEDIATOR_RATE_LIMIT_PER_DID = 3
    before = _refused("did")
    assert [_query(alice, tenant_a)[0] for _ in range(3)] == [200, 200, 200]
    assert _query(alice, tenant_a) == (429, RATE_LIMITED, "60")
    assert _refused("did") == before + 1
    # Another DID from the same address has its own window.
    assert _query(bob, tenant_a)[0] == 200
    # The window slides: one millisecond short of a minute still refused, then free again.
    limiter_clock["now"] += 59_001
    assert _query(alice, tenant_a) == (429, RATE_LIMITED, "1")
    limiter_clock["now"] += 999
    assert _query(alice, tenant_a)[0] == 200


def test_a_rate_limited_command_keeps_its_nonce_and_can_be_sent_again(limiter_clock, settings, post_a, tenant_a, alice):
    register(post_a, alice, tenant_a)
    settings.MEDIATOR_RATE_LIMIT_PER_DID = 1
    assert _query(alice, tenant_a)[0] == 200
    env = canonical_bytes(alice.sign_command(recipient_did=tenant_a.did, payload={"type": "QUERY_PENDING_EVENTS"}))
    assert _post(HOST_A, env)[:2] == (429, RATE_LIMITED)
    limiter_clock["now"] += 60_000
    status, body, _ = _post(HOST_A, env)
    assert (status, body["type"]) == (200, "SUCCESS")


def test_forged_commands_in_someone_elses_name_do_not_use_up_their_limit(
    limiter_clock, settings, post_a, tenant_a, alice, bob
):
    register(post_a, alice, tenant_a)
    settings.MEDIATOR_RATE_LIMIT_PER_DID = 3
    for _ in range(5):
        forged = bob.sign_command(recipient_did=tenant_a.did, payload={"type": "QUERY_PENDING_EVENTS"})
        forged["header"]["sender_did"] = alice.did  # claims to be Alice, signed by Bob
        forged["header"]["sender_signing_key_id"] = alice.key_id
        assert _post(HOST_A, canonical_bytes(forged))[:2] == (401, {"type": "ERROR", "code": "INVALID_SIGNATURE"})
    garbled = alice.sign_command(recipient_did=tenant_a.did, payload={"type": "QUERY_PENDING_EVENTS"})
    garbled["signature"] = "not base64 at all!"
    assert _post(HOST_A, canonical_bytes(garbled))[:2] == (401, {"type": "ERROR", "code": "INVALID_SIGNATURE"})
    assert [_query(alice, tenant_a)[0] for _ in range(4)] == [200, 200, 200, 429]


def test_a_tenant_overrides_the_deployment_per_did_limit(limiter_clock, settings, post_a, tenant_a, alice):
    register(post_a, alice, tenant_a)
    settings.MEDIATOR_RATE_LIMIT_PER_DID = 5
    type(tenant_a).objects.filter(pk=tenant_a.pk).update(rate_limit_per_did=2)
    assert [_query(alice, tenant_a)[0] for _ in range(3)] == [200, 200, 429]


def test_a_tenant_limit_of_zero_switches_the_per_did_limit_off(limiter_clock, settings, post_a, tenant_a, alice):
    register(post_a, alice, tenant_a)
    settings.MEDIATOR_RATE_LIMIT_PER_DID = 1
    type(tenant_a).objects.filter(pk=tenant_a.pk).update(rate_limit_per_did=0)
    assert [_query(alice, tenant_a)[0] for _ in range(4)] == [200, 200, 200, 200]


# --- per IP ----------------------------------------------------------------------------------


def test_the_per_ip_limit_counts_every_command_from_an_address(limiter_clock, settings, tenant_a):
    settings.MEDIATOR_RATE_LIMIT_PER_IP = 120  # per minute: one every 500 ms, sustained
    settings.MEDIATOR_RATE_LIMIT_PER_IP_BURST = 4
    before = _refused("ip")
    junk = b'{"not":"a command"}'
    assert [_post(HOST_A, junk)[0] for _ in range(4)] == [400, 400, 400, 400]  # the burst
    assert _post(HOST_A, junk) == (429, RATE_LIMITED, "1")
    assert _refused("ip") == before + 1
    assert _post(HOST_A, junk, ip=IP_2)[0] == 400  # another address is not affected
    # The bucket refills at 120 a minute: one more after 500 ms, not before.
    limiter_clock["now"] += 499
    assert _post(HOST_A, junk)[0] == 429
    limiter_clock["now"] += 1
    assert [_post(HOST_A, junk)[0] for _ in range(2)] == [400, 429]
    limiter_clock["now"] += 2_000  # full again: a whole burst
    assert [_post(HOST_A, junk)[0] for _ in range(5)] == [400, 400, 400, 400, 429]


def test_per_ip_buckets_are_per_tenant_and_tenants_override_them(limiter_clock, settings, tenant_a, tenant_b):
    settings.MEDIATOR_RATE_LIMIT_PER_IP = 10
    settings.MEDIATOR_RATE_LIMIT_PER_IP_BURST = 10
    type(tenant_a).objects.filter(pk=tenant_a.pk).update(rate_limit_per_ip=1, rate_limit_per_ip_burst=2)
    assert type(tenant_a).objects.get(pk=tenant_a.pk).rate_limit_per_ip_burst == 2
    junk = b"[]"
    assert [_post(HOST_A, junk)[0] for _ in range(3)] == [400, 400, 429]
    # The same address on tenant B uses B's bucket and the deployment default (10 at once).
    assert [_post(HOST_B, junk)[0] for _ in range(10)] == [400] * 10
    assert _post(HOST_B, junk)[0] == 429


def test_the_default_per_ip_limit_lets_a_carrier_nat_address_through(limiter_clock, settings, tenant_a):
    """The deployment defaults (a hosted mediator's: 100 a second, bursts of 50): 50 commands at
    once and then 100 a second from one address all pass, for a minute (6 050 commands; the
    former default refused the 121st); beyond the rate, Retry-After."""
    settings.MEDIATOR_RATE_LIMIT_PER_IP, settings.MEDIATOR_RATE_LIMIT_PER_IP_BURST = 6000, 50
    for _ in range(50):
        limits.per_ip("ip", tenant_a.pk, IP_1)
    for _ in range(6_000):
        limiter_clock["now"] += 10
        limits.per_ip("ip", tenant_a.pk, IP_1)
    with pytest.raises(ProtocolError) as refused:
        limits.per_ip("ip", tenant_a.pk, IP_1)
    assert (refused.value.code, refused.value.retry_after) == (ErrorCode.RATE_LIMITED, 1)


@pytest.mark.parametrize(
    ("name", "per_second", "burst"),
    [
        ("MEDIATOR_RATE_LIMIT_PER_IP", "6000", "50"),
        ("MEDIATOR_DIDCOMM_RATE_LIMIT_PER_IP", "6000", "50"),
        ("MEDIATOR_WS_CONNECT_PER_IP", "600", "100"),
        ("MEDIATOR_WS_AUTH_PER_IP", "600", "100"),
    ],
)
def test_the_deployment_defaults_are_a_hosted_mediators(name, per_second, burst, tmp_path):
    code = f"import django; django.setup(); from django.conf import settings as s; print(s.{name}, s.{name}_BURST)"
    result = _run_settings(code, {"MEDIATOR_VAR_DIR": str(tmp_path)})
    assert result.stdout.split() == [per_second, burst], result.stderr


@pytest.mark.parametrize(
    "name",
    [
        "MEDIATOR_RATE_LIMIT_PER_IP_BURST",
        "MEDIATOR_DIDCOMM_RATE_LIMIT_PER_IP_BURST",
        "MEDIATOR_WS_CONNECT_PER_IP_BURST",
        "MEDIATOR_WS_AUTH_PER_IP_BURST",
    ],
)
def test_a_burst_below_one_fails_at_startup(name, tmp_path):
    result = _run_settings("import django; django.setup()", {"MEDIATOR_VAR_DIR": str(tmp_path), name: "0"})
    assert result.returncode != 0
    assert (
        f"ImproperlyConfigured: {name} must be 1 or more (a per-IP rate of 0 switches the limit off)"
    ) in result.stderr


def test_a_429_always_carries_retry_after():
    from apps.didcomm.problems import Problem

    assert ProtocolError(ErrorCode.RATE_LIMITED).retry_after == 1
    assert ProtocolError(ErrorCode.RATE_LIMITED, retry_after=7).retry_after == 7
    assert Problem("e.p.xfer.rate-limited", "rate limit exceeded", 429).retry_after == 1
    assert Problem("e.p.msg.invalid-body", "bad", 400).retry_after is None


def test_a_rate_limited_sender_on_tenant_a_does_not_touch_carol_on_tenant_b(
    limiter_clock, settings, post_a, post_b, tenant_a, tenant_b, alice, carol
):
    register(post_a, alice, tenant_a)
    register(post_b, carol, tenant_b)
    settings.MEDIATOR_RATE_LIMIT_PER_DID = 1
    assert [_query(alice, tenant_a)[0] for _ in range(2)] == [200, 429]
    assert _query(carol, tenant_b, host=HOST_B)[0] == 200


# --- WebSocket admission (called by the socket consumers: limits.per_ip) -----------------------------


@pytest.mark.parametrize(
    ("setting", "scope"),
    [("MEDIATOR_WS_CONNECT_PER_IP", "ws_connect"), ("MEDIATOR_WS_AUTH_PER_IP", "ws_auth")],
)
def test_websocket_admission_takes_a_burst_then_the_rate_per_address(limiter_clock, settings, tenant_a, setting, scope):
    setattr(settings, setting, 6)  # one every 10 s, sustained
    setattr(settings, f"{setting}_BURST", 3)
    before = _refused(scope)

    def admit(ip: str) -> None:
        limits.per_ip(scope, tenant_a.pk, ip)

    for _ in range(3):  # a burst: every socket of one address reconnecting at once
        admit(IP_1)
    with pytest.raises(ProtocolError) as refused:
        admit(IP_1)
    assert (refused.value.code, refused.value.retry_after) == (ErrorCode.RATE_LIMITED, 10)
    assert _refused(scope) == before + 1
    admit(IP_2)
    limiter_clock["now"] += 10_000
    admit(IP_1)
    with pytest.raises(ProtocolError):
        admit(IP_1)
    limiter_clock["now"] += 30_000  # three more tokens: the bucket holds its burst again
    for _ in range(3):
        admit(IP_1)


def test_websocket_admission_limits_of_zero_admit_everyone(limiter_clock, settings, tenant_a):
    settings.MEDIATOR_WS_CONNECT_PER_IP = 0
    settings.MEDIATOR_WS_AUTH_PER_IP = 0
    for _ in range(50):
        for scope in ("ws_connect", "ws_auth"):
            limits.per_ip(scope, tenant_a.pk, IP_1)


def test_an_unreachable_redis_fails_open_without_an_error(settings, post_a, tenant_a, alice):
    register(post_a, alice, tenant_a)
    settings.MEDIATOR_RATE_LIMIT_REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens there
    settings.MEDIATOR_RATE_LIMIT_PER_DID = 1
    settings.MEDIATOR_RATE_LIMIT_PER_IP = 1
    before = metrics.RATE_LIMIT_ERRORS._value.get()
    assert [_query(alice, tenant_a)[0] for _ in range(3)] == [200, 200, 200]
    assert metrics.RATE_LIMIT_ERRORS._value.get() == before + 6


# --- recipient queue cap (507) and body cap (413) -----------------------------------------------


def test_a_full_recipient_queue_refuses_with_507_and_evicts_nothing(post_a, tenant_a, alice, bob):
    register(post_a, alice, tenant_a)
    register(post_a, bob, tenant_a)
    contract_both_ways(post_a, alice, bob, tenant_a)
    type(tenant_a).objects.filter(pk=tenant_a.pk).update(pending_queue_cap=3)

    def send(blob: str):
        return post_a.command(alice, blob, recipient_did=bob.did, channel="TWO_WAY_PRIVATE")

    assert [send(f"blob-{i}")[0] for i in range(3)] == [200, 200, 200]
    assert send("blob-3") == (507, {"type": "ERROR", "code": "RECIPIENT_QUEUE_FULL"})
    status, body = post_a.command(bob, {"type": "QUERY_PENDING_EVENTS"}, recipient_did=tenant_a.did)
    queued = body["payload"]["pending_events"]
    assert [e["payload"] for e in queued] == ["blob-0", "blob-1", "blob-2"]
    assert body["payload"]["pagination"]["total"] == 3
    # Acknowledging one makes room for exactly one more.
    ack = {"type": "ACKNOWLEDGE_PENDING_EVENTS", "event_ids": [queued[0]["id"]]}
    assert post_a.command(bob, ack, recipient_did=tenant_a.did)[0] == 200
    assert send("blob-4")[0] == 200
    assert send("blob-5")[0] == 507
    status, body = post_a.command(bob, {"type": "QUERY_PENDING_EVENTS"}, recipient_did=tenant_a.did)
    assert [e["payload"] for e in body["payload"]["pending_events"]] == ["blob-1", "blob-2", "blob-4"]


def _private_of_size(alice, bob, size: int) -> bytes:
    """A correctly signed TWO_WAY_PRIVATE command whose body is exactly `size` bytes."""
    fixed = dict(nonce="00000000-0000-4000-8000-000000000000")
    base = len(
        canonical_bytes(alice.sign_command(recipient_did=bob.did, payload="", channel="TWO_WAY_PRIVATE", **fixed))
    )
    env = alice.sign_command(recipient_did=bob.did, payload="x" * (size - base), channel="TWO_WAY_PRIVATE")
    body = canonical_bytes(env)
    assert len(body) == size
    return body


@pytest.mark.parametrize("where", ["deployment", "tenant"])
def test_the_body_cap_accepts_exactly_the_cap_and_refuses_one_byte_more(settings, post_a, tenant_a, alice, bob, where):
    register(post_a, alice, tenant_a)
    register(post_a, bob, tenant_a)
    contract_both_ways(post_a, alice, bob, tenant_a)
    cap = 2048
    if where == "deployment":
        settings.MEDIATOR_MAX_BODY_BYTES = cap
        settings.DATA_UPLOAD_MAX_MEMORY_SIZE = cap
    else:
        type(tenant_a).objects.filter(pk=tenant_a.pk).update(max_body_bytes=cap)
    status, body = post_a.raw(_private_of_size(alice, bob, cap))
    assert (status, body["type"]) == (200, "SUCCESS")
    assert post_a.raw(_private_of_size(alice, bob, cap + 1)) == (413, {"type": "ERROR", "code": "PAYLOAD_TOO_LARGE"})


# --- client address behind proxies --------------------------------------------------------------


@pytest.mark.parametrize(
    ("trusted", "peer", "xff", "client"),
    [
        ([], "127.0.0.1", "203.0.113.9", "127.0.0.1"),  # no trusted proxy: the header is ignored
        (["127.0.0.1/32"], "127.0.0.1", "203.0.113.9", "203.0.113.9"),
        (["127.0.0.1/32"], "198.51.100.1", "203.0.113.9", "198.51.100.1"),  # peer is not a trusted proxy
        (["127.0.0.1/32", "10.0.0.0/8"], "127.0.0.1", "6.6.6.6, 203.0.113.9, 10.0.0.2", "203.0.113.9"),
        (["127.0.0.1/32"], "127.0.0.1", None, "127.0.0.1"),
    ],
)
def test_the_client_address_trusts_only_configured_proxies(settings, trusted, peer, xff, client):
    from apps.ops.clientip import forwarded_client

    settings.MEDIATOR_TRUSTED_PROXIES = trusted
    assert forwarded_client(peer, xff) == client


def test_behind_a_trusted_proxy_each_forwarded_client_has_its_own_ip_window(limiter_clock, settings, tenant_a):
    settings.MEDIATOR_TRUSTED_PROXIES = ["127.0.0.1/32"]
    settings.MEDIATOR_RATE_LIMIT_PER_IP = 1
    settings.MEDIATOR_RATE_LIMIT_PER_IP_BURST = 2

    def post(xff: str) -> int:
        return Poster(HOST_A).post("/", b"[]", REMOTE_ADDR="127.0.0.1", HTTP_X_FORWARDED_FOR=xff).status_code

    assert [post(IP_1) for _ in range(3)] == [400, 400, 429]
    assert [post(IP_2) for _ in range(2)] == [400, 400]
