"""One DIDComm message path for every transport and both versions: bytes in, a Reply out (docs/didcomm.md).

`handle` routes by shape (an RFC 0019 envelope, or a body sent with a v1 media type, is DIDComm v1;
anything else v2), then runs one sequence: tenant and policy → size → media type (HTTP) → per-IP
limit → unpack (with the current or a grace-period mediator identity; once more from a fresh read
when the recipient key is not among the cached ones) → per-sender limit → the handler and the
answer → one log line and the observers. A version's own parts are its `door.Door`: v2.py, v1.py.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager

from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.db import DatabaseError
from django.utils import timezone

from apps.didcomm.core import envelope_v1
from apps.didcomm.core.errors import DidcommError, MalformedEnvelope, UnknownRecipientKey
from apps.didcomm.core.message import parse_json_object
from apps.ops import limits
from apps.ops.logconfig import code_path
from apps.tenants.models import Tenant
from apps.usage import records
from apps.wire.errors import ProtocolError

from . import protocols
from .door import V1_MEDIA, C, Door, M, Message, Opened, Reply
from .identity import accepting_for
from .models import DidcommPolicy
from .problems import Problem, Unanswered, problem_message, unavailable
from .protocols import Code
from .v1 import V1
from .v2 import V2

log = logging.getLogger("mediator.didcomm")


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
    v1, envelope = route(raw, content_type)
    if v1:
        return through(V1, started, raw, envelope, tenant, transport, remote_addr, content_type, live)
    return through(V2, started, raw, envelope, tenant, transport, remote_addr, content_type, live)


def through(
    door: Door[M, C],
    started: float,
    raw: bytes,
    envelope: dict | None,
    tenant: Tenant | None,
    transport: str,
    remote_addr: str | None,
    content_type: str | None,
    live: bool | None,
) -> Reply:
    """The one sequence (the module docstring) with `door`'s parts, from `started` (perf_counter)."""
    message: M | None = None
    ctx: C | None = None
    reply: Reply
    try:
        message, ctx = _open(door, raw, envelope, tenant, transport, remote_addr, content_type, live)
        with concerning(message, ctx):
            rate_key = door.rate_key(ctx)
            if rate_key and tenant is not None:
                limit(
                    "didcomm_sender",
                    tenant,
                    rate_key,
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


def http_reply(
    raw: bytes | None, tenant: Tenant | None, client: str | None, content_type: str | None
) -> tuple[int, list[tuple[str, str]], bytes]:
    """`POST /didcomm` as (status, headers without Content-Length, body), for the production entry
    (mediator_project/entry.py). `raw` is None when the body is over DATA_UPLOAD_MAX_MEMORY_SIZE."""
    if raw is None:
        return _problem_triple(Code.TOO_BIG, "message too large", 413)
    reply = handle(raw, tenant=tenant, transport="http", remote_addr=client, content_type=content_type)
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


def route(raw: bytes, content_type: str | None) -> tuple[bool, dict | None]:
    """(whether a message body is DIDComm v1, the body's JSON object or None when it is not one): by
    shape, and a body sent with a v1 media type is v1 whatever its shape, so that a broken envelope is
    told what is wrong with it in a v1 problem report. The object is handed on: the body is parsed once."""
    v1_media = (content_type or "").split(";", 1)[0].strip().lower() in V1_MEDIA
    try:
        envelope = parse_json_object(raw)
    except MalformedEnvelope:
        return v1_media, None
    return v1_media or envelope_v1.is_v1(envelope), envelope


def refusal(tenant: Tenant | None, enabled: bool = True, *, active: bool | None = None) -> Problem | None:
    """Why a request to `tenant` (None: no tenant serves the host) is refused, or None when DIDComm
    is served there: no mediator (404), suspended (503; `active`, else the tenant's own state),
    DIDComm off (404, `enabled` False). A socket gets the same report, then closes with 4000 + the status."""
    if tenant is None:
        return Problem(Code.UNKNOWN_MEDIATOR, "no mediator at this host", 404)
    if not (tenant.is_active if active is None else active):
        return Problem(Code.UNAVAILABLE, "mediator suspended", 503)
    if not enabled:
        return Problem(Code.UNKNOWN_MEDIATOR, "DIDComm is not enabled on this mediator", 404)
    return None


@contextmanager
def concerning(message: Message, ctx: Opened) -> Iterator[None]:
    """Within it, a Problem learns the message and the sender's context it concerns, and any other
    exception becomes Unanswered with them."""
    try:
        yield
    except Problem as problem:
        problem.message, problem.ctx = message, ctx
        raise
    except Exception as exc:  # noqa: BLE001 - handed on, with what it concerns, to dispatch's backstop
        raise Unanswered(exc, message, ctx) from exc


def _open(
    door: Door[M, C],
    raw: bytes,
    envelope: dict | None,
    tenant: Tenant | None,
    transport: str,
    remote_addr: str | None,
    content_type: str | None,
    live: bool | None,
) -> tuple[M, C]:
    """The checks before decryption, then the version's unpack with the cached identities; when no
    recipient key of the envelope is among them (a rotation in another process), once more with a
    fresh read."""
    if (refused := refusal(tenant)) is not None:
        raise refused
    assert tenant is not None  # refusal() refuses an unknown host
    accepting = accepting_for(tenant=tenant)
    policy = accepting.policy
    if (refused := refusal(tenant, policy.enabled)) is not None:
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


def limit_ip(tenant: Tenant, remote_addr: str, policy: DidcommPolicy) -> None:
    """The per-IP token bucket (per minute, with its burst) of the tenant's DIDComm policy."""
    try:
        limits.per_ip("didcomm_ip", tenant.pk, remote_addr, policy.rate_limit_per_ip, policy.rate_limit_per_ip_burst)
    except ProtocolError as err:
        raise _rate_limited(err) from err
