"""The Alice and Bob story at DEBUG, SQL logging included, leaks nothing into the server log
(issue 5 §4, docs/protocol-readings.md §9), and each command is one structured line."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest

from apps.ops.logconfig import JsonFormatter, RedactSqlFilter, sql_shape
from apps.wire.client import Identity, MediatorClient, MediatorDirectory
from apps.wire.encoding import b64encode
from apps.wire.ws import MediatorSocket
from tests.e2e.test_story import run_story
from tests.support.servers import free_port, start_daphne


class RecordingClient(MediatorClient):
    """A client that remembers every signature and string payload it sent."""

    sent: list[str]

    def send(self, envelope: dict, **kw) -> dict:
        self.sent.append(envelope["signature"])
        if isinstance(envelope.get("payload"), str):
            self.sent.append(envelope["payload"])
        return super().send(envelope, **kw)


def _key_strings(*identities: Identity) -> list[str]:
    out = []
    for who in identities:
        for raw in (who.signing.seed, who.prekey.private, who.storage_key):
            out += [b64encode(raw), raw.hex()]
    return out


@pytest.mark.e2e
@pytest.mark.parametrize("log_format", ["plain", "json"])
def test_the_story_at_debug_level_logs_no_payload_tag_signature_or_key(transactional_db, tmp_path, log_format):
    from apps.tenants.services import tenant_create

    port = free_port()
    tenant = tenant_create(slug="tenant-a", domain=f"127.0.0.1:{port}", public_url=f"http://127.0.0.1:{port}")
    server = start_daphne(
        tmp_path, port=port, env={"LOG_LEVEL": "DEBUG", "DJANGO_DEBUG": "1", "LOG_FORMAT": log_format}
    )
    directory = MediatorDirectory(scheme="http")
    client = RecordingClient(f"http://127.0.0.1:{port}", directory=directory)
    client.sent = []
    try:
        alice, bob = Identity.create("alice", client.did), Identity.create("bob", client.did)
        secrets = run_story(client, client, alice, bob)
        secrets += asyncio.run(_push_over_websocket(client, port, alice, bob))
    finally:
        directory.close()
        server.stop()

    secrets += client.sent + _key_strings(alice, bob)
    tenant.refresh_from_db()
    secrets += [b64encode(tenant.signing_keypair.seed), tenant.signing_keypair.seed.hex()]
    secrets += [b64encode(tenant.prekey_pair.private), tenant.prekey_pair.private.hex()]
    secrets += [tenant.signing_private_sealed, tenant.prekey_private_sealed]
    log = server.log()
    assert len(secrets) > 60
    leaked = [s[:24] for s in secrets if s and s in log]
    assert leaked == []

    # The test means something: SQL debug logging was on (redacted), and commands were logged.
    sql_lines = [line for line in log.splitlines() if "django.db.backends" in line]
    assert any("protocol_nonce" in line for line in sql_lines)
    assert any("messaging_pendingevent" in line for line in sql_lines)
    assert any("SELECT tenants_tenant" in line for line in sql_lines)
    assert "args=" not in log and "params" not in log
    if log_format == "json":
        lines = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
        commands = [r for r in lines if r["logger"] == "mediator.command"]
        sends = [r for r in commands if r["command"] == "TWO_WAY_PRIVATE"]
        assert len(sends) == 2
        assert {k for k in sends[0] if k not in ("ts", "duration_ms", "msg")} == {
            "level",
            "logger",
            "tenant",
            "transport",
            "command",
            "code",
            "status",
        }
        assert (sends[0]["tenant"], sends[0]["code"], sends[0]["status"], sends[0]["transport"]) == (
            "tenant-a",
            "SUCCESS",
            200,
            "http",
        )
        assert isinstance(sends[0]["duration_ms"], float)
        assert any(r["logger"] == "django.db.backends" for r in lines)
    else:
        assert "command tenant=tenant-a transport=http type=TWO_WAY_PRIVATE code=SUCCESS status=200" in log


async def _push_over_websocket(client: MediatorClient, port: int, alice: Identity, bob: Identity) -> list[str]:
    """Bob listens on /ws while Alice sends: the pushed payload must not be logged either."""
    sock = await MediatorSocket.open(f"ws://127.0.0.1:{port}/ws")
    try:
        auth = bob.ws_authenticate()
        await sock.send_json(auth)
        assert (await sock.recv())["type"] == "AUTH_SUCCESS"
        await asyncio.to_thread(
            client.send_private, alice, bob.did, {"type": "chat.message", "data": "over the socket"}
        )
        frame = await sock.next_of("PENDING_EVENTS")
        return [auth["signature"], *(e["payload"] for e in frame["events"])]
    finally:
        await sock.close()


# --- the helpers themselves -------------------------------------------------------------------


def _record(name: str, msg: str, args: tuple, **extra) -> logging.LogRecord:
    record = logging.LogRecord(name, logging.DEBUG, __file__, 1, msg, args, None)
    record.__dict__.update(extra)
    return record


def test_the_sql_filter_keeps_the_timing_and_the_table_and_drops_every_value():
    sql = 'INSERT INTO "messaging_pendingevent" ("payload") VALUES (\'c2VjcmV0LWNpcGhlcnRleHQ=\') RETURNING id'
    record = _record(
        "django.db.backends",
        "(%.3f) %s; args=%s; alias=%s",
        (0.0123, sql, ("c2VjcmV0",), "default"),
        duration=0.0123,
        sql=sql,
        params=("c2VjcmV0",),
        alias="default",
    )
    assert RedactSqlFilter().filter(record) is True
    assert record.getMessage() == "(0.012) INSERT INTO messaging_pendingevent"
    RedactSqlFilter().filter(record)  # a second filter (logger, then handler) changes nothing
    assert record.getMessage() == "(0.012) INSERT INTO messaging_pendingevent"
    assert "sql" not in record.__dict__ and "params" not in record.__dict__
    assert "c2VjcmV0" not in JsonFormatter().format(record)


def test_the_sql_filter_also_redacts_schema_statements_and_leaves_other_loggers_alone():
    record = _record(
        "django.db.backends.schema",
        "%s; (params %r)",
        ("ALTER TABLE x ADD y DEFAULT 'k'", ["k"]),
        sql="ALTER TABLE x",
        params=["k"],
    )
    RedactSqlFilter().filter(record)
    assert record.getMessage() == "ALTER x"
    other = _record("mediator.command", "command tenant=%s", ("a",))
    RedactSqlFilter().filter(other)
    assert other.getMessage() == "command tenant=a"


@pytest.mark.parametrize(
    ("sql", "shape"),
    [
        ('SELECT "a"."id" FROM "tenants_tenant" WHERE x = 1', "SELECT tenants_tenant"),
        ("UPDATE \"messaging_pendingevent\" SET payload = ''", "UPDATE messaging_pendingevent"),
        ('DELETE FROM "protocol_nonce" WHERE expires_at <= 5', "DELETE FROM protocol_nonce"),
        (
            "WITH c AS (INSERT INTO protocol_nonce VALUES ('x')) INSERT INTO messaging_pendingevent SELECT 1 FROM c",
            "WITH protocol_nonce, messaging_pendingevent, c",
        ),
        ("INSERT INTO t (p) VALUES ('see FROM secrets JOIN keys')", "INSERT INTO t"),
        ("SAVEPOINT s1", "SAVEPOINT"),
        ("", "SQL"),
    ],
)
def test_sql_shape(sql, shape):
    assert sql_shape(sql) == shape


def test_the_json_formatter_writes_one_line_with_only_whitelisted_extras():
    record = _record("mediator.command", "command %s", ("x",), tenant="t", code="SUCCESS", payload="SECRET")
    line = JsonFormatter().format(record)
    assert "\n" not in line
    data = json.loads(line)
    assert (data["msg"], data["tenant"], data["code"], data["logger"]) == (
        "command x",
        "t",
        "SUCCESS",
        "mediator.command",
    )
    assert "payload" not in data and "SECRET" not in line
