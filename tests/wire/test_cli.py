"""The shell client against a real Daphne: alice and bob register, agree a contract, and bob reads
alice's message from his inbox. Every step runs `python -m apps.wire.cli` as a subprocess."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from apps.wire.client import Identity, MediatorClient
from apps.wire.crypto import X25519KeyPair
from apps.wire.encoding import b64encode
from tests.support.servers import ROOT, free_port, start_daphne

pytestmark = pytest.mark.e2e

UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"


def cli(*args: str) -> subprocess.CompletedProcess:
    # A clean environment: the CLI must work without Django settings.
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    return subprocess.run(
        [sys.executable, "-m", "apps.wire.cli", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def ok(*args: str) -> str:
    out = cli(*args)
    assert (out.returncode, out.stderr) == (0, ""), out
    return out.stdout


def iso(ts: int) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def load(path: Path) -> dict:
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    return json.loads(path.read_text())


def held_with(data: dict, other: str) -> list[dict]:
    terms = [c["signed_communication_contract"]["communication_contract"] for c in data["contracts"]]
    return [t for t in terms if other in (t["requestor_did"], t["recipient_did"])]


@pytest.fixture
def mediator(transactional_db, tmp_path):
    from apps.tenants.services import tenant_create

    port = free_port()
    host = f"127.0.0.1:{port}"
    tenant = tenant_create(slug="cli", domain=host, name="CLI", public_url=f"http://{host}")
    server = start_daphne(tmp_path, port=port)
    try:
        yield tenant, server
    finally:
        server.stop()


def test_alice_messages_bob_from_the_shell(mediator, tmp_path):
    tenant, server = mediator
    assert tenant.did == f"did:web:127.0.0.1%3A{server.port}"
    alice_file, bob_file = tmp_path / "alice.json", tmp_path / "bob.json"

    alice_did = ok("new-identity", "--alias", "alice", "--mediator", server.url + "/", "--out", str(alice_file)).strip()
    bob_did = ok("new-identity", "--alias", "bob", "--mediator", server.url, "--out", str(bob_file)).strip()
    alice_data = load(alice_file)
    assert alice_data["did"] == alice_did and alice_data["mediator_did"] == tenant.did
    assert alice_data["mediator_url"] == server.url
    assert Identity.from_json(alice_data).did == alice_did
    assert alice_data["contracts"] == [] and alice_data["requested"] == []

    # Registration: the mediator's contract lands in the identity file.
    out = ok("register", "--identity", str(alice_file))
    [reg] = held_with(load(alice_file), tenant.did)
    assert out == f"registered with {tenant.did} until {iso(reg['expires_at'])}\n"

    # Bob is not registered yet: his mediator refuses to queue a request for him.
    out = cli("request-contract", "--identity", str(alice_file), "--to", bob_did)
    assert (out.returncode, out.stdout) == (1, "")
    assert out.stderr == "error: the mediator replied 404 RECIPIENT_NOT_REGISTERED\n"
    assert load(alice_file)["requested"] == []
    out = ok("register", "--identity", str(bob_file), "--days", "10")
    [bob_reg] = held_with(load(bob_file), tenant.did)
    assert out == f"registered with {tenant.did} until {iso(bob_reg['expires_at'])}\n"

    # A request bob cannot decrypt is dropped (acknowledged), not accepted and not kept.
    mallory = Identity.create("mallory", tenant.did)
    junk = {
        "type": "REQUEST_COMMUNICATION_CONTRACT",
        "encrypted_contract_request": b64encode(os.urandom(64)),
        "requestor_ephemeral_public_key": b64encode(X25519KeyPair.generate().public),
    }
    with httpx.Client() as http:
        MediatorClient(server.url, http=http).command(mallory, junk, recipient_did=bob_did)
    out = cli("accept-requests", "--identity", str(bob_file))
    assert (out.returncode, out.stdout) == (0, "")
    assert out.stderr == f"dropped an invalid request from {mallory.did}: contract request does not decrypt\n"
    assert ok("accept-requests", "--identity", str(bob_file)) == "no pending contract requests\n"

    # Alice asks bob for a contract through bob's mediator (reached by an explicit URL here).
    out = ok("request-contract", "--identity", str(alice_file), "--to", bob_did, "--mediator-url", server.url)
    assert out == f"requested a contract with bob ({bob_did})\n"
    assert len(load(alice_file)["requested"]) == 1

    # Sending before the contract is accepted fails cleanly.
    out = cli("send", "--identity", str(alice_file), "--to", bob_did, "--text", "too early")
    assert out.returncode == 1 and out.stdout == ""
    assert out.stderr == (
        f"error: no live contract with {bob_did}: request-contract first, then contracts once it is accepted\n"
    )

    assert ok("accept-requests", "--identity", str(bob_file)) == f"accepted a contract with alice ({alice_did})\n"
    assert ok("accept-requests", "--identity", str(bob_file)) == "no pending contract requests\n"
    [bob_side] = held_with(load(bob_file), alice_did)

    # Alice picks the accepted contract up from her own mediator.
    out = ok("contracts", "--identity", str(alice_file))
    alice_data = load(alice_file)
    [alice_side] = held_with(alice_data, bob_did)
    assert alice_side == bob_side
    assert alice_data["requested"] == []
    assert out == (
        f"adopted a contract with bob ({bob_did})\n"
        f"contract with bob ({bob_did}) until {iso(alice_side['expires_at'])}\n"
        f"contract with {tenant.did} until {iso(reg['expires_at'])}\n"
    )

    out = ok("send", "--identity", str(alice_file), "--to", bob_did, "--text", "hello bob")
    assert re.fullmatch(f"sent {UUID}\n", out), out

    # Reading without --ack leaves the message pending; --ack removes it.
    assert ok("inbox", "--identity", str(bob_file)) == f"alice ({alice_did}): hello bob\n"
    assert ok("inbox", "--identity", str(bob_file), "--ack") == (
        f"alice ({alice_did}): hello bob\nacknowledged 1 message(s)\n"
    )
    assert ok("inbox", "--identity", str(bob_file)) == "no pending messages\n"

    # Bob answers over the same contract; alice reads it on her own mediator.
    assert re.fullmatch(
        f"sent {UUID}\n", ok("send", "--identity", str(bob_file), "--to", alice_did, "--text", "hi alice")
    )
    assert ok("inbox", "--identity", str(alice_file), "--ack") == (
        f"bob ({bob_did}): hi alice\nacknowledged 1 message(s)\n"
    )
    assert stat.S_IMODE(alice_file.stat().st_mode) == 0o600


def test_identities_on_two_mediators_find_each_other_through_their_did_web(mediator, tmp_path):
    """alice on 127.0.0.1:<port>, carol on localhost:<port>: the same Daphne hosts both tenants,
    and each CLI call reaches the other party's mediator from the did:web in its DID (--scheme http)."""
    from apps.tenants.services import tenant_create

    tenant, server = mediator
    other = tenant_create(slug="cli-b", domain=f"localhost:{server.port}", public_url=f"http://localhost:{server.port}")
    alice_file, carol_file = tmp_path / "alice.json", tmp_path / "carol.json"
    alice_did = ok("new-identity", "--alias", "alice", "--mediator", server.url, "--out", str(alice_file)).strip()
    carol_did = ok(
        "new-identity", "--alias", "carol", "--mediator", f"http://localhost:{server.port}", "--out", str(carol_file)
    ).strip()
    assert load(carol_file)["mediator_did"] == other.did != tenant.did
    ok("register", "--identity", str(alice_file))
    ok("register", "--identity", str(carol_file))

    # Without --scheme http the CLI would look for https://localhost:<port>, which does not answer.
    # (The TLS handshake with a plain-HTTP server stalls until the timeout, or the connection is refused.)
    out = cli("request-contract", "--identity", str(alice_file), "--to", carol_did, "--timeout", "1")
    assert (out.returncode, out.stdout) == (1, "")
    assert re.fullmatch(r"error: Connect(Error|Timeout): [^\n]*\n", out.stderr), out.stderr
    assert load(alice_file)["requested"] == []

    http = ("--scheme", "http")
    assert ok("request-contract", "--identity", str(alice_file), "--to", carol_did, *http) == (
        f"requested a contract with carol ({carol_did})\n"
    )
    assert (
        ok("accept-requests", "--identity", str(carol_file), *http) == f"accepted a contract with alice ({alice_did})\n"
    )
    assert ok("contracts", "--identity", str(alice_file)).startswith(f"adopted a contract with carol ({carol_did})\n")
    assert re.fullmatch(
        f"sent {UUID}\n", ok("send", "--identity", str(alice_file), "--to", carol_did, "--text", "hé 👋", *http)
    )
    assert (
        ok("inbox", "--identity", str(carol_file), "--ack")
        == f"alice ({alice_did}): hé 👋\nacknowledged 1 message(s)\n"
    )
    assert re.fullmatch(
        f"sent {UUID}\n", ok("send", "--identity", str(carol_file), "--to", alice_did, "--text", "\x1b[2Jhi", *http)
    )
    assert ok("inbox", "--identity", str(alice_file)) == f"carol ({carol_did}): \\u001b[2Jhi\n"


def test_cli_refuses_to_overwrite_an_identity_and_reports_unreachable_mediators(tmp_path):
    path = tmp_path / "id.json"
    path.write_text("{}")
    out = cli("new-identity", "--alias", "x", "--mediator", f"http://127.0.0.1:{free_port()}", "--out", str(path))
    assert out.returncode == 1 and out.stdout == "" and out.stderr.startswith("error: ConnectError: ")
    assert path.read_text() == "{}"
    out = cli("register", "--identity", str(path))
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr == f"error: {path} is not an identity file (not a version 1 identity)\n"
    out = cli("register", "--identity", str(tmp_path / "missing.json"))
    assert (out.returncode, out.stderr) == (
        2,
        f"error: cannot read {tmp_path / 'missing.json'}: No such file or directory\n",
    )
