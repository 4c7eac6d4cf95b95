"""The exception a handler raises for a client-caused error (answered as Report Problem 2.0)."""

from __future__ import annotations

from typing import Any


class Problem(Exception):
    """A client-caused error, answered as a Report Problem 2.0 message."""

    def __init__(self, code: str, comment: str, status: int = 400, *, retry_after: int | None = None):
        super().__init__(code)
        self.code, self.comment, self.status, self.retry_after = code, comment, status, retry_after
        # Set by dispatch once known: the message it concerns (for pthid) and the sender's context.
        self.message: Any = None
        self.ctx: Any = None
