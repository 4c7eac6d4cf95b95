"""One DIDComm message path for every transport and both versions: bytes in, a Reply out (docs/didcomm.md).

`handle` routes by shape (an RFC 0019 envelope, or a body sent with a v1 media type, is DIDComm v1;
anything else v2), then runs one sequence: tenant and policy → size → media type (HTTP) → per-IP
limit → unpack (with the current or a grace-period mediator identity; once more from a fresh read
when the recipient key is not among the cached ones) → per-sender limit → the handler and the
answer → one log line and the observers. A version's own parts are its `Door`:

- v2: authcrypt sender = the DID of `skid` (core.resolver), a signed inner message verified, `from`
  checked against both; an authcrypt message other than a forward has its id claimed with its
  handler (replay.claimed_run); the response authcrypt from the mediator DID the caller addressed,
  to its `skid`. Problems are Report Problem 2.0 with `pthid` = the thread: plaintext while the
  sender is unknown, authcrypt to it once authenticated.
- v1: unpacked with the base58 verkey of an identity; the sender's connection by its verkey. An
  answer goes back on the return route (HTTP body or socket) when the message asked for one
  (`~transport.return_route` all/thread) or the agent has no HTTP endpoint; otherwise it is queued
  as an outbound POST to its DID document's endpoint (ACA-Py never asks for a return route).
  Problems are Report Problem 1.0 on the return path, authcrypt to the sender when it is known.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.db import DatabaseError
from django.utils import timezone

from apps.didcomm.core import envelope_v1, jwe, jws, message_v1
from apps.didcomm.core.errors import DidcommError, MalformedEnvelope, UnknownRecipientKey
from apps.didcomm.core.message import ENCRYPTED, SIGNED, PlainMessage, envelope_kind, parse_json_object, parse_plaintext
from apps.didcomm.core.resolver import authentication_key, key_agreement_key
from apps.ops import limits
from apps.ops.logconfig import code_path
from apps.tenants.models import Tenant
from apps.usage import records
from apps.wire.errors import ProtocolError

from . import handlers, handlers_v1, protocols
from .identity import Accepting, accepting_for, verkey_of
from .mediation import connection_for_key, mediation_of
from .models import Connection, DidcommPolicy, MediatorIdentity
from .outbound import outbound_reply
from .packing import pack_for_kid, pack_reply, stamp
from .problems import Problem, Unanswered, concerning, problem_message, pthid_of, refusal, unavailable
from .protocols import Code
from .replay import claimed_run

log = logging.getLogger("mediator.didcomm")

ENCRYPTED_MEDIA = "application/didcomm-encrypted+json"
PLAIN_MEDIA = "application/json"
ENVELOPE_MEDIA = "application/didcomm-envelope-enc"
V1_MEDIA = (ENVELOPE_MEDIA, "application/ssi-agent-wire")
MAX_NESTING = 2  # v2: anoncrypt(authcrypt(…)) at most


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


@dataclass
class Context:
    """What a v2 handler may know about the message it handles (never the raw bytes)."""

    tenant: Tenant
    policy: DidcommPolicy
    identity: MediatorIdentity  # the mediator identity the sender addressed; answers come from it
    # Its key-agreement key as the sender named it (either DID of the identity, any id form): answers
    # come from that DID and name that key, which is what the sender's library resolves.
    mediator_kid: str
    caller_did: str | None  # the authcrypt sender's DID (from skid), None for anoncrypt
    caller_kid: str | None
    transport: str
    live: bool | None  # None on HTTP; on a socket, whether live delivery is on
    signer_kid: str | None = None  # the verified JWS signature's kid of a signed inner message
    code: str = "SUCCESS"
    extra: dict = field(default_factory=dict)

    @property
    def mediator_did(self) -> str:
        """The mediator DID the sender addressed (`identity.did` or `identity.legacy_did`)."""
        return self.mediator_kid.split("#", 1)[0]

    @property
    def rate_key(self) -> str | None:
        return self.caller_did


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

    @property
    def rate_key(self) -> str | None:
        return self.sender_verkey


@dataclass(frozen=True)
class Door:
    """A DIDComm version's parts of the one message path."""

    name: str  # Reply.protocol
    protocol: str  # its records' protocol (usage.records)
    media: tuple[str, ...]  # the HTTP content types it accepts, the one to use first
    # (raw, its parsed object or None, tenant, accepting, transport, live) -> (message, context)
    open: Callable[[bytes, dict | None, Tenant, Accepting, str, bool | None], tuple[Any, Any]]
    answer: Callable[[Any, Any], Reply]  # (context, message) -> the reply: the handler, then the answer
    problem: Callable[[Problem, Any, Any], Reply]  # (problem, message or None, context or None)
    caller: Callable[[Any], tuple[str | None, str | None]]  # context -> Reply's (caller_did, caller_kid)


