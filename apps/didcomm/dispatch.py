"""One DIDComm v2 message path for every transport: bytes in, a Reply out (docs/didcomm.md).

Order: tenant and policy → size → media type (HTTP) → per-IP limit → unpack (decrypt with the
current or a grace-period mediator DID; authcrypt sender = the DID of `skid`, resolved with
core.resolver; signed inner messages verified) → per-sender limit → the protocol handler → the
response, authcrypt from the mediator DID that was addressed to the caller's `skid`.

Every client-caused error is a Report Problem 2.0 message with `pthid` = the thread it concerns:
plaintext JSON while the sender is unknown, authcrypt to the sender once it is authenticated.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime

from django.conf import settings
from django.db import DatabaseError, transaction
from django.utils import timezone

from apps.didcomm.core import jwe, jws
from apps.didcomm.core.errors import DidcommError, UnknownRecipientKey
from apps.didcomm.core.keys import PublicKey
from apps.didcomm.core.message import ENCRYPTED, SIGNED, PlainMessage, envelope_kind, parse_plaintext
from apps.didcomm.core.resolver import authentication_key, key_agreement_key
from apps.ops import limits
from apps.ops.logconfig import code_path
from apps.tenants.models import Tenant
from apps.usage import records
from apps.wire.errors import ProtocolError

from . import handlers, protocols, services
from .models import DidcommPolicy, Mediation, MediatorIdentity
from .problems import Problem, Unanswered, concerning, problem_message, pthid_of
from .protocols import Code

log = logging.getLogger("mediator.didcomm")

ENCRYPTED_MEDIA = "application/didcomm-encrypted+json"
ACCEPTED_MEDIA = (ENCRYPTED_MEDIA, "application/json")
PLAIN_MEDIA = "application/json"
MAX_NESTING = 2  # anoncrypt(authcrypt(…)) at most


@dataclass
class Reply:
    status: int
    body: bytes = b""
    content_type: str | None = None
    retry_after: int | None = None
    live: bool | None = None  # live-delivery-change accepted on a socket: the new state
    # A v1 message on a socket from a granted connection asking `~transport.return_route: "all"`
    # (RFC 0092, not a pickup message): the socket delivers the connection's messages (implicit pickup).
    implicit: bool = False
    protocol: str = "v2"  # "v1": an RFC 0019 exchange (socket frames are binary)
    caller_did: str | None = None  # the authcrypt sender, once known
    caller_kid: str | None = None  # its key (`skid`): where a socket's live deliveries are encrypted to


@dataclass
class Context:
    """What a handler may know about the message it handles (never the raw bytes)."""

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


@dataclass
class _Unpacked:
    message: PlainMessage
    identity: MediatorIdentity
    mediator_kid: str  # the recipient kid the outer envelope was decrypted with
    sender_kid: str | None
    signer_kid: str | None = None


def _unpack(raw: bytes, identities: list[MediatorIdentity], documents: dict, envelope: dict | None = None) -> _Unpacked:
    """Decrypt (nested at most MAX_NESTING), verify an inner JWS, parse the plaintext.

    `documents` maps each identity's DID to its resolved document (services.Accepting); `envelope`
    is `raw` already parsed, if the caller did (dispatch_v1.route)."""
    docs = {did: (ident, documents[did]) for ident in identities for did in ident.dids}
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

    obj: object = jwe.parse_envelope(raw if envelope is None else envelope)
    if envelope_kind(obj) != ENCRYPTED:  # type: ignore[arg-type]
        raise Problem(Code.UNAUTHENTICATED, "messages to this mediator must be encrypted (JWE)")
    sender_kid = None
    for _ in range(MAX_NESTING):
        decrypted = jwe.decrypt(obj, private_key_for=private_key_for, sender_key_for=key_agreement_key)  # type: ignore[arg-type]
        used.append((docs[decrypted.recipient_kid.split("#", 1)[0]][0], decrypted.recipient_kid))
        sender_kid = decrypted.sender_kid or sender_kid
        obj = jwe.parse_envelope(decrypted.plaintext)
        if envelope_kind(obj) != ENCRYPTED:  # type: ignore[arg-type]
            break
    else:
        raise Problem("e.p.msg", "envelope nested too deeply")
    signer = signer_kid = None
    if envelope_kind(obj) == SIGNED:  # type: ignore[arg-type]
        verified = jws.verify(obj, public_key_for=authentication_key)  # type: ignore[arg-type]
        signer_kid = verified.signer_kids[0]
        signer = signer_kid.split("#", 1)[0]
        obj = verified.payload
    message = parse_plaintext(obj)  # type: ignore[arg-type]
    sender_did = sender_kid.split("#", 1)[0] if sender_kid else None
    # DIDComm v2: `from` must be the authcrypt sender's (and a signer's) DID.
    for claimed in (signer, message.from_):
        if claimed is not None and sender_did is not None and claimed != sender_did:
            problem = Problem(Code.SENDER_MISMATCH, "from does not match the sender key")
            problem.message = message
            raise problem
    return _Unpacked(message, *used[0], sender_kid, signer_kid)


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
    """Handle one DIDComm message; never raises for client input (a problem report instead).
    `envelope`: `raw` already parsed (dispatch_v1.route)."""
    started = time.perf_counter()
    message: PlainMessage | None = None
    ctx: Context | None = None
    reply: Reply
    try:
        reply, message, ctx = _handle(raw, tenant, transport, remote_addr, content_type, live, envelope)
        code = ctx.code if ctx else "SUCCESS"
    except Problem as problem:
        code = problem.code
        message, ctx = problem.message, problem.ctx
        reply = _problem_reply(problem, message=message, ctx=ctx)
    except Exception as exc:  # noqa: BLE001 - the database is down, or a defect of ours: never a 500
        if isinstance(exc, Unanswered):  # raised once the message was known: answered and metered as it
            exc, message, ctx = exc.cause, exc.message, exc.ctx
        log_failure(exc, tenant)
        code = Code.UNAVAILABLE
        reply = _plain_problem(Problem(Code.UNAVAILABLE, "mediator unavailable", 503), message)
    reply.caller_did = ctx.caller_did if ctx else None
    reply.caller_kid = ctx.caller_kid if ctx else None
    observe(
        tenant=tenant,
        transport=transport,
        protocol=records.DIDCOMM_V2,
        short=protocols.short_type(message.type if message else None),
        code=code,
        reply=reply,
        raw=raw,
        started=started,
        sender=reply.caller_did,
        remote_addr=remote_addr,
        extra=ctx.extra if ctx else {},
    )
    return reply


def log_failure(exc: Exception, tenant: Tenant | None) -> None:
    """The log line of a message answered `e.p.me.unavailable` (v1 and v2): the database is
    unreachable, or an exception no handler answered (a defect of ours: client input is refused
    with its own problem code), logged by its type and code path only, as Decentrl's dispatch
    does: its message may quote input."""
    slug = tenant.slug if tenant else "-"
    if isinstance(exc, DatabaseError):
        log.warning("didcomm: database unreachable tenant=%s", slug)
    else:
        log.error("didcomm: unexpected error tenant=%s: %s at %s", slug, type(exc).__name__, code_path(exc))


def observe(
    *,
    tenant: Tenant | None,
    transport: str,
    protocol: str,
    short: str,
    code: str,
    reply: Reply,
    raw: bytes,
    started: float,
    sender: str | None,
    remote_addr: str | None,
    extra: dict,
) -> None:
    """The one log line and the observers' record of a finished DIDComm message (v1 and v2)."""
    duration = (time.perf_counter() - started) * 1000
    # Routing metadata only: never a payload, an attachment, a key or a DID. Its text is built only
    # when the line is written (production benchmarks run at WARNING).
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
            sender_did=sender,
            remote_addr=remote_addr,
        )
    )


