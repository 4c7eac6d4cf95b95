"""One dispatch path for every transport: raw bytes in, (status, reply) out (ARCHITECTURE.md).

Order (PROTOCOL-DECISIONS §3): schema → timestamp window → nonce (committed) → channel
authentication and authorization → handler (one transaction inside the service).
"""

from __future__ import annotations

import functools
import logging
import time
import traceback
from dataclasses import dataclass

from django.conf import settings
from django.db import DatabaseError, connection
from django.utils import timezone

from apps.messaging import fastpath
from apps.messaging.services import delivery_checks, is_registered
from apps.tenants.models import Tenant
from apps.tenants.resolver import resolve_did
from apps.wire.canonical import canonical_bytes
from apps.wire.crypto import verify_json_object
from apps.wire.did import DidError, ResolvedDid, parse_decentrl
from apps.wire.envelope import DIRECT_AUTHENTICATED, ONE_WAY_PUBLIC, TWO_WAY_PRIVATE, Command, parse_command
from apps.wire.errors import ErrorCode, ProtocolError

from . import handlers, hooks
from .context import CommandContext
from .nonces import nonce_claim_sql, nonce_consume

log = logging.getLogger("mediator.command")


@dataclass(frozen=True)
class Outcome:
    status: int
    body: dict
    command_type: str | None = None
    sender_did: str | None = None
    code: str = "SUCCESS"
    retry_after: int | None = None
    channel: str | None = None

    def body_bytes(self) -> bytes:
        return canonical_bytes(self.body)


class Verification:
    """Whether this command's signature verified (set by `_authenticate`). Metering and metrics
    get the sender DID only then: an unverified claim is anybody's to make (issue 13 item 9)."""

    __slots__ = ("sender_verified",)

    def __init__(self) -> None:
        self.sender_verified = False


@functools.lru_cache(maxsize=8192)
def _parse_decentrl_cached(did: str) -> ResolvedDid:
    return parse_decentrl(did)


def _resolve(did: str) -> ResolvedDid:
    """resolve_did, with did:decentrl parses cached: they are pure functions of the string (base58
    and base64 decoding profiled at ~6% of a TWO_WAY_PRIVATE). did:web depends on the tenants
    table, so it is never cached here. Failures are not cached (lru_cache does not keep raises)."""
    if isinstance(did, str) and did.startswith("did:decentrl:"):
        return _parse_decentrl_cached(did)
    return resolve_did(did)


def _authenticate(tenant: Tenant, cmd: Command, verification: Verification) -> ResolvedDid:
    """Resolve the sender, find its signing key and verify over the received object (§6.2 1-3)."""
    h = cmd.header
    try:
        sender = _resolve(h.sender_did)
    except DidError as exc:
        raise ProtocolError(ErrorCode.SENDER_NOT_FOUND) from exc
    key = sender.signing_key_for(h.sender_signing_key_id)
    if key is None:
        raise ProtocolError(ErrorCode.SENDER_SIGNING_KEY_NOT_FOUND)
    if not verify_json_object(cmd.signable, cmd.signature, key):
        raise ProtocolError(ErrorCode.INVALID_SIGNATURE)
    verification.sender_verified = True
    return sender


def _authorize_direct(tenant: Tenant, cmd: Command) -> None:
    """DCTRL-0004 §6.2 step 4."""
    h = cmd.header
    if cmd.type in handlers.RECIPIENT_CHECKED:
        if h.recipient_did != tenant.did and not is_registered(tenant=tenant, did=h.recipient_did):
            raise ProtocolError(ErrorCode.RECIPIENT_NOT_REGISTERED)
        return
    if h.recipient_did != tenant.did or not is_registered(tenant=tenant, did=h.sender_did):
        raise ProtocolError(ErrorCode.UNAUTHORIZED_COMMAND)


