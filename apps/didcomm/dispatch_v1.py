"""One DIDComm v1 (RFC 0019) message path for HTTP and the socket: bytes in, a Reply out.

Order: the checks shared with v2 (tenant, policy, size, media type, per-IP limit) → unpack with
the base58 verkey of the current or a grace-period identity → the connection of the authcrypt
sender's verkey → per-sender limit → the handler → the answer. An answer goes back on the return
route (HTTP body or socket) when the message asked for one (`~transport.return_route` all/thread)
or the agent has no HTTP endpoint; otherwise it is queued as an outbound POST to the endpoint of
its DID document (ACA-Py never asks for a return route). Errors are Report Problem 1.0 messages
on the return path, authcrypt to the sender when it is known, with the HTTP status of the code.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from django.conf import settings

from apps.didcomm.core import envelope_v1, message_v1
from apps.didcomm.core.errors import DidcommError, MalformedEnvelope
from apps.didcomm.core.message import parse_json_object
from apps.tenants.models import Tenant
from apps.usage import records

from . import dispatch, handlers_v1, protocols, services, services_v1
from .dispatch import (
    ENCRYPTED_MEDIA,
    PLAIN_MEDIA,
    Reply,
    Row,
    admit,
    decrypting,
    limit,
    log_failure,
    observe,
    shared_identity,
)
from .handlers_v1 import ContextV1, attachments_v1
from .models import Mediation, MediatorIdentity
from .problems import Problem, Unanswered, concerning
from .protocols import Code

ENVELOPE_MEDIA = "application/didcomm-envelope-enc"
V1_MEDIA = (ENVELOPE_MEDIA, "application/ssi-agent-wire")
ACCEPTED_MEDIA = (*V1_MEDIA, ENCRYPTED_MEDIA, "application/json")


def problem_v1(code: str, comment: str, msg: message_v1.V1Message | None) -> dict:
    """A Report Problem 1.0 message about `msg` (its thread)."""
    report: dict = {
        "@type": protocols.REPORT_PROBLEM_V1,
        "@id": str(uuid.uuid4()),
        "description": {"code": code, "en": comment},
    }
    if msg is not None:
        report["~thread"] = {"thid": msg.thid}
    return report


def _body(obj: dict) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode("utf-8")


def handle(
    raw: bytes,
    *,
    tenant: Tenant | None,
    transport: str,
    remote_addr: str | None,
    content_type: str | None = None,
    live: bool | None = None,
    envelope: dict | None = None,
) -> Reply:
    """Handle one DIDComm v1 message; never raises for client input (a problem report instead).
    `envelope`: `raw` already parsed (`route`)."""
    started = time.perf_counter()
    msg = ctx = None
    try:
        reply, msg, ctx = _handle(raw, tenant, transport, remote_addr, content_type, live, envelope)
        code = ctx.code
    except Problem as problem:
        code = problem.code
        msg, ctx = problem.message, problem.ctx
        reply = _problem_reply(problem, msg, ctx)
    except Exception as exc:  # noqa: BLE001 - the database is down, or a defect of ours: never a 500
        if isinstance(exc, Unanswered):  # raised once the message was known: answered and metered as it
            exc, msg, ctx = exc.cause, exc.message, exc.ctx
        log_failure(exc, tenant)
        code = Code.UNAVAILABLE
        reply = Reply(503, _body(problem_v1(code, "mediator unavailable", msg)), PLAIN_MEDIA)
    reply.protocol = "v1"
    mediation_did = ctx.connection.their_did if ctx is not None and ctx.connection is not None else None
    reply.caller_did = mediation_did
    reply.caller_kid = ctx.sender_verkey if ctx is not None else None
    observe(
        tenant=tenant,
        transport=transport,
        protocol=records.DIDCOMM_V1,
        short=protocols.short_type(msg.type if msg else None),
        code=code,
        reply=reply,
        raw=raw,
        started=started,
        sender=mediation_did,
        remote_addr=remote_addr,
        extra=ctx.extra if ctx is not None else {},
    )
    return reply


def _handle(raw, tenant, transport, remote_addr, content_type, live, envelope):
    accepting = admit(raw, tenant, transport, remote_addr, content_type, ACCEPTED_MEDIA)
    policy = accepting.policy

    def unpack(identities, _documents):
        keys = {services_v1.verkey_of(i): i for i in identities}
        return identities, keys, envelope_v1.unpack(envelope, private_key_for=lambda kid: _key(keys, kid))

    try:
        if envelope is None:
            envelope = _envelope_object(raw)
        _, (identities, keys, unpacked) = decrypting(tenant, accepting, unpack)
        msg = message_v1.parse(unpacked.message)
    except DidcommError as exc:
        raise Problem(exc.problem_code, str(exc), 400) from exc
    sender = unpacked.sender_verkey
    connection = services_v1.connection_for_key(tenant=tenant, verkey=sender) if sender else None
    ctx = ContextV1(
        tenant=tenant,
        policy=policy,
        identity=keys[unpacked.recipient_verkey],
        identities=identities,
        sender_verkey=sender,
        connection=connection,
        transport=transport,
        live=live,
    )
    with concerning(msg, ctx):
        if sender:
            limit(
                "didcomm_sender",
                tenant,
                sender,
                policy.rate_limit_per_sender,
                settings.MEDIATOR_DIDCOMM_RATE_LIMIT_PER_SENDER,
            )
        outcome = handlers_v1.run(ctx, msg)
        if outcome.connection is not None:
            ctx.connection = outcome.connection
        implicit = _implicit(ctx, msg, outcome)
        if outcome.response is None or sender is None:
            return Reply(200, live=outcome.live, implicit=implicit), msg, ctx
        conn = ctx.connection
        inline = msg.return_route in ("all", "thread") or conn is None or not conn.endpoint
        if inline:
            envelope = services_v1.pack_reply(
                outcome.response, identity=ctx.identity, their_verkey=sender, routing_keys=[]
            )
            return Reply(200, _body(envelope), ENVELOPE_MEDIA, live=outcome.live, implicit=implicit), msg, ctx
        envelope = services_v1.pack_reply(
            outcome.response, identity=ctx.identity, their_verkey=sender, routing_keys=list(conn.routing_keys)
        )
        services_v1.outbound_reply(connection=conn, envelope=envelope, policy=policy)
        ctx.extra["outbound"] = 1
        return Reply(200, live=outcome.live), msg, ctx


def _implicit(ctx: ContextV1, msg: message_v1.V1Message, outcome: handlers_v1.Outcome) -> bool:
    """Implicit pickup (RFC 0092): a message on a socket asking `return_route: "all"` from a
    connection with a granted mediation asks for the connection's messages on that socket. A pickup
    message does not: a client speaking Pickup on the socket chooses live delivery itself
    (`live-delivery-change`). The grant is read only while the socket has no live client (a socket
    already live for another one finds a missing grant when it loads the client's push state)."""
    if ctx.live is None or ctx.connection is None or msg.return_route != "all" or outcome.live is not None:
        return False
    if msg.type.startswith((protocols.PICKUP_V1, protocols.PICKUP_V2)):
        return False
    return bool(ctx.live) or services_v1.mediation_of(connection=ctx.connection) is not None


def _envelope_object(raw: bytes) -> dict:
    """The body as a JSON object; MalformedEnvelope saying it is not one (a v1 media type's body)."""
    try:
        return parse_json_object(raw)
    except MalformedEnvelope as exc:
        raise MalformedEnvelope(f"the body is {exc}: an RFC 0019 envelope is a JSON object") from exc


def _key(keys: dict, kid: str):
    identity = keys.get(kid)
    return identity.authentication_key if identity is not None else None


def _problem_reply(problem: Problem, msg, ctx: ContextV1 | None) -> Reply:
    """Authcrypt to the sender when known, plaintext JSON otherwise; the HTTP status says the error."""
    report = problem_v1(problem.code, problem.comment, msg)
    if ctx is None or ctx.sender_verkey is None:
        return Reply(problem.status, _body(report), PLAIN_MEDIA, retry_after=problem.retry_after)
    try:
        envelope = services_v1.pack_reply(
            report, identity=ctx.identity, their_verkey=ctx.sender_verkey, routing_keys=[]
        )
    except DidcommError:
        return Reply(problem.status, _body(report), PLAIN_MEDIA, retry_after=problem.retry_after)
    return Reply(problem.status, _body(envelope), ENVELOPE_MEDIA, retry_after=problem.retry_after)


def route(raw: bytes, content_type: str | None = None) -> tuple[Callable[..., Reply], dict | None]:
    """(the front door for a message body, the body's JSON object or None when it is not one): an RFC
    0019 envelope goes the v1 way, anything else v2 (dispatch by shape). A body sent with a v1 media
    type goes the v1 way whatever its shape, so that a broken envelope is told what is wrong with it
    in a v1 problem report. The object is handed on (`envelope=`), so the body is parsed once."""
    v1_media = (content_type or "").split(";", 1)[0].strip().lower() in V1_MEDIA
    try:
        envelope = parse_json_object(raw)
    except MalformedEnvelope:
        return (handle if v1_media else dispatch.handle), None
    return (handle if v1_media or envelope_v1.is_v1(envelope) else dispatch.handle), envelope


@dataclass(slots=True)
class LiveTargetV1:
    """What a live v1 socket keeps per agent to push a Pickup 2.0 `delivery` without the database:
    the grant, the connection's identity (its Ed25519 key unsealed) and the agent's verkey."""

    mediation_id: int  # the grant (an id, not the row: kept per socket)
    identity: MediatorIdentity  # the connection's; one instance per identity and process
    their_verkey: str
    loaded_at: float = field(default_factory=time.monotonic)

    def backlog(self, ids: list[str] | None) -> list[Row]:
        return services.messages_rows(
            mediation=Mediation(pk=self.mediation_id), recipient=None, limit=handlers_v1.MAX_DELIVERY_LIMIT, ids=ids
        )

    def frame(self, rows: list[Row]) -> bytes:
        """A Pickup 2.0 `delivery` push (empty `~thread`, as a Credo mediator pushes), authcrypt to
        the agent's verkey. Messages stay queued until messages-received."""
        delivery = {
            "@type": protocols.PICKUP_V2 + "delivery",
            "@id": str(uuid.uuid4()),
            "~attach": attachments_v1(rows),
            "~thread": {},
            "~transport": dict(handlers_v1.RETURN_ROUTE),
        }
        return _body(
            services_v1.pack_reply(delivery, identity=self.identity, their_verkey=self.their_verkey, routing_keys=[])
        )


def live_start(
    *, tenant: Tenant, client_did: str, client_kid: str, backlog: bool
) -> tuple[LiveTargetV1 | None, list[Row]]:
    """(the push state of a live v1 socket's agent, what is queued when `backlog`, oldest first);
    (None, []) when its connection or grant is gone."""
    connection = services_v1.connection_for_key(tenant=tenant, verkey=client_kid)
    mediation = services_v1.mediation_of(connection=connection) if connection is not None else None
    if mediation is None:
        return None, []
    identity = shared_identity(tenant=tenant, identity=connection.identity)
    identity.authentication_key  # noqa: B018 - unsealed here, in a thread, not on the first push
    target = LiveTargetV1(mediation.pk, identity, client_kid)
    rows = target.backlog(None) if backlog else []
    return target, rows
