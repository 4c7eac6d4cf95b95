"""apps/ops/dbconn.py in-process: a live idle connection is kept, one the server ended or psycopg
already closed is dropped without an error, and the next query reconnects. (The production
layout test terminates every HTTP-tier backend and checks the requests that follow.)"""

from __future__ import annotations

import time

import pytest
from django.db import connection

from apps.ops.dbconn import close_dead_idle_connections
from tests.support import servers

pytestmark = pytest.mark.django_db(transaction=True)


def _select_one() -> int:
    with connection.cursor() as cur:
        cur.execute("SELECT 1")
        return cur.fetchone()[0]


def test_a_live_idle_connection_is_kept():
    assert _select_one() == 1
    raw = connection.connection
    assert close_dead_idle_connections() == 0
    assert connection.connection is raw


def test_a_connection_the_server_ended_is_replaced():
    assert _select_one() == 1
    pid = connection.connection.info.backend_pid
    servers.terminate_backends([pid])
    time.sleep(0.05)  # the FATAL message and the close reach our socket
    assert close_dead_idle_connections() == 1
    assert connection.connection is None
    assert _select_one() == 1
    assert connection.connection.info.backend_pid != pid


def test_a_connection_psycopg_already_closed_is_dropped_without_an_error():
    assert _select_one() == 1
    connection.connection.close()  # as psycopg does after a fatal error
    assert close_dead_idle_connections() == 1
    assert _select_one() == 1