def _authorize_two_way(tenant: Tenant, cmd: Command, now_ms: int) -> None:
    """DCTRL-0004 §7.2 steps 4-6."""
    h = cmd.header
    try:
        resolve_did(h.recipient_did)
    except DidError as exc:
        raise ProtocolError(ErrorCode.RECIPIENT_NOT_FOUND) from exc
    # Steps 5 and 6 in one query: this is the hottest path of the mediator.
    registered, has_contract = delivery_checks(
        tenant=tenant, sender_did=h.sender_did, recipient_did=h.recipient_did, now_s=now_ms // 1000
    )
    if not registered:
        raise ProtocolError(ErrorCode.RECIPIENT_NOT_REGISTERED)
    if not has_contract:
        raise ProtocolError(ErrorCode.COMMUNICATION_CONTRACT_NOT_FOUND)


def _claiming_statement(tenant: Tenant, cmd: Command, now_ms: int, window: int, cpu_checks, statement):
    """The shape both one-statement paths share (DCTRL-0004 §5.4, PROTOCOL-DECISIONS §3).

    `cpu_checks()` runs first; its ProtocolError is remembered, not answered, and otherwise its
    return value is kept. `statement(claim, checked)` then runs the one statement that claims the
    nonce (`checked` is None when a CPU check failed, so the statement only claims) and returns
    (nonce fresh, result). A replay is answered first, then the remembered error; the caller
    answers the database checks from `result`. The nonce is consumed after every outcome: when a
    did:web lookup or the statement itself fails, it is claimed on its own before the 503.
    """
    h = cmd.header

    def consume() -> bool:
        return nonce_consume(tenant_id=tenant.pk, sender_did=h.sender_did, nonce=h.nonce,
                             expires_at_ms=h.timestamp + window, now_ms=now_ms)  # fmt: skip

    claim = nonce_claim_sql(
        tenant_id=tenant.pk, sender_did=h.sender_did, nonce=h.nonce, expires_at_ms=h.timestamp + window, now_ms=now_ms
    )
    deferred: ProtocolError | None = None
    checked = None
    try:
        checked = cpu_checks()
    except ProtocolError as err:
        deferred = err
    except DatabaseError:
        # A did:web lookup failed: answer as the ORM path would (nonce first, then 503).
        if not consume():
            raise ProtocolError(ErrorCode.DUPLICATE_NONCE) from None
        raise
    try:
        fresh, result = statement(claim, None if deferred else checked)
    except DatabaseError:
        # The failed statement committed nothing, its nonce claim included: claim it on its own
        # so that the pair stays consumed after this 503.
        try:
            consume()
        except DatabaseError:
            pass
        raise
    if not fresh:
        raise ProtocolError(ErrorCode.DUPLICATE_NONCE)
    if deferred is not None:
        raise deferred
    return result


def _two_way_fast(tenant: Tenant, cmd: Command, now_ms: int, window: int, verification: Verification) -> dict:
    """TWO_WAY_PRIVATE in one statement (apps/messaging/fastpath.py), answers in §3/§7.2 order:
    sender, key id, signature and recipient DID on the CPU first, then the statement's
    registration, contract and queue-cap flags."""
    h = cmd.header

    def cpu_checks() -> bool:
        _authenticate(tenant, cmd, verification)  # §7.2 steps 1-3
        try:
            _resolve(h.recipient_did)  # §7.2 step 4
        except DidError as exc:
            raise ProtocolError(ErrorCode.RECIPIENT_NOT_FOUND) from exc
        return True

    def statement(claim, checked):
        got = fastpath.pending_event_enqueue_claiming(
            tenant=tenant,
            claim=claim,
            checks_passed=checked is not None,
            sender_did=h.sender_did,
            recipient_did=h.recipient_did,
            payload=cmd.payload,
            now_s=now_ms // 1000,
        )
        return got.nonce_fresh, got

    got = _claiming_statement(tenant, cmd, now_ms, window, cpu_checks, statement)
    if not got.registered:
        raise ProtocolError(ErrorCode.RECIPIENT_NOT_REGISTERED)
    if not got.has_contract:
        raise ProtocolError(ErrorCode.COMMUNICATION_CONTRACT_NOT_FOUND)
    if got.queue_full:
        raise ProtocolError(ErrorCode.RECIPIENT_QUEUE_FULL)
    return {"type": "SUCCESS", "pendingEventId": got.event_id}