def admit(
    raw: bytes, tenant: Tenant | None, transport: str, remote_addr: str | None, content_type: str | None, media
) -> services.Accepting:
    """The checks before decryption, shared by both versions: tenant, policy, size, media type, per-IP
    limit. Returns the tenant's (cached) policy and accepting identities."""
    if tenant is None:
        raise Problem(Code.UNKNOWN_MEDIATOR, "no mediator at this host", 404)
    if not tenant.is_active:
        raise Problem(Code.UNAVAILABLE, "mediator suspended", 503)
    accepting = services.accepting_for(tenant=tenant)
    policy = accepting.policy
    if not policy.enabled:
        raise Problem(Code.UNKNOWN_MEDIATOR, "DIDComm is not enabled on this mediator", 404)
    # The smaller cap wins (docs/operations.md): HTTP bodies meet the deployment's before this,
    # socket frames only here.
    if len(raw) > min(tenant.max_body_bytes, settings.MEDIATOR_MAX_BODY_BYTES):
        raise Problem(Code.TOO_BIG, "message too large", 413)
    if transport == "http" and (content_type or "").split(";", 1)[0].strip().lower() not in media:
        raise Problem(Code.UNSUPPORTED_MEDIA, f"use {media[0]}", 415)
    if remote_addr:
        limit_ip(tenant, remote_addr, policy)
    return accepting


