"""Abuse limits wired into the command path and /ws (PROTOCOL-DECISIONS §7, UC-021 AF-2).

- per IP, every POST / command (hooks.PRE_CHECKS): a token bucket, default 6 000 per minute (100
  a second) with bursts of 50, a hosted mediator's (carrier NAT puts thousands of clients behind
  one address);
- per sender DID, every command whose signature verifies (hooks.SENDER_CHECKS), default 60/min:
  the limit that stops one abusive client;
- per IP, /ws connections and AUTHENTICATE attempts (hooks.WS_CONNECT_CHECKS / WS_AUTH_CHECKS);
  /didcomm/ws upgrades count in the same connect window (its consumer calls ws_connect_check).

Tenants override the per-DID and per-IP limits (Tenant.rate_limit_per_did / _per_ip /
_per_ip_burst; null is the deployment default, 0 switches the limit off). A refusal is 429
RATE_LIMITED, always with Retry-After.
"""

from __future__ import annotations

from django.conf import settings

from apps.wire.errors import ErrorCode, ProtocolError

from . import metrics, ratelimit


def _limit(override: int | None, default: int) -> int:
    return default if override is None else override


def enforce(scope: str, tenant_id: int | None, ident: str, limit: int) -> None:
    """One hit of `ident` in the (scope, tenant) window; RATE_LIMITED with Retry-After past `limit`
    (0 = off). Front doors call it with their own scopes (DIDComm: didcomm_ip, didcomm_sender)."""
    decision = ratelimit.hit(scope, tenant_id, ident, limit)
    if not decision.allowed:
        metrics.RATE_LIMITED.labels(scope).inc()
        raise ProtocolError(ErrorCode.RATE_LIMITED, f"{scope} limit", retry_after=decision.retry_after_s)


def enforce_rate(scope: str, tenant_id: int | None, ident: str, per_minute: int, burst: int) -> None:
    """One hit of `ident` from the (scope, tenant) token bucket: `per_minute` sustained, bursts of
    up to `burst` (0 per minute = off); RATE_LIMITED with Retry-After when it is empty. Front doors
    call it with their own scopes (DIDComm: didcomm_ip)."""
    decision = ratelimit.take(scope, tenant_id, ident, per_minute, burst)
    if not decision.allowed:
        metrics.RATE_LIMITED.labels(scope).inc()
        raise ProtocolError(ErrorCode.RATE_LIMITED, f"{scope} limit", retry_after=decision.retry_after_s)


def per_ip_check(tenant, meta) -> None:
    """hooks.PRE_CHECKS: every command from one address counts, whatever its outcome."""
    if not meta.remote_addr:
        return
    enforce_rate(
        "ip",
        tenant.pk,
        meta.remote_addr,
        _limit(tenant.rate_limit_per_ip, settings.MEDIATOR_RATE_LIMIT_PER_IP),
        _limit(tenant.rate_limit_per_ip_burst, settings.MEDIATOR_RATE_LIMIT_PER_IP_BURST),
    )


def per_did_check(tenant, cmd, meta, verified: bool) -> None:
    """hooks.SENDER_CHECKS: only commands that really come from the DID count against it.

    The DID in a header is a claim until the signature is checked; counting unsigned claims would
    let anyone exhaust someone else's budget. `verified` is dispatch's one signature check of this
    command. Commands whose signature fails are left for dispatch to refuse (INVALID_SIGNATURE
    etc.) and are still covered by the per-IP limit. This runs before the nonce is consumed, so a
    refused command can be sent again unchanged after Retry-After.
    """
    limit = _limit(tenant.rate_limit_per_did, settings.MEDIATOR_RATE_LIMIT_PER_DID)
    if limit <= 0 or not verified:
        return
    enforce("did", tenant.pk, cmd.header.sender_did, limit)


def ws_connect_check(tenant, ip: str | None) -> None:
    """hooks.WS_CONNECT_CHECKS: /ws and /didcomm/ws upgrades per address per minute."""
    if ip:
        enforce("ws_connect", tenant.pk, ip, settings.MEDIATOR_WS_CONNECT_PER_IP)


def ws_auth_check(tenant, ip: str | None) -> None:
    """hooks.WS_AUTH_CHECKS: AUTHENTICATE attempts per address per minute."""
    if ip:
        enforce("ws_auth", tenant.pk, ip, settings.MEDIATOR_WS_AUTH_PER_IP)
