"""DIDComm v1's (RFC 0019) door of the one message path (dispatch.py; docs/didcomm.md).

A message is unpacked with the base58 verkey of an identity; the sender's connection is found by its
verkey. An answer goes back on the return route (HTTP body or socket) when the message asked for one
(`~transport.return_route` all/thread) or the agent has no HTTP endpoint; otherwise it is queued as
an outbound POST to its DID document's endpoint (ACA-Py never asks for a return route). Problems are
Report Problem 1.0 on the return path, authcrypt to the sender when it is known.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from apps.didcomm.core import envelope_v1, message_v1
from apps.didcomm.core.errors import DidcommError, MalformedEnvelope
from apps.didcomm.core.message import parse_json_object
from apps.didcomm.core.message_v1 import V1Message
from apps.tenants.models import Tenant
from apps.usage import records

from . import handlers_v1, protocols
from .door import ENCRYPTED_MEDIA, ENVELOPE_MEDIA, PLAIN_MEDIA, V1_MEDIA, Reply, json_bytes, problem_reply
from .handlers import Outcome
from .identity import Accepting, verkey_of
from .mediation import connection_for_key, mediation_of
from .models import Connection, DidcommPolicy, MediatorIdentity
from .outbound import outbound_reply
from .packing import pack_reply
from .problems import Problem, unsupported_type


@dataclass
class ContextV1:
    """What a v1 handler may know about the message it handles (never the raw bytes)."""

    tenant: Tenant
    policy: DidcommPolicy
    identity: MediatorIdentity  # the identity whose key the envelope was for; answers come from it
    identities: list[MediatorIdentity]
    sender_verkey: str | None  # authcrypt sender (base58), None for anoncrypt
    connection: Connection | None  # the connection of sender_verkey, if any
    transport: str
    live: bool | None
    code: str = "SUCCESS"
    extra: dict = field(default_factory=dict)


def problem_v1(code: str, comment: str, msg: V1Message | None, report_type: str | None = None) -> dict:
    """A Report Problem 1.0 message about `msg` (its thread), of `report_type` when the protocol has
    its own; about a Pickup 4.0 message, that protocol's own problem report, whose `~thread.pthid`
    names the thread (its spec's v1 form)."""
    kind = report_type or protocols.problem_type(msg.type if msg is not None else None, protocols.REPORT_PROBLEM_V1)
    report: dict = {"@type": kind, "@id": str(uuid.uuid4()), "description": {"code": code, "en": comment}}
    if msg is not None:
        pickup4 = kind == protocols.problem_type(protocols.PICKUP4, "")
        report["~thread"] = {"pthid": msg.thid} if pickup4 else {"thid": msg.thid}
    return report


def run(ctx: ContextV1, msg: V1Message) -> Outcome:
    """The handler of the message's type, or the unsupported-type problem."""
    handler = handlers_v1.HANDLERS.get(msg.type)
    if handler is None:
        raise unsupported_type()
    return handler(ctx, msg)


def implicit_pickup(ctx: ContextV1, msg: V1Message, outcome: Outcome) -> bool:
    """Implicit pickup (RFC 0092): a message on a socket asking `return_route: "all"` from a
    connection with a granted mediation asks for the connection's messages on that socket. A pickup
    message does not: a client speaking Pickup on the socket chooses live delivery itself
    (`live-delivery-change`). The grant is read only while the socket has no live client (a socket
    already live for another one finds a missing grant when it loads the client's push state)."""
    if ctx.live is None or ctx.connection is None or msg.return_route != "all" or outcome.live is not None:
        return False
    if msg.type.startswith((protocols.PICKUP_V1, protocols.PICKUP_V2, protocols.PICKUP4)):
        return False
    return bool(ctx.live) or mediation_of(connection=ctx.connection) is not None


class V1Door:
    name = "v1"
    protocol = records.DIDCOMM_V1
    media = (*V1_MEDIA, ENCRYPTED_MEDIA, "application/json")

    def open(
        self, raw: bytes, envelope: dict | None, tenant: Tenant, accepting: Accepting, transport: str, live: bool | None
    ) -> tuple[V1Message, ContextV1]:
        identities = accepting.identities_now()
        keys = {verkey_of(i): i for i in identities}

        def private_key_for(kid: str):
            identity = keys.get(kid)
            return identity.authentication_key if identity is not None else None

        if envelope is None:
            try:
                envelope = parse_json_object(raw)
            except MalformedEnvelope as exc:
                raise MalformedEnvelope(f"the body is {exc}: an RFC 0019 envelope is a JSON object") from exc
        unpacked = envelope_v1.unpack(envelope, private_key_for=private_key_for)
        msg = message_v1.parse(unpacked.message)
        sender = unpacked.sender_verkey
        connection = connection_for_key(tenant=tenant, verkey=sender) if sender else None
        identity = keys[unpacked.recipient_verkey]
        return msg, ContextV1(tenant, accepting.policy, identity, identities, sender, connection, transport, live)

    def answer(self, ctx: ContextV1, msg: V1Message) -> Reply:
        outcome = run(ctx, msg)
        if outcome.connection is not None:
            ctx.connection = outcome.connection
        implicit = implicit_pickup(ctx, msg, outcome)
        sender, conn = ctx.sender_verkey, ctx.connection
        if outcome.response is None or sender is None:
            return Reply(200, live=outcome.live, implicit=implicit, pickup=outcome.pickup)
        if msg.return_route in ("all", "thread") or conn is None or not conn.endpoint:
            envelope = pack_reply(outcome.response, identity=ctx.identity, their_verkey=sender, routing_keys=[])
            return Reply(
                200, json_bytes(envelope), ENVELOPE_MEDIA, live=outcome.live, implicit=implicit, pickup=outcome.pickup
            )
        routing_keys = list(conn.routing_keys)
        envelope = pack_reply(outcome.response, identity=ctx.identity, their_verkey=sender, routing_keys=routing_keys)
        outbound_reply(connection=conn, envelope=envelope, policy=ctx.policy)
        ctx.extra["outbound"] = 1
        return Reply(200, live=outcome.live)

    def problem(self, problem: Problem, msg: V1Message | None, ctx: ContextV1 | None) -> Reply:
        """Authcrypt to the sender when known, plaintext JSON otherwise; the HTTP status says the error."""
        report = problem_v1(problem.code, problem.comment, msg, problem.report_type_v1)
        if ctx is not None and ctx.sender_verkey is not None:
            try:
                envelope = pack_reply(report, identity=ctx.identity, their_verkey=ctx.sender_verkey, routing_keys=[])
                return problem_reply(problem, envelope, ENVELOPE_MEDIA)
            except DidcommError:
                pass
        return problem_reply(problem, report, PLAIN_MEDIA)

    def caller(self, ctx: ContextV1) -> tuple[str | None, str | None]:
        return (ctx.connection.their_did if ctx.connection is not None else None), ctx.sender_verkey

    def rate_key(self, ctx: ContextV1) -> str | None:
        return ctx.sender_verkey


V1 = V1Door()