def decrypting(tenant: Tenant, accepting: services.Accepting, unpack):
    """`unpack(identities, documents)` with the cached identities; when no recipient kid of the
    envelope is among them (a rotation in another process), once more with a fresh read."""
    try:
        return accepting, unpack(accepting.identities_now(), accepting.documents)
    except UnknownRecipientKey:
        if accepting.fresh:
            raise
    accepting = services.accepting_for(tenant=tenant, reload=True)
    return accepting, unpack(accepting.identities_now(), accepting.documents)


def _handle(raw, tenant, transport, remote_addr, content_type, live, envelope) -> tuple[Reply, PlainMessage, Context]:
    accepting = admit(raw, tenant, transport, remote_addr, content_type, ACCEPTED_MEDIA)
    try:
        accepting, unpacked = decrypting(tenant, accepting, lambda ids, docs: _unpack(raw, ids, docs, envelope))
    except DidcommError as exc:
        raise Problem(exc.problem_code, str(exc), 400) from exc
    message = unpacked.message
    caller_kid = unpacked.sender_kid
    policy = accepting.policy
    ctx = Context(
        tenant=tenant,
        policy=policy,
        identity=unpacked.identity,
        mediator_kid=unpacked.mediator_kid,
        caller_did=caller_kid.split("#", 1)[0] if caller_kid else None,
        caller_kid=caller_kid,
        transport=transport,
        live=live,
        signer_kid=unpacked.signer_kid,
    )
    with concerning(message, ctx):
        if ctx.caller_did:
            limit(
                "didcomm_sender",
                tenant,
                ctx.caller_did,
                policy.rate_limit_per_sender,
                settings.MEDIATOR_DIDCOMM_RATE_LIMIT_PER_SENDER,
            )
        if ctx.caller_did and message.type != protocols.FORWARD:
            outcome = claimed_run(ctx, message)
        else:
            outcome = handlers.run(ctx, message)
        if outcome.response is None or message.return_route not in ("all", "thread") or ctx.caller_kid is None:
            # Handled, but the answer has no way back (we make no outbound connections): 202, no body.
            return Reply(202, live=outcome.live), message, ctx
        response = _stamp(outcome.response, ctx, message)
        envelope = services.pack_for_kid(
            response, identity=ctx.identity, kid=ctx.caller_kid, sender_kid=ctx.mediator_kid
        )
        body = json.dumps(envelope, separators=(",", ":")).encode("utf-8")
        return Reply(200, body, ENCRYPTED_MEDIA, live=outcome.live), message, ctx


