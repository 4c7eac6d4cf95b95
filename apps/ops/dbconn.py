"""Persistent database connections that died while idle are closed before a request uses them.

The HTTP tier's threads (Granian) keep one PostgreSQL connection each (DB_CONN_MAX_AGE, docs/serving.md). When
PostgreSQL restarts, or an operator terminates backends, every one of those connections is dead,
and Django only notices when a query fails on it: each thread's next request would answer 503
MEDIATOR_UNAVAILABLE. A PostgreSQL backend that ends a connection sends its FATAL message and
closes the socket, so the socket of an idle connection turns readable; nothing else makes it
readable, as the mediator never LISTENs. At `request_started` each open PostgreSQL connection
outside a transaction gets one zero-timeout poll (about 2 µs); if the socket is readable it is
closed, and Django opens a fresh connection on first use.
"""

from __future__ import annotations

import logging
import select

from django.db import connections

log = logging.getLogger("mediator.db")

_DEAD = select.POLLIN | select.POLLHUP | select.POLLERR


def close_dead_idle_connections(**_kwargs) -> int:
    """Close every idle PostgreSQL connection of this thread whose server end has gone; returns
    how many were closed."""
    closed = 0
    for conn in connections.all(initialized_only=True):
        raw = conn.connection
        if raw is None or conn.vendor != "postgresql" or conn.in_atomic_block:
            continue
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
            closed += 1
    return closed
