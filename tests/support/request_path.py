"""The product files on the path of one request, entry to write (docs/architecture.md, "The shape
in one picture"): which files of `apps/` and `mediator_project/` (migrations aside) have a Python
function run from the moment the production WSGI application (mediator_project/wsgi.py) is called
until the request's database write statement executes. Metering, the reply and the push after
commit come after the write and are not on the path.

`measure()` builds one valid request of each kind against a tenant (registration and contract for
TWO_WAY_PRIVATE; mediation and a recipient key for the forwards, all through the same application),
sends one of each to warm the per-process caches, then records the next one of each under
`sys.setprofile`; the write is recognised by its statement (`WRITES`), seen through Django's
execute wrappers (which the prepared cursor runs too). It needs committed rows and real request
signals: tests/test_request_path.py runs it on a transactional database; scripts/request_path.py
prints its answer.
"""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from django.db import connection

from apps.wire.canonical import canonical_bytes
from apps.wire.client import Identity
from tests.support.didcomm_agent import CM2, ENCRYPTED, Agent, forward_for, routed_did
from tests.support.didcomm_agent_v1 import CM1, ENVELOPE, AgentV1, forward_to
from tests.support.entry import Poster, wsgi_call
from tests.support.registration import contract_both_ways, register

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = (ROOT / "apps", ROOT / "mediator_project")

TWO_WAY_PRIVATE = "decentrl TWO_WAY_PRIVATE"
FORWARD_V2 = "didcomm v2 forward"
FORWARD_V1 = "didcomm v1 forward"
# Each kind's write: the one statement that stores the request's row.
WRITES: dict[str, Callable[[str], bool]] = {
    TWO_WAY_PRIVATE: lambda sql: "INSERT INTO messaging_pendingevent" in sql,
    FORWARD_V2: lambda sql: "didcomm_forward_store(" in sql,
    FORWARD_V1: lambda sql: "didcomm_forward_store(" in sql,
}


def product_file(filename: str, _seen: dict[str, str | None] = {}) -> str | None:  # noqa: B006 - a memo
    """`filename` relative to the repository when it is product code (not a migration), else None."""
    if filename not in _seen:
        path = Path(filename)
        inside = any(path.is_relative_to(root) for root in PRODUCT) and "migrations" not in path.parts
        _seen[filename] = str(path.relative_to(ROOT)) if inside else None
    return _seen[filename]


@contextmanager
def recording(is_write: Callable[[str], bool]) -> Iterator[tuple[dict[str, set[str]], list[bool]]]:
    """({product file: the functions of it that ran}, [whether the write was reached]): every Python
    function call of this thread is seen until a statement `is_write` accepts is executed."""
    files: dict[str, set[str]] = {}
    reached = [False]

    def profile(frame, event, _arg) -> None:
        if event == "call":
            code = frame.f_code
            name = product_file(code.co_filename)
            if name is not None:
                files.setdefault(name, set()).add(code.co_qualname)

    def at_statement(execute, sql, params, many, context):
        if not reached[0] and is_write(sql):
            reached[0] = True
            sys.setprofile(None)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(at_statement):
        sys.setprofile(profile)
        try:
            yield files, reached
        finally:
            sys.setprofile(None)


def call(
    app, body: bytes = b"", *, host: str, method: str = "POST", path: str = "/", content_type: str = "application/json"
):
    """One request through the WSGI application `app` (tests/support/entry.py), with nothing of it
    replaced (the entry's connection handling included): (status code, body)."""
    status, _, data = wsgi_call(
        app, body, method=method, path=path, host=host, keep_connection=False, CONTENT_TYPE=content_type
    )
    return int(status.split(" ", 1)[0]), data


def _decentrl(app, tenant, host: str) -> Callable[[], tuple[bytes, str]]:
    """TWO_WAY_PRIVATE from alice to bob (both registered, with a contract)."""
    poster = Poster(host, app, keep_connection=False)
    alice, bob = Identity.create("alice", tenant.did), Identity.create("bob", tenant.did)
    register(poster, alice, tenant)
    register(poster, bob, tenant)
    contract_both_ways(poster, alice, bob, tenant)

    def request() -> tuple[bytes, str]:
        envelope = alice.sign_command(recipient_did=bob.did, payload="ciphertext", channel="TWO_WAY_PRIVATE")
        return canonical_bytes(envelope), "application/json"

    return request


def _v2(app, host: str) -> Callable[[], tuple[bytes, str]]:
    """A v2 forward (anoncrypt to the mediator) for a recipient DID a granted wallet registered."""
    status, body = call(app, method="GET", path="/didcomm/invitation", host=host)
    assert status == 200, body
    mediator = json.loads(body)["from"]
    wallet = Agent()
    status, _ = call(
        app,
        wallet.pack(wallet.message(CM2 + "mediate-request"), mediator),
        host=host,
        path="/didcomm",
        content_type=ENCRYPTED,
    )
    assert status == 200
    recipient = routed_did(mediator)
    update = wallet.message(CM2 + "keylist-update", {"updates": [{"recipient_did": recipient.did, "action": "add"}]})
    status, _ = call(app, wallet.pack(update, mediator), host=host, path="/didcomm", content_type=ENCRYPTED)
    assert status == 200
    return lambda: (forward_for(recipient, mediator), ENCRYPTED)


def _v1(app, host: str) -> Callable[[], tuple[bytes, str]]:
    """A routing/1.0 forward (anoncrypt, as ACA-Py sends) for a key a connected, granted agent registered."""
    status, body = call(app, method="GET", path="/didcomm/invitation?version=1", host=host)
    assert status == 200, body
    invitation = json.loads(body)
    routing_key = invitation["services"][0]["recipientKeys"][0]
    agent, key = AgentV1(), AgentV1()
    for message in (
        agent.didx_request(invitation),
        agent.message(CM1 + "mediate-request"),
        agent.message(CM1 + "keylist-update", updates=[{"recipient_key": key.did_key, "action": "add"}]),
    ):
        status, _ = call(app, agent.pack(message, routing_key), host=host, path="/didcomm", content_type=ENVELOPE)
        assert status == 200
    inner = json.loads(
        AgentV1().pack({"@type": "https://didcomm.org/basicmessage/1.0/message", "@id": str(uuid.uuid4())}, key.did_key)
    )
    return lambda: (forward_to(key.did_key, routing_key, inner), ENVELOPE)


def measure(app, tenant, host: str) -> dict[str, dict[str, list[str]]]:
    """{kind: {each product file on its path: the functions of it that ran}}, for each kind of WRITES."""
    requests = {
        TWO_WAY_PRIVATE: ("/", _decentrl(app, tenant, host)),
        FORWARD_V2: ("/didcomm", _v2(app, host)),
        FORWARD_V1: ("/didcomm", _v1(app, host)),
    }
    for path, request in requests.values():  # the per-process caches, warm as in steady state
        body, media = request()
        assert call(app, body, host=host, path=path, content_type=media)[0] in (200, 202)
    paths = {}
    for kind, (path, request) in requests.items():
        body, media = request()
        with recording(WRITES[kind]) as (files, reached):
            status, reply = call(app, body, host=host, path=path, content_type=media)
        assert status in (200, 202) and reached[0], (kind, status, reply[:200])
        paths[kind] = {name: sorted(functions) for name, functions in sorted(files.items())}
    return paths