def claimed_run(ctx: Context, message: PlainMessage) -> handlers.Outcome:
    """Replay protection of an authcrypt message other than a forward (docs/didcomm.md "Replays"):
    its id claimed, then the handler, in ONE transaction, so that the message pays one commit (one
    WAL flush) whether its handler writes or only reads.

    The id stays claimed whatever the handler answers, as a Decentrl nonce (DCTRL-0004 §5.4): a
    client retries with a new message id. A handler's problem report commits the claim with what
    the handler did before it (each service is atomic at its boundary: a savepoint here), and a
    database error, which rolls the whole transaction back, claims the id on its own before the
    503, as apps/decentrl/storage.py does for its nonce. A replay or a timing header refused
    writes nothing.
    """
    failed: Problem | None = None
    keep: tuple[int, int] | None = None
    try:
        with transaction.atomic():
            keep = claim_message_id(ctx, message)
            try:
                outcome = handlers.run(ctx, message)
            except Problem as problem:
                failed = problem
    except DatabaseError:
        if keep is not None:  # the id was fresh: claim it again, on its own
            try:
                services.message_id_claim(
                    tenant=ctx.tenant,
                    sender_did=ctx.caller_did,
                    message_id=message.id,
                    keep_until=keep[0],
                    now=keep[1],
                )
            except DatabaseError:
                pass
        raise
    if failed is not None:
        raise failed
    return outcome


def claim_message_id(ctx: Context, message: PlainMessage) -> tuple[int, int]:
    """Its timing headers first, then the message's id claimed for its sender (in the caller's
    transaction: `claimed_run`). A record lives until the message itself would be refused: its
    created_time out of the window, or its expires_time past, or (neither given) for the window.
    Returns the claim's (keep_until, now)."""
    now = int(time.time())
    window = settings.MEDIATOR_DIDCOMM_REPLAY_WINDOW_S
    if message.expires_time is not None and message.expires_time <= now:
        raise Problem(Code.EXPIRED, "message expired (expires_time)")
    created = message.created_time
    if created is not None and abs(created - now) > window:
        raise Problem(Code.OUT_OF_WINDOW, f"created_time is more than {window} s from the mediator's clock")
    keep_until = max(now, created or now) + window
    if message.expires_time is not None:
        keep_until = min(keep_until, message.expires_time)
    if not services.message_id_claim(
        tenant=ctx.tenant, sender_did=ctx.caller_did, message_id=message.id, keep_until=keep_until, now=now
    ):
        raise Problem(Code.REPLAY, "this message id was already used by its sender", 409)
    return keep_until, now


def limit(scope: str, tenant: Tenant, ident: str, override: int | None, default: int) -> None:
    try:
        limits.enforce(scope, tenant.pk, ident, default if override is None else override)
    except ProtocolError as err:
        raise Problem(Code.RATE_LIMITED, "rate limit exceeded", 429, retry_after=err.retry_after) from err


def limit_ip(tenant: Tenant, remote_addr: str, policy) -> None:
    """The per-IP token bucket (per minute, with its burst) of the tenant's DIDComm policy."""
    rate, burst = policy.rate_limit_per_ip, policy.rate_limit_per_ip_burst
    try:
        limits.enforce_rate(
            "didcomm_ip",
            tenant.pk,
            remote_addr,
            settings.MEDIATOR_DIDCOMM_RATE_LIMIT_PER_IP if rate is None else rate,
            settings.MEDIATOR_DIDCOMM_RATE_LIMIT_PER_IP_BURST if burst is None else burst,
        )
    except ProtocolError as err:
        raise Problem(Code.RATE_LIMITED, "rate limit exceeded", 429, retry_after=err.retry_after) from err


def _stamp(response: dict, ctx: Context, request: PlainMessage | None) -> dict:
    """Headers every response carries: id, typ, from (the addressed mediator DID), to, created_time, thid."""
    out = {
        "id": str(uuid.uuid4()),
        "typ": "application/didcomm-plain+json",
        **response,
        "from": ctx.mediator_did,
        "created_time": int(time.time()),
    }
    if ctx.caller_did:
        out["to"] = [ctx.caller_did]
    if request is not None and "thid" not in out and "pthid" not in out:
        out["thid"] = request.thid or request.id
    return out


def _plain_problem(problem: Problem, message: PlainMessage | None) -> Reply:
    body = json.dumps(problem_message(problem.code, problem.comment, pthid=pthid_of(message)), separators=(",", ":"))
    return Reply(problem.status, body.encode("utf-8"), PLAIN_MEDIA, retry_after=problem.retry_after)


