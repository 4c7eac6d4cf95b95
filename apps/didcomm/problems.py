"""What a handler returns (`Outcome`), the exception it raises for a client-caused error (answered
as a problem report), and the one dispatch raises for any other exception once it knows the message
it concerns."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .protocols import PROBLEM_REPORT, Code

if TYPE_CHECKING:
    from .models import Connection


@dataclass(frozen=True)
class Outcome:
    """What a handler (v1 or v2) did: its plaintext answer (packed by dispatch), a live-delivery
    change, and (v1 DID Exchange) the connection it made."""

    response: dict | None = None
    live: bool | None = None
    connection: Connection | None = None
    # The Pickup protocol base of a live-delivery-change (protocols.PICKUP4); None: the version's
    # default (3.0 for v2, 2.0 for v1). Live pushes use its `delivery` (apps/didcomm/live.py).
    pickup: str | None = None


class Problem(Exception):
    """A client-caused error, answered as a Report Problem 2.0 message."""

    def __init__(
        self,
        code: str,
        comment: str,
        status: int = 400,
        *,
        retry_after: int | None = None,
        report_type_v1: str | None = None,
    ):
        super().__init__(code)
        self.code, self.comment, self.status = code, comment, status
        # DIDComm v1: a protocol's own problem-report type (RFC 0035 lets a protocol adopt it, and
        # clients such as Credo handle only theirs), else Report Problem 1.0's.
        self.report_type_v1 = report_type_v1
        # A 429 always says when to come back (clients such as the Identus SDK give up without it).
        self.retry_after = 1 if retry_after is None and status == 429 else retry_after
        # Set by dispatch once known: the message it concerns (for pthid) and the sender's context.
        self.message: Any = None
        self.ctx: Any = None


def unavailable() -> Problem:
    """The answer while the database is unreachable, or to a defect of ours (never a 500)."""
    return Problem(Code.UNAVAILABLE, "mediator unavailable", 503)


def unsupported_type() -> Problem:
    """The answer to a message type the version's handlers do not have."""
    return Problem(Code.UNSUPPORTED_TYPE, "message type not supported")


def problem_message(
    code: str,
    comment: str,
    *,
    pthid: str | None,
    from_did: str | None = None,
    to: str | None = None,
    type_: str = PROBLEM_REPORT,
) -> dict:
    """A Report Problem 2.0 plaintext message (`type_`: a protocol's own problem-report type with
    the same body, as Pickup 4.0 has)."""
    msg: dict = {
        "id": str(uuid.uuid4()),
        "typ": "application/didcomm-plain+json",
        "type": type_,
        "body": {"code": code, "comment": comment},
    }
    if pthid:
        msg["pthid"] = pthid
    if from_did is not None:
        msg["from"] = from_did
    if to:
        msg["to"] = [to]
    return msg


def pthid_of(message: Any) -> str | None:
    """The thread a problem report about `message` (a PlainMessage, or None) belongs to."""
    if message is None:
        return None
    return message.thid or message.id


class Unanswered(Exception):
    """An exception no handler answered (the database is down, or a defect of ours), raised once
    the message it concerns was known: dispatch answers it `e.p.me.unavailable` and meters it under
    that message's type and sender. `cause` is the exception itself."""

    def __init__(self, cause: Exception, message: Any, ctx: Any):
        super().__init__(type(cause).__name__)
        self.cause, self.message, self.ctx = cause, message, ctx