def handle(
    raw: bytes,
    *,
    tenant: Tenant | None,
    transport: str,
    remote_addr: str | None,
    content_type: str | None = None,
    live: bool | None = None,
) -> Reply:
    """Handle one DIDComm message; never raises for client input (a problem report instead)."""
    started = time.perf_counter()
    door, envelope = route(raw, content_type)
    message: Any = None
    ctx: Any = None
    reply: Reply
    try:
        message, ctx = _open(door, raw, envelope, tenant, transport, remote_addr, content_type, live)
        with concerning(message, ctx):
            if ctx.rate_key and tenant is not None:
                limit(
                    "didcomm_sender",
                    tenant,
                    ctx.rate_key,
                    ctx.policy.rate_limit_per_sender,
                    settings.MEDIATOR_DIDCOMM_RATE_LIMIT_PER_SENDER,
                )
            reply = door.answer(ctx, message)
        code = ctx.code
    except Problem as problem:
        code, message, ctx = problem.code, problem.message, problem.ctx
        reply = door.problem(problem, message, ctx)
    except Exception as exc:  # noqa: BLE001 - the database is down, or a defect of ours: never a 500
        if isinstance(exc, Unanswered):  # raised once the message was known: answered and metered as it
            message, ctx, exc = exc.message, exc.ctx, exc.cause
        log_failure(exc, tenant)
        code = Code.UNAVAILABLE
        reply = door.problem(unavailable(), message, None)
    reply.protocol = door.name
    reply.caller_did, reply.caller_kid = door.caller(ctx) if ctx is not None else (None, None)
    observe(tenant, transport, door.protocol, protocols.short_type(message.type if message else None), code, reply, raw,
            started, remote_addr, ctx.extra if ctx is not None else {})  # fmt: skip
    return reply


def http_reply(raw: bytes | None, tenant, client: str | None, environ) -> tuple[int, list[tuple[str, str]], bytes]:
    """`POST /didcomm` as (status, headers without Content-Length, body), for both HTTP entries (the
    production entry, apps/decentrl/wsgi.py's CommandEntry, and the view `views.endpoint`). `raw` is
    None when the body is over DATA_UPLOAD_MAX_MEMORY_SIZE."""
    if raw is None:
        return _problem_triple(Code.TOO_BIG, "message too large", 413)
    reply = handle(raw, tenant=tenant, transport="http", remote_addr=client, content_type=environ.get("CONTENT_TYPE"))
    headers = [("Content-Type", reply.content_type)] if reply.content_type else []
    if reply.retry_after is not None:
        headers.append(("Retry-After", str(reply.retry_after)))
    return reply.status, headers, reply.body


def http_unavailable() -> tuple[int, list[tuple[str, str]], bytes]:
    """The production entry's answer when the entry itself fails (never a 500)."""
    return _problem_triple(Code.UNAVAILABLE, "mediator unavailable", 503)


def _problem_triple(code: str, comment: str, status: int) -> tuple[int, list[tuple[str, str]], bytes]:
    body = json.dumps(problem_message(code, comment, pthid=None), cls=DjangoJSONEncoder).encode("utf-8")
    return status, [("Content-Type", "application/json")], body


def route(raw: bytes, content_type: str | None) -> tuple[Door, dict | None]:
    """(the version of a message body, the body's JSON object or None when it is not one): by shape,
    and a body sent with a v1 media type is v1 whatever its shape, so that a broken envelope is told
    what is wrong with it in a v1 problem report. The object is handed on: the body is parsed once."""
    v1_media = (content_type or "").split(";", 1)[0].strip().lower() in V1_MEDIA
    try:
        envelope = parse_json_object(raw)
    except MalformedEnvelope:
        return (V1 if v1_media else V2), None
    return (V1 if v1_media or envelope_v1.is_v1(envelope) else V2), envelope


