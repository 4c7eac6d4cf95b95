"""Persistent database connections that died while idle are closed before a request uses them.

The HTTP tier's threads (Granian) keep one PostgreSQL connection each (DB_CONN_MAX_AGE, docs/serving.md). When
PostgreSQL restarts, or an operator terminates backends, every one of those connections is dead,
and Django only notices when a query fails on it: each thread's next request would answer 503
MEDIATOR_UNAVAILABLE. A PostgreSQL backend that ends a connection sends its FATAL message and
closes the socket, so the socket of an idle connection turns readable; nothing else makes it
readable, as the mediator never LISTENs. When a request starts, each open PostgreSQL connection
outside a transaction gets one zero-timeout poll (cheap); if the socket is readable it is
closed, and Django opens a fresh connection on first use.

`request_begins` and `request_ends` are what the production command entry
(mediator_project/entry.py's CommandEntry) does instead of sending Django's request signals: the
connection handling of `close_old_connections` (at both ends, as Django's receivers do) and, at
the start, this poll, in one pass over the thread's connections. `close_dead_idle_connections` is
the same poll as a `request_started` receiver, for every other request (Django's handlers).
"""

from __future__ import annotations

import logging
import select

from django.conf import settings
from django.db import close_old_connections, connections, reset_queries

log = logging.getLogger("mediator.db")

_DEAD = select.POLLIN | select.POLLHUP | select.POLLERR


def _close_if_dead(conn) -> bool:
    """Close `conn` when it is an idle connection whose server end has gone."""
    raw = conn.connection
    if raw is None or conn.in_atomic_block:
        return False
    try:
        if raw.closed:  # psycopg closed it after a fatal error Django has not seen yet
            dead = True
        else:
            poller = select.poll()
            poller.register(raw.fileno(), _DEAD)
            dead = bool(poller.poll(0))
    except Exception:  # noqa: BLE001 - a connection we cannot even poll is no use either
        dead = True
    if dead:
        log.warning("database connection %s closed by the server while idle; reconnecting", conn.alias)
        try:
            conn.close()
        except Exception:  # noqa: BLE001 - a request must never fail here; Django reconnects on use
            conn.connection = None
    return dead


def close_dead_idle_connections(**_kwargs) -> int:
    """Close every idle PostgreSQL connection of this thread whose server end has gone; returns
    how many were closed."""
    return sum(_close_if_dead(conn) for conn in connections.all(initialized_only=True))


def request_begins() -> None:
    """A command begins: each of this thread's connections that errored, outlived its
    CONN_MAX_AGE or was left outside autocommit is closed (Django's `close_old_connections`),
    and then one the server ended while idle. Under DEBUG, the query log starts afresh (Django's
    `reset_queries`: queries are logged only then)."""
    if settings.DEBUG:
        reset_queries()
    for conn in connections.all(initialized_only=True):
        conn.close_if_unusable_or_obsolete()
        _close_if_dead(conn)


def request_ends() -> None:
    """A command ends: Django's `close_old_connections`."""
    close_old_connections()
