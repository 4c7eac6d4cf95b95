"""A socket server's capacity, by policy: how many sockets one process holds and admits at once, and
the thread pool their database work runs on (docs/realtime.md "Capacity").

Every accepted socket of either front door takes a `Ticket` from the process's `GATE` before any
database work. Over `MEDIATOR_WS_MAX_SOCKETS` open sockets, or `MEDIATOR_WS_MAX_ADMITTING` sockets
still being admitted (connected, their first answer not yet given: `/ws` until AUTHENTICATE is
answered, `/didcomm/ws` until its tenant is found), the socket is refused at once in its protocol's
words and closed with 1013 (Try Again Later, RFC 6455 §7.4.1 as registered by IANA), whose reason says
when to retry. The socket is accepted first, so a storm never meets the ASGI server's connect timeout
(Daphne's HTTP 403, WSREJECT, which a client may read as "forbidden").

`db_hop(func)` is `database_sync_to_async(func)` on `MEDIATOR_WS_DB_THREADS` threads of their own
(each with its pooled connection) instead of the one thread every thread-sensitive call of the process
shares: admission's round trips and commits then overlap instead of queueing behind one another.
`MEDIATOR_WS_DB_THREADS=0` keeps the shared thread (in-process tests, whose calls must run on the
test's thread to see its transaction).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from channels.db import database_sync_to_async
from django.conf import settings

from apps.ops import metrics

# Try Again Later: the server is overloaded, the client should reconnect after a while.
CLOSE_CODE = 1013


class Gate:
    """This process's count of open sockets and of sockets being admitted (one event loop: no lock)."""

    __slots__ = ("open", "admitting")

    def __init__(self) -> None:
        self.open = 0
        self.admitting = 0

    def enter(self) -> Ticket | None:
        """A ticket for a new socket, or None when the process is over either cap."""
        max_open, max_admitting = settings.MEDIATOR_WS_MAX_SOCKETS, settings.MEDIATOR_WS_MAX_ADMITTING
        if (max_open and self.open >= max_open) or (max_admitting and self.admitting >= max_admitting):
            metrics.observe_ws("over_capacity", None)
            return None
        self.open += 1
        self.admitting += 1
        return Ticket(self)


class Ticket:
    """One socket's place in the gate: `admitted()` once its first answer is given, `release()` as it
    closes (each idempotent)."""

    __slots__ = ("gate", "admitting", "held")

    def __init__(self, gate: Gate) -> None:
        self.gate = gate
        self.admitting = True
        self.held = True

    def admitted(self) -> None:
        if self.admitting:
            self.admitting = False
            self.gate.admitting -= 1

    def release(self) -> None:
        self.admitted()
        if self.held:
            self.held = False
            self.gate.open -= 1


GATE = Gate()


def retry_reason() -> str:
    """The close reason of a refusal by capacity: when to try again."""
    return f"try again in {settings.MEDIATOR_WS_RETRY_AFTER_S} s"


_executor: ThreadPoolExecutor | None = None


def db_hop(func: Callable[..., Any]) -> Callable[..., Any]:
    """`func` as a coroutine function run on the sockets' database threads (module docstring)."""
    global _executor
    threads = settings.MEDIATOR_WS_DB_THREADS
    if not threads:
        return database_sync_to_async(func)
    if _executor is None:
        _executor = ThreadPoolExecutor(threads, thread_name_prefix="ws-db")
    return database_sync_to_async(func, thread_sensitive=False, executor=_executor)