def _open(door: Door, raw, envelope, tenant, transport, remote_addr, content_type, live) -> tuple[Any, Any]:
    """The checks before decryption, then the version's unpack with the cached identities; when no
    recipient key of the envelope is among them (a rotation in another process), once more with a
    fresh read."""
    refused = refusal(tenant)
    if refused is None:
        accepting = accepting_for(tenant=tenant)
        policy = accepting.policy
        refused = refusal(tenant, policy.enabled)
    if refused is not None:
        raise refused
    # The smaller cap wins (docs/operations.md): HTTP bodies meet the deployment's before this,
    # socket frames only here.
    if len(raw) > min(tenant.max_body_bytes, settings.MEDIATOR_MAX_BODY_BYTES):
        raise Problem(Code.TOO_BIG, "message too large", 413)
    if transport == "http" and (content_type or "").split(";", 1)[0].strip().lower() not in door.media:
        raise Problem(Code.UNSUPPORTED_MEDIA, f"use {door.media[0]}", 415)
    if remote_addr:
        limit_ip(tenant, remote_addr, policy)
    try:
        try:
            return door.open(raw, envelope, tenant, accepting, transport, live)
        except UnknownRecipientKey:
            if accepting.fresh:
                raise
        return door.open(raw, envelope, tenant, accepting_for(tenant=tenant, reload=True), transport, live)
    except DidcommError as exc:
        raise Problem(exc.problem_code, str(exc), 400) from exc


def log_failure(exc: Exception, tenant: Tenant | None) -> None:
    """The log line of a message answered `e.p.me.unavailable`: the database is unreachable, or an
    exception no handler answered (a defect of ours: client input is refused with its own problem
    code), logged by its type and code path only, as Decentrl's dispatch does: its message may
    quote input."""
    slug = tenant.slug if tenant else "-"
    if isinstance(exc, DatabaseError):
        log.warning("didcomm: database unreachable tenant=%s", slug)
    else:
        log.error("didcomm: unexpected error tenant=%s: %s at %s", slug, type(exc).__name__, code_path(exc))


def observe(tenant, transport, protocol, short, code, reply: Reply, raw, started, remote_addr, extra) -> None:
    """The one log line and the observers' record of a finished DIDComm message."""
    duration = (time.perf_counter() - started) * 1000
    # Routing metadata only: never a payload, an attachment, a key or a DID. Its text is built only
    # when the line is written (a deployment logging at WARNING pays nothing for it).
    if log.isEnabledFor(logging.INFO):
        log.info(
            "didcomm tenant=%s transport=%s type=%s code=%s status=%s ms=%.1f%s",
            tenant.slug if tenant else "-",
            transport,
            short,
            code,
            reply.status,
            duration,
            "".join(f" {k}={v}" for k, v in extra.items()),
        )
    records.publish(
        records.Record(
            protocol=protocol,
            tenant_id=tenant.pk if tenant else None,
            tenant_slug=tenant.slug if tenant else None,
            at=timezone.now(),
            transport=transport,
            channel=protocol,
            command_type=short,
            code=code,
            http_status=reply.status,
            bytes_in=len(raw),
            bytes_out=len(reply.body),
            duration_ms=duration,
            sender_did=reply.caller_did,
            remote_addr=remote_addr,
        )
    )


def _rate_limited(err: ProtocolError) -> Problem:
    return Problem(Code.RATE_LIMITED, "rate limit exceeded", 429, retry_after=err.retry_after)


def limit(scope: str, tenant: Tenant, ident: str, override: int | None, default: int) -> None:
    try:
        limits.enforce(scope, tenant.pk, ident, limits.effective(override, default))
    except ProtocolError as err:
        raise _rate_limited(err) from err


def limit_ip(tenant: Tenant, remote_addr: str, policy) -> None:
    """The per-IP token bucket (per minute, with its burst) of the tenant's DIDComm policy."""
    try:
        limits.per_ip("didcomm_ip", tenant.pk, remote_addr, policy.rate_limit_per_ip, policy.rate_limit_per_ip_burst)
    except ProtocolError as err:
        raise _rate_limited(err) from err


def run(table: dict[str, Callable[..., handlers.Outcome]], ctx: Any, message: Any) -> handlers.Outcome:
    """The handler of `message`'s type in `table` (a version's HANDLERS), or the unsupported-type problem."""
    handler = table.get(message.type)
    if handler is None:
        raise Problem(Code.UNSUPPORTED_TYPE, "message type not supported")
    return handler(ctx, message)


