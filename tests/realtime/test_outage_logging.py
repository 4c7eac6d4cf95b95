"""A Redis outage is logged once per process and use, and its end once with a count, not once per
request or push: a 5 s outage under load wrote 601 tracebacks. A real Daphne on a private
`redis-server` (channel layer and rate limits) that the test stops, loads, and starts again on the
same port; and the counting itself on an injected clock (apps/ops/outage.py)."""

from __future__ import annotations

import logging
import re

import pytest

from apps.ops.outage import Outage
from apps.tenants.services import tenant_create
from apps.wire.client import Identity, MediatorClient
from tests.support.registration import signed_contract
from tests.support.servers import free_port, start_daphne, start_redis

OUTAGE_LOG = re.compile(r"WARNING mediator\.outage (.*)")


def test_an_outage_is_logged_at_its_first_failure_and_at_its_end_with_the_count(caplog):
    now = [100.0]
    outage = Outage("thing", clock=lambda: now[0])
    caplog.set_level(logging.WARNING, "mediator.outage")
    outage.recovered()  # nothing was failing: nothing to say
    for _ in range(3):
        outage.failed(ConnectionError("refused\nsecond line"), "testing")
    assert outage.down and outage.failures == 3
    now[0] = 102.5
    outage.recovered()
    outage.recovered()
    assert [r.getMessage() for r in caplog.records] == [
        "thing unavailable while testing (ConnectionError: refused second line);"
        " further failures are counted until it answers again",
        "thing available again after 3 failures in 2.5 s",
    ]
    assert not outage.down and outage.failures == 0


@pytest.mark.e2e
@pytest.mark.django_db(transaction=True)
def test_a_redis_outage_under_load_is_logged_once_per_use_and_its_end_once(transactional_db, tmp_path):
    redis_server = start_redis(tmp_path)
    port = free_port()
    host = f"127.0.0.1:{port}"
    tenant = tenant_create(slug="out", domain=host, rate_limit_per_did=100_000, rate_limit_per_ip=100_000)
    server = start_daphne(tmp_path, port=port, env={"REDIS_URL": redis_server.url}, wait_host=host)
    http = MediatorClient(f"http://127.0.0.1:{port}", host=host)
    try:
        alice, bob = Identity.create("alice", tenant.did), Identity.create("bob", tenant.did)
        http.register(alice)
        http.register(bob)
        signed, _, _ = signed_contract(alice, bob)
        http.command(bob, {"type": "SAVE_COMMUNICATION_CONTRACT", "signed_communication_contract": signed})

        def load(n: int) -> None:
            # Each is limited twice (per IP, per DID) and pushed once: ~3n uses of Redis.
            for i in range(n):
                http.send(alice.sign_command(recipient_did=bob.did, payload=f"blob-{i}", channel="TWO_WAY_PRIVATE"))
            assert http.http.get(http.base_url + "/health", headers={"Host": host}).status_code in (200, 503)

        load(5)
        assert OUTAGE_LOG.findall(server.log()) == []
        redis_server.stop()
        load(40)
        redis_server = start_redis(tmp_path, port=redis_server.port)
        load(5)
    finally:
        http.close()
        server.stop()
    log = server.log()
    assert "Traceback" not in log
    lines = OUTAGE_LOG.findall(log)
    started = sorted(line.split(" while ")[0] for line in lines if " unavailable while " in line)
    ended = sorted(re.sub(r" after \d+ failures in [\d.]+ s$", "", line) for line in lines if "available again" in line)
    assert started == ["channel layer unavailable", "rate limiter unavailable"], lines
    assert ended == ["channel layer available again", "rate limiter available again"], lines
    # The limiter's count: two limits per command, forty commands.
    assert "rate limiter available again after 80 failures in " in log
