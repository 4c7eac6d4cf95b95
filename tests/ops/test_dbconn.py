"""apps/ops/dbconn.py in-process: a live idle connection is kept, one the server ended or psycopg
already closed is dropped without an error, and the next query reconnects. (The production
layout test terminates every HTTP-tier backend and checks the requests that follow.)"""

from __future__ import annotations

import select
import time

import pytest
from django.db import connection

from apps.ops.dbconn import close_dead_idle_connections, request_begins, request_ends
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


def _wait_until_readable(timeout: float = 5.0) -> None:
    """Until the FATAL message and the close of a terminated backend reach our socket."""
    poller = select.poll()
    poller.register(connection.connection.fileno(), select.POLLIN | select.POLLHUP | select.POLLERR)
    poller.poll(timeout * 1000)


def test_a_connection_the_server_ended_is_replaced():
    assert _select_one() == 1
    pid = connection.connection.info.backend_pid
    servers.terminate_backends([pid])
    _wait_until_readable()
    assert close_dead_idle_connections() == 1
    assert connection.connection is None
    assert _select_one() == 1
    assert connection.connection.info.backend_pid != pid


def test_a_connection_psycopg_already_closed_is_dropped_without_an_error():
    assert _select_one() == 1
    connection.connection.close()  # as psycopg does after a fatal error
    assert close_dead_idle_connections() == 1
    assert _select_one() == 1


# request_begins / request_ends: what the command entry does instead of the request signals.


def test_a_command_keeps_a_live_connection_within_its_age():
    assert _select_one() == 1
    raw = connection.connection
    connection.close_at = time.monotonic() + 60
    request_begins()
    request_ends()
    assert connection.connection is raw


def test_a_command_begins_on_a_fresh_connection_when_the_server_ended_the_old_one():
    assert _select_one() == 1
    pid = connection.connection.info.backend_pid
    servers.terminate_backends([pid])
    _wait_until_readable()
    request_begins()
    assert connection.connection is None
    assert _select_one() == 1
    assert connection.connection.info.backend_pid != pid


@pytest.mark.parametrize("end", [request_begins, request_ends])
def test_either_end_closes_a_connection_past_its_max_age(end):
    assert _select_one() == 1
    connection.close_at = time.monotonic() - 1
    end()
    assert connection.connection is None


@pytest.mark.parametrize("end", [request_begins, request_ends])
def test_either_end_closes_a_connection_left_outside_autocommit(end):
    assert _select_one() == 1
    connection.set_autocommit(False)
    end()
    assert connection.connection is None
    assert _select_one() == 1
    assert connection.get_autocommit() is True


def test_the_query_log_starts_afresh_under_debug(settings):
    settings.DEBUG = True
    _select_one()
    assert len(connection.queries) >= 1
    request_begins()
    assert connection.queries == []