def _direct_fast(tenant: Tenant, cmd: Command, now_ms: int, window: int, verification: Verification) -> None:
    """Nonce claim, authentication and §6.2 step-4 authorization of a DIRECT_AUTHENTICATED
    command with one statement (fastpath.nonce_claim_and_registration), in §5.4/§6.2 order."""
    h = cmd.header

    def cpu_checks() -> tuple[str | None, ErrorCode]:
        """(whose registration §6.2 step 4 asks for, if anyone's; the error if it is missing)."""
        _authenticate(tenant, cmd, verification)  # §6.2 steps 1-3
        if cmd.type in handlers.RECIPIENT_CHECKED:
            if h.recipient_did != tenant.did:
                return h.recipient_did, ErrorCode.RECIPIENT_NOT_REGISTERED
            return None, ErrorCode.RECIPIENT_NOT_REGISTERED
        if h.recipient_did != tenant.did:
            raise ProtocolError(ErrorCode.UNAUTHORIZED_COMMAND)
        return h.sender_did, ErrorCode.UNAUTHORIZED_COMMAND

    def statement(claim, checked):
        did = checked[0] if checked else None
        fresh, registered = fastpath.nonce_claim_and_registration(
            tenant=tenant, claim=claim, did=did, now_s=now_ms // 1000
        )
        return fresh, (checked, registered)

    checked, registered = _claiming_statement(tenant, cmd, now_ms, window, cpu_checks, statement)
    check_did, not_registered = checked
    if check_did is not None and not registered:
        raise ProtocolError(not_registered)


def execute(tenant: Tenant, cmd: Command, transport: str, now_ms: int, verification: Verification) -> dict:
    """Replay checks, authentication, authorization and the handler for a parsed command."""
    h = cmd.header
    window = settings.MEDIATOR_TIMESTAMP_WINDOW_MS
    # DCTRL-0004 §5.4: timestamp, then nonce (stored), then authentication.
    if abs(now_ms - h.timestamp) > window:
        raise ProtocolError(ErrorCode.TIMESTAMP_OUT_OF_RANGE)
    if h.channel == TWO_WAY_PRIVATE and settings.MEDIATOR_TWO_WAY_FASTPATH and connection.vendor == "postgresql":
        return _two_way_fast(tenant, cmd, now_ms, window, verification)
    if h.channel == DIRECT_AUTHENTICATED and settings.MEDIATOR_DIRECT_FASTPATH and connection.vendor == "postgresql":
        _direct_fast(tenant, cmd, now_ms, window, verification)
        ctx = CommandContext(tenant=tenant, command=cmd, transport=transport, now_ms=now_ms)
        return handlers.DIRECT_HANDLERS[cmd.type](ctx)
    if not nonce_consume(
        tenant_id=tenant.pk, sender_did=h.sender_did, nonce=h.nonce, expires_at_ms=h.timestamp + window, now_ms=now_ms
    ):
        raise ProtocolError(ErrorCode.DUPLICATE_NONCE)
    _authenticate(tenant, cmd, verification)
    ctx = CommandContext(tenant=tenant, command=cmd, transport=transport, now_ms=now_ms)
    if h.channel == DIRECT_AUTHENTICATED:
        _authorize_direct(tenant, cmd)
        return handlers.DIRECT_HANDLERS[cmd.type](ctx)
    if h.channel == TWO_WAY_PRIVATE:
        _authorize_two_way(tenant, cmd, now_ms)
        return handlers.two_way_private(ctx)
    assert h.channel == ONE_WAY_PUBLIC
    handler = handlers.PUBLIC_HANDLERS.get(cmd.type)
    if handler is None:
        raise ProtocolError(ErrorCode.INVALID_COMMAND, "public channel not enabled")
    return handler(ctx)


