"""One dispatch path for every transport: raw bytes in, (status, reply) out (docs/architecture.md).

The sequence, top to bottom (docs/protocol-readings.md §3; DCTRL-0004 §5.4, §6.2, §7.2):

    handle    tenant → body cap → per-IP limit → parse (a typed Command) → the signature,
              verified once → per-DID limit (counts only verified commands)
    execute   1. timestamp window
              2. CPU checks: the signature's verdict, then the channel's checks that need no
                 row (recipient resolves, addressed to the mediator, whose registration is
                 needed); the first failure is kept, not answered yet
              3. ONE storage call: claims the nonce and returns the flags (TWO_WAY_PRIVATE:
                 messaging's statement `sql.deliver`, which also stores the event; the others:
                 storage.py, and for QUERY_EVENTS the page it then read: handlers.READS)
              4. the error, in protocol order: replay, the kept CPU failure, then the flags
              5. the handler (one transaction inside its service); TWO_WAY_PRIVATE has none,
                 the storage call stored its event

The nonce is consumed whatever follows its check (step 3 claims it even when step 2 failed).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from django.conf import settings
from django.db import DatabaseError
from django.utils import timezone

from apps.messaging import replay, sql
from apps.messaging.sql import Delivery
from apps.ops import limits
from apps.ops.logconfig import code_path
from apps.tenants.models import Tenant
from apps.tenants.resolver import Verdict, resolve_did, verify_signer
from apps.usage import records
from apps.wire.canonical import canonical_bytes
from apps.wire.did import DidError
from apps.wire.envelope import (
    DIRECT_AUTHENTICATED,
    PUSH_COMMANDS,
    TWO_WAY_PRIVATE,
    Command,
    parse_command,
    unknown_command,
)
from apps.wire.errors import ErrorCode, ProtocolError, error_body

from . import handlers, storage
from .context import CommandContext
from .storage import NonceClaim

log = logging.getLogger("mediator.command")


@dataclass(frozen=True)
class Outcome:
    status: int
    body: dict
    command_type: str | None = None
    # The header's sender_did, only when the command's signature verified under it and the command
    # was not a replay: metering and metrics never attribute a claim.
    sender_did: str | None = None
    code: str = "SUCCESS"
    retry_after: int | None = None
    channel: str | None = None

    def body_bytes(self) -> bytes:
        return canonical_bytes(self.body)


# Refusals of a validly signed command that anyone holding a copy of it could provoke.
_ANYBODYS = (ErrorCode.DUPLICATE_NONCE, ErrorCode.TIMESTAMP_OUT_OF_RANGE)

_SENDER_ERRORS = {
    Verdict.DID_NOT_FOUND: ErrorCode.SENDER_NOT_FOUND,
    Verdict.KEY_NOT_FOUND: ErrorCode.SENDER_SIGNING_KEY_NOT_FOUND,
    Verdict.BAD_SIGNATURE: ErrorCode.INVALID_SIGNATURE,
}


def admit(tenant: Tenant | None, size: int) -> Tenant:
    """The tenant a command of `size` bytes goes to: UNKNOWN_MEDIATOR for no tenant,
    MEDIATOR_UNAVAILABLE for a suspended one, PAYLOAD_TOO_LARGE past the smaller body cap."""
    if tenant is None:
        raise ProtocolError(ErrorCode.UNKNOWN_MEDIATOR)
    if not tenant.is_active:
        raise ProtocolError(ErrorCode.MEDIATOR_UNAVAILABLE)
    if size > min(settings.MEDIATOR_MAX_BODY_BYTES, tenant.max_body_bytes):
        raise ProtocolError(ErrorCode.PAYLOAD_TOO_LARGE)
    return tenant


def parse(tenant: Tenant, raw: bytes) -> Command:
    """The command, validated; a push-device command where the tenant turned them off is refused
    exactly as a type the channel does not have (docs/push.md, "Registration")."""
    cmd = parse_command(raw)
    if cmd.type in PUSH_COMMANDS and not tenant.decentrl_push_devices:
        raise unknown_command()
    return cmd


def authenticate(cmd: Command) -> Exception | None:
    """DCTRL-0004 §6.2 steps 1-3, once per command: None when the signature verifies over the
    received object, else the failure to answer after the nonce (a DatabaseError from a did:web
    lookup becomes a 503 there)."""
    h = cmd.header
    try:
        verdict = verify_signer(
            did=h.sender_did, key_id=h.sender_signing_key_id, signable=cmd.signable, signature=cmd.signature
        )
    except DatabaseError as exc:
        return exc
    return None if verdict is Verdict.VERIFIED else ProtocolError(_SENDER_ERRORS[verdict])


@dataclass(frozen=True)
class Needed:
    """Whose registration the database must confirm (None: nobody's), and the error if it cannot."""

    did: str | None
    missing: ErrorCode


def channel_checks(tenant: Tenant, cmd: Command) -> Needed:
    """The channel's authorization as far as it needs no row; raises its error (DCTRL-0004 §6.2
    step 4, §7.2 step 4, DCTRL-0007 read as §6.2 step 4)."""
    h = cmd.header
    if h.channel == TWO_WAY_PRIVATE:
        try:
            resolve_did(h.recipient_did)
        except DidError as exc:
            raise ProtocolError(ErrorCode.RECIPIENT_NOT_FOUND) from exc
        return Needed(h.recipient_did, ErrorCode.RECIPIENT_NOT_REGISTERED)  # §7.2 steps 5-6 in the statement
    if h.channel != DIRECT_AUTHENTICATED and cmd.type not in handlers.PUBLIC_HANDLERS:
        raise ProtocolError(ErrorCode.INVALID_COMMAND, "public channel not enabled")
    if cmd.type in handlers.RECIPIENT_CHECKED:
        # To the mediator: nothing to check. To someone else: they must be registered here.
        return Needed(None if h.recipient_did == tenant.did else h.recipient_did, ErrorCode.RECIPIENT_NOT_REGISTERED)
    if h.recipient_did != tenant.did:
        raise ProtocolError(ErrorCode.UNAUTHORIZED_COMMAND)
    return Needed(h.sender_did, ErrorCode.UNAUTHORIZED_COMMAND)


def execute(tenant: Tenant, cmd: Command, failure: Exception | None, transport: str, now_ms: int) -> dict:
    """Steps 1-5 of the module docstring for a parsed command whose signature check gave `failure`."""
    h = cmd.header
    window = settings.MEDIATOR_TIMESTAMP_WINDOW_MS
    # 1. DCTRL-0004 §5.4: the timestamp window (a drift of more than the window is refused), then the nonce.
    if not replay.Window(window).admits(h.timestamp, now_ms):
        raise ProtocolError(ErrorCode.TIMESTAMP_OUT_OF_RANGE)
    nonce = NonceClaim(
        tenant_id=tenant.pk, sender_did=h.sender_did, nonce=h.nonce, expires_at_ms=h.timestamp + window, now_ms=now_ms
    )
    # 2. CPU checks.
    needed = Needed(None, ErrorCode.UNAUTHORIZED_COMMAND)
    if failure is None:
        try:
            needed = channel_checks(tenant, cmd)
        except (ProtocolError, DatabaseError) as exc:  # DatabaseError: a did:web recipient lookup
            failure = exc
    if isinstance(failure, DatabaseError):
        # The database is what failed: claim the nonce on its own, then answer 503.
        if not storage.claim(nonce):
            raise ProtocolError(ErrorCode.DUPLICATE_NONCE)
        raise failure
    # 3. One storage call. If its statement fails, nothing of it committed, its claim included:
    # `consumed` claims the nonce on its own before the error goes up.
    if h.channel == TWO_WAY_PRIVATE:
        event = Delivery(tenant, h.sender_did, h.recipient_did, cmd.payload, now_ms // 1000, failure is None)
        found = replay.consumed(storage.CLAIM, nonce, lambda: sql.deliver(storage.CLAIM, nonce, event))
    else:
        # QUERY_EVENTS: the page is read by the same call, once the claim and registration allow it.
        reads = handlers.READS.get(cmd.type) if failure is None else None
        read = reads(tenant, cmd) if reads else None
        found = replay.consumed(
            storage.CLAIM,
            nonce,
            lambda: storage.claim_checking_registration(
                nonce, tenant=tenant, did=needed.did, now_s=now_ms // 1000, read=read
            ),
        )
    # 4. The error, in protocol order.
    if not found.nonce_fresh:
        raise ProtocolError(ErrorCode.DUPLICATE_NONCE)
    if failure is not None:
        raise failure
    if needed.did is not None and not found.registered:
        raise ProtocolError(needed.missing)
    if h.channel == TWO_WAY_PRIVATE:
        if not found.has_contract:
            raise ProtocolError(ErrorCode.COMMUNICATION_CONTRACT_NOT_FOUND)
        if found.queue_full:
            raise ProtocolError(ErrorCode.RECIPIENT_QUEUE_FULL)
        return {"type": "SUCCESS", "pendingEventId": found.event_id}
    # 5. The handler.
    ctx = CommandContext(tenant=tenant, command=cmd, transport=transport, now_ms=now_ms, read=found.page)
    table = handlers.DIRECT_HANDLERS if h.channel == DIRECT_AUTHENTICATED else handlers.PUBLIC_HANDLERS
    return table[cmd.type](ctx)


def handle(
    raw: bytes, tenant: Tenant | None, transport: str = "http", remote_addr: str | None = None
) -> tuple[Outcome, bytes]:
    """Run one command end to end; always returns a protocol-shaped outcome and its reply bytes."""
    started = time.perf_counter()
    cmd: Command | None = None
    verified = False
    try:
        tenant = admit(tenant, len(raw))
        # Every command from one address counts, whatever its outcome.
        limits.per_ip("ip", tenant.pk, remote_addr, tenant.rate_limit_per_ip, tenant.rate_limit_per_ip_burst)
        cmd = parse(tenant, raw)
        failure = authenticate(cmd)
        verified = failure is None
        limits.per_did(tenant, cmd.header.sender_did, verified)
        body = execute(tenant, cmd, failure, transport, int(time.time() * 1000))
        outcome = Outcome(200, body, cmd.type, cmd.header.sender_did, channel=cmd.header.channel)
    except ProtocolError as err:
        outcome = Outcome(
            err.status,
            err.body(),
            cmd.type if cmd else None,
            # A replayed or stale command carries a signature that verifies, but anyone who saw it
            # can send it again: it is not its sender's act.
            cmd.header.sender_did if cmd and verified and err.code not in _ANYBODYS else None,
            err.code.value,
            err.retry_after,
            cmd.header.channel if cmd else None,
        )
    except Exception as exc:  # noqa: BLE001 - never a 500: a protocol-shaped 503 instead
        # Log the exception type and code path only: its message may quote input (docs/protocol-readings.md §9).
        log.error(
            "%s while handling a command: %s at %s",
            "database error" if isinstance(exc, DatabaseError) else "unexpected error",
            type(exc).__name__,
            code_path(exc),
        )
        outcome = Outcome(
            503,
            {"type": "ERROR", "code": ErrorCode.MEDIATOR_UNAVAILABLE.value},
            cmd.type if cmd else None,
            cmd.header.sender_did if cmd and verified else None,
            ErrorCode.MEDIATOR_UNAVAILABLE.value,
        )
    reply = outcome.body_bytes()
    elapsed_ms = (time.perf_counter() - started) * 1000
    # Metadata only: never payloads, ciphertexts, tags, signatures or keys (docs/protocol-readings.md §9).
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
    observe(tenant, transport, outcome, len(raw), len(reply), elapsed_ms, remote_addr)
    return outcome, reply


def observe(
    tenant: Tenant | None,
    transport: str,
    outcome: Outcome,
    bytes_in: int,
    bytes_out: int,
    elapsed_ms: float,
    remote_addr: str | None,
) -> None:
    """The observers' record (metering, metrics) of one finished command: every command of `handle`,
    and the socket's AUTHENTICATE (consumers.py)."""
    if not records.OBSERVERS:
        return
    records.publish(
        records.Record(
            protocol=records.DECENTRL,
            tenant_id=tenant.pk if tenant else None,
            tenant_slug=tenant.slug if tenant else None,
            at=timezone.now(),
            transport=transport,
            channel=outcome.channel,
            command_type=outcome.command_type,
            code=outcome.code,
            http_status=outcome.status,
            bytes_in=bytes_in,
            bytes_out=bytes_out,
            duration_ms=elapsed_ms,
            sender_did=outcome.sender_did,
            remote_addr=remote_addr,
        )
    )


_JSON = ("Content-Type", "application/json")


def http_reply(
    raw: bytes | None, tenant: Tenant | None, client: str | None, content_type: str | None
) -> tuple[int, list[tuple[str, str]], bytes]:
    """`POST /` as (status, headers without Content-Length, body), for the production entry
    (mediator_project/entry.py). `raw` is None when the body was over the deployment's cap and was
    not read. The body is read as the command whatever its content type."""
    if raw is None:
        return 413, [_JSON], canonical_bytes(error_body(ErrorCode.PAYLOAD_TOO_LARGE))
    outcome, reply = handle(raw, tenant, "http", client)
    if outcome.retry_after is None:
        return outcome.status, [_JSON], reply
    return outcome.status, [_JSON, ("Retry-After", str(outcome.retry_after))], reply


def http_unavailable() -> tuple[int, list[tuple[str, str]], bytes]:
    """The production entry's answer when the entry itself fails (never a 500)."""
    return 503, [_JSON], canonical_bytes(error_body(ErrorCode.MEDIATOR_UNAVAILABLE))
