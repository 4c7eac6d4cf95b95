"""A dependency's outage as one process sees it, logged once: the first failure is a warning naming
the dependency, what was being done and the error's class and message (no traceback: the cause is
the dependency, not our code); later failures are only counted; the first success after them logs
the end with that count and how long it lasted. Without this, every request, push and socket
wrote its own traceback while Redis was away (hundreds a second under load).

Only errors that mean "unreachable" go here (redis-py's errors, OSError); anything else is a bug
and keeps its traceback where it is caught. Thread-safe; `recovered()` costs one attribute read
while nothing is failing."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger("mediator.outage")

_MESSAGE_CHARS = 200


class Outage:
    """The outage state of one dependency (for example "rate limiter" or "channel layer")."""

    def __init__(self, name: str, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.name = name
        self.clock = clock
        self.failures = 0
        self._since: float | None = None
        self._lock = threading.Lock()

    @property
    def down(self) -> bool:
        return self._since is not None

    def failed(self, exc: BaseException, doing: str) -> None:
        """One failure of the dependency while `doing` something: logged if it starts an outage."""
        with self._lock:
            self.failures += 1
            if self._since is not None:
                return
            self._since = self.clock()
        message = str(exc).replace("\n", " ")[:_MESSAGE_CHARS]
        log.warning(
            "%s unavailable while %s (%s: %s); further failures are counted until it answers again",
            self.name,
            doing,
            type(exc).__name__,
            message,
        )

    def recovered(self) -> None:
        """The dependency answered: ends an outage, logging how many failures it had."""
        if self._since is None:
            return
        with self._lock:
            since, failures = self._since, self.failures
            if since is None:
                return
            self._since, self.failures = None, 0
        log.warning("%s available again after %d failures in %.1f s", self.name, failures, self.clock() - since)