def _run_v2(ctx: Context, message: PlainMessage) -> handlers.Outcome:
    return run(handlers.HANDLERS, ctx, message)


def _json(obj: dict) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode("utf-8")


def _problem_reply(problem: Problem, obj: dict, media: str) -> Reply:
    return Reply(problem.status, _json(obj), media, retry_after=problem.retry_after)


# --- DIDComm v2 ---------------------------------------------------------------------------------


def _unpack_v2(raw, envelope, tenant, accepting: Accepting, transport, live) -> tuple[PlainMessage, Context]:
    """Decrypt (nested at most MAX_NESTING), verify an inner JWS, parse the plaintext."""
    identities = accepting.identities_now()
    docs = {did: (ident, accepting.documents[did]) for ident in identities for did in ident.dids}
    used: list[tuple[MediatorIdentity, str]] = []

    def private_key_for(kid: str):
        entry = docs.get(kid.split("#", 1)[0])
        if entry is None:
            return None
        ident, doc = entry
        vm = doc.find(kid, "keyAgreement")
        if vm is None or vm.key.raw != bytes(ident.agreement_public):
            return None
        return ident.agreement_key

    obj = jwe.parse_envelope(raw if envelope is None else envelope)
    if envelope_kind(obj) != ENCRYPTED:
        raise Problem(Code.UNAUTHENTICATED, "messages to this mediator must be encrypted (JWE)")
    sender_kid = None
    for _ in range(MAX_NESTING):
        decrypted = jwe.decrypt(obj, private_key_for=private_key_for, sender_key_for=key_agreement_key)
        used.append((docs[decrypted.recipient_kid.split("#", 1)[0]][0], decrypted.recipient_kid))
        sender_kid = decrypted.sender_kid or sender_kid
        obj = jwe.parse_envelope(decrypted.plaintext)
        if envelope_kind(obj) != ENCRYPTED:
            break
    else:
        raise Problem("e.p.msg", "envelope nested too deeply")
    signer = signer_kid = None
    plaintext: bytes | dict[str, object] = obj
    if envelope_kind(obj) == SIGNED:
        verified = jws.verify(obj, public_key_for=authentication_key)
        signer_kid = verified.signer_kids[0]
        signer = signer_kid.split("#", 1)[0]
        plaintext = verified.payload
    message = parse_plaintext(plaintext)
    sender_did = sender_kid.split("#", 1)[0] if sender_kid else None
    # DIDComm v2: `from` must be the authcrypt sender's (and a signer's) DID.
    for claimed in (signer, message.from_):
        if claimed is not None and sender_did is not None and claimed != sender_did:
            problem = Problem(Code.SENDER_MISMATCH, "from does not match the sender key")
            problem.message = message
            raise problem
    identity, mediator_kid = used[0]
    ctx = Context(tenant, accepting.policy, identity, mediator_kid, sender_did, sender_kid, transport, live, signer_kid)
    return message, ctx


def _answer_v2(ctx: Context, message: PlainMessage) -> Reply:
    if ctx.caller_did and message.type != protocols.FORWARD:
        outcome = claimed_run(ctx, message, _run_v2)
    else:
        outcome = _run_v2(ctx, message)
    if outcome.response is None or message.return_route not in ("all", "thread") or ctx.caller_kid is None:
        # Handled, but the answer has no way back (we make no outbound connections): 202, no body.
        return Reply(202, live=outcome.live, pickup=outcome.pickup)
    response = stamp(outcome.response, from_did=ctx.mediator_did, to_did=ctx.caller_did)
    if "thid" not in response and "pthid" not in response:
        response["thid"] = message.thid or message.id
    envelope = pack_for_kid(response, identity=ctx.identity, kid=ctx.caller_kid, sender_kid=ctx.mediator_kid)
    return Reply(200, _json(envelope), ENCRYPTED_MEDIA, live=outcome.live, pickup=outcome.pickup)