def handle(
    raw: bytes, tenant: Tenant | None, transport: str = "http", remote_addr: str | None = None
) -> tuple[Outcome, bytes]:
    """Run one command end to end; always returns a protocol-shaped outcome and its reply bytes."""
    started = time.perf_counter()
    meta = hooks.RequestMeta(transport=transport, remote_addr=remote_addr, bytes_in=len(raw))
    cmd: Command | None = None
    verification = Verification()
    try:
        if tenant is None:
            raise ProtocolError(ErrorCode.UNKNOWN_MEDIATOR)
        if not tenant.is_active:
            raise ProtocolError(ErrorCode.MEDIATOR_UNAVAILABLE)
        if len(raw) > min(settings.MEDIATOR_MAX_BODY_BYTES, tenant.max_body_bytes):
            raise ProtocolError(ErrorCode.PAYLOAD_TOO_LARGE)
        for check in hooks.PRE_CHECKS:
            check(tenant, meta)
        cmd = parse_command(raw)
        for sender_check in hooks.SENDER_CHECKS:
            sender_check(tenant, cmd, meta)
        body = execute(tenant, cmd, transport, int(time.time() * 1000), verification)
        outcome = Outcome(200, body, cmd.type, cmd.header.sender_did, channel=cmd.header.channel)
    except ProtocolError as err:
        outcome = Outcome(
            err.status,
            err.body(),
            cmd.type if cmd else None,
            # A replay carries a signature that verifies, but not its sender's act: the one-statement
            # paths verify before they find the nonce used, the ORM path never gets that far.
            cmd.header.sender_did
            if cmd and verification.sender_verified and err.code is not ErrorCode.DUPLICATE_NONCE
            else None,
            err.code.value,
            err.retry_after,
            cmd.header.channel if cmd else None,
        )
    except Exception as exc:  # noqa: BLE001 - never a 500: a protocol-shaped 503 instead
        # Log the exception type and code path only: its message may quote input (PROTOCOL-DECISIONS §9).
        log.error(
            "%s while handling a command: %s at %s",
            "database error" if isinstance(exc, DatabaseError) else "unexpected error",
            type(exc).__name__,
            " <- ".join(f"{f.filename}:{f.lineno} {f.name}" for f in reversed(traceback.extract_tb(exc.__traceback__))),
        )
        outcome = Outcome(
            503,
            {"type": "ERROR", "code": ErrorCode.MEDIATOR_UNAVAILABLE.value},
            cmd.type if cmd else None,
            cmd.header.sender_did if cmd and verification.sender_verified else None,
            ErrorCode.MEDIATOR_UNAVAILABLE.value,
        )
    reply = outcome.body_bytes()
    elapsed_ms = (time.perf_counter() - started) * 1000
    # Metadata only: never payloads, ciphertexts, tags, signatures or keys (PROTOCOL-DECISIONS §9).
    slug = tenant.slug if tenant else "-"
    log.info(
        "command tenant=%s transport=%s type=%s code=%s status=%s ms=%.1f",
        slug,
        transport,
        outcome.command_type or "-",
        outcome.code,
        outcome.status,
        elapsed_ms,
        # The same fields, structured, for LOG_FORMAT=json (apps.ops.logconfig.JsonFormatter).
        extra={
            "tenant": slug,
            "transport": transport,
            "command": outcome.command_type or "-",
            "code": outcome.code,
            "status": outcome.status,
            "duration_ms": round(elapsed_ms, 2),
        },
    )
    if hooks.OBSERVERS:
        record = hooks.CommandRecord(
            tenant_id=tenant.pk if tenant else None,
            tenant_slug=tenant.slug if tenant else None,
            at=timezone.now(),
            transport=transport,
            channel=outcome.channel,
            command_type=outcome.command_type,
            code=outcome.code,
            http_status=outcome.status,
            bytes_in=len(raw),
            bytes_out=len(reply),
            duration_ms=elapsed_ms,
            sender_did=outcome.sender_did,
            remote_addr=remote_addr,
        )
        for observer in hooks.OBSERVERS:
            try:
                observer(record)
            except Exception:  # noqa: BLE001 - an observer must never break a command
                log.exception("command observer failed")
    return outcome, reply