def _problem_reply(problem: Problem, *, message: PlainMessage | None, ctx: Context | None) -> Reply:
    """Authcrypt to the sender when it is known, plaintext otherwise; the HTTP status says the error."""
    if ctx is None or ctx.caller_kid is None:
        return _plain_problem(problem, message)
    report = problem_message(
        problem.code, problem.comment, pthid=pthid_of(message), from_did=ctx.mediator_did, to=ctx.caller_did
    )
    report["created_time"] = int(time.time())
    try:
        envelope = services.pack_for_kid(report, identity=ctx.identity, kid=ctx.caller_kid, sender_kid=ctx.mediator_kid)
    except DidcommError:
        return _plain_problem(problem, message)
    body = json.dumps(envelope, separators=(",", ":")).encode("utf-8")
    return Reply(problem.status, body, ENCRYPTED_MEDIA, retry_after=problem.retry_after)


# Rows of the queue as a live push carries them: (message id, stored data, received at).
Row = tuple[str, dict, datetime]


def _backlog(mediation_id: int, ids: list[str] | None) -> list[Row]:
    return services.messages_rows(
        mediation=Mediation(pk=mediation_id), recipient=None, limit=handlers.MAX_DELIVERY_LIMIT, ids=ids
    )


@dataclass(slots=True)
class LiveTarget:
    """What a live socket keeps per client to push a Pickup 3.0 `delivery` without the database:
    the grant, the mediator identity (its X25519 key unsealed) and the client's resolved key.
    Loaded when live mode starts, again on services.LIVE_REFRESH (revocation, rotation)."""

    mediation_id: int  # the grant (an id, not the row: kept per socket)
    client_did: str  # the live entry's own string, shared
    identity: MediatorIdentity  # one instance per identity and process (_live_identities)
    recipient: tuple[str, PublicKey]  # the client's key-agreement kid and key (its `skid`)
    loaded_at: float = field(default_factory=time.monotonic)

    def backlog(self, ids: list[str] | None) -> list[Row]:
        """The listed messages still queued, or the oldest ones (ids None); database."""
        return _backlog(self.mediation_id, ids)

    def frame(self, rows: list[Row]) -> str:
        """The packed `delivery` of `rows` (they stay queued until messages-received); no database."""
        message = {
            "id": str(uuid.uuid4()),
            "typ": "application/didcomm-plain+json",
            "type": protocols.PICKUP + "delivery",
            "from": self.identity.did,
            "to": [self.client_did],
            "created_time": int(time.time()),
            "body": {},
            "attachments": [{"id": mid, "data": data} for mid, data, _ in rows],
        }
        envelope = services.pack_to(message, identity=self.identity, recipient=self.recipient)
        return json.dumps(envelope, separators=(",", ":"))


def shared_identity(*, tenant: Tenant, identity: MediatorIdentity) -> MediatorIdentity:
    """This process's instance of `identity` for live sockets: the one of the tenant's accepting
    identities (services.accepting_for, keys unsealed once per process), or `identity` itself
    when it no longer accepts (a v1 connection made with an identity retired past its grace)."""
    for cached in services.accepting_for(tenant=tenant).identities:
        if cached.pk == identity.pk:
            return cached
    return identity


def live_start(
    *, tenant: Tenant, client_did: str, client_kid: str, backlog: bool
) -> tuple[LiveTarget | None, list[Row]]:
    """(the push state of a live socket's client, what is queued when `backlog`, oldest first);
    (None, []) when its grant is gone."""
    mediation = services.mediation_for(tenant=tenant, client_did=client_did)
    if mediation is None:
        return None, []
    # The backlog before the identity: a rotation commits the new identity and its announcement to
    # the client together, so an announcement in the backlog is never packed from the identity it
    # retired (read the other way round, a rotation committing between the two reads did that).
    rows = _backlog(mediation.pk, None) if backlog else []
    identity = shared_identity(tenant=tenant, identity=services.identity_current(tenant=tenant))
    identity.agreement_key  # noqa: B018 - unsealed here, in a thread, not on the first push
    target = LiveTarget(mediation.pk, client_did, identity, services.agreement_key_for(client_kid))
    return target, rows
