"""Every query the story's commands make is served by an index (issue 2, part 3), shown with
EXPLAIN on PostgreSQL.

The same Alice and Bob story as test_story.py runs in-process: the client library talks to the
WSGI application through httpx's WSGI transport, so every SQL statement the commands issue is
captured on this thread's connection. Each read, update and delete is then EXPLAINed with
sequential scans disabled; a plan that still contains a Seq Scan means no index can serve it.
"""

from __future__ import annotations

import re

import httpx
import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from apps.wire.client import Identity, MediatorClient, MediatorDirectory

from .test_story import run_story

pytestmark = pytest.mark.django_db(transaction=True)

# Statements with no scan to plan: writes of new rows and transaction control.
_SKIP = re.compile(r"^\s*(INSERT|SAVEPOINT|RELEASE|ROLLBACK|BEGIN|COMMIT|SET)\b", re.IGNORECASE)
_TENANT_ONLY = re.compile(r"^\s*Index Cond: \(tenant_id = \d+\)\s*$")
_TABLE = re.compile(r'(?:FROM|UPDATE|INTO)\s+"([a-z_]+)"', re.IGNORECASE)


def _plans(statements: list[str]) -> dict[str, list[str]]:
    """EXPLAIN each statement with seq scans off; returns plan text by statement."""
    plans: dict[str, list[str]] = {}
    with transaction.atomic(), connection.cursor() as cur:
        cur.execute("SET LOCAL enable_seqscan = off")
        for sql in statements:
            cur.execute("EXPLAIN " + sql)
            plans[sql] = [row[0] for row in cur.fetchall()]
    return plans


def test_every_query_of_the_story_is_served_by_an_index(transactional_db):
    from apps.tenants.services import tenant_create
    from mediator_project.entry import protocol_application  # the production entry (Django set up by now)

    tenant_create(slug="tenant-a", domain="a.mediator.test", public_url="http://a.mediator.test")
    tenant_create(slug="tenant-b", domain="b.mediator.test", public_url="http://b.mediator.test")
    transport = httpx.WSGITransport(app=protocol_application())
    directory = MediatorDirectory(scheme="http")
    ma = MediatorClient("http://a.mediator.test", http=httpx.Client(transport=transport), directory=directory)
    mb = MediatorClient("http://b.mediator.test", http=httpx.Client(transport=transport), directory=directory)
    alice = Identity.create("alice", ma.did)
    bob = Identity.create("bob", mb.did)

    with CaptureQueriesContext(connection) as captured:
        run_story(ma, mb, alice, bob)

    statements = list(dict.fromkeys(q["sql"] for q in captured.captured_queries if not _SKIP.match(q["sql"])))
    tables = {t for sql in statements for t in _TABLE.findall(sql)}
    # The story reads every table a command reads. (The nonce check is an INSERT … ON CONFLICT:
    # its only lookup is the unique index itself.)
    assert {
        "messaging_contract",
        "messaging_contractrequest",
        "messaging_pendingevent",
        "messaging_storedevent",
        "messaging_eventtag",
    } <= tables
    plans = _plans(statements)
    unindexed = {sql: plan for sql, plan in plans.items() if any("Seq Scan" in line for line in plan)}
    assert unindexed == {}
    # And no index is used for the tenant alone: every lookup narrows to an owner, a recipient,
    # a tag or a row (the tenant is the leading column of every composite index).
    tenant_only = {sql: plan for sql, plan in plans.items() if any(_TENANT_ONLY.match(line) for line in plan)}
    assert tenant_only == {}
