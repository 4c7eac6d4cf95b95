"""What the one DIDComm message path (dispatch.py) and each version's door (v2.py, v1.py) share:
the `Reply`, the `Door` interface a version implements, and the media types.

A `Door[M, C]` is a version's parts of the path: `open` unpacks a body into its message `M` and the
context `C` its handlers see, `answer` runs the handler and packs the answer, `problem` answers a
problem report, `caller` names the sender once known, `rate_key` whom the per-sender limit counts.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Protocol, TypeVar

from apps.tenants.models import Tenant

from .identity import Accepting
from .models import DidcommPolicy
from .problems import Problem

ENCRYPTED_MEDIA = "application/didcomm-encrypted+json"
PLAIN_MEDIA = "application/json"
ENVELOPE_MEDIA = "application/didcomm-envelope-enc"
V1_MEDIA = (ENVELOPE_MEDIA, "application/ssi-agent-wire")


@dataclass
class Reply:
    status: int
    body: bytes = b""
    content_type: str | None = None
    retry_after: int | None = None
    live: bool | None = None  # live-delivery-change accepted on a socket: the new state
    pickup: str | None = None  # its Pickup protocol when not the version's default (handlers.Outcome.pickup)
    # A v1 message on a socket from a granted connection asking `~transport.return_route: "all"`
    # (RFC 0092, not a pickup message): the socket delivers the connection's messages (implicit pickup).
    implicit: bool = False
    protocol: str = "v2"  # "v1": an RFC 0019 exchange (socket frames are binary)
    caller_did: str | None = None  # the authcrypt sender (v1: its connection's DID), once known
    caller_kid: str | None = None  # its key (v2 `skid`, v1 verkey): where a socket's live deliveries go


class Message(Protocol):
    """What the path reads of any version's message: its type (the log line, the records)."""

    @property
    def type(self) -> str: ...


class Opened(Protocol):
    """What the path reads and writes of any version's context: the policy (the per-sender limit),
    the outcome code and the log line's extra fields, which handlers set."""

    policy: DidcommPolicy
    code: str
    extra: dict


M = TypeVar("M", bound=Message)
C = TypeVar("C", bound=Opened)


class Door(Protocol[M, C]):
    """A DIDComm version's parts of the one message path (the module docstring)."""

    @property
    def name(self) -> str: ...  # Reply.protocol

    @property
    def protocol(self) -> str: ...  # its records' protocol (usage.records)

    @property
    def media(self) -> tuple[str, ...]: ...  # the HTTP content types it accepts, the one to use first

    def open(
        self, raw: bytes, envelope: dict | None, tenant: Tenant, accepting: Accepting, transport: str, live: bool | None
    ) -> tuple[M, C]: ...

    def answer(self, ctx: C, message: M) -> Reply: ...

    def problem(self, problem: Problem, message: M | None, ctx: C | None) -> Reply: ...

    def caller(self, ctx: C) -> tuple[str | None, str | None]: ...  # Reply's (caller_did, caller_kid)

    def rate_key(self, ctx: C) -> str | None: ...  # the per-sender limit's key, None: not counted


def json_bytes(obj: dict) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode("utf-8")


def problem_reply(problem: Problem, obj: dict, media: str) -> Reply:
    return Reply(problem.status, json_bytes(obj), media, retry_after=problem.retry_after)