def _problem_v2(problem: Problem, message: PlainMessage | None, ctx: Context | None) -> Reply:
    """Authcrypt to the sender when it is known, plaintext otherwise; the HTTP status says the error."""
    pthid = pthid_of(message)
    kind = protocols.problem_type(message.type if message is not None else None, protocols.PROBLEM_REPORT)
    if ctx is not None and ctx.caller_kid is not None:
        report = problem_message(
            problem.code, problem.comment, pthid=pthid, from_did=ctx.mediator_did, to=ctx.caller_did, type_=kind
        )
        report["created_time"] = int(time.time())
        try:
            envelope = pack_for_kid(report, identity=ctx.identity, kid=ctx.caller_kid, sender_kid=ctx.mediator_kid)
            return _problem_reply(problem, envelope, ENCRYPTED_MEDIA)
        except DidcommError:
            pass
    return _problem_reply(problem, problem_message(problem.code, problem.comment, pthid=pthid, type_=kind), PLAIN_MEDIA)


V2 = Door(
    name="v2",
    protocol=records.DIDCOMM_V2,
    media=(ENCRYPTED_MEDIA, "application/json"),
    open=_unpack_v2,
    answer=_answer_v2,
    problem=_problem_v2,
    caller=lambda ctx: (ctx.caller_did, ctx.caller_kid),
)


# --- DIDComm v1 (RFC 0019) ----------------------------------------------------------------------


def problem_v1(code: str, comment: str, msg: message_v1.V1Message | None, report_type: str | None = None) -> dict:
    """A Report Problem 1.0 message about `msg` (its thread), of `report_type` when the protocol has
    its own; about a Pickup 4.0 message, that protocol's own problem report, whose `~thread.pthid`
    names the thread (its spec's v1 form)."""
    kind = report_type or protocols.problem_type(msg.type if msg is not None else None, protocols.REPORT_PROBLEM_V1)
    report: dict = {"@type": kind, "@id": str(uuid.uuid4()), "description": {"code": code, "en": comment}}
    if msg is not None:
        pickup4 = kind == protocols.problem_type(protocols.PICKUP4, "")
        report["~thread"] = {"pthid": msg.thid} if pickup4 else {"thid": msg.thid}
    return report


def _unpack_v1(raw, envelope, tenant, accepting: Accepting, transport, live) -> tuple[message_v1.V1Message, ContextV1]:
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


def _answer_v1(ctx: ContextV1, msg: message_v1.V1Message) -> Reply:
    outcome = run(handlers_v1.HANDLERS, ctx, msg)
    if outcome.connection is not None:
        ctx.connection = outcome.connection
    implicit = _implicit(ctx, msg, outcome)
    sender, conn = ctx.sender_verkey, ctx.connection
    if outcome.response is None or sender is None:
        return Reply(200, live=outcome.live, implicit=implicit, pickup=outcome.pickup)
    if msg.return_route in ("all", "thread") or conn is None or not conn.endpoint:
        envelope = pack_reply(outcome.response, identity=ctx.identity, their_verkey=sender, routing_keys=[])
        return Reply(200, _json(envelope), ENVELOPE_MEDIA, live=outcome.live, implicit=implicit, pickup=outcome.pickup)
    routing_keys = list(conn.routing_keys)
    envelope = pack_reply(outcome.response, identity=ctx.identity, their_verkey=sender, routing_keys=routing_keys)
    outbound_reply(connection=conn, envelope=envelope, policy=ctx.policy)
    ctx.extra["outbound"] = 1
    return Reply(200, live=outcome.live)


def _implicit(ctx: ContextV1, msg: message_v1.V1Message, outcome: handlers.Outcome) -> bool:
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


def _problem_v1(problem: Problem, msg: message_v1.V1Message | None, ctx: ContextV1 | None) -> Reply:
    """Authcrypt to the sender when known, plaintext JSON otherwise; the HTTP status says the error."""
    report = problem_v1(problem.code, problem.comment, msg, problem.report_type_v1)
    if ctx is not None and ctx.sender_verkey is not None:
        try:
            envelope = pack_reply(report, identity=ctx.identity, their_verkey=ctx.sender_verkey, routing_keys=[])
            return _problem_reply(problem, envelope, ENVELOPE_MEDIA)
        except DidcommError:
            pass
    return _problem_reply(problem, report, PLAIN_MEDIA)


V1 = Door(
    name="v1",
    protocol=records.DIDCOMM_V1,
    media=(*V1_MEDIA, ENCRYPTED_MEDIA, "application/json"),
    open=_unpack_v1,
    answer=_answer_v1,
    problem=_problem_v1,
    caller=lambda ctx: (ctx.connection.their_did if ctx.connection is not None else None, ctx.sender_verkey),
)
